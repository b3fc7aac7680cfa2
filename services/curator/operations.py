"""The operator's view of the curator's jobs, every protocol: list, show, cancel (`mpdp jobs`).

Only moves messages: the answers come from the :class:`~mpdp_services.curator.catalog.Catalog`, a cancellation
from the protocol's own servicer (``cancel(job_id)``), which fails the job through its one failure path.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable

from mpdp.messages import common_pb2, operations_pb2 as pb, operations_pb2_grpc as pb_grpc
from mpdp_services.common import errors, jobs
from mpdp_services.common.rpc import roles_by_method
from mpdp_services.curator.catalog import MAX_LIMIT, Catalog

log = logging.getLogger("mpdp.curator")

SERVICE = "mpdp.messages.JobOperations"
ROLES = roles_by_method(SERVICE, {"ListJobs": ("operator",), "GetJob": ("operator",), "CancelJob": ("operator",)})

Cancel = Callable[[str], Awaitable[bool]]


class JobOperations(pb_grpc.JobOperationsServicer):
    def __init__(self, catalog: Catalog, cancels: dict[str, Cancel]) -> None:
        self.catalog = catalog
        self.cancels = cancels  # protocol → its servicer's cancel(job_id)

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
        cancel = self.cancels.get(summary.protocol)
        if cancel is None or not await cancel(request.job_id):
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
