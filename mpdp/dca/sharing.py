"""M-way additive sharing in Z_2^64, vectorised over clients (Heikkilä et al. 2017, Algorithm 1, steps 1–2).

Hazmat. What misuse breaks: drawing masks anywhere but a CSPRNG :class:`~mpdp.math.drbg.Drbg`
(bounded or numpy masks leak, as the authors' bounded non-modular masks do); reusing a mask seed for two vectors (the PRG
keystream repeats and their difference leaks); summing before the headroom check of
:mod:`mpdp.dca.params` (the sum wraps silently).

Ring: q = 2^64 as numpy uint64, whose + and − wrap mod 2^64. For client i with
u_i = enc(z_i + η_i):

* full sharing (Algorithm 1 as printed): r_{i,1..M−1} uniform, r_{i,0} = −Σ_{k≥1} r_{i,k};
  m_{i,0} = u_i + r_{i,0} and m_{i,k} = r_{i,k} for k ≥ 1. Node k = 0 plays the paper's "Compute 1".
* seed-compressed sharing (ours): the same sharing, but r_{i,k} = expand(s_{i,k}) for a fresh
  32-byte seed s_{i,k} per node k ≥ 1, so node k receives 32 bytes instead of 8·d. AES-256-CTR keyed
  with the seed (zero IV, one keystream per key) is the PRG; any M−1 messages stay computationally
  uniform. Σ_k m_{i,k} = u_i in both cases.

Packing on the wire: little-endian uint64, exactly 8·d bytes per vector (:func:`unpack_u64` checks).
"""

from __future__ import annotations

import hashlib
from typing import Any, Iterable, Sequence

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from mpdp.math.drbg import Drbg

SEED_BYTES = 32
_CTR0 = modes.CTR(b"\x00" * 16)  # zero IV: the counter blocks are 0, 1, 2, … (a mode object is immutable, so shared)
U64 = np.dtype("<u8")


class MalformedVector(ValueError):
    """A packed vector or seed has the wrong length."""


# -- masks and shares ---------------------------------------------------------------------
def share_u64(u: np.ndarray, parts: int, rng: Drbg) -> np.ndarray:
    """Full M-way sharing of ``u`` (shape (..., d), uint64): returns shares of shape (parts, ..., d).

    Share 0 is u + r_0 with r_0 = −Σ_{k≥1} r_k; shares 1..parts−1 are the uniform masks r_k.
    """
    u = np.asarray(u, dtype=np.uint64)
    if parts < 2:
        raise ValueError(f"additive sharing needs at least 2 parts (M ≥ 2), got {parts}")
    out = np.empty((parts,) + u.shape, dtype=U64)
    rng.random_into(out[1:])  # the masks r_1..r_{parts−1}: keystream written straight into the shares (C order, little-endian)
    np.subtract(u, out[1], out=out[0])
    for k in range(2, parts):  # r_0 = −Σ_{k≥1} r_k, accumulated in place (mod 2^64)
        np.subtract(out[0], out[k], out=out[0])
    return out


def _keystream(seed: bytes) -> Any:
    """A fresh AES-256-CTR encryptor keyed with ``seed`` (zero IV). AES also takes 16/24-byte keys: the length is checked."""
    if len(seed) != SEED_BYTES:
        raise MalformedVector(f"a mask seed must be {SEED_BYTES} bytes, got {len(seed)}")
    return Cipher(algorithms.AES(seed), _CTR0).encryptor()


def expand_seed(seed: bytes, d: int) -> np.ndarray:
    """r = AES-256-CTR_seed(0^{8d}) read as d little-endian uint64 (the PRG of seed-compressed sharing).

    The reference definition; :class:`SeedExpander` produces the same keystream into a reused buffer."""
    return np.frombuffer(_keystream(bytes(seed)).update(bytes(8 * d)), dtype=U64).copy()


class SeedExpander:
    """expand_seed(s, d) for many seeds without a row per seed: one d-word buffer, reused.

    Each seed is its own AES key, so there is one cipher context per seed, but no per-row allocation, copy
    or N×d matrix: :meth:`add_into` / :meth:`subtract_into` fold every expansion straight into a caller's
    O(d) accumulator (mod 2^64, numpy uint64 wraps). Memory: 16·d bytes (the zero plaintext and the buffer).
    Not thread-safe (one buffer); cheap to build, so build one per caller.
    """

    __slots__ = ("d", "_zeros", "_buf", "_row")

    def __init__(self, d: int) -> None:
        self.d = d
        self._zeros = bytes(8 * d)
        # update_into wants room for one block more than the input (CTR writes exactly 8·d bytes)
        self._buf = bytearray(8 * d + 16)
        self._row = np.frombuffer(self._buf, dtype=U64, count=d)

    def expand(self, seed: bytes) -> np.ndarray:
        """expand_seed(seed, d) as a read-only view of the buffer: valid until the next call."""
        _keystream(seed).update_into(self._zeros, self._buf)
        return self._row

    def add_into(self, acc: np.ndarray, seeds: Iterable[bytes]) -> int:
        """acc += Σ_s expand_seed(s, d) (mod 2^64); returns the number of seeds."""
        count = 0
        for seed in seeds:
            np.add(acc, self.expand(seed), out=acc)
            count += 1
        return count

    def subtract_into(self, acc: np.ndarray, seeds: Iterable[bytes]) -> None:
        """acc −= Σ_s expand_seed(s, d) (mod 2^64)."""
        for seed in seeds:
            np.subtract(acc, self.expand(seed), out=acc)


def expand_seeds(seeds: Sequence[bytes], d: int) -> np.ndarray:
    """Rows expand_seed(s, d) for every seed, shape (len(seeds), d). Materialises len(seeds)·d words: for a sum
    use :func:`sum_expanded` (the nodes never build this matrix)."""
    out = np.empty((len(seeds), d), dtype=np.uint64)
    ex = SeedExpander(d)
    for j, seed in enumerate(seeds):
        out[j] = ex.expand(seed)
    return out


def sum_expanded(seeds: Iterable[bytes], d: int, acc: np.ndarray | None = None) -> np.ndarray:
    """Σ_s expand_seed(s, d) mod 2^64 in O(d) memory, added into ``acc`` (a uint64 (d,) array) when given."""
    if acc is None:
        acc = np.zeros(d, dtype=np.uint64)
    SeedExpander(d).add_into(acc, seeds)
    return acc


def share_u64_seeded(u: np.ndarray, parts: int, rng: Drbg) -> tuple[np.ndarray, list[list[bytes]]]:
    """Seed-compressed sharing of ``u`` (shape (n, d) or (d,)).

    Returns (m0, seeds): m0 = u − Σ_{k≥1} expand(seeds[k−1][j]) for row j, and seeds[k−1] the list of
    fresh 32-byte seeds for node k (one per row). Σ over nodes of the expanded messages equals u.
    """
    m0, blobs = share_u64_seeded_packed(u, parts, rng)
    return m0, [split_seeds(b, len(b) // SEED_BYTES) for b in blobs]


def share_u64_seeded_packed(u: np.ndarray, parts: int, rng: Drbg) -> tuple[np.ndarray, list[bytes]]:
    """:func:`share_u64_seeded` with each node's seeds packed: blobs[k−1] is the n concatenated 32-byte seeds of
    node k (row order), ready for ``ShareBatch.mask_seeds``. The same draws from ``rng`` (all parts−1 blobs in one
    read, node by node) and the same m0. m0 is computed row by row (the row stays in cache while the parts−1
    keystreams are subtracted from it), with no masks matrix."""
    u = np.asarray(u, dtype=np.uint64)
    if parts < 2:
        raise ValueError(f"additive sharing needs at least 2 parts (M ≥ 2), got {parts}")
    rows = u.reshape(-1, u.shape[-1]) if u.ndim else u.reshape(1, 1)
    n, d = rows.shape
    width = SEED_BYTES * n
    raw = rng.random_bytes(width * (parts - 1))
    blobs = [raw[k * width : (k + 1) * width] for k in range(parts - 1)]
    m0 = rows.copy()
    ex = SeedExpander(d)
    for j in range(n):
        at = j * SEED_BYTES
        ex.subtract_into(m0[j], [b[at : at + SEED_BYTES] for b in blobs])
    return m0.reshape(u.shape), blobs


def ring_sum(vectors: np.ndarray, axis: int = 0) -> np.ndarray:
    """Σ mod 2^64 along ``axis`` (uint64 accumulator: numpy wraps, never promotes)."""
    return np.add.reduce(np.asarray(vectors, dtype=np.uint64), axis=axis, dtype=np.uint64)


# -- packing ---------------------------------------------------------------------------------
def pack_u64(vectors: np.ndarray) -> bytes:
    """Row-major little-endian uint64 bytes."""
    return np.ascontiguousarray(vectors, dtype=U64).tobytes()


def unpack_u64(data: bytes, d: int, rows: int | None = None, *, copy: bool = True) -> np.ndarray:
    """Inverse of :func:`pack_u64`: shape (d,) when ``rows`` is None, else (rows, d). Length is checked.

    ``copy=False`` returns a read-only view of ``data`` (no copy of a large batch that is only read)."""
    want = 8 * d * (1 if rows is None else rows)
    if len(data) != want:
        what = f"{d} coordinates" if rows is None else f"{rows} × {d} coordinates"
        raise MalformedVector(f"a packed vector of {what} must be {want} bytes, got {len(data)}")
    arr = np.frombuffer(data, dtype=U64)
    if rows is not None:
        arr = arr.reshape(rows, d)
    return arr.copy() if copy else arr


def split_seeds(data: bytes, count: int) -> list[bytes]:
    """Cut ``count`` concatenated 32-byte seeds apart. Length is checked."""
    if len(data) != SEED_BYTES * count:
        raise MalformedVector(f"{count} mask seeds must be {SEED_BYTES * count} bytes, got {len(data)}")
    return [data[j * SEED_BYTES : (j + 1) * SEED_BYTES] for j in range(count)]


# -- client sets -------------------------------------------------------------------------------
def set_digest(client_ids, *, presorted: bool = False) -> bytes:
    """SHA-256 of (tag, the 4-byte big-endian lengths of the sorted UTF-8 ids, then the ids): names a client set.

    ``presorted``: the caller guarantees ``client_ids`` is already sorted (skips the sort)."""
    ordered = client_ids if presorted else sorted(client_ids)
    raws = list(map(str.encode, ordered))
    h = hashlib.sha256(b"mpdp-dca-client-set\x00")
    h.update(np.fromiter(map(len, raws), dtype=np.int64, count=len(raws)).astype(">u4").tobytes())
    h.update(b"".join(raws))
    return h.digest()
