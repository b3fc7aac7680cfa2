"""A compute node's bookkeeping for agreeing on A = ∩_k R_k (spec dca.md §4.3 "fault tolerance"; ours).

:class:`ClientBook` maps client ids to dense indices and keeps, per client, the bitmask of nodes known to
hold that client's message, plus the node's *pending* shares — received here, not yet known to be held
by every node. Work is vectorised over index arrays so a node handles 10^5 clients without a Python
loop per client and node step beyond one dict lookup. Memory: O(N) ids and bitmasks, plus the pending
buffer (8·d bytes per pending full vector, 32 bytes per pending seed); see :mod:`mpdp.dca.compute_node`.
"""

from __future__ import annotations

import itertools

import numpy as np

from mpdp.dca import sharing

MAX_NODES = 63  # bitmasks live in int64


class ClientBook:
    def __init__(self, nodes: int, own: int, dimension: int, roster: tuple[str, ...] = ()) -> None:
        if not 2 <= nodes <= MAX_NODES:
            raise ValueError(f"a job has 2..{MAX_NODES} compute nodes, got {nodes}")
        self.own_bit = 1 << own
        self.full = (1 << nodes) - 1
        self.d = dimension
        self.closed_roster = bool(roster)
        self._slot: dict[str, int] = {c: i for i, c in enumerate(roster)}
        self._names: list[str] = list(roster)
        self._bits = np.zeros(max(len(roster), 64), dtype=np.int64)
        self._pend_row = np.full(self._bits.shape[0], -1, dtype=np.int64)  # row of the pending buffer, −1 = none
        self._buf = np.empty((0, dimension), dtype=np.uint64)
        self._free: list[int] = []
        self._seeds: dict[int, bytes] = {}
        self.pending = 0
        self.peak_pending = 0
        self._digests: dict[bytes, tuple[tuple[str, ...], bytes]] = {}  # selection → (sorted ids, digest)

    # -- ids ------------------------------------------------------------------------------------------
    def lookup(self, ids: list[str]) -> np.ndarray:
        """Indices of known ids, −1 for unknown ones (no change).

        Fast path: the nodes see the same batches in the same order, so a report or batch is usually a run of
        ids this node already holds in consecutive slots; one dict lookup and a list comparison then replace
        a dict lookup per id."""
        n = len(ids)
        if n >= 16:
            start = self._slot.get(ids[0], -1)
            if start >= 0 and self._names[start : start + n] == (ids if isinstance(ids, list) else list(ids)):
                return np.arange(start, start + n, dtype=np.int64)
        return np.fromiter(map(self._slot.get, ids, itertools.repeat(-1)), dtype=np.int64, count=n)

    @staticmethod
    def is_run(look: np.ndarray) -> bool:
        """Whether ``look`` is a run of consecutive known slots (so its ids are distinct and already admitted)."""
        return look.size > 0 and look[0] >= 0 and (look.size == 1 or bool(np.all(np.diff(look) == 1)))

    def admit(self, ids: list[str], look: np.ndarray) -> np.ndarray:
        """Indices for ``ids``, giving new ids (look == −1) fresh slots; ids must be distinct."""
        unknown = np.flatnonzero(look < 0)
        if unknown.size:
            if self.closed_roster:
                raise ValueError("admit: an id outside the roster")
            new = ids if unknown.size == len(ids) else [ids[j] for j in unknown.tolist()]
            base = len(self._names)
            slots = range(base, base + len(new))
            self._slot.update(zip(new, slots))
            self._names.extend(new)
            look = look.copy()
            look[unknown] = np.arange(base, base + len(new), dtype=np.int64)
            self._grow(len(self._names))
        return look

    def bits(self, idx: np.ndarray) -> np.ndarray:
        """Bitmasks of known indices (−1 entries read as 0)."""
        out = np.zeros(idx.shape[0], dtype=np.int64)
        known = idx >= 0
        out[known] = self._bits[idx[known]]
        return out

    def mark(self, idx: np.ndarray, bit: int) -> np.ndarray:
        """Set ``bit`` for ``idx``; return a boolean array: which of them became full just now."""
        before = self._bits[idx]
        after = before | bit
        self._bits[idx] = after
        return (after == self.full) & (before != self.full)

    def holders(self, bit: int) -> list[str]:
        """Ids of the clients whose bitmask contains ``bit`` (R_k for node k's bit; A for the full mask)."""
        return list(map(self._names.__getitem__, self._select(bit).tolist()))

    def sorted_holders(self, bit: int) -> tuple[tuple[str, ...], bytes]:
        """(sorted holders(bit), their :func:`~mpdp.dca.sharing.set_digest`), computed once per distinct set.

        The received sets of all nodes and the agreed set are usually the same set; the digest (a sort of N ids)
        is then computed once, not once per node and again for A."""
        sel = self._select(bit)
        key = sel.tobytes()
        hit = self._digests.get(key)
        if hit is None:
            ordered = tuple(sorted(map(self._names.__getitem__, sel.tolist())))
            hit = (ordered, sharing.set_digest(ordered, presorted=True))
            if len(self._digests) >= 4:
                self._digests.clear()
            self._digests[key] = hit
        return hit

    def _select(self, bit: int) -> np.ndarray:
        n = len(self._names)
        return np.flatnonzero((self._bits[:n] & bit) == bit)

    def count(self, bit: int) -> int:
        n = len(self._names)
        return int(np.count_nonzero((self._bits[:n] & bit) == bit))

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
        slots = np.array(self._free[cut:][::-1], dtype=np.int64)  # as idx.size pops from the end
        del self._free[cut:]
        self._buf[slots] = rows
        self._pend_row[idx] = slots
        self._count_pending(idx.size)

    def hold_seeds(self, idx: np.ndarray, seeds: list[bytes]) -> None:
        self._seeds.update(zip(idx.tolist(), seeds))
        self._count_pending(idx.size)

    def take(self, idx: np.ndarray) -> np.ndarray:
        """Σ mod 2^64 of the pending shares of ``idx`` (each must be pending), removed from the buffer."""
        total = np.zeros(self.d, dtype=np.uint64)
        if idx.size == 0:
            return total
        rows = self._pend_row[idx]
        has_row = rows >= 0
        if has_row.any():
            slots = rows[has_row]
            total += sharing.ring_sum(self._buf[slots])
            self._free.extend(slots.tolist())
            self._pend_row[idx[has_row]] = -1
        seeded = idx[~has_row]
        if seeded.size:
            seeds = [self._seeds.pop(i) for i in seeded.tolist()]
            total += sharing.ring_sum(sharing.expand_seeds(seeds, self.d))
        self.pending -= idx.size
        return total

    def drop_pending(self) -> None:
        """Forget every pending share (R_k \\ A after agreement, or a failed job)."""
        self._buf = np.empty((0, self.d), dtype=np.uint64)
        self._free = []
        self._pend_row[:] = -1
        self._seeds.clear()
        self.pending = 0

    # -- internals ---------------------------------------------------------------------------------------
    def _count_pending(self, added: int) -> None:
        self.pending += added
        self.peak_pending = max(self.peak_pending, self.pending)

    def _grow(self, n: int) -> None:
        if n <= self._bits.shape[0]:
            return
        cap = max(n, 2 * self._bits.shape[0])
        bits = np.zeros(cap, dtype=np.int64)
        bits[: self._bits.shape[0]] = self._bits
        rows = np.full(cap, -1, dtype=np.int64)
        rows[: self._pend_row.shape[0]] = self._pend_row
        self._bits, self._pend_row = bits, rows
