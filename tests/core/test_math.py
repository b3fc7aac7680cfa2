"""Math modules: DRBG, fixed point, sharing, Paillier, DGK and the DGK secure comparison."""

from __future__ import annotations

import numpy as np
import gmpy2
import pytest
from scipy import stats

from mpdp.math import comparison, sharing
from mpdp.math.dgk import DgkBlindingPool, DgkCiphertextError, DgkKeyPair
from mpdp.math.drbg import Drbg
from mpdp.math.fixedpoint import EncodingOverflow, FixedPoint, check_sum_headroom, decode_u64, encode_u64
from mpdp.math.paillier import KeyPair, RandomnessPool, check_key_bits


def test_drbg_streams_are_reproducible_and_separated():
    a, b = Drbg.from_seed(1), Drbg.from_seed(1)
    assert a.random_bytes(40) == b.random_bytes(40)
    assert a.child("x").randbits(128) == Drbg.from_seed(1).child("x").randbits(128)
    assert a.child("x").randbits(128) != a.child("y").randbits(128)
    assert not Drbg.from_os().seeded and a.seeded


def test_drbg_random_into_is_the_same_stream_as_random_bytes():
    """In-place fills (words, uniform, normal) read the keystream exactly as random_bytes does, across block edges."""
    from mpdp.math import drbg

    a, b = Drbg.from_seed("into"), Drbg.from_seed("into")
    blk = drbg._BLOCK
    for n in (0, 1, 7, blk - 3, blk, blk + 1, 2 * blk + 5, 3 * blk - 1, 17 * blk + 3, 3 * drbg._FILL + 11, 5, 9):
        want = a.random_bytes(n)
        if n % 2:
            got = bytearray(n)
            b.random_into(got)
            assert bytes(got) == want, n
        else:
            assert b.random_bytes(n) == want, n
    w = b.words(blk + 3)
    assert w.dtype == np.dtype("<u8") and w.tobytes() == a.random_bytes(8 * (blk + 3))


def test_drbg_normal_is_box_muller_on_the_keystream():
    """normal(n) (computed in place) equals the plain formula on two runs of ⌈n/2⌉ uniforms, bit for bit."""
    for n in (1, 2, 7, 4001):
        ref_rng, rng = Drbg.from_seed(f"normal-{n}"), Drbg.from_seed(f"normal-{n}")
        half = (n + 1) // 2
        w = np.frombuffer(ref_rng.random_bytes(16 * half), dtype="<u8")
        u = ((w >> np.uint64(11)).astype(np.float64) + 0.5) * (2.0**-53)
        u1, u2 = u[:half], u[half:]
        r = np.sqrt(-2.0 * np.log(u1))
        want = np.concatenate([r * np.cos(2 * np.pi * u2), r * np.sin(2 * np.pi * u2)])[:n]
        got = rng.normal((n, 1))
        assert got.shape == (n, 1) and np.array_equal(got.ravel(), want)
        assert np.array_equal(Drbg.from_seed(f"normal-{n}").uniform(2 * half), u)


def test_drbg_randbelow_uniform():
    r = Drbg.from_seed(2)
    counts = np.bincount([r.randbelow(7) for _ in range(14000)], minlength=7)
    assert stats.chisquare(counts).pvalue > 1e-3


def test_drbg_permutation_uniform():
    r = Drbg.from_seed(3)
    seen: dict[tuple, int] = {}
    for _ in range(6000):
        p = tuple(r.permutation(3))
        seen[p] = seen.get(p, 0) + 1
    assert len(seen) == 6 and stats.chisquare(list(seen.values())).pvalue > 1e-3


def test_fixed_point_round_trip_negative_and_overflow():
    fp = FixedPoint(32, 1 << 128)
    v = np.array([-3.25, 0.0, 1e-9, 123456.789, -2.0**39])
    assert np.allclose(fp.decode(fp.encode(v, 2.0**40)), v, atol=2**-32)
    with pytest.raises(EncodingOverflow):
        fp.encode([2.0**41], 2.0**40)
    with pytest.raises(EncodingOverflow):
        fp.encode([1.0], 2.0**100)  # the bound itself cannot fit
    with pytest.raises(EncodingOverflow):
        fp.encode([float("nan")], 1.0)
    with pytest.raises(EncodingOverflow):
        check_sum_headroom(10**6, 2.0**80, 32, 1 << 128)
    u = encode_u64(np.array([-1.5, 2.25]), 24, 10.0)
    assert np.allclose(decode_u64(u, 24), [-1.5, 2.25])


def test_sharing_sums_and_single_shares_uniform():
    q = 1 << 8
    r = Drbg.from_seed(4)
    secret = [5, 200, 0]
    sh = sharing.split(secret, 4, q, r)
    assert sharing.combine(sh, q) == secret
    # any m−1 shares are uniform: a fixed secret's first share over many splits is uniform on Z_q
    firsts = [sharing.split([7], 3, q, r)[0][0] for _ in range(8000)]
    assert stats.chisquare(np.bincount(firsts, minlength=q)).pvalue > 1e-3
    pi = [2, 0, 1]
    assert sharing.apply_permutation(sharing.invert_permutation(pi), sharing.apply_permutation(pi, ["a", "b", "c"])) == ["a", "b", "c"]
    with pytest.raises(ValueError):
        sharing.unpack_ring(b"\x00" * 15, 128, 1)


def test_paillier_homomorphism_and_pool():
    kp = KeyPair.generate(512)
    pk, r = kp.public, Drbg.from_seed(5)
    c1, c2 = pk.encrypt(17, r), pk.encrypt(-5, r)
    assert kp.decrypt_signed(pk.add(c1, c2)) == 12
    assert kp.decrypt_signed(pk.mul_plain(c1, -3)) == -51
    pool = RandomnessPool(pk, r.child("pool"))
    pool.fill(2)
    c3 = pk.rerandomize(c1, pool.take())
    assert c3 != c1 and kp.decrypt(c3) == 17
    held = RandomnessPool(pk, Drbg.from_seed("held"), kp.random_factor)  # the key's holder fills by CRT: the same r^N
    held.fill(1)
    assert held.take() == pk.random_factor(Drbg.from_seed("held")) and len(held) == 0
    assert kp.decrypt(pk.encrypt(9, factor=held.take())) == 9 and held.misses == 1  # empty: drawn on demand
    with pytest.raises(ValueError):
        pk.from_bytes(b"\x00" * pk.ciphertext_bytes)
    with pytest.raises(ValueError):
        check_key_bits(1024, test_mode=False)
    check_key_bits(1024, test_mode=True)


@pytest.fixture(scope="module")
def dgk():
    return DgkKeyPair.generate(512, t=40, u_bits=12, rng=Drbg.from_seed(6))


def test_dgk_zero_test_and_homomorphism(dgk):
    r = Drbg.from_seed(7)
    pk = dgk.public
    for m in (0, 1, 2, pk.u - 1):
        assert dgk.is_zero(pk.encrypt(m, r)) == (m == 0)
        assert dgk.decrypt(dgk.encrypt_fast(m, r)) == m
    assert dgk.decrypt(pk.mul(pk.encrypt(3, r), pk.encrypt(4, r))) == 7


def _parse_each(pk, blobs):
    """The plain reference: one from_bytes (and one gcd) per ciphertext; the error it raises, or the values."""
    try:
        return [pk.from_bytes(b) for b in blobs]
    except ValueError as e:
        return (type(e), str(e))


def _parse_batched(pk, blobs):
    try:
        return pk.from_bytes_many(blobs)
    except ValueError as e:
        return (type(e), str(e))


def test_dgk_batched_parse_matches_per_item_parse_and_refusals(dgk):
    """One gcd on Π c_i mod n accepts exactly what per-item gcds accept, and refuses with the same error."""
    r = Drbg.from_seed(8)
    pk = dgk.public
    good = [pk.to_bytes(pk.encrypt(m, r)) for m in range(12)]
    assert pk.from_bytes_many(good) == _parse_each(pk, good)
    assert pk.from_bytes_many([]) == []
    size = pk.ciphertext_bytes
    bad_items = {
        "zero": b"\x00" * size,
        "n": pk.n.to_bytes(size, "big"),
        "above n": b"\xff" * size,
        "multiple of p": pk.to_bytes(dgk.p * 3),
        "multiple of q": pk.to_bytes(dgk.q),
        "short": good[0][1:],
        "long": b"\x00" + good[0],
    }
    for name, bad in bad_items.items():
        for at in (0, 5, 11):
            blobs = good[:at] + [bad] + good[at + 1 :]
            want = _parse_each(pk, blobs)
            assert isinstance(want, tuple), name
            assert _parse_batched(pk, blobs) == want, (name, at)
    # Two non-units (one per prime): their product is 0 mod n, the batched gcd is n; still refused like per-item.
    blobs = good[:3] + [pk.to_bytes(dgk.p), pk.to_bytes(dgk.q)] + good[5:]
    assert _parse_batched(pk, blobs) == _parse_each(pk, blobs)
    # A length error after a non-unit: the first failing item decides, as in the per-item loop.
    blobs = [pk.to_bytes(dgk.q)] + good[1:6] + [b"\x01"]
    assert _parse_batched(pk, blobs) == _parse_each(pk, blobs) == (DgkCiphertextError, "DGK ciphertext out of range")


def test_dgk_pooled_crt_factors_encrypt_like_fresh_randomness(dgk):
    """Charlie's pool: h^r by CRT is h^r mod n, and g^m·(h^r) from the pool decrypts to m."""
    r = Drbg.from_seed(10)
    pk = dgk.public
    assert dgk.blinding_factor_crt(r.child("a")) == pk.blinding_factor(r.child("a"))
    pool = DgkBlindingPool(pk, r.child("pool"), dgk.blinding_factor_crt)
    pool.fill(4)
    y, ell = 0b1011001, 9
    cts = comparison.b_encrypt_bits(dgk, y, ell, r, factors=pool)
    assert [dgk.decrypt(c) for c in cts] == [(y >> i) & 1 for i in range(ell)]
    assert len(set(cts[i] for i in range(ell) if not (y >> i) & 1)) == sum(1 for i in range(ell) if not (y >> i) & 1)  # fresh factor per bit


def _compare(dgk, x, y, ell, r, pool, factors=None):
    bits = comparison.b_encrypt_bits(dgk, y, ell, r, factors=factors)
    terms = comparison.a_blinded_terms(dgk.public, x, bits, r, pool)
    zeros = sum(dgk.is_zero(t) for t in terms)
    assert zeros <= 1  # B's list has at most one zero, all else non-zero
    return comparison.b_result(dgk, terms)


def test_comparison_random_equal_extreme_and_signed(dgk):
    r = Drbg.from_seed(8)
    pool = DgkBlindingPool(dgk.public, r.child("pool"))
    ell = 10
    top = (1 << ell) - 1
    cases = [(0, 0), (top, top), (0, top), (top, 0), (5, 5), (511, 512), (512, 511)]
    cases += [(r.randbelow(1 << ell), r.randbelow(1 << ell)) for _ in range(40)]
    charlie = DgkBlindingPool(dgk.public, r.child("charlie"), dgk.blinding_factor_crt)
    for x, y in cases:
        assert _compare(dgk, x, y, ell, r, pool) == int(x < y), (x, y)
        assert _compare(dgk, x, y, ell, r, pool, factors=charlie) == int(x < y), (x, y)
    off = 1 << (ell - 1)
    for xs, ys in [(-300, 200), (200, -300), (-7, -7), (-511, 511)]:
        assert _compare(dgk, xs + off, ys + off, ell, r, pool) == int(xs < ys)


def test_comparison_output_to_a(dgk):
    r = Drbg.from_seed(9)
    pool = DgkBlindingPool(dgk.public, r.child("pool"))
    ell = 8
    for x, y in [(3, 9), (9, 3), (4, 4), (0, 255), (255, 0)] + [(r.randbelow(256), r.randbelow(256)) for _ in range(20)]:
        bits = comparison.b_encrypt_bits(dgk, y, ell, r)
        da = r.randbelow(2)
        terms = comparison.a_blinded_terms(dgk.public, x, bits, r, pool, sigma=1 - 2 * da, equality_term=da)
        assert comparison.a_result(da, comparison.b_result(dgk, terms)) == int(y < x)


def test_comparison_rejects_out_of_range_inputs(dgk):
    with pytest.raises(ValueError):
        comparison.bits_of(1 << 8, 8)


def _reference_blinded_terms(pk, x, enc_y_bits, rng, blinding, sigma=1, equality_term=None):
    """Steps 3–5 one operation at a time (an inversion per bit), as the module docstring states them."""
    xb = comparison.bits_of(x, len(enc_y_bits))
    terms, run = [], 1
    for i in range(len(enc_y_bits) - 1, -1, -1):
        ey_inv = pk.inverse(enc_y_bits[i])
        ew = enc_y_bits[i] if xb[i] == 0 else pk.mul(pk.g, ey_inv)
        terms.append(pk.mul(pk.mul(pk.power(pk.g, sigma + xb[i]), ey_inv), pk.mul(run, pk.mul(run, run))))
        run = pk.mul(run, ew)
    if equality_term is not None:
        terms.append(pk.mul(pk.power(pk.g, equality_term), run))
    out = [pk.mul(pk.power(c, 1 + rng.randbelow(pk.u - 1)), blinding.take()) for c in terms]
    return [out[p] for p in rng.permutation(len(out))]


def test_blinded_terms_equal_the_step_by_step_formula(dgk):
    """The batched inversion and precomputed g^(σ + x_i) change no term: same list for the same draws, both variants."""
    r = Drbg.from_seed(11)
    pk, ell = dgk.public, 12
    for x, y, da in [(0, 0, None), (4095, 0, None), (1234, 1235, None), (77, 3000, 0), (3000, 77, 1)]:
        bits = comparison.b_encrypt_bits(dgk, y, ell, r)
        kw = {} if da is None else {"sigma": 1 - 2 * da, "equality_term": da}
        seed = r.randbits(64)
        pools = [DgkBlindingPool(pk, Drbg.from_seed(seed).child("pool")) for _ in range(2)]
        for p in pools:
            p.fill(ell + 1)
        got = comparison.a_blinded_terms(pk, x, bits, Drbg.from_seed(seed), pools[0], **kw)
        assert got == _reference_blinded_terms(pk, x, bits, Drbg.from_seed(seed), pools[1], **kw)
        assert all(type(t) is int for t in got)


def test_batch_inverse(dgk):
    n = dgk.public.n
    r = Drbg.from_seed(12)
    vals = [1 + r.randbelow(n - 1) for _ in range(9)]
    assert [v * w % n for v, w in zip(vals, comparison.batch_inverse(vals, n))] == [1] * 9
    assert comparison.batch_inverse([], n) == []
    with pytest.raises(ZeroDivisionError):
        comparison.batch_inverse(vals + [dgk.p], n)


def test_paillier_from_factors_closed_form_crt_constants_match_phe():
    """h_p, h_q in closed form equal phe's L_p(g^{p−1} mod p²)^{−1}, and the key decrypts; bad factors are refused."""
    from phe import paillier as phe_paillier

    for seed in (1, 2, 3):
        r = Drbg.from_seed(seed)
        p, q = (int(gmpy2.next_prime(r.randbits(256) | (1 << 255))) for _ in range(2))
        kp = KeyPair.from_factors(p, q)
        reference = phe_paillier.PaillierPrivateKey(phe_paillier.PaillierPublicKey(p * q), p, q)
        assert (kp._phe.hp, kp._phe.hq, kp._phe.p_inverse) == (reference.hp, reference.hq, reference.p_inverse)
        for m in (0, 1, 12345, p * q - 1):
            assert kp.decrypt(kp.public.encrypt(m, r)) == m
        for bad in ((p, p), (p, q + 2), (p * q, q), (1, q)):
            with pytest.raises(ValueError):
                KeyPair.from_factors(*bad)
