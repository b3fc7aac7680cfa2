"""The curator's one job host: every protocol's job submitted, watched, cancelled and fetched the same way
(`mpdp train --detach`, `mpdp jobs`, `mpdp model export`).

Only moves messages. Each protocol (:data:`mpdp.registry.PROTOCOLS`) is hosted by its own servicer, which gives
the host a :class:`HostedProtocol`: ``submit(spec)`` checks, admits and starts a job and returns its id at once
(raising :class:`errors.Refused`); ``release(job_id)`` reads its durable store; ``cancel(job_id)`` fails a running
job through its one failure path. Summaries come from the :class:`~mpdp_services.curator.catalog.Catalog`; a
watcher wakes on every job change (:data:`jobs.changes`) and sends the job's summary when it changed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from mpdp import registry
from mpdp.messages import common_pb2, operations_pb2 as pb, operations_pb2_grpc as pb_grpc
from mpdp_services.common import errors, jobs
from mpdp_services.common.rpc import roles_by_method
from mpdp_services.curator.catalog import MAX_LIMIT, Catalog

log = logging.getLogger("mpdp.curator")

SERVICE = "mpdp.messages.JobOperations"
ROLES = roles_by_method(SERVICE, {m: ("operator",) for m in ("SubmitJob", "WatchJob", "GetRelease", "ListJobs", "GetJob", "CancelJob")})
HEARTBEAT = 5.0  # seconds: a watcher reads its job again at least this often, whatever it was told

Cancel = Callable[[str], Awaitable[bool]]


@dataclass(frozen=True)
class HostedProtocol:
    """What the job host needs of the servicer that runs one protocol's jobs."""

    protocol: registry.Protocol
    submit: Callable[[Any], Awaitable[str]]  # the protocol's spec → the job's id, at once (errors.Refused otherwise)
    release: Callable[[str], Any]  # job id → what it published (its durable store), or None
    cancel: Cancel


class JobOperations(pb_grpc.JobOperationsServicer):
    def __init__(self, catalog: Catalog, hosted: list[HostedProtocol]) -> None:
        self.catalog = catalog
        self.hosted = {h.protocol.name: h for h in hosted}
        self.by_field = {h.protocol.submission: h for h in hosted}  # dpgd and regression share the learner host

    async def SubmitJob(self, request: pb.JobSubmission, context) -> pb.JobSummary:
        field = str(request.WhichOneof("spec") or "")
        host = self.by_field.get(field)
        if host is None:
            await errors.refuse(context, common_pb2.MALFORMED, f"a job submission carries one spec: {', '.join(sorted(self.by_field))}")
        try:
            job_id = await host.submit(getattr(request, field))
        except errors.Refused as e:
            await errors.refuse(context, e.problem, e.detail)
        log.info("job %s submitted through the job host", job_id)
        return await self._summary(job_id, context)

    async def WatchJob(self, request, context):
        since = jobs.changes.version
        while self.catalog.busy(request.job_id):  # a step is running: its end is a change (the summary then is whole)
            since = await jobs.changes.wait(since, HEARTBEAT)
        summary = await self._summary(request.job_id, context)
        yield summary
        while not summary.terminal:
            since = await jobs.changes.wait(since, HEARTBEAT)
            if self.catalog.busy(request.job_id):
                continue
            now = self.catalog.job(request.job_id)
            if now is None:
                return
            if now != summary:
                summary = now
                yield summary

    async def GetRelease(self, request, context) -> pb.JobRelease:
        summary = await self._summary(request.job_id, context)
        host = self.hosted.get(summary.protocol)
        released = host.release(request.job_id) if host is not None else None
        if released is None:
            if not summary.terminal:
                await errors.refuse(context, common_pb2.STEP_OUT_OF_ORDER, f"job {request.job_id} is still running ({summary.stage or summary.state})")
            await errors.refuse(context, common_pb2.JOB_FAILED, f"job {request.job_id} ended {summary.state} and published nothing"
                                + (f": {summary.detail}" if summary.detail else ""))
        out = pb.JobRelease(job_id=request.job_id, protocol=summary.protocol)
        getattr(out, host.protocol.submission).CopyFrom(released)  # type: ignore[union-attr]
        return out

    async def ListJobs(self, request: pb.JobQuery, context) -> pb.JobList:
        if request.protocol and request.protocol not in self.catalog.protocols():
            await errors.refuse(context, common_pb2.MALFORMED, f"no such protocol; one of {', '.join(self.catalog.protocols())}")
        if request.limit > MAX_LIMIT:
            await errors.refuse(context, common_pb2.MALFORMED, f"limit is at most {MAX_LIMIT}")
        return pb.JobList(jobs=self.catalog.jobs(request.protocol, request.live_only, request.limit))

    async def GetJob(self, request, context) -> pb.JobSummary:
        return await self._summary(request.job_id, context)

    async def CancelJob(self, request, context) -> pb.JobSummary:
        summary = await self._summary(request.job_id, context)
        if summary.terminal:
            await errors.refuse(context, common_pb2.STEP_OUT_OF_ORDER, f"job {request.job_id} has already ended ({summary.state}); nothing to cancel")
        host = self.hosted.get(summary.protocol)
        if host is None or not await host.cancel(request.job_id):
            await errors.refuse(context, common_pb2.STEP_OUT_OF_ORDER, f"job {request.job_id} is not running at the curator; nothing to cancel")
        log.warning("job %s cancelled by the operator", request.job_id)
        return await self._summary(request.job_id, context)

    async def _summary(self, job_id: str, context) -> pb.JobSummary:
        if not jobs.valid_id(job_id):
            await errors.refuse(context, common_pb2.UNKNOWN_JOB, "no such job (not a job id)")
        summary = self.catalog.job(job_id)
        if summary is None:
            await errors.refuse(context, common_pb2.UNKNOWN_JOB, f"no job {job_id} at this curator")
        return summary
