"""Charlie asks parties to contribute a statistic of their own records to a DCA job (parties as DCA clients)."""

from __future__ import annotations

import asyncio
import logging

import grpc

from mpdp.messages import contribution_pb2 as pb, contribution_pb2_grpc as pb_grpc
from services.common.rpc import PeerChannels, roles_by_method

log = logging.getLogger("mpdp.curator.contribution")

SERVICE = "mpdp.messages.ContributionCurator"
PARTY_SERVICE = "mpdp.messages.ContributionParty"
ROLES = roles_by_method(SERVICE, {"RequestContributions": ("operator",)})


class ContributionCurator(pb_grpc.ContributionCuratorServicer):
    def __init__(self, channels: PeerChannels, addresses: dict[str, str]) -> None:
        self.channels = channels
        self.addresses = addresses

    async def RequestContributions(self, request: pb.ContributionRound, context) -> pb.ContributionSummary:
        unknown = [p for p in request.parties if p not in self.addresses]
        if not request.parties or unknown:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"INVALID_JOB: parties {unknown or '(none)'} are not registered with the curator")

        async def ask(party: str) -> pb.ContributionReceipt:
            try:
                return await self.channels.call(self.addresses[party], party, PARTY_SERVICE, "Contribute", request.request, pb.ContributionReceipt, timeout=600)
            except grpc.aio.AioRpcError as e:
                raise RuntimeError(f"party {party}: {e.code().name}: {e.details()}") from e

        results = await asyncio.gather(*(ask(p) for p in request.parties), return_exceptions=True)
        failures = [str(r) for r in results if isinstance(r, BaseException)]
        if failures:
            await context.abort(grpc.StatusCode.ABORTED, f"JOB_FAILED: DCA job {request.request.dca_job_id}: {'; '.join(failures)}")
        log.info("DCA job %s: %d parties contributed %s", request.request.dca_job_id, len(results), request.request.statistic)
        return pb.ContributionSummary(receipts=[r for r in results if isinstance(r, pb.ContributionReceipt)])
