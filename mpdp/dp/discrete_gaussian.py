"""Exact discrete Gaussian sampling on CSPRNG bits (Canonne, Kamath & Steinke 2020, "The Discrete Gaussian for
Differential Privacy", NeurIPS 2020, arXiv:2004.00010, Algorithms 1–3).

Hazmat. The discrete Gaussian N_Z(0, σ²) has P[X = x] = exp(−x²/(2σ²)) / Σ_{y∈Z} exp(−y²/(2σ²)) on the integers.
This module samples it *exactly*: every step is a comparison of uniform integers drawn from a
:class:`~mpdp.math.drbg.Drbg` (AES-256-CTR keystream) with integers computed from the rational σ², so no
floating-point value ever enters the sampling path (no Box–Muller, no ``exp``, no rounding; Mironov 2012's
attack on floating-point noise has nothing to read). σ² is given as a :class:`fractions.Fraction` (or an int).

What misuse breaks: drawing from a seeded Drbg for a real release (non-private by construction); passing a
float σ² (refused: its binary value is not the rational you meant); reading the number of loop iterations or
the time a draw took (the sampler is not constant-time — it runs on the client, whose own timing only the
client sees; do not run it where an adversary times it).

The three algorithms (CKS20 §5):

* Alg. 1, Bernoulli(exp(−γ)) for rational γ ≥ 0: for γ ≤ 1, draw A_k ~ Bernoulli(γ/k) for k = 1, 2, … until the
  first failure at K and return [K odd] (the alternating series of exp); for γ > 1, ⌊γ⌋ successes of
  Bernoulli(exp(−1)) and one of Bernoulli(exp(−(γ − ⌊γ⌋))).
* Alg. 2, discrete Laplace with scale t (P[Y = y] ∝ exp(−|y|/t)) for a positive integer t: U uniform in
  [0, t), accepted with probability exp(−U/t); V geometric (Bernoulli(exp(−1)) successes); a sign bit, with the
  duplicate zero rejected; Y = ±(U + t·V).
* Alg. 3, discrete Gaussian: t = ⌊σ⌋ + 1, Y ~ DLap(t), accepted with probability exp(−(|Y| − σ²/t)²/(2σ²)).
"""

from __future__ import annotations

import math
from fractions import Fraction
from math import isqrt

from mpdp.math.drbg import Drbg

_WORDS = 1 << 13  # 64-bit keystream words fetched per refill


class BitSource:
    """Uniform integers from a Drbg's keystream, buffered as 64-bit words (the Drbg's own ``randbelow`` pays a call
    and a byte-slice per draw).

    :meth:`below` is rejection sampling (no modulo bias): draw ⌈log2 n⌉ bits (whole words, top bits) until the value
    is < n.
    """

    __slots__ = ("_i", "_rng", "_words")

    def __init__(self, rng: Drbg) -> None:
        if not isinstance(rng, Drbg):
            raise TypeError(f"rng must be a mpdp.math.drbg.Drbg, got {type(rng).__name__}")
        self._rng = rng
        self._words: list[int] = []
        self._i = 0

    def _word(self) -> int:
        """One uniform 64-bit word."""
        if self._i >= len(self._words):
            self._words = self._rng.uint64(_WORDS).tolist()
            self._i = 0
        w = self._words[self._i]
        self._i += 1
        return w

    def below(self, n: int) -> int:
        """Uniform integer in [0, n) for an integer n ≥ 1."""
        if n == 1:
            return 0
        k = (n - 1).bit_length()
        if k <= 64:
            shift = 64 - k
            while True:
                v = self._word() >> shift
                if v < n:
                    return v
        words = (k + 63) >> 6
        shift = 64 * words - k
        while True:
            v = 0
            for _ in range(words):
                v = (v << 64) | self._word()
            v >>= shift
            if v < n:
                return v

    def bit(self) -> int:
        return self._word() >> 63


def _bernoulli(bits: BitSource, num: int, den: int) -> bool:
    """Bernoulli(num/den) for integers 0 ≤ num ≤ den, den ≥ 1: exactly one uniform draw below den."""
    return bits.below(den) < num


def bernoulli_exp(bits: BitSource, num: int, den: int) -> bool:
    """CKS20 Alg. 1: Bernoulli(exp(−γ)) for γ = num/den ≥ 0 (integers), exactly."""
    if num < 0 or den <= 0:
        raise ValueError("bernoulli_exp needs num ≥ 0 and den > 0")
    if num <= den:  # γ ≤ 1: K = first k with A_k = 0, A_k ~ Bernoulli(γ/k); P[K odd] = exp(−γ)
        k = 1
        while _bernoulli(bits, num, den * k):
            k += 1
        return k & 1 == 1
    whole, rest = divmod(num, den)
    for _ in range(whole):
        if not bernoulli_exp(bits, 1, 1):
            return False
    return bernoulli_exp(bits, rest, den)


def discrete_laplace(bits: BitSource, t: int) -> int:
    """CKS20 Alg. 2: P[Y = y] = (e^{1/t} − 1)/(e^{1/t} + 1)·exp(−|y|/t) for an integer scale t ≥ 1, exactly."""
    if t < 1:
        raise ValueError(f"discrete Laplace scale must be a positive integer, got {t}")
    while True:
        u = bits.below(t)
        if not bernoulli_exp(bits, u, t):
            continue
        v = 0
        while bernoulli_exp(bits, 1, 1):
            v += 1
        b = bits.bit()
        if b and u == 0 and v == 0:
            continue  # −0 would count zero twice
        y = u + t * v
        return -y if b else y


def as_rational(sigma2: Fraction | int) -> Fraction:
    """σ² as an exact positive rational; floats are refused (their binary value is not the number you meant)."""
    if isinstance(sigma2, bool) or not isinstance(sigma2, (Fraction, int)):
        raise TypeError(f"sigma² must be a fractions.Fraction or an int, got {type(sigma2).__name__}")
    s = Fraction(sigma2)
    if s <= 0:
        raise ValueError("sigma² must be positive")
    return s


class DiscreteGaussian:
    """N_Z(0, σ²) for one rational σ², sampled exactly (CKS20 Alg. 3) from one Drbg.

    Sensitivity/guarantee: as a single mechanism, adding N_Z(0, σ²) to an integer query with ℓ2-sensitivity Δ
    is (Δ²/(2σ²))-zCDP (CKS20 Thm. 4); sums of several are accounted in :mod:`mpdp.dca.discrete`.
    """

    __slots__ = ("_bits", "_d", "_n", "_t", "sigma2")

    def __init__(self, sigma2: Fraction | int, rng: Drbg) -> None:
        self.sigma2 = as_rational(sigma2)
        self._n, self._d = self.sigma2.numerator, self.sigma2.denominator
        self._t = isqrt(self._n // self._d) + 1  # ⌊σ⌋ + 1 (⌊√x⌋ = isqrt(⌊x⌋) for x ≥ 0)
        self._bits = BitSource(rng)

    def sample(self) -> int:
        n, d, t, bits = self._n, self._d, self._t, self._bits
        # accept Y with probability exp(−(|Y| − σ²/t)²/(2σ²)) = exp(−(|Y|·t·d − n)² / (2·n·d·t²))
        den = 2 * n * d * t * t
        while True:
            y = discrete_laplace(bits, t)
            a = abs(y) * t * d - n
            if bernoulli_exp(bits, a * a, den):
                return y

    def samples(self, count: int) -> list[int]:
        """``count`` independent draws (Python ints: the sampler never truncates)."""
        if count < 0:
            raise ValueError("count must be ≥ 0")
        draw = self.sample
        return [draw() for _ in range(count)]


def pmf(sigma2: Fraction | int, x: int, *, terms: int | None = None) -> float:
    """P[X = x] for X ~ N_Z(0, σ²), in floating point (tests and accounting only, never sampling)."""
    s = float(as_rational(sigma2))
    width = terms if terms is not None else int(40 * math.sqrt(s)) + 40
    norm = sum(math.exp(-(y * y) / (2 * s)) for y in range(-width, width + 1))
    return math.exp(-(x * x) / (2 * s)) / norm


def variance(sigma2: Fraction | int) -> float:
    """Var X for X ~ N_Z(0, σ²) (< σ², CKS20 Cor. 9), summed numerically (tests only)."""
    s = float(as_rational(sigma2))
    width = int(40 * math.sqrt(s)) + 40
    w = [math.exp(-(y * y) / (2 * s)) for y in range(-width, width + 1)]
    return sum(y * y * p for y, p in zip(range(-width, width + 1), w)) / sum(w)
