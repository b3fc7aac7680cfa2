"""The DGK cryptosystem (Damgård, Geisler, Krøigaard, ACISP 2007), used for the secure comparisons of :mod:`mpdp.math.comparison`.

Hazmat. Additively homomorphic with a small prime plaintext space Z_u; the secret key
answers only "is the plaintext zero?", which is all the comparison protocol needs, and
answers it with one short exponentiation mod p. Misuse that breaks the comparison: a
plaintext prime u ≤ 3ℓ − 1 (a non-zero c_i could vanish mod u), blinding exponents not
drawn uniformly from [1, u−1], or sending a ciphertext without re-randomising it.

Key shape: n = p·q with u·v_p | p − 1 and u·v_q | q − 1 (v_p, v_q t-bit primes);
g has order u·v_p·v_q and h has order v_p·v_q. E(m; r) = g^m·h^r mod n with r of
``r_bits`` ≥ 2.5·t bits. Zero test: c^{v_p} mod p = 1 ⇔ u | m.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass
from typing import Callable, Sequence

import gmpy2

from mpdp.math.drbg import Drbg
from mpdp.math.opcount import OpCounter

DEFAULT_T = 160
DEFAULT_U_BITS = 16


class DgkCiphertextError(ValueError):
    """A DGK ciphertext is outside [1, n) or not a unit."""


@dataclass(frozen=True)
class DgkPublicKey:
    n: int
    g: int
    h: int
    u: int
    r_bits: int

    @property
    def ciphertext_bytes(self) -> int:
        return (self.n.bit_length() + 7) // 8

    def blinding_factor(self, rng: Drbg) -> int:
        """h^r for a fresh r: multiplying by it re-randomises a ciphertext."""
        return int(gmpy2.powmod(self.h, rng.randbits(self.r_bits), self.n))

    def encrypt(self, m: int, rng: Drbg | None = None, *, factor: int | None = None, ops: OpCounter | None = None) -> int:
        if factor is None:
            if rng is None:
                raise ValueError("encrypt needs an rng or a precomputed factor")
            factor = self.blinding_factor(rng)
        if ops is not None:
            ops.tick("dgk_encrypt")
        return int(gmpy2.powmod(self.g, m % self.u, self.n) * factor % self.n)

    def mul(self, c1: int, c2: int) -> int:
        return int(gmpy2.mul(c1, c2) % self.n)

    def inverse(self, c: int) -> int:
        return int(gmpy2.invert(c, self.n))

    def power(self, c: int, k: int) -> int:
        return int(gmpy2.powmod(c, k % self.u, self.n))

    def check(self, c: int) -> int:
        if not 0 < c < self.n or gmpy2.gcd(c, self.n) != 1:
            raise DgkCiphertextError("DGK ciphertext out of range")
        return c

    def to_bytes(self, c: int) -> bytes:
        return int(c).to_bytes(self.ciphertext_bytes, "big")

    def from_bytes(self, b: bytes) -> int:
        if len(b) != self.ciphertext_bytes:
            raise DgkCiphertextError(f"DGK ciphertext must be {self.ciphertext_bytes} bytes, got {len(b)}")
        return self.check(int.from_bytes(b, "big"))

    def from_bytes_many(self, blobs: Sequence[bytes]) -> list[int]:
        """``[from_bytes(b) for b in blobs]`` with one gcd for the whole message instead of one per ciphertext.

        n = p·q, so a prime of n divides Π c_i mod n iff it divides some c_i: gcd(Π c_i mod n, n) = 1 iff every
        c_i is a unit. Any failure re-runs the per-item parse, which raises exactly the error it raises alone."""
        size, n = self.ciphertext_bytes, self.n
        out: list[int] = []
        prod = gmpy2.mpz(1)
        for b in blobs:
            c = int.from_bytes(b, "big") if len(b) == size else 0
            if not 0 < c < n:
                return [self.from_bytes(b) for b in blobs]
            out.append(c)
            prod = prod * c % n
        if gmpy2.gcd(prod, n) != 1:
            return [self.from_bytes(b) for b in blobs]
        return out


@dataclass(frozen=True)
class DgkKeyPair:
    public: DgkPublicKey
    p: int
    q: int
    vp: int
    vq: int

    @classmethod
    def generate(cls, bits: int = 2048, t: int = DEFAULT_T, u_bits: int = DEFAULT_U_BITS, rng: Drbg | None = None) -> "DgkKeyPair":
        rng = rng or Drbg.from_os()
        if bits < 2 * (t + u_bits + 24):
            raise ValueError(f"DGK modulus of {bits} bits is too small for t={t}, u of {u_bits} bits")
        u = int(gmpy2.next_prime(1 << (u_bits - 1)))
        half = bits // 2

        def prime_factor() -> tuple[int, int]:
            while True:
                v = int(gmpy2.next_prime(rng.randbits(t) | (1 << (t - 1))))
                if v.bit_length() != t:
                    continue
                rest_bits = half - 1 - u.bit_length() - t
                for _ in range(10000):
                    r = rng.randbits(rest_bits) | (1 << (rest_bits - 1))
                    p = 2 * u * v * r + 1
                    if gmpy2.is_prime(p, 40):
                        return p, v

        p, vp = prime_factor()
        while True:
            q, vq = prime_factor()
            if q != p and vq != vp:
                break
        n = p * q

        def element_of_order(prime: int, order_factors: tuple[int, ...]) -> int:
            order = 1
            for f in order_factors:
                order *= f
            while True:
                x = rng.randrange(2, prime - 1)
                y = int(gmpy2.powmod(x, (prime - 1) // order, prime))
                if all(gmpy2.powmod(y, order // f, prime) != 1 for f in order_factors):
                    return y

        gp, gq = element_of_order(p, (u, vp)), element_of_order(q, (u, vq))
        hp, hq = element_of_order(p, (vp,)), element_of_order(q, (vq,))
        g = _crt(gp, p, gq, q)
        h = _crt(hp, p, hq, q)
        return cls(DgkPublicKey(n=n, g=g, h=h, u=u, r_bits=(5 * t + 1) // 2), p, q, vp, vq)

    def is_zero(self, c: int, ops: OpCounter | None = None) -> bool:
        """True iff the plaintext is 0 mod u."""
        if ops is not None:
            ops.tick("dgk_zero_test")
        return gmpy2.powmod(c, self.vp, self.p) == 1

    def blinding_factor_crt(self, rng: Drbg) -> int:
        """h^r for a fresh r (as :meth:`DgkPublicKey.blinding_factor`), by CRT: E(0), so E(m) = g^m·h^r."""
        return self.encrypt_fast(0, rng)

    def encrypt_fast(self, m: int, rng: Drbg, ops: OpCounter | None = None) -> int:
        """E(m) computed with the factorisation (CRT): the same ciphertext distribution, much faster."""
        r = rng.randbits(self.public.r_bits)
        pk = self.public
        cp = gmpy2.powmod(pk.g, m % pk.u, self.p) * gmpy2.powmod(pk.h, r % self.vp, self.p) % self.p
        cq = gmpy2.powmod(pk.g, m % pk.u, self.q) * gmpy2.powmod(pk.h, r % self.vq, self.q) % self.q
        if ops is not None:
            ops.tick("dgk_encrypt")
        return _crt(int(cp), self.p, int(cq), self.q)

    def decrypt(self, c: int) -> int:
        """Full decryption by search over Z_u (tests only; the protocol needs just is_zero)."""
        pk = self.public
        target = gmpy2.powmod(c, self.vp, self.p)
        base = gmpy2.powmod(pk.g, self.vp, self.p)
        acc = gmpy2.mpz(1)
        for m in range(pk.u):
            if acc == target:
                return m
            acc = acc * base % self.p
        raise DgkCiphertextError("not a valid DGK ciphertext")


class DgkBlindingPool:
    """Precomputed h^r factors (re-randomisers) for one DGK public key; thread-safe like RandomnessPool."""

    def __init__(self, key: DgkPublicKey, rng: Drbg, make: Callable[[Drbg], int] | None = None) -> None:
        """``make``: how one factor is drawn from ``rng`` (default: h^r with the public key; the key's holder passes
        :meth:`DgkKeyPair.blinding_factor_crt`, the same distribution by CRT)."""
        self.key = key
        self._rng = rng
        self._make = make or key.blinding_factor
        self._lock = threading.Lock()
        self._items: collections.deque[int] = collections.deque()

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
            with self._lock:
                return self._make(self._rng)


def _crt(a: int, p: int, b: int, q: int) -> int:
    return int((a + p * ((b - a) * gmpy2.invert(p, q) % q)) % (p * q))
