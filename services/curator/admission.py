"""Admission control at the curator: a bounded number of live jobs per federation and per operator, and a bounded,
fair queue of the jobs waiting for a slot.

One :class:`Admission` is shared by every job table of the curator (Pathak, DCA, LMGC, HCB16 and the jobs they
create): :meth:`mpdp_services.common.jobs.JobTable.admit` asks it before a job starts, so no party is asked to build
a model or spend for a job that has no slot. A job counts from its admission until its table marks it terminal
(published, failed, cancelled or expired at its deadline). A job admitted outside an operator's call (recovered at
start-up, or created by another job) is counted, never refused or queued.

An operator's job (of every protocol: each curator host admits its jobs with a ``start``) that finds no free slot
waits in the queue (:meth:`enqueue`) instead of being refused: round-robin over the operators that have jobs
waiting, first come first served within one operator, so an operator with many waiting jobs takes every other freed
slot at most while another operator waits (docs/protocols/job-model.md §5). The queue is bounded too
(``queue_total`` jobs, ``queue_per_operator`` of one operator); past it a submission is refused OVERLOADED, the
only refusal for want of a slot. :meth:`admit` counts a job no operator asked for (``refuse=False``); with
``refuse`` it is the queue-less bound (OVERLOADED when no slot is free), which no curator host uses.

Sans-IO: the table calls :meth:`admit`, :meth:`enqueue`, :meth:`withdraw` and :meth:`release`; a queued job's
``grant`` callback is called (with the seconds it waited) when it is given a slot, from within the :meth:`release`
that freed it. Bounds: ``CuratorConfig.max_live_jobs_federation``, ``max_live_jobs_per_operator``,
``max_queued_jobs`` and ``max_queued_jobs_per_operator`` (defaults in :mod:`mpdp.limits`).
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Callable

from mpdp import limits
from mpdp.messages import common_pb2
from mpdp.protocol import RemoteProtocolError

Grant = Callable[[float], None]  # a queued job got its slot: called with the seconds it waited


@dataclass
class _Waiting:
    job_id: str
    since: float
    grant: Grant


class Admission:
    """Live jobs by id and by operator, and the jobs waiting for a slot; see the module docstring."""

    def __init__(self, federation: int, per_operator: int, *, queue_total: int = limits.MAX_QUEUED_JOBS,
                 queue_per_operator: int = limits.MAX_QUEUED_JOBS_PER_OPERATOR, clock: Callable[[], float] = time.monotonic) -> None:
        if federation < 1 or per_operator < 1 or queue_total < 0 or queue_per_operator < 0:
            raise ValueError("admission bounds must be ≥ 1 (queue bounds ≥ 0)")
        self.federation, self.per_operator = federation, per_operator
        self.queue_total, self.queue_per_operator = queue_total, queue_per_operator
        self._clock = clock
        self._owner: dict[str, str] = {}  # live job id → operator
        self._by_operator: dict[str, int] = {}
        # operator → its waiting jobs, oldest first; the dict's order is the round-robin order (next turn first)
        self._queues: OrderedDict[str, deque[_Waiting]] = OrderedDict()
        self._queued_owner: dict[str, str] = {}  # queued job id → operator

    # -- reading ------------------------------------------------------------------------------------------
    def live(self, operator: str | None = None) -> int:
        return len(self._owner) if operator is None else self._by_operator.get(operator, 0)

    def queued(self, operator: str | None = None) -> int:
        if operator is None:
            return len(self._queued_owner)
        q = self._queues.get(operator)
        return len(q) if q is not None else 0

    def is_queued(self, job_id: str) -> bool:
        return job_id in self._queued_owner

    def _room(self, operator: str) -> bool:
        return len(self._owner) < self.federation and self._by_operator.get(operator, 0) < self.per_operator

    # -- admitting ----------------------------------------------------------------------------------------
    def admit(self, job_id: str, operator: str, *, refuse: bool = True) -> None:
        """Count the job as live now, or (``refuse``) raise OVERLOADED naming the bound reached (no queue)."""
        if refuse and len(self._owner) >= self.federation:
            raise RemoteProtocolError(common_pb2.OVERLOADED, f"{self.federation} jobs are live in this federation; retry when one ends")
        if refuse and self._by_operator.get(operator, 0) >= self.per_operator:
            raise RemoteProtocolError(common_pb2.OVERLOADED, f"this operator has {self.per_operator} live jobs; retry when one ends")
        self._count(job_id, operator)

    def enqueue(self, job_id: str, operator: str, grant: Grant) -> bool:
        """Count the job as live now (True; ``grant`` is not called), or queue it (False; ``grant`` is called when it
        gets its slot), or raise OVERLOADED when the queue is full (the operator's share or the whole)."""
        if self._room(operator):  # a free slot: no job of this operator waits (it would hold it already)
            self._count(job_id, operator)
            return True
        if len(self._queued_owner) >= self.queue_total:
            raise RemoteProtocolError(common_pb2.OVERLOADED, f"{self.queue_total} jobs already wait for a slot in this federation; retry when one ends")
        if self.queued(operator) >= self.queue_per_operator:
            raise RemoteProtocolError(common_pb2.OVERLOADED, f"this operator already has {self.queue_per_operator} jobs waiting for a slot; retry when one ends")
        self._queues.setdefault(operator, deque()).append(_Waiting(job_id, self._clock(), grant))
        self._queued_owner[job_id] = operator
        return False

    def withdraw(self, job_id: str) -> bool:
        """Take a queued job out of the queue (cancelled, or past its deadline): it never runs. False if not queued."""
        operator = self._queued_owner.pop(job_id, None)
        if operator is None:
            return False
        q = self._queues[operator]
        for w in q:
            if w.job_id == job_id:
                q.remove(w)
                break
        if not q:
            del self._queues[operator]
        return True

    def release(self, job_id: str) -> None:
        """The job ended (idempotent); its slot goes to the next waiting job (:meth:`_promote`)."""
        operator = self._owner.pop(job_id, None)
        if operator is None:
            return
        n = self._by_operator.get(operator, 1) - 1
        if n <= 0:
            self._by_operator.pop(operator, None)
        else:
            self._by_operator[operator] = n
        self._promote()

    # -- internals ----------------------------------------------------------------------------------------
    def _count(self, job_id: str, operator: str) -> None:
        self._owner[job_id] = operator
        self._by_operator[operator] = self._by_operator.get(operator, 0) + 1

    def _promote(self) -> None:
        """Give free slots to waiting jobs: the operators in turn (one that got a slot goes to the back; one at its
        own bound keeps its place), each operator's oldest job first."""
        while len(self._owner) < self.federation and self._queues:
            operator = next((o for o in self._queues if self._by_operator.get(o, 0) < self.per_operator), None)
            if operator is None:
                return  # every waiting operator is at its own bound
            q = self._queues.pop(operator)  # popped and re-inserted: to the back of the turn order
            w = q.popleft()
            if q:
                self._queues[operator] = q
            del self._queued_owner[w.job_id]
            self._count(w.job_id, operator)
            w.grant(max(0.0, self._clock() - w.since))
