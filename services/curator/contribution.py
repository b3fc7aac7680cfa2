"""Charlie asks parties to contribute a statistic of their own records to a DCA job (parties as DCA clients): one
round of a learner job (services/curator/learner.py), never an operator's call.
:class:`mpdp.contribution.ContributionRound` decides, this module only moves its messages."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

import grpc

from mpdp import limits
from mpdp.contribution import INTERNAL_FAILURE, ContributionRound, check_roster
from mpdp.dca.errors import InvalidJob
from mpdp.dca.params import DcaParams
from mpdp.messages import common_pb2, contribution_pb2 as pb, dca_pb2
from mpdp.protocol import ProtocolError, Publish, Send
from mpdp_services.common import errors, jobs, tracing
from mpdp_services.common.rpc import PeerChannels
from mpdp_services.curator import turns
from mpdp_services.curator.links import require_linked

log = logging.getLogger("mpdp.curator.contribution")

PARTY_SERVICE = "mpdp.messages.ContributionParty"


class ContributionCurator:
    """The curator's side of a contribution round; the learner host runs one per round of its jobs."""

    def __init__(self, channels: PeerChannels, addresses: dict[str, str], trace_parent: Callable[[str], Any] | None = None,
                 dca_spec: Callable[[str], dca_pb2.DcaJobSpec | None] | None = None) -> None:
        self.channels = channels
        self.addresses = addresses
        self._dca_spec = dca_spec  # DCA job id → its spec at this curator (None: no such job)
        self._trace_parent = trace_parent  # DCA job id → its span at this curator (the round joins the job's trace)

    async def run(self, request: pb.ContributionRound) -> pb.ContributionSummary:
        """One contribution round of a learner job, checked then run; raises :class:`errors.Refused` with the
        Problem that fails the round."""
        if not jobs.valid_id(request.request.dca_job_id):
            raise errors.Refused(common_pb2.UNKNOWN_JOB, "no such DCA job (not a job id)")
        try:
            limits.check_contribution_round(request)
        except limits.SpecError as e:
            raise errors.Refused(common_pb2.INVALID_JOB, str(e)) from None
        if not request.parties:
            raise errors.Refused(common_pb2.INVALID_JOB, "name at least one party")
        if len(set(request.parties)) != len(request.parties):
            raise errors.Refused(common_pb2.INVALID_JOB, "parties must be distinct: a party contributes once")
        unknown = [p for p in request.parties if p not in self.addresses]
        if unknown:
            raise errors.Refused(common_pb2.INVALID_JOB, f"parties {', '.join(errors.shown(p) for p in unknown[:4])} are not registered with the curator")

        job_id = request.request.dca_job_id
        spec = self._dca_spec(job_id) if self._dca_spec else None
        if spec is None:
            raise errors.Refused(common_pb2.UNKNOWN_JOB, "no such DCA job at this curator")
        try:  # the round's parties are the DCA job's whole roster (each party checks it again)
            check_roster(DcaParams.from_spec(job_id, spec), list(request.parties))
        except InvalidJob as e:
            raise errors.Refused(common_pb2.INVALID_JOB, f"DCA job {job_id}: {e.detail}") from None
        except ValueError as e:
            raise errors.Refused(common_pb2.INVALID_JOB, f"DCA job {job_id}: {e}") from None
        del request.request.parties[:]
        request.request.parties.extend(request.parties)  # what each party holds the round to
        await require_linked(self.channels, request.parties)  # a party that is down fails the round before any party spends
        with tracing.job_span(job_id, "contribution", "curator", self._trace_parent(job_id) if self._trace_parent else None) as span:
            summary = await self._round(request)
            span.done("PUBLISHED")
            return summary

    async def _round(self, request: pb.ContributionRound) -> pb.ContributionSummary:
        role = ContributionRound(request)  # decides; this servicer only moves its messages
        outs: list = []

        async def ask(send: Send) -> None:
            party = send.to.name
            receipt, detail, invalid = None, INTERNAL_FAILURE, False
            try:
                receipt = await self.channels.call(self.addresses[party], party, PARTY_SERVICE, "Contribute", send.message, pb.ContributionReceipt, timeout=600)
            except grpc.aio.AioRpcError as e:
                detail, invalid = f"{e.code().name}: {e.details() or ''}", e.code() == grpc.StatusCode.INVALID_ARGUMENT
            except Exception:
                log.error("DCA job %s: asking a party to contribute raised", request.request.dca_job_id, exc_info=True)
            try:
                outs.extend(role.receipt(party, receipt) if receipt is not None else role.refused(party, detail, invalid=invalid))
            except ProtocolError:
                pass  # the round failed closed (or had already failed): reported below

        async with turns.turn(request.parties):  # the parties of overlapping jobs decide their spends in one order
            await asyncio.gather(*(ask(s) for s in role.ask()))
        if role.error is not None:  # failed: INVALID_JOB when every party called the request invalid, else the job failed
            problem = role.error.problem if role.error.problem in (common_pb2.INVALID_JOB, common_pb2.BUDGET_EXCEEDED) else common_pb2.JOB_FAILED
            raise errors.Refused(problem, role.error.detail)
        log.info("DCA job %s: %d parties contributed %s", request.request.dca_job_id, len(request.parties), request.request.statistic)
        return next(o.release for o in outs if isinstance(o, Publish))
