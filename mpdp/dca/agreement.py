"""A compute node's bookkeeping for agreeing on A = ∩_k R_k (Heikkilä et al. 2017, Sec. 3.1.3
"Fault tolerance"; the bookkeeping is ours).

Clients have *indices*. In a job with a roster (``DcaJobSpec.roster`` or ``roster_range``) client i's index is
its roster position, the same at every node, so nodes tell each other which clients they received as roster
indices — runs or a bitmap (:func:`encode_indices`), never ids — and a node keeps no per-client object: one
node mask per client (⌈M/8⌉ bytes rounded up to a power of two: 2 bytes at M = 10; bit l set = node l is known
to hold the client's message) and a 4-byte pending-row slot, the roster itself (nothing for a range roster; 16 bytes per id beside the spec's
list for a listed roster) and the *pending* shares (received here, not yet known to be held by every node),
which are dropped the moment they are summed in. A job without a roster gives clients node-local indices in
arrival order and names them by id on the wire (one id map per node, as the set of ids seen is needed anyway
to refuse a replay).

Agreement is per-index bit arithmetic over numpy arrays: marking a report's clients is an OR over the index
array, "held by every node" is ``mask == full``, |R_l| and |A| are counts, and the set digests hash packed
bitmaps (:meth:`ClientBook.digest`). Memory: O(N) small masks + O(d) running sum + the pending buffer (8·d
bytes per pending full vector, 32 bytes per pending seed); see :mod:`mpdp.dca.compute_node`.
"""

from __future__ import annotations

import hashlib
import itertools

import numpy as np

from mpdp.dca import sharing
from mpdp.math import field as F
from mpdp.dca.params import DcaParams

MAX_NODES = 63  # node masks live in at most 64 bits
_DIGEST_TAG = b"mpdp-dca-roster-set\x00"


def mask_dtype(nodes: int) -> type[np.unsignedinteger]:
    """The narrowest unsigned integer holding one bit per node."""
    for dt in (np.uint8, np.uint16, np.uint32, np.uint64):
        if nodes <= 8 * np.dtype(dt).itemsize:
            return dt
    raise ValueError(f"at most {MAX_NODES} nodes")


# -- id ↔ index --------------------------------------------------------------------------------------
class Roster:
    """Client ids ↔ indices. ``closed``: the job's roster (indices 0..N−1, shared by every node)."""

    closed = True
    size = 0

    def lookup(self, ids: list[str]) -> np.ndarray:
        """Indices of ``ids`` (int64), −1 for ids without one."""
        raise NotImplementedError

    def name(self, i: int) -> str:
        raise NotImplementedError

    def names(self, idx: np.ndarray) -> list[str]:
        return [self.name(i) for i in idx.tolist()]


class RangeRoster(Roster):
    """Client i is ``prefix`` + i in decimal with ``digits`` digits: the index is parsed, nothing is stored."""

    def __init__(self, prefix: str, digits: int, size: int) -> None:
        self.prefix, self.digits, self.size = prefix, digits, size
        self._width = len(prefix) + digits

    def _one(self, cid: str) -> int:
        if len(cid) != self._width or not cid.startswith(self.prefix):
            return -1
        tail = cid[len(self.prefix) :]
        if not (tail.isascii() and tail.isdigit()):
            return -1
        i = int(tail)
        return i if i < self.size else -1

    def lookup(self, ids: list[str]) -> np.ndarray:
        n = len(ids)
        if n >= 16 and self.digits <= 18 and set(map(len, ids)) == {self._width}:
            raw = "".join(ids).encode("utf-8")
            if len(raw) == n * self._width:  # all ASCII, all of the roster's width: parse the digits as one array
                return self._parse(np.frombuffer(raw, dtype=np.uint8).reshape(n, self._width))
        return np.fromiter(map(self._one, ids), dtype=np.int64, count=n)

    def _parse(self, rows: np.ndarray) -> np.ndarray:
        """:meth:`_one` for n ASCII ids of the roster's width at once (rows: n × width bytes)."""
        p, prefix = len(self.prefix), self.prefix.encode("utf-8")
        if len(prefix) != p:  # a non-ASCII prefix cannot match ASCII ids
            return np.full(len(rows), -1, dtype=np.int64)
        ok = (rows[:, :p] == np.frombuffer(prefix, dtype=np.uint8)).all(axis=1)
        digits = rows[:, p:] - np.uint8(48)  # bytes below '0' wrap above 9
        ok &= (digits <= 9).all(axis=1)
        value = digits.astype(np.int64) @ (10 ** np.arange(self.digits - 1, -1, -1, dtype=np.int64))
        ok &= value < self.size
        return np.where(ok, value, -1)

    def name(self, i: int) -> str:
        return f"{self.prefix}{i:0{self.digits}d}"


class ListRoster(Roster):
    """A listed roster: a sorted array of the ids' (process-local) hashes with their positions, 16 bytes per id;
    a hash hit is confirmed by comparing the id with the roster's. Two roster ids with the same 64-bit hash
    (never seen in practice) fall back to a dict."""

    def __init__(self, roster: tuple[str, ...]) -> None:
        self.roster, self.size = roster, len(roster)
        h = np.fromiter(map(hash, roster), dtype=np.int64, count=len(roster))
        self._order = np.argsort(h, kind="stable")
        self._hashes = h[self._order]
        self._dict: dict[str, int] | None = None
        if self.size > 1 and bool(np.any(self._hashes[1:] == self._hashes[:-1])):
            self._dict = {c: i for i, c in enumerate(roster)}

    def lookup(self, ids: list[str]) -> np.ndarray:
        if self._dict is not None:
            return np.fromiter(map(self._dict.get, ids, itertools.repeat(-1)), dtype=np.int64, count=len(ids))
        if self.size == 0 or not ids:
            return np.full(len(ids), -1, dtype=np.int64)
        h = np.fromiter(map(hash, ids), dtype=np.int64, count=len(ids))
        pos = np.minimum(np.searchsorted(self._hashes, h), self.size - 1)
        idx = np.where(self._hashes[pos] == h, self._order[pos], -1)
        roster = self.roster
        return np.fromiter((i if i >= 0 and roster[i] == c else -1 for i, c in zip(idx.tolist(), ids)), dtype=np.int64, count=len(ids))

    def name(self, i: int) -> str:
        return self.roster[i]


class OpenIds(Roster):
    """A job without a roster: ids get node-local indices in arrival order (``admit``)."""

    closed = False

    def __init__(self) -> None:
        self._slot: dict[str, int] = {}
        self._names: list[str] = []

    @property
    def size(self) -> int:  # type: ignore[override]
        return len(self._names)

    def lookup(self, ids: list[str]) -> np.ndarray:
        """Fast path: the nodes see the same batches in the same order, so a report or batch is usually a run of
        ids already held in consecutive slots; one dict lookup and a list comparison then replace one per id."""
        n = len(ids)
        if n >= 16:
            start = self._slot.get(ids[0], -1)
            if start >= 0 and self._names[start : start + n] == (ids if isinstance(ids, list) else list(ids)):
                return np.arange(start, start + n, dtype=np.int64)
        return np.fromiter(map(self._slot.get, ids, itertools.repeat(-1)), dtype=np.int64, count=n)

    def admit(self, ids: list[str], look: np.ndarray) -> np.ndarray:
        """Indices for distinct ``ids``, giving unknown ones (look == −1) the next free indices."""
        unknown = np.flatnonzero(look < 0)
        if not unknown.size:
            return look
        new = ids if unknown.size == len(ids) else [ids[j] for j in unknown.tolist()]
        base = len(self._names)
        self._slot.update(zip(new, range(base, base + len(new))))
        self._names.extend(new)
        look = look.copy()
        look[unknown] = np.arange(base, base + len(new), dtype=np.int64)
        return look

    def name(self, i: int) -> str:
        return self._names[i]

    def names(self, idx: np.ndarray) -> list[str]:
        return list(map(self._names.__getitem__, idx.tolist()))


def roster_for(params: DcaParams) -> Roster:
    if params.roster_range is not None:
        return RangeRoster(params.roster_range[0], params.roster_range[1], params.clients)
    if params.roster:
        return ListRoster(params.roster)
    return OpenIds()


def is_run(look: np.ndarray) -> bool:
    """Whether ``look`` is a run of consecutive known indices (so distinct and already admitted)."""
    return look.size > 0 and look[0] >= 0 and (look.size == 1 or bool(np.all(np.diff(look) == 1)))


# -- the wire form of a set of roster indices ------------------------------------------------------------
def encode_indices(idx: np.ndarray) -> tuple[list[int], int, bytes]:
    """(index_runs, bitmap_start, bitmap) for distinct indices ``idx``: runs [start, length, …] or a bitmap over
    their span, whichever is shorter (runs cost ≈ 6 bytes each as varints, the bitmap span/8 bytes)."""
    if idx.size == 0:
        return [], 0, b""
    s = np.sort(idx.astype(np.int64, copy=False))
    cut = np.flatnonzero(np.diff(s) != 1) + 1
    starts = s[np.concatenate(([0], cut))]
    ends = s[np.concatenate((cut - 1, [s.size - 1]))] + 1
    lo = int(s[0]) & ~7
    span_bytes = (int(s[-1]) - lo) // 8 + 1
    if 6 * starts.size <= span_bytes:
        runs = np.empty(2 * starts.size, dtype=np.int64)
        runs[0::2], runs[1::2] = starts, ends - starts
        return runs.tolist(), 0, b""
    bits = np.zeros(8 * span_bytes, dtype=np.uint8)
    bits[s - lo] = 1
    return [], lo, np.packbits(bits, bitorder="little").tobytes()


def decode_indices(runs, bitmap_start: int, bitmap: bytes, size: int) -> np.ndarray:
    """The distinct roster indices in [0, size) that a ReceivedClients delta names; ValueError if malformed."""
    if len(runs) and bitmap:
        raise ValueError("a report carries index runs or a bitmap, not both")
    if len(runs):
        if len(runs) % 2:
            raise ValueError("index runs come in (start, length) pairs")
        r = np.asarray(runs, dtype=np.int64)
        starts, lens = r[0::2], r[1::2]
        ends = starts + lens
        if bool(np.any(lens < 1)) or int(ends[-1]) > size or bool(np.any(starts[1:] < ends[:-1])):
            raise ValueError("index runs must be non-empty, increasing, disjoint and within the roster")
        offsets = np.cumsum(lens) - lens
        return np.arange(int(lens.sum()), dtype=np.int64) + np.repeat(starts - offsets, lens)
    if bitmap_start % 8 or bitmap_start + 8 * len(bitmap) > size + 7:
        raise ValueError("the bitmap must start at a multiple of 8 and end within the roster")
    idx = bitmap_start + np.flatnonzero(np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little")).astype(np.int64)
    if idx.size and int(idx[-1]) >= size:
        raise ValueError("the bitmap names an index beyond the roster")
    return idx


# -- the book -------------------------------------------------------------------------------------------
class ClientBook:
    """Node masks per client index and the pending shares of one node of one job."""

    def __init__(self, nodes: int, own: int, dimension: int, roster: Roster | None = None) -> None:
        if not 2 <= nodes <= MAX_NODES:
            raise ValueError(f"a job has 2..{MAX_NODES} compute nodes, got {nodes}")
        self.roster = roster if roster is not None else OpenIds()
        self.dtype = mask_dtype(nodes)
        self.own_bit = 1 << own
        self.full = (1 << nodes) - 1
        self.d = dimension
        self._masks = np.zeros(max(self.roster.size, 64), dtype=self.dtype)
        self._buf = np.empty((0, dimension), dtype=np.uint64)
        self._free: list[int] = []
        self._row = np.full(self._masks.shape[0], -1, dtype=np.int32)  # client index → row of the pending buffer, −1 none
        self._seeds: dict[int, bytes] = {}  # client index → pending seed (seed nodes; a dict entry lives only while pending)
        self.pending = 0
        self.peak_pending = 0
        self._digests: dict[tuple[int, int], tuple[bytes, bytes]] = {}  # (bit, count) → (members, digest), open jobs (a sort of N ids)

    @property
    def closed(self) -> bool:
        return self.roster.closed

    @property
    def size(self) -> int:
        """Number of indices in use (N for a roster; ids seen so far otherwise)."""
        return self.roster.size

    # -- ids ------------------------------------------------------------------------------------------
    def lookup(self, ids: list[str]) -> np.ndarray:
        return self.roster.lookup(ids)

    def admit(self, ids: list[str], look: np.ndarray) -> np.ndarray:
        """Indices for ``ids`` (distinct), giving ids of an open job new indices; a roster job's ids must be known."""
        if self.roster.closed:
            if look.size and int(look.min()) < 0:
                raise ValueError("admit: an id outside the roster")
            return look
        idx = self.roster.admit(ids, look)  # type: ignore[attr-defined]
        self._grow(self.roster.size)
        return idx

    def bits(self, idx: np.ndarray) -> np.ndarray:
        """Node masks of ``idx`` (−1 entries read as 0)."""
        if idx.size and int(idx.min()) >= 0:
            return self._masks[idx]
        out = np.zeros(idx.shape[0], dtype=self.dtype)
        known = idx >= 0
        out[known] = self._masks[idx[known]]
        return out

    def has(self, idx: np.ndarray, bit: int) -> np.ndarray:
        """Which of (known, valid) ``idx`` already carry ``bit``."""
        return (self.bits(idx) & self.dtype(bit)) != 0

    def mark(self, idx: np.ndarray, bit: int) -> np.ndarray:
        """Set ``bit`` for ``idx``; return which of them became full (held by every node) just now."""
        before = self._masks[idx]
        after = before | self.dtype(bit)
        self._masks[idx] = after
        full = self.dtype(self.full)
        return (after == full) & (before != full)

    def selection(self, bit: int, exclude: np.ndarray | None = None) -> np.ndarray:
        """Boolean array over indices: the clients whose mask contains ``bit`` (R_l for node l's bit; A for full),
        minus the indices flagged in ``exclude`` (a validated job's rejected clients)."""
        b = self.dtype(bit)
        sel = (self._masks[: self.size] & b) == b
        if exclude is not None:
            sel &= ~exclude[: self.size]
        return sel

    def count(self, bit: int) -> int:
        return int(np.count_nonzero(self.selection(bit)))

    def holders(self, bit: int) -> list[str]:
        """Ids of the clients whose mask contains ``bit``."""
        return self.roster.names(np.flatnonzero(self.selection(bit)))

    def digest(self, bit: int, exclude: np.ndarray | None = None) -> bytes:
        """Names {i : bit ⊆ mask_i}: a roster job hashes the packed bitmap of indices (SHA-256 of a tag, N and the
        ⌈N/8⌉ bytes, LSB first); an open job hashes its sorted ids (:func:`~mpdp.dca.sharing.set_digest`, computed
        once per distinct set: the received sets and A are usually the same set)."""
        sel = self.selection(bit, exclude)
        if self.roster.closed:
            h = hashlib.sha256(_DIGEST_TAG)
            h.update(int(self.size).to_bytes(8, "big"))
            h.update(np.packbits(sel, bitorder="little").tobytes())
            return h.digest()
        key = (bit, int(np.count_nonzero(sel)))
        members = sel.tobytes()
        hit = self._digests.get(key)
        if hit is None or hit[0] != members:
            ordered = sorted(self.roster.names(np.flatnonzero(sel)))
            hit = (members, sharing.set_digest(ordered, presorted=True))
            if len(self._digests) >= 4:
                self._digests.clear()
            self._digests[key] = hit
        return hit[1]

    # -- pending shares -----------------------------------------------------------------------------------
    def hold_rows(self, idx: np.ndarray, rows: np.ndarray) -> None:
        need = idx.size - len(self._free)
        if need > 0:
            old = self._buf.shape[0]
            cap = max(2 * old, old + need, 64)
            grown = np.empty((cap, self.d), dtype=np.uint64)
            grown[:old] = self._buf
            self._buf = grown
            self._free.extend(range(cap - 1, old - 1, -1))
        cut = len(self._free) - idx.size
        slots = self._free[cut:][::-1]
        del self._free[cut:]
        self._buf[slots] = rows
        self._row[idx] = slots
        self._count_pending(idx.size)

    def hold_seeds(self, idx: np.ndarray, seeds: list[bytes]) -> None:
        self._seeds.update(zip(idx.tolist(), seeds))
        self._count_pending(idx.size)

    def take(self, idx: np.ndarray, *, field: bool = False) -> np.ndarray:
        """Σ mod 2^64 (mod p with ``field``: a validated job's Field64 rows) of the pending shares of ``idx`` (each
        must be pending), removed from the buffer."""
        total = np.zeros(self.d, dtype=np.uint64)
        if idx.size == 0:
            return total
        rows = self._row[idx]
        has_row = rows >= 0
        if has_row.any():
            slots = rows[has_row]
            total = F.sum(self._buf[slots], axis=0) if field else total + sharing.ring_sum(self._buf[slots])
            self._free.extend(slots.tolist())
            self._row[idx[has_row]] = -1
        seeded = idx[~has_row]
        if seeded.size:
            seeds = list(map(self._seeds.pop, seeded.tolist()))
            sharing.sum_expanded(seeds, self.d, total)
        self.pending -= idx.size
        return total

    def drop_pending(self) -> None:
        """Forget every pending share (R_k \\ A after agreement, or a failed job)."""
        self._buf = np.empty((0, self.d), dtype=np.uint64)
        self._free = []
        self._row[:] = -1
        self._seeds.clear()
        self.pending = 0

    def reserve(self, n: int) -> None:
        """Room for indices 0..n−1 (a worker's buffer, keyed by its coordinator's indices)."""
        self._grow(n)

    # -- internals ---------------------------------------------------------------------------------------
    def _count_pending(self, added: int) -> None:
        self.pending += added
        self.peak_pending = max(self.peak_pending, self.pending)

    def _grow(self, n: int) -> None:
        if n <= self._masks.shape[0]:
            return
        cap = max(n, 2 * self._masks.shape[0])
        masks = np.zeros(cap, dtype=self.dtype)
        masks[: self._masks.shape[0]] = self._masks
        row = np.full(cap, -1, dtype=np.int32)
        row[: self._row.shape[0]] = self._row
        self._masks, self._row = masks, row
