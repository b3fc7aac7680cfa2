"""The curator's one job host: every protocol's job submitted, watched, cancelled and fetched the same way
(`mpdp train --detach`, `mpdp jobs`, `mpdp model export`).

Only moves messages. Each protocol (:data:`mpdp.registry.PROTOCOLS`) is hosted by its own servicer, which gives
the host a :class:`HostedProtocol`: ``submit(spec)`` checks, admits and starts a job (or queues it until it has an
admission slot, docs/protocols/job-model.md §5) and returns its id at once (raising :class:`errors.Refused`); ``release(job_id)`` reads its durable store; ``cancel(job_id)`` fails a running
job through its one failure path. Summaries come from the :class:`~mpdp_services.curator.catalog.Catalog`; a
watcher wakes on every job change (:data:`jobs.changes`) and sends the job's summary when it changed.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

from mpdp import limits, registry
from mpdp.messages import common_pb2, operations_pb2 as pb, operations_pb2_grpc as pb_grpc
from mpdp_services.common import calls, errors, jobs
from mpdp_services.common.rpc import roles_by_method
from mpdp_services.curator.catalog import MAX_LIMIT, Catalog
from mpdp_services.curator.submissions import SubmissionKeys, digest

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
    release: Callable[[str], Any]  # job id → what it published (its durable store), or None; errors.Refused if withheld
    cancel: Cancel


class JobOperations(pb_grpc.JobOperationsServicer):
    def __init__(self, catalog: Catalog, hosted: list[HostedProtocol], state_dir: Path | None = None) -> None:
        self.catalog = catalog
        self.hosted = {h.protocol.name: h for h in hosted}
        self.by_field = {h.protocol.submission: h for h in hosted}  # dpgd and regression share the learner host
        self.keys = SubmissionKeys(state_dir)
        self._under_way: dict[tuple[str, str], asyncio.Future] = {}  # the keyed submits still running

    async def SubmitJob(self, request: pb.JobSubmission, context) -> pb.JobSummary:
        field = str(request.WhichOneof("spec") or "")
        host = self.by_field.get(field)
        if host is None:
            await errors.refuse(context, common_pb2.MALFORMED, f"a job submission carries one spec: {', '.join(sorted(self.by_field))}")
        try:
            limits.check_job_submission(request)
        except limits.SpecError as e:
            await errors.refuse(context, common_pb2.MALFORMED, str(e))
        if not request.idempotency_key:
            job_id = await self._submit(host, getattr(request, field), context)
            return await self._summary(job_id, context)
        ident = calls.caller()
        key = (ident.name if ident is not None else "", request.idempotency_key)
        job_id = await self._keyed(key, digest(request), host, getattr(request, field), context)
        return await self._summary(job_id, context)

    async def _keyed(self, key: tuple[str, str], spec_digest: str, host: HostedProtocol, spec: Any, context) -> str:
        """The job of this operator's key: the one its first submit started, or a new one (its key recorded durably
        first). The submit runs as its own task, so a caller that disconnects mid-submit (the lost answer a retry is
        for) neither stops it nor loses its record; a retry that arrives meanwhile waits for that same task."""
        known = self.keys.get(key)
        if known is not None and known[0] != spec_digest:
            await errors.refuse(context, common_pb2.REPLAY, "this idempotency key was already used for another job specification")
        running = self._under_way.get(key)
        if running is None:
            if known is not None:
                if known[1] is None:
                    await errors.refuse(context, common_pb2.JOB_FAILED, "the curator restarted while this key's submit was under way; "
                                        "whether its job started is unknown, so it is not started again (use a new key)")
                log.info("job %s: a repeated submit with its key answered with the same job", known[1])
                return known[1]
            self.keys.pending(key, spec_digest)
            running = asyncio.ensure_future(host.submit(spec))
            self._under_way[key] = running
            running.add_done_callback(lambda task: self._settled(key, task))
        try:
            job_id = await asyncio.shield(running)
        except errors.Refused as e:
            await errors.refuse(context, e.problem, e.detail)
        log.info("job %s submitted through the job host (keyed)", job_id)
        return job_id

    def _settled(self, key: tuple[str, str], task: asyncio.Future) -> None:
        self._under_way.pop(key, None)
        if task.cancelled() or task.exception() is not None:
            self.keys.forget(key)  # refused: nothing started under this key, a retry may try again
        else:
            self.keys.started(key, task.result())

    async def _submit(self, host: HostedProtocol, spec: Any, context) -> str:
        try:
            job_id = await host.submit(spec)
        except errors.Refused as e:
            await errors.refuse(context, e.problem, e.detail)
        log.info("job %s submitted through the job host", job_id)
        return job_id

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
        try:
            released = host.release(request.job_id) if host is not None else None
        except errors.Refused as e:  # the protocol withholds it (a DCA secure sum is the curator's own, never served)
            await errors.refuse(context, e.problem, e.detail)
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
