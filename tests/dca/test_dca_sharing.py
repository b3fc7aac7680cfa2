"""M-way additive sharing in Z_2^64, full and seed-compressed (Algorithm 1, steps 1–2)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from mpdp.dca import sharing
from mpdp.math.drbg import Drbg
from mpdp.math.fixedpoint import decode_u64, encode_u64

P_MIN = 1e-4  # deterministic seeds: a fixed sample either passes or not; the negative controls show it can fail


def top_bits(x: np.ndarray, bits: int) -> np.ndarray:
    return (np.asarray(x, dtype=np.uint64) >> np.uint64(64 - bits)).astype(np.int64)


def chi2_uniform_p(cells: np.ndarray, ncells: int) -> float:
    counts = np.bincount(cells.ravel(), minlength=ncells)
    return float(stats.chisquare(counts).pvalue)


@pytest.mark.parametrize("M", [2, 3, 5])
def test_shares_sum_to_u_and_masks_sum_to_zero(M):
    rng = Drbg.from_seed(f"share-{M}")
    u = encode_u64(np.array([[-1.5, 0.0, 2.25], [7.0, -7.0, 1e-6]]), 32, 100.0)
    shares = sharing.share_u64(u, M, rng)
    assert shares.shape == (M, 2, 3) and shares.dtype == np.uint64
    assert np.array_equal(sharing.ring_sum(shares), u)
    masks = shares.copy()
    masks[0] = shares[0] - u  # r_0 = m_0 − u
    assert np.array_equal(sharing.ring_sum(masks), np.zeros_like(u))
    assert np.allclose(decode_u64(sharing.ring_sum(shares), 32), [[-1.5, 0.0, 2.25], [7.0, -7.0, 1e-6]], atol=2**-32)


@pytest.mark.parametrize("M", [2, 4])
def test_seed_compressed_shares_sum_to_u(M):
    u = encode_u64(np.array([[3.0, -4.0], [0.5, 0.25], [-8.0, 9.0]]), 32, 100.0)
    m0, seeds = sharing.share_u64_seeded(u, M, Drbg.from_seed("seeded"))
    assert len(seeds) == M - 1 and all(len(s) == 3 and all(len(x) == 32 for x in s) for s in seeds)
    expanded = [sharing.expand_seeds(seeds[k], 2) for k in range(M - 1)]
    assert np.array_equal(m0 + sharing.ring_sum(np.stack(expanded)), u)
    # the seeds are fresh: no two alike, and the PRG is a function of the seed alone
    flat = [x for s in seeds for x in s]
    assert len(set(flat)) == len(flat)
    assert np.array_equal(sharing.expand_seed(flat[0], 2), sharing.expand_seeds([flat[0]], 2)[0])


def test_expand_seed_is_aes_ctr():
    """Known answer: AES-256-CTR, key = seed, IV = 0; the first block under the all-zero key is AES_0(0)."""
    r = sharing.expand_seed(bytes(32), 2)
    # AES-256 with an all-zero key on the all-zero block: dc95c078a2408989ad48a21492842087 (FIPS-197 style vector)
    assert sharing.pack_u64(r) == bytes.fromhex("dc95c078a2408989ad48a21492842087")


def reference_expand(seed: bytes, d: int) -> np.ndarray:
    """The keystream definition written out independently: AES-256-ECB of the counter blocks 0, 1, 2, … (128-bit
    big-endian) under the seed, read as little-endian uint64 — what AES-256-CTR with a zero IV produces."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    blocks = -(-8 * d // 16)
    counters = b"".join(i.to_bytes(16, "big") for i in range(blocks))
    stream = Cipher(algorithms.AES(seed), modes.ECB()).encryptor().update(counters)
    return np.frombuffer(stream[: 8 * d], dtype="<u8").astype(np.uint64)


@pytest.mark.parametrize("d", [1, 2, 3, 37, 1000])
def test_fast_seed_expansion_equals_the_reference_bit_for_bit(d):
    """SeedExpander (one reused buffer), expand_seeds, sum_expanded and the packed sharing against the definition."""
    rng = Drbg.from_seed(f"expand-{d}")
    seeds = [rng.random_bytes(32) for _ in range(7)] + [bytes(32)]
    ref = np.stack([reference_expand(s, d) for s in seeds])
    assert all(np.array_equal(sharing.expand_seed(s, d), r) for s, r in zip(seeds, ref))
    assert np.array_equal(sharing.expand_seeds(seeds, d), ref)
    ex = sharing.SeedExpander(d)
    views = [ex.expand(s).copy() for s in seeds]
    assert np.array_equal(np.stack(views), ref)
    total = sharing.ring_sum(ref)
    assert np.array_equal(sharing.sum_expanded(seeds, d), total)
    acc = np.arange(d, dtype=np.uint64)
    assert sharing.sum_expanded(iter(seeds), d, acc) is acc and np.array_equal(acc, np.arange(d, dtype=np.uint64) + total)
    ex.subtract_into(acc, seeds)
    assert np.array_equal(acc, np.arange(d, dtype=np.uint64))
    # the client's packed sharing: m0 = u − Σ_k expand(seed_{k,j}) row by row, node k's seeds in row order
    u = rng.uint64((5, d))
    m0, blobs = sharing.share_u64_seeded_packed(u, 4, Drbg.from_seed("pack"))
    m0_lists, lists = sharing.share_u64_seeded(u, 4, Drbg.from_seed("pack"))  # same draws: same shares
    assert np.array_equal(m0, m0_lists) and [b"".join(x) for x in lists] == blobs
    assert all(len(b) == 32 * 5 for b in blobs)
    masks = sum((np.stack([reference_expand(b[32 * j : 32 * j + 32], d) for j in range(5)]) for b in blobs), np.zeros((5, d), dtype=np.uint64))
    assert np.array_equal(m0 + masks, u)


def test_seed_expansion_refuses_other_key_lengths():
    """AES itself takes 16- and 24-byte keys: a short seed must be refused, not expanded."""
    for bad in (bytes(16), bytes(24), bytes(31), bytes(33)):
        with pytest.raises(sharing.MalformedVector):
            sharing.SeedExpander(4).expand(bad)
        with pytest.raises(sharing.MalformedVector):
            sharing.sum_expanded([bytes(32), bad], 4)


@pytest.mark.parametrize("seeded", [False, True])
@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_any_m_minus_1_shares_are_uniform(seeded):
    """For a fixed secret, every (M−1)-subset of the shares is jointly uniform (χ²)."""
    M, n = 3, 20000
    u = encode_u64(np.full((n, 1), 0.75), 32, 1.0)  # the same secret everywhere: any structure would show
    rng = Drbg.from_seed(f"chi2-{seeded}")
    if seeded:
        m0, seeds = sharing.share_u64_seeded(u, M, rng)
        shares = np.stack([m0] + [sharing.expand_seeds(s, 1) for s in seeds])
    else:
        shares = sharing.share_u64(u, M, rng)
    for k in range(M):
        assert chi2_uniform_p(top_bits(shares[k], 8), 256) > P_MIN
    for a, b in itertools.combinations(range(M), M - 1):
        joint = top_bits(shares[a], 4) * 16 + top_bits(shares[b], 4)
        assert chi2_uniform_p(joint, 256) > P_MIN
    # all M together are not uniform: they determine u
    assert np.array_equal(sharing.ring_sum(shares), u)


def test_chi2_detects_the_papers_bounded_masks():
    """Negative control (the authors' non-modular masks): masks in ±10^14 with last share value − Σ masks are far from uniform in Z_2^64."""
    n = 20000
    rng = np.random.default_rng(1)  # reproduces the authors' numpy masks; not used by the protocol
    masks = rng.integers(-10**14, 10**14, size=(2, n), dtype=np.int64)
    share0 = (np.int64(7_500_000) - masks.sum(axis=0)).view(np.uint64)
    assert chi2_uniform_p(top_bits(share0, 8), 256) < 1e-12
    assert chi2_uniform_p(top_bits(masks[0].view(np.uint64), 8), 256) < 1e-12


def test_sharing_needs_two_parts():
    with pytest.raises(ValueError):
        sharing.share_u64(np.zeros(3, dtype=np.uint64), 1, Drbg.from_seed(0))


def test_set_digest_is_order_free_and_unambiguous():
    assert sharing.set_digest(["b", "a", "c"]) == sharing.set_digest(["c", "b", "a"])
    assert sharing.set_digest(["ab", "c"]) != sharing.set_digest(["a", "bc"])
    assert sharing.set_digest(["a"]) != sharing.set_digest(["a", "b"])
    assert len(sharing.set_digest([])) == 32
