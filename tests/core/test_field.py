"""Field64 arithmetic against Python integers: every operation, edge values, the NTT and the XOF sampler."""

from __future__ import annotations

import random

import numpy as np
import pytest

from mpdp.math import field as F

P = F.P
EDGES = [0, 1, 2, P - 1, P - 2, 2**32, 2**32 - 1, 2**32 + 1, 2**63, 2**63 - 1, P - 2**32, 2**64 - 2**33, (P - 1) // 2, (P + 1) // 2]


def _pairs(n: int, seed: int) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    xs = [rng.randrange(P) for _ in range(n)] + [a for a in EDGES for _ in EDGES]
    ys = [rng.randrange(P) for _ in range(n)] + [b for _ in EDGES for b in EDGES]
    return xs, ys


def test_add_sub_mul_neg_match_python_integers():
    xs, ys = _pairs(50_000, 1)
    a, b = np.array(xs, dtype=np.uint64), np.array(ys, dtype=np.uint64)
    assert F.mul(a, b).tolist() == [x * y % P for x, y in zip(xs, ys)]
    assert F.add(a, b).tolist() == [(x + y) % P for x, y in zip(xs, ys)]
    assert F.sub(a, b).tolist() == [(x - y) % P for x, y in zip(xs, ys)]
    assert F.neg(a).tolist() == [(-x) % P for x in xs]
    assert int(F.mul(np.uint64(P - 1), np.uint64(P - 1))) == 1  # 0-d operands too


def test_sum_dot_inverse_and_powers():
    xs, ys = _pairs(20_000, 2)
    a, b = np.array(xs, dtype=np.uint64), np.array(ys, dtype=np.uint64)
    assert int(F.sum(a)) == sum(xs) % P
    assert int(F.dot(a, b)) == sum(x * y for x, y in zip(xs, ys)) % P
    m = a[: 600].reshape(20, 30)
    assert F.sum(m, axis=1).tolist() == [sum(xs[30 * i : 30 * i + 30]) % P for i in range(20)]
    nz = a[a != 0][:300]
    assert F.inv(nz).tolist() == [pow(int(x), P - 2, P) for x in nz]
    assert F.batch_inv(nz).tolist() == [pow(int(x), P - 2, P) for x in nz]
    assert F.powers(12345, 40).tolist() == [pow(12345, i, P) for i in range(40)]
    assert F.powers_of(np.array([3, P - 1], dtype=np.uint64), 5).tolist() == [[pow(3, i, P) for i in range(5)], [pow(P - 1, i, P) for i in range(5)]]
    assert F.pow_vec(np.array([7], dtype=np.uint64), P - 1).tolist() == [1]


def test_compiled_kernels_broadcast_and_reduce_any_axis():
    """The compiled ufuncs broadcast like numpy's own; sums run along any axis; transforms keep leading axes."""
    rng = random.Random(3)
    xs = [rng.randrange(P) for _ in range(4 * 3 * 5)]
    a = np.array(xs, dtype=np.uint64).reshape(4, 3, 5)
    row = np.array([P - 1, 2**32, 7, 0, P - 2], dtype=np.uint64)
    assert F.mul(a, row).tolist() == [[[xs[15 * i + 5 * j + k] * int(row[k]) % P for k in range(5)] for j in range(3)] for i in range(4)]
    assert F.add(a, np.uint64(P - 1)).tolist() == [[[(xs[15 * i + 5 * j + k] - 1) % P for k in range(5)] for j in range(3)] for i in range(4)]
    for axis in (0, 1, 2, -2):
        got = F.sum(a, axis=axis)
        assert got.tolist() == (np.sum(a.astype(object), axis=axis) % P).tolist()
    assert F.sum(np.zeros((3, 0), dtype=np.uint64), axis=-1).tolist() == [0, 0, 0]
    near = np.array([P - 1 - rng.randrange(3) for _ in range(6 * 7 * 2)], dtype=np.uint64).reshape(6, 7, 2)  # every add wraps
    for x in (near, near.transpose(2, 0, 1), near[:, ::2]):  # C-ordered or not
        for axis in (0, 1, -1):
            assert F.sum(x, axis=axis).tolist() == (np.sum(x.astype(object), axis=axis) % P).tolist()
    assert F.sum(np.zeros((0, 4), dtype=np.uint64), axis=0).tolist() == [0] * 4 and F.sum(np.zeros((2, 0, 3), dtype=np.uint64), axis=1).shape == (2, 3)
    c = np.array([rng.randrange(P) for _ in range(2 * 3 * 16)], dtype=np.uint64).reshape(2, 3, 16)
    assert F.ntt(c).tolist() == [[F.ntt(c[i, j]).tolist() for j in range(3)] for i in range(2)]
    assert F.intt(F.ntt(c)).tolist() == c.tolist()


def test_signed_lift_and_canonical_decoding():
    x = np.array([-(2**62), -5, 0, 3, 2**62], dtype=np.int64)
    assert F.to_signed(F.from_signed(x)).tolist() == x.tolist()
    assert F.from_signed(np.array([-1])).tolist() == [P - 1]
    data = F.encode(np.array([1, P - 1], dtype=np.uint64))
    assert F.decode(data, 2).tolist() == [1, P - 1]
    with pytest.raises(F.NotCanonical):
        F.decode(np.array([P], dtype="<u8").tobytes(), 1)
    with pytest.raises(F.NotCanonical):
        F.decode(data, 3)


@pytest.mark.parametrize("n", [1, 2, 8, 64])
def test_ntt_is_evaluation_at_roots_of_unity(n):
    rng = random.Random(n)
    coeffs = [rng.randrange(P) for _ in range(2 * n)]
    c = np.array(coeffs, dtype=np.uint64).reshape(2, n)
    w = F.root_of_unity(n)
    assert pow(w, n, P) == 1 and (n == 1 or pow(w, n // 2, P) != 1)
    want = [[sum(coeffs[r * n + j] * pow(w, i * j, P) for j in range(n)) % P for i in range(n)] for r in range(2)]
    assert F.ntt(c).tolist() == want
    assert F.intt(F.ntt(c)).tolist() == c.tolist()


@pytest.mark.parametrize("n", [1, 4, 32])
@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_transforms_along_columns_coset_values_and_pair_dots_match_python_integers(n):
    rng = random.Random(100 + n)
    vals = np.array([rng.randrange(P) for _ in range(3 * n * 4)], dtype=np.uint64).reshape(3, n, 4)  # 3 stacks of 4 columns
    cols = np.swapaxes(vals, -1, -2)
    assert F.ntt(vals, axis=-2).tolist() == np.swapaxes(F.ntt(cols), -1, -2).tolist()
    assert F.intt(vals, axis=-2).tolist() == np.swapaxes(F.intt(cols), -1, -2).tolist()
    z = F.root_of_unity(2 * n)
    w = F.root_of_unity(n)
    coeffs = np.swapaxes(F.intt(cols), -1, -2)  # (3, n, 4): coefficient i of each column's polynomial
    want = [[[sum(int(coeffs[b, i, c]) * pow(z * pow(w, k, P) % P, i, P) for i in range(n)) % P for c in range(4)] for k in range(n)] for b in range(3)]
    assert F.coset_values(vals, z).tolist() == want
    pairs = vals.reshape(3, -1)[:, : 2 * (vals[0].size // 2)]
    assert F.pair_dots(pairs).tolist() == [sum(int(r[2 * i]) * int(r[2 * i + 1]) for i in range(len(r) // 2)) % P for r in pairs]
    with pytest.raises(ValueError):
        F.pair_dots(np.zeros(3, dtype=np.uint64))
    for bad in (0, -3):
        with pytest.raises(ValueError):
            F.ntt(vals, axis=bad)


def test_rand_stream_is_uniform_canonical_and_fresh():
    from mpdp.math.drbg import Drbg

    a = F.rand_stream(Drbg.from_os(), 5000)
    assert a.shape == (5000,) and bool((a < np.uint64(P)).all()) and len(set(a.tolist())) == 5000
    assert not np.array_equal(a[:8], F.rand_stream(Drbg.from_os(), 8))


def test_xof_is_deterministic_separated_and_canonical():
    a = F.xof(b"dst", b"seed", b"binder", 1000)
    assert a.tolist() == F.xof(b"dst", b"seed", b"binder", 1000).tolist()
    assert a[:10].tolist() != F.xof(b"dsu", b"seed", b"binder", 10).tolist()
    assert F.xof(b"dst", b"seed", b"binder", 10).tolist() == a[:10].tolist()  # a prefix of the same stream
    assert bool((a < np.uint64(P)).all()) and bool((F.rand(1000) < np.uint64(P)).all())


def test_xof_many_is_xof_row_by_row_even_past_a_rejected_word(monkeypatch):
    seeds = [bytes([i]) * 32 for i in range(20)]
    many = F.xof_many(b"dst", seeds, b"b", 17)
    assert many.tolist() == [F.xof(b"dst", s, b"b", 17).tolist() for s in seeds]
    assert F.xof_many(b"dst", [], b"b", 3).shape == (0, 3)
    # a row whose first words hold one ≥ p (probability ≈ 17·2^-32, so planted) takes xof's rejection path
    real = F.hashlib.shake_128

    class Planted:
        def __init__(self, data: bytes) -> None:
            self.h = real(data)
            self.hit = data.endswith(seeds[5] + b"b")

        def digest(self, n: int) -> bytes:
            out = self.h.digest(n)
            return (2**64 - 1).to_bytes(8, "little") + out[8:] if self.hit else out

    monkeypatch.setattr(F.hashlib, "shake_128", Planted)
    got = F.xof_many(b"dst", seeds, b"b", 17)
    assert got[5].tolist() == F.xof(b"dst", seeds[5], b"b", 17).tolist() and bool((got < np.uint64(P)).all())
    assert got[5].tolist() != many[5].tolist() and got[6].tolist() == many[6].tolist()


def _edge_heavy(rng: random.Random, n: int) -> list[int]:
    return [rng.choice(EDGES) if rng.random() < 0.3 else rng.randrange(P) for _ in range(n)]


@pytest.mark.parametrize("width", [1, 3, 18, 36, 63])
def test_recombine_matches_python_integers(width):
    rng = random.Random(width)
    rows, d = 5, 7
    flat = _edge_heavy(rng, rows * d * width)
    got = F.recombine(np.array(flat, dtype=np.uint64).reshape(rows, d * width), width)
    want = [[sum(flat[(r * d + j) * width + l] << l for l in range(width)) % P for j in range(d)] for r in range(rows)]
    assert got.tolist() == want
    for bad in (2, 0, 64):  # not a whole number of groups; widths outside 1..63
        with pytest.raises(ValueError):
            F.recombine(np.zeros((2, 128), dtype=np.uint64) if bad != 2 else np.zeros((2, 5), dtype=np.uint64), bad)


@pytest.mark.parametrize("m,chunk,extra", [(1, 1, 0), (7, 3, 2), (24, 5, 5), (30, 6, 0)])
def test_wire_evals_match_the_wires_evaluated_with_python_integers(m, chunk, extra):
    """Every operand of every quad term at its (call, slot) position, times the weight of its call, summed."""
    rng = random.Random(m * 100 + chunk)
    rows, reps = 3, 2
    calls = -(-(m + extra) // chunk)
    n = calls + 2
    meas = _edge_heavy(rng, rows * m)
    alphas = _edge_heavy(rng, rows * reps * (-(-m // chunk)))
    ea, eb = _edge_heavy(rng, rows * reps * extra), _edge_heavy(rng, rows * reps * extra)
    seeds, weights = _edge_heavy(rng, rows * reps * 2 * chunk), _edge_heavy(rng, rows * reps * n)
    inv = rng.randrange(P)
    arr = lambda xs, *shape: np.array(xs, dtype=np.uint64).reshape(shape)  # noqa: E731
    got = F.wire_evals(arr(meas, rows, m), arr(alphas, rows, reps, -(-m // chunk)), arr(ea, rows, reps, extra), arr(eb, rows, reps, extra),
                       arr(seeds, rows, reps, 2 * chunk), arr(weights, rows, reps, n), inv, chunk)
    for r in range(rows):
        for j in range(reps):
            w = weights[(r * reps + j) * n : (r * reps + j + 1) * n]
            f = [seeds[(r * reps + j) * 2 * chunk + i] * w[0] for i in range(2 * chunk)]
            for q in range(m + extra):
                k, s = divmod(q, chunk)
                if q < m:
                    x = meas[r * m + q]
                    a, b = pow(alphas[(r * reps + j) * (-(-m // chunk)) + k], s + 1, P) * x, x - inv
                else:
                    a, b = ea[(r * reps + j) * extra + q - m], eb[(r * reps + j) * extra + q - m]
                f[2 * s] += a * w[k + 1]
                f[2 * s + 1] += b * w[k + 1]
            assert got[r, j].tolist() == [v % P for v in f]


def test_prg_is_the_aes_ctr_keystream_with_words_at_or_above_p_dropped():
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    key = bytes(range(32))
    stream = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor().update(bytes(8 * 5000))
    words = [int.from_bytes(stream[8 * i : 8 * i + 8], "little") for i in range(5000)]
    want = [w for w in words if w < P][:4000]
    assert F.prg(key, 4000).tolist() == want
    assert F.prg(key, 7).tolist() == want[:7]  # a prefix of the same stream, however long the draw
    with pytest.raises(ValueError):
        F.prg(b"short", 4)


def test_prg_many_is_prg_row_by_row_even_past_a_rejected_word(monkeypatch):
    keys = [bytes([i]) * 32 for i in range(12)]
    many = F.prg_many(keys, 300)
    assert many.tolist() == [F.prg(key, 300).tolist() for key in keys]
    assert F.prg_many([], 3).shape == (0, 3)
    with pytest.raises(ValueError):
        F.prg_many(keys[:2] + [b"short"], 4)
    # a key whose first words hold one ≥ p (probability ≈ 300·2^-32, so planted) takes prg's rejection path
    real = F.Cipher

    class First:
        def __init__(self, algorithm, mode) -> None:
            self.inner, self.hit = real(algorithm, mode).encryptor(), algorithm.key == keys[4]

        def encryptor(self):
            return self

        def update(self, data: bytes) -> bytes:
            out = self.inner.update(data)
            if self.hit:  # the stream's first word only
                self.hit = False
                return (2**64 - 1).to_bytes(8, "little") + out[8:]
            return out

    monkeypatch.setattr(F, "Cipher", First)
    got = F.prg_many(keys, 300)
    assert got[4].tolist() == F.prg(keys[4], 300).tolist() and got[4, :299].tolist() == many[4, 1:].tolist()
    assert got[5].tolist() == many[5].tolist() and bool((got < np.uint64(P)).all())


@pytest.mark.parametrize("n, cols", [(1, 2), (2, 4), (8, 6), (32, 52)])
def test_coset_pair_dots_equals_pair_dots_of_the_coset_values(n, cols):
    near_p = (np.uint64(F.P) - np.random.default_rng(n).integers(1, 1 << 16, size=(2, n, cols)).astype(np.uint64)).astype(np.uint64)
    for a in (F.rand(3 * n * cols).reshape(3, n, cols), near_p):
        shift = F.root_of_unity(2 * n)
        want = F.sum(F.mul(*(F.ntt(F.mul(F.intt(a, axis=-2), F.powers(shift, n)[:, None]), axis=-2)[..., i::2] for i in (0, 1))), axis=-1)
        assert np.array_equal(F.coset_pair_dots(a, shift), want)
        assert np.array_equal(F.coset_pair_dots(a, shift), F.pair_dots(F.coset_values(a, shift)))


@pytest.mark.parametrize("cols", [2, 52, 496])
def test_pair_dots_equals_the_plain_sum_of_products_near_p(cols):
    """The unreduced three-word accumulation against mul-then-sum, with every element at or just below p − 1 (the
    largest products: every carry taken)."""
    gen = np.random.default_rng(cols)
    for a in (np.full((2, cols), F.P - 1, dtype=np.uint64),
              (np.uint64(F.P) - gen.integers(1, 1 << 8, size=(5, cols)).astype(np.uint64)).astype(np.uint64),
              F.rand(5 * cols).reshape(5, cols)):
        assert np.array_equal(F.pair_dots(a), F.sum(F.mul(a[:, 0::2], a[:, 1::2]), axis=-1))
