"""Fixed-point encodings of real vectors into the ring Z_q.

Hazmat. enc(v) = round(v·2^f) mod q and dec(u) = (u if u < q/2 else u − q)/2^f.
A sum of encodings decodes correctly only while the true sum stays inside
(−q/2, q/2)·2^-f; every encoder here takes an explicit magnitude bound and raises
:class:`EncodingOverflow` *before* a value could wrap, and :func:`check_sum_headroom`
checks a whole sum in advance (overflow is checked before any modular sum).

Two rings are used: Python integers mod any q (Pathak shares, q = 2^128, and
Paillier plaintexts mod N), and numpy uint64 for q = 2^64 (DCA).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class EncodingOverflow(ValueError):
    """A value (or a sum of values) would not fit the ring without wrapping."""


@dataclass(frozen=True)
class FixedPoint:
    """Encoding with ``frac_bits`` fractional bits into Z_modulus."""

    frac_bits: int
    modulus: int

    def __post_init__(self) -> None:
        if not 0 <= self.frac_bits <= 64:
            raise ValueError(f"frac_bits must be in [0, 64], got {self.frac_bits}")
        if self.modulus < 2 ** (self.frac_bits + 2):
            raise ValueError(f"modulus 2^{self.modulus.bit_length() - 1} too small for frac_bits={self.frac_bits}")

    @property
    def scale(self) -> int:
        return 1 << self.frac_bits

    @property
    def half(self) -> int:
        return self.modulus // 2

    def to_int(self, values: np.ndarray | list[float], bound: float) -> list[int]:
        """Signed integers round(v·2^f), refusing any |v| > bound or any bound that cannot fit."""
        arr = np.asarray(values, dtype=np.float64)
        if not np.all(np.isfinite(arr)):
            raise EncodingOverflow("cannot encode NaN or infinite values")
        if bound * self.scale >= self.half:
            raise EncodingOverflow(f"bound {bound} times 2^{self.frac_bits} does not fit in Z_q/2 (q = 2^{self.modulus.bit_length() - 1})")
        worst = float(np.max(np.abs(arr))) if arr.size else 0.0
        if worst > bound:
            raise EncodingOverflow(f"value {worst:.6g} exceeds the encoding bound {bound}")
        return [int(x) for x in np.rint(arr * self.scale).astype(object)] if arr.size else []

    def encode(self, values: np.ndarray | list[float], bound: float) -> list[int]:
        """enc(v) ∈ [0, q) for each value."""
        return [x % self.modulus for x in self.to_int(values, bound)]

    def signed(self, u: int) -> int:
        u %= self.modulus
        return u - self.modulus if u >= self.half else u

    def decode(self, encoded: list[int]) -> np.ndarray:
        """dec(u) for each ring element."""
        return np.array([self.signed(u) for u in encoded], dtype=np.float64) / self.scale

    def add(self, *vectors: list[int]) -> list[int]:
        """Coordinate-wise sum mod q."""
        if not vectors:
            raise ValueError("add needs at least one vector")
        d = len(vectors[0])
        if any(len(v) != d for v in vectors):
            raise ValueError(f"vectors have different lengths: {[len(v) for v in vectors]}")
        return [sum(col) % self.modulus for col in zip(*vectors)]


def check_sum_headroom(count: int, bound: float, frac_bits: int, modulus: int) -> None:
    """Raise unless the sum of ``count`` values with |v| ≤ bound fits in (−q/2, q/2) after scaling."""
    if count * bound * (1 << frac_bits) >= modulus // 2:
        raise EncodingOverflow(
            f"sum of {count} values bounded by {bound} with 2^{frac_bits} scaling overflows q = 2^{modulus.bit_length() - 1}; "
            "lower frac_bits or the bound"
        )


# -- numpy uint64 ring (q = 2^64) ------------------------------------------------
U64_MODULUS = 1 << 64


def encode_u64(values: np.ndarray, frac_bits: int, bound: float) -> np.ndarray:
    """Vectorised enc into Z_2^64 as uint64 (two's complement wrap), refusing |v| > bound."""
    arr = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise EncodingOverflow("cannot encode NaN or infinite values")
    if bound * 2.0**frac_bits >= 2.0**63:
        raise EncodingOverflow(f"bound {bound} times 2^{frac_bits} does not fit in Z_2^64/2")
    if arr.size and max(float(arr.max()), -float(arr.min())) > bound:  # max |v| without an |arr| temporary
        raise EncodingOverflow(f"value {float(np.max(np.abs(arr))):.6g} exceeds the encoding bound {bound}")
    scaled = arr * 2.0**frac_bits
    np.rint(scaled, out=scaled)
    return scaled.astype(np.int64).view(np.uint64)


def decode_u64(encoded: np.ndarray, frac_bits: int) -> np.ndarray:
    """dec from Z_2^64: reinterpret as signed int64, then scale."""
    return np.asarray(encoded, dtype=np.uint64).view(np.int64).astype(np.float64) / 2.0**frac_bits
