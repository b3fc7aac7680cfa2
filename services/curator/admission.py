"""Admission control at the curator: a bounded number of live jobs per federation and per operator.

One :class:`Admission` is shared by every job table of the curator (Pathak, DCA, LMGC, HCB16 and the jobs they
create): :meth:`mpdp_services.common.jobs.JobTable.admit` asks it before a job exists, so a submission past either
bound is refused OVERLOADED (RESOURCE_EXHAUSTED) before the job is announced and no party is asked to build a model
or spend for it. A job counts from its admission until its table marks it terminal (published, failed, cancelled or
expired at its deadline). A job admitted outside an operator's call (recovered at start-up) is counted, never refused. Bounds: ``CuratorConfig.max_live_jobs_federation``
and ``max_live_jobs_per_operator`` (defaults :data:`mpdp.limits.MAX_LIVE_JOBS_FEDERATION` and
:data:`~mpdp.limits.MAX_LIVE_JOBS_PER_OPERATOR`; docs/protocols/job-model.md §5).
"""

from __future__ import annotations

from mpdp.messages import common_pb2
from mpdp.protocol import RemoteProtocolError


class Admission:
    """Live jobs by id and by operator; sans-IO (the service calls :meth:`admit` and :meth:`release`)."""

    def __init__(self, federation: int, per_operator: int) -> None:
        if federation < 1 or per_operator < 1:
            raise ValueError("admission bounds must be ≥ 1")
        self.federation, self.per_operator = federation, per_operator
        self._owner: dict[str, str] = {}  # live job id → operator
        self._by_operator: dict[str, int] = {}

    def live(self, operator: str | None = None) -> int:
        return len(self._owner) if operator is None else self._by_operator.get(operator, 0)

    def admit(self, job_id: str, operator: str, *, refuse: bool = True) -> None:
        """Count the job as live, or (``refuse``) raise OVERLOADED naming the bound reached."""
        if refuse and len(self._owner) >= self.federation:
            raise RemoteProtocolError(common_pb2.OVERLOADED, f"{self.federation} jobs are live in this federation; retry when one ends")
        if refuse and self._by_operator.get(operator, 0) >= self.per_operator:
            raise RemoteProtocolError(common_pb2.OVERLOADED, f"this operator has {self.per_operator} live jobs; retry when one ends")
        self._owner[job_id] = operator
        self._by_operator[operator] = self._by_operator.get(operator, 0) + 1

    def release(self, job_id: str) -> None:
        """The job ended (idempotent)."""
        operator = self._owner.pop(job_id, None)
        if operator is None:
            return
        n = self._by_operator.get(operator, 1) - 1
        if n <= 0:
            self._by_operator.pop(operator, None)
        else:
            self._by_operator[operator] = n
