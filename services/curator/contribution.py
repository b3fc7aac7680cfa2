"""Charlie asks parties to contribute a statistic of their own records to a DCA job (parties as DCA clients)."""

from __future__ import annotations

import asyncio
import logging

import grpc

from mpdp import limits
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
        try:
            limits.check_contribution_round(request)
        except limits.SpecError as e:
            await errors.refuse(context, common_pb2.INVALID_JOB, str(e))
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
                raise _PartyFailed(party, e.code(), e.details() or "") from e

        results = await asyncio.gather(*(ask(p) for p in request.parties), return_exceptions=True)
        errs = [r for r in results if isinstance(r, BaseException)]
        for r in errs:
            if not isinstance(r, _PartyFailed):
                log.error("DCA job %s: asking a party to contribute raised", request.request.dca_job_id, exc_info=r)
        failures = [str(r) if isinstance(r, _PartyFailed) else "internal error (see the curator's log)" for r in errs]
        if failures and all(isinstance(r, _PartyFailed) and r.code == grpc.StatusCode.INVALID_ARGUMENT for r in errs):
            # every party refused the request itself (unknown statistic, bounds that do not fit the job): it is invalid
            await errors.refuse(context, common_pb2.INVALID_JOB, f"the parties refused the request as invalid: {failures[0]}")
        if failures:
            await errors.refuse(context, common_pb2.JOB_FAILED, f"DCA job {request.request.dca_job_id}: {'; '.join(failures)}")
        log.info("DCA job %s: %d parties contributed %s", request.request.dca_job_id, len(results), request.request.statistic)
        return pb.ContributionSummary(receipts=[r for r in results if isinstance(r, pb.ContributionReceipt)])


class _PartyFailed(Exception):
    """A party refused or could not be reached: its name and the status it answered with."""

    def __init__(self, party: str, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"party {party}: {code.name}: {details}")
        self.code = code
