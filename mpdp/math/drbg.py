"""Deterministic random bit generator: AES-256-CTR keyed from a CSPRNG.

Hazmat. Every key, share, mask, permutation and DP noise sample in mpdp is drawn
from a :class:`Drbg`. In production a Drbg is keyed from ``os.urandom`` (see
:meth:`Drbg.from_os`); tests and simulations may key it from a fixed seed, which
makes a run reproducible *and non-private*: :attr:`Drbg.seeded` records that, and
every run that used a seeded Drbg says so in its output.

Misuse that breaks privacy: using a seeded Drbg for a real release; reusing one
Drbg (same key) in two processes; drawing noise from numpy's RNG instead.

Streams are separated with :meth:`child`, which derives an independent key as
HMAC-SHA256(key, label), so the noise of party "P2" does not depend on how many
bits the same party spent on masks.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

KEY_BYTES = 32
_BLOCK = 1 << 16  # keystream bytes produced per AES call
_FILL = 1 << 20  # random_into: keystream bytes per AES call (a multiple of _BLOCK)
_ZEROS = memoryview(bytes(_FILL))  # the zero plaintext of every update_into


class Drbg:
    """AES-256-CTR keystream with integer, float and permutation helpers."""

    __slots__ = ("_key", "_enc", "_buf", "_pos", "seeded")

    def __init__(self, key: bytes, *, seeded: bool) -> None:
        if not isinstance(key, (bytes, bytearray)) or len(key) != KEY_BYTES:
            raise ValueError(f"Drbg key must be {KEY_BYTES} bytes, got {len(key) if isinstance(key, (bytes, bytearray)) else type(key).__name__}")
        self._key = bytes(key)
        self._enc = Cipher(algorithms.AES(self._key), modes.CTR(b"\x00" * 16)).encryptor()
        self._buf = b""
        self._pos = 0
        self.seeded = seeded

    # -- construction -----------------------------------------------------
    @classmethod
    def from_os(cls) -> "Drbg":
        """A fresh generator keyed from the operating system's CSPRNG."""
        return cls(os.urandom(KEY_BYTES), seeded=False)

    @classmethod
    def from_seed(cls, seed: bytes | str | int) -> "Drbg":
        """A reproducible generator for tests and simulations (non-private)."""
        if isinstance(seed, int):
            seed = seed.to_bytes((seed.bit_length() + 8) // 8, "big", signed=True)
        if isinstance(seed, str):
            seed = seed.encode()
        return cls(hashlib.sha256(b"mpdp-seed\x00" + seed).digest(), seeded=True)

    @staticmethod
    def stream_prefix(key: bytes, n: int) -> bytes:
        """The first ``n`` bytes that ``Drbg(key, …).random_bytes(n)`` returns, from one AES call of exactly n bytes
        (a fresh Drbg's first draw makes a whole 64 KiB block: for a few short streams, most of their cost)."""
        if len(key) != KEY_BYTES or n < 0:
            raise ValueError(f"need a {KEY_BYTES}-byte key and n >= 0")
        return Cipher(algorithms.AES(key), modes.CTR(b"\x00" * 16)).encryptor().update(bytes(n))

    def child(self, label: str) -> "Drbg":
        """An independent stream for ``label``; same parent key and label give the same stream."""
        key = hmac.new(self._key, b"mpdp-child\x00" + label.encode(), hashlib.sha256).digest()
        return Drbg(key, seeded=self.seeded)

    # -- raw bits ------------------------------------------------------------
    def random_bytes(self, n: int) -> bytes:
        """The next ``n`` keystream bytes. The rest of the current block first, then as many whole blocks as needed
        from one AES call (the same keystream as block by block; the last block stays buffered)."""
        if n < 0:
            raise ValueError("n must be >= 0")
        head = self._buf[self._pos : self._pos + n]
        self._pos += len(head)
        rest = n - len(head)
        if rest == 0:
            return bytes(head)
        blocks = -(-rest // _BLOCK)
        stream = self._enc.update(bytes(blocks * _BLOCK))
        self._buf = stream[(blocks - 1) * _BLOCK :]
        self._pos = rest - (blocks - 1) * _BLOCK
        return head + stream[:rest] if head else stream[:rest]

    def random_into(self, out: bytearray | memoryview | np.ndarray) -> None:
        """Fill the writable buffer ``out`` with the next len(out) keystream bytes: the bytes random_bytes(len(out))
        would return (the same stream and the same buffered tail), written in place. For large draws: no zero
        plaintext, output object or copy of the size of the draw is allocated (those cost page faults)."""
        mv = memoryview(out.data if isinstance(out, np.ndarray) else out).cast("B")  # a C-contiguous buffer
        n = mv.nbytes
        head = self._buf[self._pos : self._pos + n]
        mv[: len(head)] = head
        self._pos += len(head)
        rest = n - len(head)
        if rest == 0:
            return
        at = len(head)
        blocks = -(-rest // _BLOCK)
        # blocks 0..blocks−3 straight into ``out`` (update_into wants a block's room past its output; the last two
        # blocks leave ≥ _BLOCK + 1 bytes of it), the last two through a scratch buffer
        direct = max(0, blocks - 2) * _BLOCK
        while direct:
            step = min(direct, _FILL)
            self._enc.update_into(_ZEROS[:step], mv[at:])
            at += step
            direct -= step
        last = min(blocks, 2)
        scratch = bytearray(last * _BLOCK + 16)
        self._enc.update_into(_ZEROS[: last * _BLOCK], scratch)
        tail = n - at
        mv[at:] = memoryview(scratch)[:tail]
        self._buf = bytes(scratch[(last - 1) * _BLOCK : last * _BLOCK])
        self._pos = rest - (blocks - 1) * _BLOCK

    def words(self, count: int) -> np.ndarray:
        """The next ``count`` keystream words as a fresh little-endian uint64 array (random_into, no copy)."""
        out = np.empty(count, dtype="<u8")
        self.random_into(out)
        return out

    def randbits(self, k: int) -> int:
        """Uniform integer in [0, 2^k)."""
        if k <= 0:
            return 0
        nbytes = (k + 7) // 8
        v = int.from_bytes(self.random_bytes(nbytes), "big")
        return v >> (nbytes * 8 - k)

    def randbelow(self, n: int) -> int:
        """Uniform integer in [0, n) by rejection sampling (no modulo bias)."""
        if n <= 0:
            raise ValueError(f"randbelow bound must be positive, got {n}")
        k = n.bit_length()
        while True:
            v = self.randbits(k)
            if v < n:
                return v

    def randrange(self, lo: int, hi: int) -> int:
        """Uniform integer in [lo, hi)."""
        return lo + self.randbelow(hi - lo)

    def permutation(self, k: int) -> list[int]:
        """Uniform permutation of range(k) (Fisher-Yates)."""
        p = list(range(k))
        for i in range(k - 1, 0, -1):
            j = self.randbelow(i + 1)
            p[i], p[j] = p[j], p[i]
        return p

    # -- vectorised transforms of the keystream -------------------------------
    def uint64(self, size: int | tuple[int, ...]) -> np.ndarray:
        """Uniform uint64 array (e.g. additive shares in Z_2^64)."""
        count = int(np.prod(size))
        return self.words(count).reshape(size)

    def uniform(self, size: int | tuple[int, ...]) -> np.ndarray:
        """Uniform floats in the open interval (0, 1), 53 bits each: ((w >> 11) + 0.5)·2^−53 for keystream words w."""
        return self._uniform_words(int(np.prod(size))).reshape(size)

    def _uniform_words(self, count: int) -> np.ndarray:
        words = self.words(count)
        out = np.right_shift(words, np.uint64(11), out=words).astype(np.float64)  # exact: < 2^53
        out += 0.5
        out *= 2.0**-53
        return out

    def normal(self, size: int | tuple[int, ...]) -> np.ndarray:
        """Standard normal samples (Box-Muller on keystream uniforms).

        With h = ⌈count/2⌉ pairs, u1 = the next h uniforms and u2 the h after them, r = sqrt(−2 ln u1) and
        θ = 2π·u2, the output is (r·cos θ, r·sin θ) concatenated and cut to ``count``. Computed in place (one
        keystream read, two h-word work arrays) for large batches; the values are those of the plain formula."""
        count = int(np.prod(size))
        half = (count + 1) // 2
        u = self._uniform_words(2 * half)  # u1 = u[:half], u2 = u[half:] (the same draws as two uniform(half) calls)
        u1, theta = u[:half], u[half:]
        r = np.log(u1, out=u1)
        r *= -2.0
        np.sqrt(r, out=r)
        theta *= 2 * math.pi
        z = np.empty(2 * half)
        np.cos(theta, out=z[:half])
        np.sin(theta, out=z[half:])
        z[:half] *= r
        z[half:] *= r
        return (z if count == 2 * half else z[:count]).reshape(size)

    def exponential(self, size: int | tuple[int, ...]) -> np.ndarray:
        """Exponential(1) samples by inversion."""
        return -np.log(self.uniform(size))

    def gamma_int_shape(self, shape: int, scale: float, size: int = 1) -> np.ndarray:
        """Gamma(shape, scale) for a positive integer shape: the sum of `shape` Exponential(1) times scale."""
        if shape < 1:
            raise ValueError(f"gamma shape must be a positive integer, got {shape}")
        return self.exponential((size, shape)).sum(axis=1) * scale

    def gamma(self, shape: float, scale: float, size: int = 1) -> np.ndarray:
        """Gamma(shape, scale) for any shape > 0 (Marsaglia-Tsang on keystream normals and uniforms)."""
        if shape <= 0:
            raise ValueError(f"gamma shape must be positive, got {shape}")
        if shape < 1:
            # Gamma(a) = Gamma(a+1) * U^(1/a)
            return self.gamma(shape + 1.0, scale, size) * self.uniform(size) ** (1.0 / shape)
        d = shape - 1.0 / 3.0
        c = 1.0 / math.sqrt(9.0 * d)
        out = np.empty(size)
        filled = 0
        while filled < size:
            need = size - filled
            m = max(16, int(need * 1.2) + 8)
            x = self.normal(m)
            u = self.uniform(m)
            v = (1.0 + c * x) ** 3
            ok = (v > 0) & (np.log(u, where=v > 0, out=np.full(m, np.inf)) < 0.5 * x * x + d - d * v + d * np.log(np.where(v > 0, v, 1.0)))
            acc = (d * v)[ok][:need]
            out[filled : filled + len(acc)] = acc
            filled += len(acc)
        return out * scale
