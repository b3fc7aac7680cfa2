"""Additive secret sharing over Z_q and permutations.

Hazmat. split(s) draws m−1 uniform shares and sets the last to s − Σ mod q, so any m−1 shares
are jointly uniform. Permutation convention (the Pathak protocol's): π(v) puts v_j at position π(j).
"""

from __future__ import annotations

from typing import Sequence, TypeVar

from mpdp.math.drbg import Drbg

T = TypeVar("T")


def split(secret: Sequence[int], parts: int, modulus: int, rng: Drbg, keep: int | None = None) -> list[list[int]]:
    """Shares t_0..t_{parts−1} of a vector; share ``keep`` (default the last) absorbs the secret."""
    if parts < 1:
        raise ValueError(f"need at least one share, got {parts}")
    keep = parts - 1 if keep is None else keep
    shares: list[list[int]] = [[] for _ in range(parts)]
    for s in secret:
        acc = 0
        for t in range(parts):
            if t == keep:
                continue
            r = rng.randbelow(modulus)
            shares[t].append(r)
            acc += r
        shares[keep].append((s - acc) % modulus)
    return shares


def combine(shares: Sequence[Sequence[int]], modulus: int) -> list[int]:
    if not shares:
        raise ValueError("no shares to combine")
    d = len(shares[0])
    if any(len(s) != d for s in shares):
        raise ValueError(f"shares have different lengths: {[len(s) for s in shares]}")
    return [sum(col) % modulus for col in zip(*shares)]


def apply_permutation(pi: Sequence[int], v: Sequence[T]) -> list[T]:
    """π(v): entry j of v lands at position π(j)."""
    out: list[T | None] = [None] * len(v)
    for j, x in enumerate(v):
        out[pi[j]] = x
    return out  # type: ignore[return-value]


def invert_permutation(pi: Sequence[int]) -> list[int]:
    inv = [0] * len(pi)
    for j, p in enumerate(pi):
        inv[p] = j
    return inv


def is_permutation(pi: Sequence[int], k: int) -> bool:
    return len(pi) == k and sorted(pi) == list(range(k))


def pack_ring(vec: Sequence[int], ring_bits: int) -> bytes:
    """Pack Z_{2^ring_bits} elements big-endian, ring_bits/8 bytes each."""
    width = ring_bits // 8
    return b"".join(int(x).to_bytes(width, "big") for x in vec)


def unpack_ring(data: bytes, ring_bits: int, length: int) -> list[int]:
    width = ring_bits // 8
    if len(data) != width * length:
        raise ValueError(f"ring vector must be {width * length} bytes ({length} × {width}), got {len(data)}")
    return [int.from_bytes(data[i : i + width], "big") for i in range(0, len(data), width)]
