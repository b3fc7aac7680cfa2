"""The prime field Field64 (p = 2^64 − 2^32 + 1, "Goldilocks"), vectorised over numpy uint64.

The field of the fully linear proofs (:mod:`mpdp.math.flp`) and of the validated DCA mode's shares, as Prio3 uses it
(draft-irtf-cfrg-vdaf, Field64). Elements are numpy ``uint64`` arrays holding canonical representatives in [0, p);
every function takes and returns canonical values. No Python-int loop on any path that touches a vector.

Every elementwise operation is a numba-compiled ufunc (one pass, no temporaries), the transforms and sums compiled
loops. Multiplication (the only non-trivial step): split both operands into 32-bit limbs, form the 128-bit product
hi·2^64 + lo from four 32×32-bit products (each fits a uint64) with explicit carries, then reduce with the special form
of p: 2^64 ≡ 2^32 − 1 and 2^96 ≡ −1 (mod p), so hi·2^64 + lo ≡ lo − hi_hi + hi_lo·(2^32 − 1), where hi = hi_hi·2^32
+ hi_lo. Every step is checked against Python integers in tests/core/test_field.py.

Randomness: :func:`rand` reads ``os.urandom`` (the CSPRNG) and :func:`xof` expands a byte string with SHAKE128 (the
draft's XOF role), :func:`prg` an AES-256-CTR keystream (expanding a seed-compressed share); all sample uniformly by rejection (a 64-bit word ≥ p is dropped, probability 2^-32 − 2^-64).

Polynomials over the multiplicative subgroup of order 2^k (k ≤ 32, generator 7 of F_p^*): :func:`ntt` / :func:`intt`
evaluate / interpolate at the n-th roots of unity along the last axis (iterative radix-2 butterflies, compiled, all polynomials of a call side by side).
"""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Sequence, cast

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from numba import njit, vectorize

if TYPE_CHECKING:
    from mpdp.math.drbg import Drbg

P = 2**64 - 2**32 + 1
ENCODED_SIZE = 8  # bytes per element on the wire (little-endian)
GENERATOR = 7  # a generator of F_p^* (p − 1 = 2^32·3·5·17·257·65537)
TWO_ADICITY = 32
U64 = np.dtype("<u8")
Elem = np.ndarray | np.uint64  # an array of elements, or one (0-d operands are numpy scalars)

_P = np.uint64(P)
_EPS = np.uint64(2**32 - 1)  # 2^64 mod p
_M32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_ONE = np.uint64(1)
_ZERO = np.uint64(0)
_C96 = np.uint64(1 << 32)


class NotCanonical(ValueError):
    """A packed vector holds a word ≥ p, or has the wrong length."""


# -- arithmetic ---------------------------------------------------------------------------------------
# The elementwise operations are numba-compiled ufuncs (broadcasting like numpy's own, no temporaries: one pass
# over the operands); the scalar kernels below are the whole arithmetic. numba types a uint64 mixed with an int
# literal as float64, so every constant is a np.uint64.
_wrap = np.errstate(over="ignore")  # uint64 wrap-around is intended in the numpy helpers below


@njit(cache=True, inline="always")
def _reduce128_1(hi: np.uint64, lo: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    hi_hi = hi >> _S32
    hi_lo = hi & _M32
    t = lo - hi_hi  # 2^96·hi_hi ≡ −hi_hi
    if lo < hi_hi:
        t -= _EPS  # borrow: add p, ≡ subtract 2^32 − 1 mod 2^64
    u = (hi_lo << _S32) - hi_lo  # hi_lo·(2^32 − 1) < 2^64
    r = t + u
    if r < u:
        r += _EPS
    if r >= _P:
        r -= _P
    return r


@njit(cache=True, inline="always")
def _mul_wide(a: np.uint64, b: np.uint64) -> tuple[np.uint64, np.uint64]:  # pragma: no cover - compiled
    """The 128-bit product a·b as (hi, lo), unreduced."""
    a0, a1 = a & _M32, a >> _S32
    b0, b1 = b & _M32, b >> _S32
    lo = a0 * b0
    hi = a1 * b1
    t = a1 * b0
    mid = a0 * b1 + t
    if mid < t:
        hi += _C96  # a carry out of mid is worth 2^96 in the product: 2^32 in hi
    hi += mid >> _S32
    mid = mid << _S32
    lo += mid
    if lo < mid:
        hi += _ONE  # the carry out of lo
    return hi, lo


@njit(cache=True, inline="always")
def _mul1(a: np.uint64, b: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    hi, lo = _mul_wide(a, b)
    return _reduce128_1(hi, lo)


@njit(cache=True, inline="always")
def _add1(a: np.uint64, b: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    s = a + b
    if s < a:
        s += _EPS  # a wrap past 2^64 is worth 2^64 ≡ 2^32 − 1; cannot wrap again
    if s >= _P:
        s -= _P
    return s


@njit(cache=True, inline="always")
def _sub1(a: np.uint64, b: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    d = a - b
    if a < b:
        d -= _EPS  # (a − b + 2^64) + p ≡ (a − b + 2^64) − (2^32 − 1) mod 2^64
    return d


_SIG = ["uint64(uint64, uint64)"]
_add = vectorize(_SIG, cache=True)(lambda a, b: _add1(a, b))
_sub = vectorize(_SIG, cache=True)(lambda a, b: _sub1(a, b))
_mul = vectorize(_SIG, cache=True)(lambda a, b: _mul1(a, b))


def _u64(a: Elem) -> np.ndarray:
    return np.asarray(a, dtype=np.uint64)


def _arg(a: Elem, dtype: type = np.uint64) -> np.ndarray:
    """An array argument of a compiled kernel, always of one type: uint64 (or the int64 of a permutation), C-contiguous
    and read-only (a view: no copy when the array already is contiguous). numba compiles one machine-code version per
    argument type (dtype, layout, read-only flag), so normalising every argument keeps each kernel at the one version
    :func:`warm_up` compiles; no job compiles another."""
    v: np.ndarray = np.ascontiguousarray(a, dtype=dtype).view()
    v.flags.writeable = False
    return v


def add(a: Elem, b: Elem) -> np.ndarray:
    """a + b mod p."""
    return _add(_u64(a), _u64(b))


def sub(a: Elem, b: Elem) -> np.ndarray:
    """a − b mod p."""
    return _sub(_u64(a), _u64(b))


@_wrap
def neg(a: Elem) -> np.ndarray:
    """−a mod p."""
    a = np.asarray(a, dtype=np.uint64)
    return np.where(a == 0, a, _P - a)


def mul(a: Elem, b: Elem) -> np.ndarray:
    """a·b mod p (see the module docstring)."""
    return _mul(_u64(a), _u64(b))


def square(a: Elem) -> np.ndarray:
    return mul(a, a)


def pow_scalar(x: int, e: int) -> int:
    return pow(int(x) % P, e, P)


def inv(a: Elem) -> np.ndarray:
    """a^(p−2) elementwise (Fermat, vectorised); 0 maps to 0."""
    return pow_vec(a, P - 2)


@njit(cache=True)
def _inv1(x: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    """x^(p−2) by square and multiply (Fermat)."""
    result = _ONE
    base = x
    e = _P - np.uint64(2)
    while e:
        if e & _ONE:
            result = _mul1(result, base)
        base = _mul1(base, base)
        e >>= _ONE
    return result


@njit(cache=True)
def _batch_inv(a: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    n = a.size
    prefix = np.empty(n, dtype=np.uint64)
    acc = _ONE
    for i in range(n):
        acc = _mul1(acc, a[i])
        prefix[i] = acc
    out = np.empty(n, dtype=np.uint64)
    if acc == _ZERO:
        out[:] = _ZERO
        return out
    inv_acc = _inv1(acc)
    for i in range(n - 1, 0, -1):
        out[i] = _mul1(inv_acc, prefix[i - 1])
        inv_acc = _mul1(inv_acc, a[i])
    out[0] = inv_acc
    return out


def batch_inv(a: Elem) -> np.ndarray:
    """Inverses of a 1-D array of non-zero elements with one exponentiation (Montgomery's trick, prefix products;
    compiled)."""
    a = np.ascontiguousarray(a, dtype=np.uint64).reshape(-1)
    if a.size == 0:
        return a.copy()
    if bool((a == 0).any()):
        raise ZeroDivisionError("batch_inv: a zero element")
    return _batch_inv(_arg(a))


@njit(cache=True)
def _row_sums(x: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    out = np.empty(x.shape[0], dtype=np.uint64)
    for r in range(x.shape[0]):
        acc = _ZERO
        for i in range(x.shape[1]):
            acc = _add1(acc, x[r, i])
        out[r] = acc
    return out


@njit(cache=True)
def _mid_sums(x: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """x of shape (A, n, B) → (A, B): the sums over the middle axis, read in memory order."""
    out = np.zeros((x.shape[0], x.shape[2]), dtype=np.uint64)
    for a in range(x.shape[0]):
        for i in range(x.shape[1]):
            for b in range(x.shape[2]):
                out[a, b] = _add1(out[a, b], x[a, i, b])
    return out


def sum(a: Elem, axis: int | None = None) -> np.ndarray:  # noqa: A001 - the field's Σ
    """Σ a mod p along ``axis`` (all elements when None)."""
    a = np.asarray(a, dtype=np.uint64)
    if axis is None:
        a = a.reshape(-1)
        axis = 0
    if a.ndim and axis % a.ndim != a.ndim - 1 and a.size:  # not the last axis: summed in place, without a transposed copy
        axis %= a.ndim
        a = np.ascontiguousarray(a)
        pre, post = int(np.prod(a.shape[:axis], dtype=np.int64)), int(np.prod(a.shape[axis + 1 :], dtype=np.int64))
        return _mid_sums(_arg(a.reshape(pre, a.shape[axis], post))).reshape(a.shape[:axis] + a.shape[axis + 1 :])
    moved = np.moveaxis(a, axis, -1)
    n = moved.shape[-1]
    rows = moved.reshape(-1, n) if n else np.zeros((int(np.prod(moved.shape[:-1], dtype=np.int64)), 1), dtype=np.uint64)
    out = _row_sums(_arg(rows)).reshape(moved.shape[:-1])
    return out if out.ndim else cast(np.ndarray, out[()])  # one element: a numpy scalar, as numpy reductions give


def canon(a: Elem) -> np.ndarray:
    """The canonical representative of any uint64 (a − p when a ≥ p)."""
    a = np.asarray(a, dtype=np.uint64)
    return np.where(a >= _P, a - _P, a)


def dot(a: Elem, b: Elem, axis: int = -1) -> np.ndarray:
    """Σ_i a_i·b_i mod p along ``axis`` (broadcasting)."""
    return sum(mul(a, b), axis=axis)


def scalar(x: int) -> np.uint64:
    """A Python integer as a field element (mod p)."""
    return np.uint64(int(x) % P)


def from_ints(xs) -> np.ndarray:
    """Python (signed) integers → field elements, x mod p."""
    return np.array([int(x) % P for x in xs], dtype=np.uint64)


def to_signed(a: Elem) -> np.ndarray:
    """Centred lift: x ∈ [0, p) → x if x ≤ (p − 1)/2 else x − p, as int64 (|value| < 2^63)."""
    a = np.asarray(a, dtype=np.uint64)
    half = np.uint64((P - 1) // 2)
    neg_part = (_P - a).astype(np.int64)  # < 2^63 where a > (p − 1)/2
    return np.where(a > half, -neg_part, a.astype(np.int64))


def from_signed(x: Elem) -> np.ndarray:
    """int64 (|x| < p/2) → field elements."""
    x = np.asarray(x, dtype=np.int64)
    mag = np.abs(x).astype(np.uint64)
    return np.where(x < 0, neg(mag), mag)


def pow_vec(a: Elem, e: int) -> np.ndarray:
    """a^e elementwise (square and multiply, vectorised)."""
    a = np.asarray(a, dtype=np.uint64)
    result = np.ones_like(a)
    base = a.copy()
    while e:
        if e & 1:
            result = mul(result, base)
        base = mul(base, base)
        e >>= 1
    return result


def powers_of(x: Elem, n: int) -> np.ndarray:
    """[1, x, …, x^(n−1)] for every element of x, shape x.shape + (n,) (doubling, log n vectorised steps)."""
    x = np.asarray(x, dtype=np.uint64)
    out = np.empty(x.shape + (max(n, 1),), dtype=np.uint64)
    out[..., 0] = 1
    filled, step = 1, x.copy()
    while filled < n:
        take = min(filled, n - filled)
        out[..., filled : filled + take] = mul(out[..., :take], step[..., None])
        filled += take
        step = mul(step, step)
    return out[..., :n]


def powers(x: int, n: int) -> np.ndarray:
    """[1, x, x^2, …, x^(n−1)] by doubling (log n vectorised steps)."""
    out = np.empty(max(n, 1), dtype=np.uint64)
    out[0] = 1
    filled, step = 1, int(x) % P
    while filled < n:
        take = min(filled, n - filled)
        out[filled : filled + take] = mul(out[:take], np.uint64(step))
        filled += take
        step = step * step % P
    return out[:n]


# -- bytes, randomness, XOF ----------------------------------------------------------------------------------
def encode(a: Elem) -> bytes:
    return np.ascontiguousarray(a, dtype=U64).tobytes()


def decode(data: bytes, n: int) -> np.ndarray:
    """Inverse of :func:`encode`; refuses a wrong length or a non-canonical word (≥ p)."""
    if len(data) != ENCODED_SIZE * n:
        raise NotCanonical(f"{n} field elements must be {ENCODED_SIZE * n} bytes, got {len(data)}")
    a = np.frombuffer(data, dtype=U64).astype(np.uint64)
    if n and bool((a >= _P).any()):
        raise NotCanonical("a field element is not below p")
    return a


def _uniform(stream, n: int) -> np.ndarray:
    """n uniform elements from ``stream(nbytes)`` (a prefix-consistent byte source) by rejection of words ≥ p."""
    want = n + 8 + n // (1 << 20)
    while True:
        words = np.frombuffer(stream(8 * want), dtype=U64)
        ok = words[words < _P]
        if ok.size >= n:
            return ok[:n].astype(np.uint64)
        want *= 2


def rand(n: int) -> np.ndarray:
    """n uniform elements from the operating system's CSPRNG."""
    buf = bytearray()

    def more(nbytes: int) -> bytes:
        if len(buf) < nbytes:
            buf.extend(os.urandom(nbytes - len(buf)))
        return bytes(buf[:nbytes])

    return _uniform(more, n)


def rand_stream(drbg: "Drbg", n: int) -> np.ndarray:
    """n uniform elements from a CSPRNG keystream (:class:`mpdp.math.drbg.Drbg`, AES-256-CTR keyed from the OS:
    ≈ 2× faster than os.urandom for the large shares of a validated contribution), by rejection of words ≥ p."""
    words = drbg.words(n + 8 + n // (1 << 20))
    ok = words[words < _P]
    while ok.size < n:
        more = drbg.words(n)
        ok = np.concatenate([ok, more[more < _P]])
    return ok[:n].astype(np.uint64)


def xof(dst: bytes, seed: bytes, binder: bytes, n: int) -> np.ndarray:
    """n elements of SHAKE128(len(dst) ‖ dst ‖ seed ‖ binder), uniform by rejection (the draft's XofShake128 role:
    a domain-separation tag, a seed and a binder string)."""
    h = hashlib.shake_128(len(dst).to_bytes(2, "big") + dst + seed + binder)
    return _uniform(h.digest, n)


def xof_many(dst: bytes, seeds: list[bytes], binder: bytes, n: int) -> np.ndarray:
    """:func:`xof` for many seeds, shape (len(seeds), n): each row the same elements as xof(dst, seed, binder, n). Rows
    whose first n words are all below p (all but ≈ n·2^-32 of them) are taken in one vectorised step."""
    if not seeds:
        return np.zeros((0, n), dtype=np.uint64)
    prefix = len(dst).to_bytes(2, "big") + dst
    width = 8 * n
    words = np.frombuffer(b"".join([hashlib.shake_128(prefix + s + binder).digest(width) for s in seeds]), dtype=U64).reshape(len(seeds), n)
    out = words.astype(np.uint64)
    for i in np.flatnonzero((words >= _P).any(axis=1)).tolist():
        out[i] = xof(dst, seeds[i], binder, n)
    return out


def prg(key: bytes, n: int) -> np.ndarray:
    """n elements of the AES-256-CTR keystream under ``key`` (a 32-byte key used for this one stream; zero counter
    block), uniform by rejection of words ≥ p: a seed expander ≈ 10× faster than SHAKE128 for long outputs (AES-NI)."""
    if len(key) != 32:
        raise ValueError("prg takes a 32-byte AES-256 key")
    enc = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor()
    words = np.frombuffer(enc.update(bytes(8 * (n + 8 + n // (1 << 20)))), dtype=U64)
    below = words < _P
    if bool(below[:n].all()):
        return words[:n].astype(np.uint64)  # the first n words, all accepted (all but ≈ n·2^-32 of the draws)
    ok = words[below]
    while ok.size < n:  # the keystream continues where it stopped: the same elements however it is cut
        more = np.frombuffer(enc.update(bytes(8 * n)), dtype=U64)
        ok = np.concatenate([ok, more[more < _P]])
    return ok[:n].astype(np.uint64)


_CTR0 = modes.CTR(bytes(16))  # the zero counter block of every prg stream (a mode object holds only its nonce)


def prg_many(keys: Sequence[bytes], n: int) -> np.ndarray:
    """:func:`prg` for many keys, shape (len(keys), n): row i = prg(keys[i], n). Each key's first keystream block run
    is drawn once into one array and the rows whose first n words are all below p (all but ≈ n·2^-32 of them) are
    taken in one vectorised step; the others take :func:`prg`'s general path. The result is a view of a wider array
    (rows not contiguous)."""
    if any(len(key) != 32 for key in keys):
        raise ValueError("prg takes a 32-byte AES-256 key")
    if not keys:
        return np.zeros((0, n), dtype=np.uint64)
    width = n + 8 + n // (1 << 20)  # prg's first draw
    zeros = bytes(8 * width)
    words = np.empty((len(keys), width), dtype=U64)  # each keystream written in place: no joined copy (its page faults
    rows = words.data.cast("B")  # cost more than the AES itself at d = 10)
    w8 = 8 * width
    for i, key in enumerate(keys):
        rows[w8 * i : w8 * (i + 1)] = Cipher(algorithms.AES(key), _CTR0).encryptor().update(zeros)
    out = words[:, :n]
    for i in np.flatnonzero((out >= _P).any(axis=1)).tolist():
        out[i] = prg(keys[i], n)
    return out.astype(np.uint64, copy=False)


def xof_bytes(dst: bytes, seed: bytes, binder: bytes, n: int) -> bytes:
    """n bytes of the same XOF (seeds derived from seeds)."""
    return hashlib.shake_128(len(dst).to_bytes(2, "big") + dst + seed + binder).digest(n)


# -- roots of unity and the NTT ------------------------------------------------------------------------------
def root_of_unity(n: int) -> int:
    """A primitive n-th root of unity (n a power of two, n ≤ 2^32)."""
    if n < 1 or n & (n - 1) or n > 2**TWO_ADICITY:
        raise ValueError(f"n must be a power of two ≤ 2^32, got {n}")
    return pow(GENERATOR, (P - 1) // n, P)


@lru_cache(maxsize=64)
def _plan(n: int, inverse: bool) -> tuple[np.ndarray, np.ndarray]:
    """Bit-reversal permutation and the per-level twiddles (level h: the half = 2^h powers of a primitive
    2^(h+1)-th root, concatenated: n − 1 elements) for a size-n transform."""
    bits = n.bit_length() - 1
    idx = np.arange(n)
    rev = np.zeros(n, dtype=np.int64)
    for b in range(bits):
        rev |= ((idx >> b) & 1) << (bits - 1 - b)
    w = root_of_unity(n)
    if inverse:
        w = pow(w, P - 2, P)
    twiddles = []
    half = 1
    while half < n:
        step = pow(w, n // (2 * half), P)  # a primitive (2·half)-th root
        twiddles.append(powers(step, half))
        half *= 2
    return _arg(rev, np.int64), _arg(np.concatenate(twiddles) if twiddles else np.zeros(0, dtype=np.uint64))  # shared (cached): read-only


def ntt(a: Elem, axis: int = -1) -> np.ndarray:
    """Evaluations at ω^0, …, ω^(n−1) (ω = :func:`root_of_unity`(n)) of the polynomials whose coefficients are
    along ``axis`` of ``a`` (-1, or -2: one polynomial per column, no transposition; n a power of two)."""
    return _transform(a, inverse=False, axis=axis)


def intt(a: Elem, axis: int = -1) -> np.ndarray:
    """Coefficients of the polynomials of degree < n taking the values along ``axis`` (-1 or -2) at ω^0, …, ω^(n−1)."""
    return _transform(a, inverse=True, axis=axis)


@njit(cache=True)
def _ntt_columns(x: np.ndarray, rev: np.ndarray, tw: np.ndarray, scale: np.uint64) -> np.ndarray:  # pragma: no cover - compiled
    """The transform of every column of x (n, columns): bit-reversal permutation of the rows, log2 n radix-2 butterfly
    levels, times scale. Columns are the innermost axis, so each butterfly runs over contiguous memory (≈ 2.5× faster
    than one row at a time)."""
    n, cols = x.shape
    y = np.empty_like(x)
    for i in range(n):
        y[i, :] = x[rev[i], :]
    half = 1
    off = 0
    while half < n:
        for start in range(0, n, 2 * half):
            for j in range(half):
                w = tw[off + j]
                lo_row = y[start + j]
                hi_row = y[start + j + half]
                for c in range(cols):
                    e = lo_row[c]
                    o = _mul1(hi_row[c], w)
                    lo_row[c] = _add1(e, o)
                    hi_row[c] = _sub1(e, o)
        off += half
        half *= 2
    if scale != _ONE:
        for i in range(n):
            for c in range(cols):
                y[i, c] = _mul1(y[i, c], scale)
    return y


@njit(cache=True)
def _ntt_stack(x: np.ndarray, rev: np.ndarray, tw: np.ndarray, scale: np.uint64) -> np.ndarray:  # pragma: no cover - compiled
    """:func:`_ntt_columns` of each x[b] (x of shape (batch, n, columns))."""
    out = np.empty_like(x)
    for b in range(x.shape[0]):
        out[b] = _ntt_columns(x[b], rev, tw, scale)
    return out


@njit(cache=True)
def _coset_stack(x: np.ndarray, rev: np.ndarray, tw_inv: np.ndarray, tw: np.ndarray, twist: np.ndarray) -> np.ndarray:  # pragma: no cover
    """Per x[b] (n, columns): interpolate each column (unscaled), multiply row i by twist[i], evaluate."""
    out = np.empty_like(x)
    n, cols = x.shape[1], x.shape[2]
    for b in range(x.shape[0]):
        y = _ntt_columns(x[b], rev, tw_inv, _ONE)
        for i in range(n):
            t = twist[i]
            for c in range(cols):
                y[i, c] = _mul1(y[i, c], t)
        out[b] = _ntt_columns(y, rev, tw, _ONE)
    return out


def coset_values(a: Elem, shift: int) -> np.ndarray:
    """Given the values of polynomials of degree < n at ω^0, …, ω^(n−1) (one per column: axis −2 has length n), their
    values at shift·ω^0, …, shift·ω^(n−1): interpolation, the coefficient of x^i times shift^i, evaluation, in one
    compiled pass per polynomial (= ntt(intt(a) · shift^i), without the intermediate arrays)."""
    a = np.asarray(a, dtype=np.uint64)
    n = a.shape[-2]
    rev, tw_inv = _plan(n, True)
    _, tw = _plan(n, False)
    twist = mul(powers(shift, n), np.uint64(pow(n, P - 2, P)))  # the 1/n of the interpolation folded in
    stack = np.ascontiguousarray(a).reshape((-1,) + a.shape[-2:])
    return _coset_stack(_arg(stack), rev, tw_inv, tw, _arg(twist)).reshape(a.shape)


@njit(cache=True, inline="always")
def _pair_dot_row(row: np.ndarray) -> np.uint64:  # pragma: no cover - compiled
    """Σ_i row[2i]·row[2i+1]: the 128-bit products summed unreduced in three words, reduced once."""
    c0 = c1 = c2 = _ZERO
    for i in range(0, row.shape[0] - 1, 2):
        hi, lo = _mul_wide(row[i], row[i + 1])
        c0 += lo
        hi += np.uint64(c0 < lo)  # hi ≤ 2^64 − 2: no wrap
        c1 += hi
        c2 += np.uint64(c1 < hi)
    return _reduce192(c2, c1, c0)


@njit(cache=True)
def _pair_dots(x: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    out = np.empty(x.shape[0], dtype=np.uint64)
    for r in range(x.shape[0]):
        out[r] = _pair_dot_row(x[r])
    return out


def pair_dots(a: Elem) -> np.ndarray:
    """Σ_i a[..., 2i]·a[..., 2i+1] along the last axis (of even length): ParallelSum(Mul) on interleaved operands."""
    a = np.asarray(a, dtype=np.uint64)
    if a.shape[-1] % 2:
        raise ValueError("pair_dots takes interleaved pairs: an even last axis")
    return _pair_dots(_arg(a.reshape(-1, a.shape[-1]))).reshape(a.shape[:-1])


@njit(cache=True)
def _coset_pair_dots(x: np.ndarray, rev: np.ndarray, tw_inv: np.ndarray, tw: np.ndarray, twist: np.ndarray) -> np.ndarray:  # pragma: no cover
    """Per x[b] (n, columns): the coset values of :func:`_coset_stack`, consumed row by row as pair dots (never stored)."""
    n, cols = x.shape[1], x.shape[2]
    out = np.empty((x.shape[0], n), dtype=np.uint64)
    for b in range(x.shape[0]):
        y = _ntt_columns(x[b], rev, tw_inv, _ONE)
        for i in range(n):
            t = twist[i]
            for c in range(cols):
                y[i, c] = _mul1(y[i, c], t)
        z = _ntt_columns(y, rev, tw, _ONE)
        for i in range(n):
            out[b, i] = _pair_dot_row(z[i])
    return out


def coset_pair_dots(a: Elem, shift: int) -> np.ndarray:
    """pair_dots(coset_values(a, shift)) in one compiled pass (the coset values are not kept): shape a.shape[:-1]."""
    a = np.asarray(a, dtype=np.uint64)
    n = a.shape[-2]
    if a.shape[-1] % 2:
        raise ValueError("coset_pair_dots takes interleaved pairs: an even last axis")
    rev, tw_inv = _plan(n, True)
    _, tw = _plan(n, False)
    twist = mul(powers(shift, n), np.uint64(pow(n, P - 2, P)))
    stack = np.ascontiguousarray(a).reshape((-1,) + a.shape[-2:])
    return _coset_pair_dots(_arg(stack), rev, tw_inv, tw, _arg(twist)).reshape(a.shape[:-1])


def _per_row_and_rep(x: Elem, rows: int, reps: int) -> np.ndarray:
    """x (broadcastable to (rows, reps, …)) as a contiguous uint64 array of that shape, for the per-client kernels."""
    return _arg(np.broadcast_to(np.asarray(x, dtype=np.uint64), (rows, reps) + np.shape(x)[2:]))


@njit(cache=True)
def _prove_wires(meas: np.ndarray, alphas: np.ndarray, extra_a: np.ndarray, extra_b: np.ndarray, seeds: np.ndarray,
                 n: int, chunk: int) -> np.ndarray:  # pragma: no cover - compiled
    rows, m = meas.shape
    reps, e = alphas.shape[1], extra_a.shape[2]
    calls = (m + chunk - 1) // chunk  # calls holding bit checks
    out = np.zeros((rows, reps, n, 2 * chunk), dtype=np.uint64)
    u = np.empty(calls, dtype=np.uint64)
    for r in range(rows):
        for j in range(reps):
            w = out[r, j]
            w[0, :] = seeds[r, j]
            al = alphas[r, j]
            for k in range(calls):
                u[k] = _ONE
            for s in range(chunk):
                # slot s of every call: independent multiplications (u[k] ← u[k]·α_k = α_k^(s+1)), no serial chain
                for k in range(calls):
                    q = k * chunk + s
                    if q >= m:
                        break
                    x = meas[r, q]
                    uk = _mul1(u[k], al[k])
                    u[k] = uk
                    w[k + 1, 2 * s] = _mul1(uk, x)
                    w[k + 1, 2 * s + 1] = _sub1(x, _ONE)
            for t in range(e):
                q = m + t
                kk = q // chunk
                s = q - kk * chunk
                w[kk + 1, 2 * s] = extra_a[r, j, t]
                w[kk + 1, 2 * s + 1] = extra_b[r, j, t]
    return out


def prove_wires(meas: Elem, alphas: Elem, extra_a: Elem, extra_b: Elem, seeds: Elem, n: int, chunk: int) -> np.ndarray:
    """The FLP prover's wire values (:meth:`mpdp.math.flp.Circuit.prove`) built in one compiled pass, for rows of
    ``meas`` (rows, m) and R repetitions: the bit checks' coefficients' bases ``alphas`` (rows, R, ⌈m/chunk⌉), the
    further Mul operands ``extra_a``/``extra_b`` (rows, R, e) (quad index m + t) and the wire seeds (rows, R, 2·chunk).

    Quad term q (call k = q // chunk + 1, slot s = q mod chunk) has operands (α_(q//chunk)^(s+1)·x_q, x_q − 1) for
    q < m and (extra_a, extra_b)[q − m] beyond; row 0 holds the seeds, row k the operands of call k (a in column 2s,
    b in 2s + 1), the rest zeros. Returns shape (rows, R, n, 2·chunk) (the same as the verifier's
    :func:`wire_evals` layout, at the points ω^0..ω^(n−1) instead of r)."""
    meas = np.ascontiguousarray(meas, dtype=np.uint64)
    rows = meas.shape[0]
    reps = np.shape(seeds)[1]

    alphas, extra_a, extra_b, seeds = (_per_row_and_rep(x, rows, reps) for x in (alphas, extra_a, extra_b, seeds))
    return _prove_wires(_arg(meas), alphas, extra_a, extra_b, seeds, int(n), int(chunk))


def _transform(a: Elem, *, inverse: bool, axis: int = -1) -> np.ndarray:
    a = np.asarray(a, dtype=np.uint64)
    if axis not in (-1, -2) or a.ndim < -axis:
        raise ValueError("the transform runs along axis -1 or -2")
    n = a.shape[axis]
    rev, tw = _plan(n, inverse)
    scale = np.uint64(pow(n, P - 2, P) if inverse else 1)
    if axis == -2:  # already one polynomial per column
        stack = np.ascontiguousarray(a).reshape((-1,) + a.shape[-2:])
        return _ntt_stack(_arg(stack), rev, tw, scale).reshape(a.shape)
    columns = np.ascontiguousarray(a.reshape(-1, n).T)  # one polynomial per column
    y = _ntt_columns(_arg(columns), rev, tw, scale)
    return np.ascontiguousarray(y.T).reshape(a.shape)


# -- fused kernels of the FLP verifier (mpdp.math.flp.Circuit.query) -------------------------------------------
_C128 = np.uint64((1 << 128) % P)  # 2^128 mod p = p − 2^32


@njit(cache=True, inline="always")
def _reduce192(c2: np.uint64, c1: np.uint64, c0: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    """c2·2^128 + c1·2^64 + c0 mod p."""
    return _add1(_reduce128_1(c1, c0), _mul1(c2, _C128))


@njit(cache=True)
def _recombine_rows(x: np.ndarray, width: int) -> np.ndarray:  # pragma: no cover - compiled
    """Per row of x (rows, d·width): Σ_l 2^l·x[j·width + l] for each j (width ≤ 63), the 128-bit terms x·2^l summed
    unreduced in three words and reduced once (no data-dependent branch)."""
    rows, cols = x.shape
    d = cols // width
    out = np.empty((rows, d), dtype=np.uint64)
    for r in range(rows):
        for j in range(d):
            base = j * width
            c0 = x[r, base]
            c1 = c2 = _ZERO
            for bit in range(1, width):
                v = x[r, base + bit]
                lo = v << np.uint64(bit)
                hi = v >> np.uint64(64 - bit)
                c0 += lo
                hi += np.uint64(c0 < lo)
                c1 += hi
                c2 += np.uint64(c1 < hi)
            out[r, j] = _reduce192(c2, c1, c0)
    return out


def recombine(bits: Elem, width: int) -> np.ndarray:
    """Σ_l 2^l·b_{j,l} mod p for bits of shape (..., d·width) → (..., d), width ≤ 63: the integers of little-endian bit
    groups (linear, so valid on shares of the bits too); one compiled pass."""
    a = np.asarray(bits, dtype=np.uint64)
    if not 1 <= width <= 63 or a.shape[-1] % width:
        raise ValueError("recombine: the last axis must be a whole number of width-bit groups")
    rows = np.ascontiguousarray(a).reshape(-1, a.shape[-1])
    return _recombine_rows(_arg(rows), int(width)).reshape(a.shape[:-1] + (a.shape[-1] // width,))


@njit(cache=True)
def _wire_evals(meas: np.ndarray, alphas: np.ndarray, extra_a: np.ndarray, extra_b: np.ndarray, seeds: np.ndarray,
                weights: np.ndarray, inv: np.uint64, chunk: int) -> np.ndarray:  # pragma: no cover - compiled
    rows, m = meas.shape
    reps, e = alphas.shape[1], extra_a.shape[2]
    calls = (m + chunk - 1) // chunk  # calls holding bit checks
    out = np.empty((rows, reps, 2 * chunk), dtype=np.uint64)
    u = np.empty(calls, dtype=np.uint64)
    for r in range(rows):
        for j in range(reps):
            f = out[r, j]
            w = weights[r, j]
            al = alphas[r, j]
            for k in range(calls):
                u[k] = w[k + 1]
            for s in range(chunk):
                # slot s of every call: independent multiplications (u[k] ← u[k]·α_k = ℓ_(k+1)·α_k^(s+1)); the sums of
                # the 128-bit products kept unreduced in three words (a2, a1, a0) and reduced once
                a0 = a1 = a2 = b0 = b1 = b2 = w0 = w1 = _ZERO
                for k in range(calls):
                    q = k * chunk + s
                    if q >= m:
                        break
                    x = meas[r, q]
                    uk = _mul1(u[k], al[k])
                    u[k] = uk
                    wk = w[k + 1]
                    hi, lo = _mul_wide(x, uk)
                    a0 += lo
                    hi += np.uint64(a0 < lo)  # hi ≤ 2^64 − 2: no wrap
                    a1 += hi
                    a2 += np.uint64(a1 < hi)
                    hi, lo = _mul_wide(x, wk)
                    b0 += lo
                    hi += np.uint64(b0 < lo)
                    b1 += hi
                    b2 += np.uint64(b1 < hi)
                    w0 += wk
                    w1 += np.uint64(w0 < wk)
                seed_w = w[0]
                f[2 * s] = _add1(_mul1(seeds[r, j, 2 * s], seed_w), _reduce192(a2, a1, a0))
                # Σ_k (x − inv)·ℓ_k = Σ_k x·ℓ_k − inv·Σ_k ℓ_k
                b = _sub1(_reduce192(b2, b1, b0), _mul1(inv, _reduce128_1(w1, w0)))
                f[2 * s + 1] = _add1(_mul1(seeds[r, j, 2 * s + 1], seed_w), b)
            for t in range(e):
                q = m + t
                kk = q // chunk
                s = q - kk * chunk
                wq = w[kk + 1]
                f[2 * s] = _add1(f[2 * s], _mul1(extra_a[r, j, t], wq))
                f[2 * s + 1] = _add1(f[2 * s + 1], _mul1(extra_b[r, j, t], wq))
    return out


def wire_evals(meas: Elem, alphas: Elem, extra_a: Elem, extra_b: Elem, seeds: Elem, weights: Elem, inv: int, chunk: int) -> np.ndarray:
    """The FLP verifier's wire polynomials at its query points (:meth:`mpdp.math.flp.Circuit.query`), without building
    the wires. Rows of ``meas`` (rows, m) are clients; per client and repetition j: the bit checks' coefficients'
    bases ``alphas`` (rows, R, ⌈m/chunk⌉), the further Mul terms' operands ``extra_a``/``extra_b`` (rows, R, e) (quad
    index m + t), the wire seeds (rows, R, 2·chunk) and the Lagrange weights ℓ_i(r_j) (rows, R, n).

    Quad term q (call k = q // chunk + 1, slot s = q mod chunk) has operands (a_q, b_q) = (α_(q//chunk)^(s+1)·x_q,
    x_q − inv) for q < m and (extra_a, extra_b)[q − m] beyond; wire 2s takes a, wire 2s + 1 takes b, and seed i sits at
    point 0. Returns f_i(r_j) = seed_i·ℓ_0(r_j) + Σ_calls operand·ℓ_k(r_j), shape (rows, R, 2·chunk)."""
    meas = np.ascontiguousarray(meas, dtype=np.uint64)
    rows = meas.shape[0]
    reps = np.shape(weights)[1]

    alphas, extra_a, extra_b, seeds, weights = (_per_row_and_rep(x, rows, reps) for x in (alphas, extra_a, extra_b, seeds, weights))
    return _wire_evals(_arg(meas), alphas, extra_a, extra_b, seeds, weights, np.uint64(inv), int(chunk))


# -- ahead-of-time compilation -------------------------------------------------------------------------------
_NESTED = ("_inv1",)  # compiled into _batch_inv, never called from Python


def kernels() -> dict[str, Any]:
    """Every compiled kernel Python calls (name → numba dispatcher); the inlined scalar helpers and :data:`_NESTED` are
    compiled into them."""
    from numba.core.registry import CPUDispatcher

    return {name: obj for name, obj in globals().items()
            if isinstance(obj, CPUDispatcher) and obj.targetoptions.get("inline") != "always" and name not in _NESTED}


def warm_up() -> None:
    """Compile (or load from numba's cache, ``NUMBA_CACHE_DIR``) every kernel of this module by calling each once on
    tiny inputs through its public function. Every kernel argument goes through :func:`_arg`, so this compiles the one
    version a job uses: a role calls it before it reports ready and no job pays compile time (a cold compile of all
    of them takes tens of seconds on a loaded machine). The elementwise ufuncs are compiled when the module loads."""
    x = rand(16)
    batch_inv(x[:4] | _ONE)
    sum(x)  # the sums along the last axis
    sum(x.reshape(2, 8), axis=0)  # along a middle axis
    pair_dots(x.reshape(2, 8))
    ntt(x.reshape(2, 8))
    ntt(x.reshape(8, 2), axis=-2)
    coset_values(x.reshape(2, 4, 2), 3)
    coset_pair_dots(x.reshape(2, 4, 2), 3)
    recombine(x.reshape(2, 8) & _ONE, 2)
    # one client, one repetition, m = 2 measurement entries in one call of chunk 2, one further Mul term: wires on 4 points
    meas, alphas, extra, seeds = x[:2].reshape(1, 2), x[2:3].reshape(1, 1, 1), x[3:4].reshape(1, 1, 1), x[4:8].reshape(1, 1, 4)
    prove_wires(meas, alphas, extra, extra, seeds, 4, 2)
    wire_evals(meas, alphas, extra, extra, seeds, x[8:12].reshape(1, 1, 4), 5, 2)
