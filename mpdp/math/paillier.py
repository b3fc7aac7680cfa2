"""Paillier encryption over integers we encode ourselves (keys ≥ 2048 bits).

Hazmat. Keys come from ``phe`` (prime generation from the OS CSPRNG) and decryption uses
phe's CRT path over gmpy2; encryption, re-randomisation and homomorphic operations work
on raw integers here, so no float encoding (which leaks exponents) is ever used. Misuse
that breaks privacy: sending a ciphertext whose randomness the receiver knows without
re-randomising it (every ciphertext a party sends is re-randomised), or decrypting a plaintext that wrapped mod N.

g = N + 1, so E(m; r) = (1 + m·N)·r^N mod N². The expensive factor r^N can be drawn in
advance (:class:`RandomnessPool`), off the critical path.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from typing import Callable

import gmpy2
from phe import paillier as phe_paillier

from mpdp import limits
from mpdp.math.drbg import Drbg
from mpdp.math.opcount import OpCounter

MIN_PRODUCTION_BITS = limits.MIN_PRODUCTION_KEY_BITS


class CiphertextError(ValueError):
    """A ciphertext is outside [1, N²) or not a unit; raised for peer-supplied input."""


@dataclass(frozen=True)
class PublicKey:
    n: int

    @property
    def nsquare(self) -> int:
        return self.n * self.n

    @property
    def bits(self) -> int:
        return self.n.bit_length()

    @property
    def ciphertext_bytes(self) -> int:
        return (self.nsquare.bit_length() + 7) // 8

    def random_factor(self, rng: Drbg) -> int:
        """r^N mod N² for a fresh uniform unit r."""
        while True:
            r = rng.randbelow(self.n)
            if r > 0 and gmpy2.gcd(r, self.n) == 1:
                return int(gmpy2.powmod(r, self.n, self.nsquare))

    def encrypt(self, m: int, rng: Drbg | None = None, *, factor: int | None = None, ops: OpCounter | None = None) -> int:
        """E(m mod N) with fresh randomness (or a precomputed r^N ``factor``)."""
        if factor is None:
            if rng is None:
                raise ValueError("encrypt needs an rng or a precomputed factor")
            factor = self.random_factor(rng)
        if ops is not None:
            ops.tick("paillier_encrypt")
        return int((1 + (m % self.n) * self.n) * factor % self.nsquare)

    def add(self, c1: int, c2: int) -> int:
        """E(a)·E(b) = E(a + b)."""
        return int(gmpy2.mul(c1, c2) % self.nsquare)

    def mul_plain(self, c: int, k: int, ops: OpCounter | None = None) -> int:
        """E(a)^k = E(k·a); negative k uses the inverse, so the exponent stays short."""
        if ops is not None:
            ops.tick("paillier_scalar_mul")
        if k < 0:
            return int(gmpy2.powmod(gmpy2.invert(c, self.nsquare), -k, self.nsquare))
        return int(gmpy2.powmod(c, k, self.nsquare))

    def rerandomize(self, c: int, factor: int, ops: OpCounter | None = None) -> int:
        """c·r^N: same plaintext, fresh randomness."""
        if ops is not None:
            ops.tick("paillier_rerandomize")
        return int(gmpy2.mul(c, factor) % self.nsquare)

    def check(self, c: int) -> int:
        """Validate a peer-supplied ciphertext: 0 < c < N² and gcd(c, N) = 1."""
        if not 0 < c < self.nsquare or gmpy2.gcd(c, self.n) != 1:
            raise CiphertextError("ciphertext out of range for this Paillier key")
        return c

    def to_bytes(self, c: int) -> bytes:
        return int(c).to_bytes(self.ciphertext_bytes, "big")

    def from_bytes(self, b: bytes) -> int:
        if len(b) != self.ciphertext_bytes:
            raise CiphertextError(f"ciphertext must be {self.ciphertext_bytes} bytes, got {len(b)}")
        return self.check(int.from_bytes(b, "big"))


@dataclass(frozen=True)
class KeyPair:
    public: PublicKey
    p: int
    q: int
    _phe: phe_paillier.PaillierPrivateKey = field(repr=False, compare=False)

    @classmethod
    def generate(cls, bits: int = MIN_PRODUCTION_BITS) -> "KeyPair":
        pub, priv = phe_paillier.generate_paillier_keypair(n_length=bits)
        return cls(PublicKey(pub.n), priv.p, priv.q, priv)

    @classmethod
    def from_factors(cls, p: int, q: int) -> "KeyPair":
        if p == q or p < 3 or q < 3 or not gmpy2.is_prime(p) or not gmpy2.is_prime(q):
            raise ValueError("Paillier factors must be distinct primes")
        pub = phe_paillier.PaillierPublicKey(p * q)
        return cls(PublicKey(p * q), p, q, _PrivateKeyWithClosedH(pub, p, q))

    def random_factor(self, rng: Drbg) -> int:
        """r^N mod N² for a fresh uniform unit r, by CRT over p² and q² (the factors' holder only): the value
        :meth:`PublicKey.random_factor` gives for the same r, with exponentiations mod p² and q², not mod N²."""
        n = self.public.n
        while True:
            r = rng.randbelow(n)
            if r > 0 and gmpy2.gcd(r, n) == 1:
                break
        p2, q2 = gmpy2.mpz(self.p) ** 2, gmpy2.mpz(self.q) ** 2
        xp = gmpy2.powmod(r, n % (p2 - self.p), p2)  # φ(p²) = p(p − 1)
        xq = gmpy2.powmod(r, n % (q2 - self.q), q2)
        return int(xq + q2 * ((xp - xq) * gmpy2.invert(q2, p2) % p2))

    def decrypt(self, c: int, ops: OpCounter | None = None) -> int:
        """Plaintext in [0, N) (CRT decryption)."""
        if ops is not None:
            ops.tick("paillier_decrypt")
        return int(self._phe.raw_decrypt(int(c)))

    def decrypt_signed(self, c: int, ops: OpCounter | None = None) -> int:
        """Plaintext in (−N/2, N/2]."""
        m = self.decrypt(c, ops)
        return m - self.public.n if m > self.public.n // 2 else m


class _PrivateKeyWithClosedH(phe_paillier.PaillierPrivateKey):
    """phe's CRT private key with its constants h_p, h_q in closed form instead of an exponentiation mod p² each.

    Paillier (Eurocrypt 1999, §7, decryption by CRT): h_p = L_p(g^{p−1} mod p²)^{−1} mod p. phe's g is n + 1, so
    g^{p−1} = 1 + (p−1)·n mod p² and L_p(·) = (p−1)·n/p = (p−1)·q mod p: h_p = ((p−1)·q)^{−1} mod p (likewise h_q)."""

    def h_function(self, x: int, xsquare: int) -> int:
        if self.public_key.g != self.public_key.n + 1:  # phe's keys always have g = n + 1; anything else: the general form
            return super().h_function(x, xsquare)
        return int(gmpy2.invert((x - 1) * (self.public_key.n // x) % x, x))


def check_key_bits(bits: int, *, test_mode: bool) -> None:
    """Refuse keys under 2048 bits unless a test mode was explicitly enabled, and keys above
    8192 bits (their cubic cost would pin a role); the range lives in :mod:`mpdp.limits` (a ValueError)."""
    limits.check_key_bits(bits, test_mode=test_mode)


class RandomnessPool:
    """Precomputed r^N mod N² factors for one public key, filled off the critical path.

    ``take`` is thread-safe (a deque) and computes a factor on demand when the pool is
    empty, so correctness never depends on the pool being warm.
    """

    def __init__(self, key: PublicKey, rng: Drbg, make: Callable[[Drbg], int] | None = None) -> None:
        """``make``: how one factor is drawn from ``rng`` (default: r^N with the public key; the key's holder passes
        :meth:`KeyPair.random_factor`, the same value for the same r by CRT)."""
        self.key = key
        self._rng = rng
        self._make = make or key.random_factor
        self._lock = threading.Lock()
        self._items: collections.deque[int] = collections.deque()
        self.misses = 0

    def __len__(self) -> int:
        return len(self._items)

    def fill(self, count: int) -> None:
        for _ in range(count):
            with self._lock:
                f = self._make(self._rng)
            self._items.append(f)

    def take(self) -> int:
        try:
            return self._items.popleft()
        except IndexError:
            self.misses += 1
            with self._lock:
                return self._make(self._rng)
