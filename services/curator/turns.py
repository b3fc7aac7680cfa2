"""Spend turns: the curator asks the parties of jobs that share a party one job at a time, so every party decides
their spends in one order.

A party spends a job's charge when the curator's request reaches it (an LMGC release, an ensemble's votes, a
learner round's contribution), then sends what its data gave. Were two jobs asked at once, two parties could take
them in opposite orders: with room for one job, each would spend for a different one, both jobs would fail and
each party would keep the charge of a job that published nothing (its shares or its release had left). The
curator therefore holds a turn at every party a job names, from its first request to the last answer: the parties
of overlapping jobs see them in the same order, and with the same ledgers they take the same ones and refuse the
same ones before spending (docs/protocols/accounting.md, "When a job spends, and when a charge is voided"). Jobs
over disjoint parties run at once. Turns are taken in sorted party order, so two jobs never wait on each other.
A turn is held at most as long as the job's requests (each has its deadline; a cancel ends it at once). One lock
per party name: the names are the registered parties every job is checked against, so they are bounded.
"""

from __future__ import annotations

import asyncio
import weakref
from contextlib import asynccontextmanager
from typing import AsyncIterator, Iterable

_locks: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]]" = weakref.WeakKeyDictionary()


@asynccontextmanager
async def turn(parties: Iterable[str]) -> AsyncIterator[None]:
    """Hold the turn at each of ``parties`` (one lock per party name, per event loop) until the block ends."""
    locks = _locks.setdefault(asyncio.get_running_loop(), {})
    held: list[asyncio.Lock] = []
    try:
        for p in sorted(set(parties)):
            lock = locks.setdefault(p, asyncio.Lock())
            await lock.acquire()
            held.append(lock)
        yield
    finally:
        for lock in reversed(held):
            lock.release()
