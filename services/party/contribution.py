"""The party as a DCA client (regression and dp-gd contributions): computes a statistic of its own records and
submits it with its noise slice to the job's compute nodes, having spent the job's true (ε, δ) first.

A dp-gd round (statistic ``dpgd/round``, docs/protocols/dpgd.md) is charged differently: the party spends the whole
dp-gd job's composed (ε, δ) (``DpgdPlan.ledger_entry``, protocol ``dpgd``) once — every round spends the same entry,
which the ledger stores once and returns thereafter — and its per-round DCA submission spends no DCA entry of its
own. So that a curator cannot get rounds for free, the party takes a round only if the DCA job is that round of the
plan it was charged for (``mpdp.dpgd.wire.check_round_job``: label, r ≤ R, dimension, Δ₂, σ_std) and records a
zero-charge ``dpgd-round`` marker per round: a second request for a round it contributed to is a REPLAY.

Every round is held to the parties it was asked with (``StatisticRequest.parties``, set by the curator): the DCA
job must be a DP sum whose roster is exactly those parties (:func:`mpdp.contribution.check_roster`), so whoever
creates the job cannot inflate N to thin each party's noise slice; a dp-gd job's charge records its parties, and
a later round over other parties is refused."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import grpc

from mpdp.data.dataset import DoesNotFit, SchemaMismatch, require_schema
from mpdp.data.engine import dpgd_contribution, statistics_contribution
from mpdp.data.loaders import DatasetError
from mpdp import limits
from mpdp.contribution import check_roster
from mpdp.dca.params import DcaParams
from mpdp.dpgd import wire as dpgd_wire
from mpdp.dpgd.plan import round_job_id
from mpdp.ledger import FAILED, BudgetExceeded, LedgerError
from mpdp.messages import common_pb2, contribution_pb2, contribution_pb2_grpc, dca_pb2
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.common import errors, tracing
from mpdp_services.common.errors import shown
from mpdp_services.common.rpc import caller, roles_by_method
from mpdp_services.dca_client.client import fetch_job, submit_vector

if TYPE_CHECKING:
    from mpdp_services.party.server import Party

log = logging.getLogger("mpdp.party")
Problem = common_pb2.Problem

SERVICE = "mpdp.messages.ContributionParty"
ROLES = roles_by_method(SERVICE, {"Contribute": ("curator",)})
STATISTICS = {"linreg/std": "std", "linreg/main": "main", dpgd_wire.STATISTIC: "dpgd"}
PROTOCOL = "dca"


class ContributingParty(contribution_pb2_grpc.ContributionPartyServicer):
    """The party as a DCA client: computes a statistic of its own records and submits it with its noise slice."""

    def __init__(self, party: "Party") -> None:
        self.party = party

    async def Contribute(self, request: contribution_pb2.StatisticRequest, context) -> contribution_pb2.ContributionReceipt:
        party = self.party
        await party.ready(context)
        cfg = party.cfg
        if caller(context).name != cfg.curator.name:
            await errors.refuse(context, Problem.WRONG_ROLE, f"only the curator of party {cfg.name} may ask for contributions")
        round_name = STATISTICS.get(request.statistic)
        if round_name is None:
            await errors.refuse(context, Problem.MALFORMED, f"unknown statistic {shown(request.statistic)}; use one of {sorted(STATISTICS)}")
        with tracing.job_span(request.dca_job_id, "contribution", "party") as span:  # a child of the curator's round
            if round_name == "dpgd":
                receipt = await self._dpgd_round(party, request, context)
            else:
                if request.HasField("dpgd"):
                    await errors.refuse(context, Problem.MALFORMED, "only a dpgd/round request carries a dp-gd round")
                async with party.claimed(context, PROTOCOL, request.dca_job_id):
                    receipt = await self._contribute(party, request, round_name, context)
            span.done("SUBMITTED")
            return receipt

    async def _contribute(self, party: "Party", request: contribution_pb2.StatisticRequest, round_name: str, context) -> contribution_pb2.ContributionReceipt:
        cfg = party.cfg
        ds = await self._dataset(party, request, context)
        tls = cfg.tls.files()
        endpoints = Endpoints(cfg.curator.address, cfg.curator.name, tls)
        ann, params = await self._dca_job(party, request, context)
        charge = params.ledger_entry()
        await party.precheck(context, charge["epsilon"], charge["delta"], charge.get("accounting"))

        def compute():  # over the dataset's batches (bounded memory; on Dask if it names a cluster)
            return statistics_contribution(ds, request.dataset, round_name, tuple(request.bounds), max(1, request.records_per_client))

        z = await self._computed(party, request, compute, context)
        try:  # spends the job's true (ε, δ) in the ledger before any share leaves; a failed submission keeps it
            report = await submit_vector(endpoints, tls, cfg.name, request.dca_job_id, z, ledger=party.ledger, announcement=ann)
        except BudgetExceeded as e:
            await errors.refuse(context, Problem.BUDGET_EXCEEDED, f"party {cfg.name}: {e}")
        except (LedgerError, OSError) as e:
            await party.ledger_broken(context, e)
        except grpc.aio.AioRpcError as e:
            await errors.refuse(context, Problem.PEER_UNREACHABLE, f"party {cfg.name} could not submit its shares ({e.code().name})")
        if report.rejected:
            await errors.refuse(context, Problem.JOB_FAILED, f"party {cfg.name}'s shares were refused ({errors.problem_name(report.rejected[0].problem)})")
        return contribution_pb2.ContributionReceipt(party=cfg.name, accepted_shares=report.accepted)

    # -- a round of a dp-gd job ---------------------------------------------------------------------------
    async def _dpgd_round(self, party: "Party", request: contribution_pb2.StatisticRequest, context) -> contribution_pb2.ContributionReceipt:
        cfg = party.cfg
        try:
            limits.check_statistic_request(request)
        except limits.SpecError as e:
            await errors.refuse(context, Problem.INVALID_JOB, str(e))
        if not request.HasField("dpgd") or request.bounds:
            await errors.refuse(context, Problem.MALFORMED, "a dpgd/round request carries its dp-gd round and no clip box")
        msg = request.dpgd
        try:
            plan = dpgd_wire.plan_of(msg)
            W = dpgd_wire.iterate_of(msg, plan)
            if msg.round > plan.rounds:
                raise ValueError(f"round {msg.round} is beyond the plan's {plan.rounds + 1} rounds")
        except ValueError as e:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name}: {e}")
        round_id = round_job_id(msg.job_id, msg.round)
        async with party.claimed(context, dpgd_wire.ROUND_PROTOCOL, round_id):  # REPLAY if this round was contributed to
            ds = await self._dataset(party, request, context)
            ann, params = await self._dca_job(party, request, context)
            try:
                dpgd_wire.check_round_job(plan, msg, params)
            except ValueError as e:
                await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name}: DCA job {shown(request.dca_job_id)}: {e}")
            entry = plan.ledger_entry(msg.job_id, seeded=params.seeded)
            entry["parties"] = sorted(request.parties)  # every round of the job is a sum over these same parties
            try:
                charged = await asyncio.to_thread(party.ledger.find, dpgd_wire.PROTOCOL, msg.job_id)
            except (LedgerError, OSError) as e:
                await party.ledger_broken(context, e)
            if charged is not None and any(charged.get(k) != entry[k] for k in ("plan", "seeded", "parties")):
                await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name}: dp-gd job {shown(msg.job_id)} was charged for another plan or other parties")
            if charged is None:
                await party.precheck(context, entry["epsilon"], entry["delta"], entry.get("accounting"))

            def compute():  # over the dataset's batches (bounded memory; on Dask if it names a cluster)
                return dpgd_contribution(ds, request.dataset, plan, msg.round, W, max(1, request.records_per_client))

            z = await self._computed(party, request, compute, context)
            # The one charge of the whole job (stored once; every later round finds it), then this round's marker;
            # both before the round's first share leaves. The DCA submission itself spends nothing.
            await party.spend(context, entry)
            marker = {"protocol": dpgd_wire.ROUND_PROTOCOL, "job_id": round_id, "epsilon": 0.0, "delta": 0.0, "dpgd_job_id": msg.job_id,
                      "round": msg.round, "dca_job_id": request.dca_job_id, "purpose": "covered by the dp-gd job's charge"}
            await party.spend(context, marker)
            report = await self._submit(party, request, z, ann, context, failed=((dpgd_wire.PROTOCOL, msg.job_id), (dpgd_wire.ROUND_PROTOCOL, round_id)))
            return contribution_pb2.ContributionReceipt(party=cfg.name, accepted_shares=report.accepted)

    async def _submit(self, party: "Party", request: contribution_pb2.StatisticRequest, z, ann: dca_pb2.DcaJobAnnouncement, context,
                      *, failed: tuple[tuple[str, str], ...]):
        """Submit without spending (the caller spent); a failed submission marks ``failed`` entries failed (they keep their charge)."""
        cfg = party.cfg
        tls = cfg.tls.files()
        endpoints = Endpoints(cfg.curator.address, cfg.curator.name, tls)
        try:
            report = await submit_vector(endpoints, tls, cfg.name, request.dca_job_id, z, announcement=ann)
        except grpc.aio.AioRpcError as e:
            for key in failed:
                await party.mark(*key, FAILED)
            await errors.refuse(context, Problem.PEER_UNREACHABLE, f"party {cfg.name} could not submit its shares ({e.code().name})")
        if report.rejected:
            for key in failed:
                await party.mark(*key, FAILED)
            await errors.refuse(context, Problem.JOB_FAILED, f"party {cfg.name}'s shares were refused ({errors.problem_name(report.rejected[0].problem)})")
        return report

    # -- shared steps -----------------------------------------------------------------------------------------
    async def _dataset(self, party: "Party", request: contribution_pb2.StatisticRequest, context):
        cfg = party.cfg
        ds = cfg.datasets.get(request.dataset)
        if ds is None:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name} has no dataset {shown(request.dataset)} (configured: {sorted(cfg.datasets)})")
        try:
            require_schema(ds, request.schema_sha256)
        except SchemaMismatch as e:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name} refuses: dataset {shown(request.dataset)}: {e}")
        return ds

    async def _dca_job(self, party: "Party", request: contribution_pb2.StatisticRequest, context) -> tuple[dca_pb2.DcaJobAnnouncement, DcaParams]:
        """The DCA job as the curator announces it, checked: a DP sum, seeded only in test mode."""
        cfg = party.cfg
        job = shown(request.dca_job_id)
        tls = cfg.tls.files()
        try:
            ann = await fetch_job(cfg.curator.address, cfg.curator.name, tls, request.dca_job_id)
            params = DcaParams.from_spec(request.dca_job_id, ann.spec)
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                await errors.refuse(context, Problem.UNKNOWN_JOB, f"party {cfg.name}: the curator has no DCA job {job}")
            await errors.refuse(context, Problem.PEER_UNREACHABLE, f"party {cfg.name} could not fetch DCA job {job} from its curator ({e.code().name})")
        except ValueError as e:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name}: DCA job {job}: {e}")
        if params.seeded and not cfg.test_mode:
            await errors.refuse(context, Problem.INVALID_JOB, "simulation_seed is refused outside test mode")
        try:  # a DP sum over exactly the round's parties: N and the roster cannot dilute this party's noise slice
            check_roster(params, list(request.parties), cfg.name, cfg.members)
        except ValueError as e:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name}: DCA job {job}: {e}")
        return ann, params

    async def _computed(self, party: "Party", request: contribution_pb2.StatisticRequest, compute, context):
        """``compute()`` off the event loop; a dataset or shape problem refuses the job as invalid."""
        cfg = party.cfg
        job = shown(request.dca_job_id)
        try:
            return await asyncio.to_thread(compute)
        except DatasetError as e:
            log.error("DCA job %s: dataset %s: %s", job, request.dataset, e)
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name} cannot read its dataset {shown(request.dataset)}; see its log")
        except DoesNotFit as e:  # names the job's public bound only; the counts stay in this party's log
            log.warning("DCA job %s: dataset %s: %s", job, request.dataset, e.private)
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name}: {e}")
        except ValueError as e:  # computed from the records: the detail stays in this party's log
            log.error("DCA job %s: dataset %s: %s", job, request.dataset, e)
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name} cannot compute its statistic from dataset {shown(request.dataset)}; see its log")
