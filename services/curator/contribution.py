"""Charlie asks parties to contribute a statistic of their own records to a DCA job (parties as DCA clients)."""

from __future__ import annotations

import asyncio
import logging

import grpc

from mpdp.messages import common_pb2, contribution_pb2 as pb, contribution_pb2_grpc as pb_grpc
from services.common import errors, jobs
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
        if not jobs.valid_id(request.request.dca_job_id):
            await errors.refuse(context, common_pb2.UNKNOWN_JOB, "no such DCA job (not a job id)")
        if not request.parties:
            await errors.refuse(context, common_pb2.INVALID_JOB, "name at least one party")
        if len(set(request.parties)) != len(request.parties):
            await errors.refuse(context, common_pb2.INVALID_JOB, "parties must be distinct: a party contributes once")
        unknown = [p for p in request.parties if p not in self.addresses]
        if unknown:
            await errors.refuse(context, common_pb2.INVALID_JOB, f"parties {', '.join(errors.shown(p) for p in unknown[:4])} are not registered with the curator")

        async def ask(party: str) -> pb.ContributionReceipt:
            try:
                return await self.channels.call(self.addresses[party], party, PARTY_SERVICE, "Contribute", request.request, pb.ContributionReceipt, timeout=600)
            except grpc.aio.AioRpcError as e:
                raise _PartyFailed(f"party {party}: {e.code().name}: {e.details()}") from e

        results = await asyncio.gather(*(ask(p) for p in request.parties), return_exceptions=True)
        errs = [r for r in results if isinstance(r, BaseException)]
        for r in errs:
            if not isinstance(r, _PartyFailed):
                log.error("DCA job %s: asking a party to contribute raised", request.request.dca_job_id, exc_info=r)
        failures = [str(r) if isinstance(r, _PartyFailed) else "internal error (see the curator's log)" for r in errs]
        if failures:
            await errors.refuse(context, common_pb2.JOB_FAILED, f"DCA job {request.request.dca_job_id}: {'; '.join(failures)}")
        log.info("DCA job %s: %d parties contributed %s", request.request.dca_job_id, len(results), request.request.statistic)
        return pb.ContributionSummary(receipts=[r for r in results if isinstance(r, pb.ContributionReceipt)])


class _PartyFailed(Exception):
    """A party refused or could not be reached: its name and the status it answered with."""
