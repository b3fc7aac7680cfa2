"""The party as a DCA client (regression and dp-gd contributions): computes a statistic of its own records and
submits it with its noise slice to the job's compute nodes, having spent the job's true (ε, δ) first, through the
party's one contribution step (``services/party/contribute.py``, :class:`mpdp.contribution.Contributor`).

A dp-gd round (statistic ``dpgd/round``, docs/protocols/dpgd.md) is charged differently: the party spends the whole
dp-gd job's composed (ε, δ) (``DpgdPlan.ledger_entry``, protocol ``dpgd``) once — every round spends the same entry,
which the ledger stores once and returns thereafter — and its per-round DCA submission spends no DCA entry of its
own. So that a curator cannot get rounds for free, the party takes a round only if the DCA job is that round of the
plan it was charged for (``mpdp.dpgd.wire.check_round_job``: label, r ≤ R, dimension, Δ₂, σ_std) and records a
zero-charge ``dpgd-round`` marker per round: a second request for a round it contributed to is a REPLAY.

Every round is held to the parties it was asked with (``StatisticRequest.parties``, set by the curator): the DCA
job must be a DP sum whose roster is exactly those parties (:func:`mpdp.contribution.check_roster`), so whoever
creates the job cannot inflate N to thin each party's noise slice; a dp-gd job's charge records its parties, and
a later round over other parties is refused.

Every round is also held to its validation: a regression round is validated unless its request says
``unvalidated`` (the DCA job must then prove each coordinate within the range the request's bounds and row bound
give, ``mpdp.regression.statistics.validated_round``); a dp-gd round as its plan says."""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import TYPE_CHECKING, Awaitable, Callable

from mpdp.dpgd.plan import dpgd_contribution
from mpdp.regression.statistics import statistics_contribution
from mpdp import registry
from mpdp.contribution import AcceptedRound
from mpdp.dca.params import DcaParams
from mpdp.dpgd import wire as dpgd_wire
from mpdp.dpgd.plan import round_job_id
from mpdp.ledger import LedgerError
from mpdp.regression.statistics import check_round_job, validated_round
from mpdp.messages import common_pb2, contribution_pb2, contribution_pb2_grpc
from mpdp_services.common import errors, tracing
from mpdp_services.common.errors import shown
from mpdp_services.common.rpc import caller, roles_by_method
from mpdp_services.party.contribute import carried, check_carries, computed, contribute, dataset_for

if TYPE_CHECKING:
    from mpdp_services.party.flows import Flow, PartySite
    from mpdp_services.party.server import Party

log = logging.getLogger("mpdp.party")
Problem = common_pb2.Problem

SERVICE = "mpdp.messages.ContributionParty"
ROLES = roles_by_method(SERVICE, {"Contribute": ("curator",)})
PROTOCOL = "dca"
# statistic → how the party contributes it: (party, request, context) → its receipt; each DCA-based protocol's
# registry entry names its own (``Hooks.contribution``), so the servicer lists none
Round = Callable[["Party", contribution_pb2.StatisticRequest, object], Awaitable[contribution_pb2.ContributionReceipt]]


@functools.cache
def rounds() -> dict[str, Round]:
    """Every statistic a party contributes, from the registry (``Hooks.contribution`` of each DCA-based protocol)."""
    return {statistic: handler for table in registry.hooked("contribution").values() for statistic, handler in table.items()}


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
        contribute_round = rounds().get(request.statistic)
        if contribute_round is None:
            await errors.refuse(context, Problem.MALFORMED, f"unknown statistic {shown(request.statistic)}; use one of {sorted(rounds())}")
        with tracing.job_span(request.dca_job_id, "contribution", "party") as span:  # a child of the curator's round
            receipt = await contribute_round(party, request, context)
            span.done("SUBMITTED")
            return receipt


# -- a round of a regression job (docs/protocols/regression.md) ---------------------------------------------------
def _regression_round(round_name: str) -> Round:
    async def contribute_round(party: "Party", request: contribution_pb2.StatisticRequest, context) -> contribution_pb2.ContributionReceipt:
        if carried(request):
            await errors.refuse(context, Problem.MALFORMED, "a linreg request carries its clip box and no other protocol's request")
        async with party.claimed(context, PROTOCOL, request.dca_job_id):
            return await _contribute(party, request, round_name, context)
    return contribute_round


async def _contribute(party: "Party", request: contribution_pb2.StatisticRequest, round_name: str, context) -> contribution_pb2.ContributionReceipt:
    cfg = party.cfg
    ds = await dataset_for(party, context, request.dataset, request.schema_sha256, request.records_per_client)

    def compute():  # over the dataset's batches (bounded memory; on Dask if it names a cluster)
        return statistics_contribution(ds, request.dataset, round_name, tuple(request.bounds), max(1, request.records_per_client))

    async def vector(params: DcaParams):
        return await computed(party, request.dca_job_id, request.dataset, compute)

    # spends the job's true (ε, δ) in the ledger before any share leaves; a failed submission keeps it
    try:  # a validated round (the default): the party holds the job to the range its bounds and row bound give
        validate, bounds = ("none", None) if request.unvalidated else validated_round(round_name, request.bounds, request.records_per_client)
    except ValueError as e:
        await errors.refuse(context, Problem.INVALID_JOB, f"party {party.cfg.name}: {e}")
    accepted = AcceptedRound(request.dca_job_id, tuple(request.parties), check=lambda params: check_round_job(round_name, request.bounds, params),
                             validate=validate, bounds=bounds)
    report = await contribute(party, context, accepted, vector)
    return contribution_pb2.ContributionReceipt(party=cfg.name, accepted_shares=report.accepted)


# -- a round of a dp-gd job (docs/protocols/dpgd.md) -------------------------------------------------------------
async def _dpgd_round(party: "Party", request: contribution_pb2.StatisticRequest, context) -> contribution_pb2.ContributionReceipt:
    cfg = party.cfg
    await check_carries(context, request, "dpgd", "a dpgd/round request carries its dp-gd round")
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
        ds = await dataset_for(party, context, request.dataset, request.schema_sha256, request.records_per_client)
        parties = sorted(request.parties)
        try:
            charged = await asyncio.to_thread(party.ledger.find, dpgd_wire.PROTOCOL, msg.job_id)
        except (LedgerError, OSError) as e:
            await party.ledger_broken(context, e)

        def charge(params: DcaParams) -> tuple[dict, ...]:
            """The one charge of the whole dp-gd job (stored once; every later round finds it), then this round's
            zero-charge marker; the DCA submission itself spends nothing of its own."""
            entry, marker = dpgd_wire.round_charge(plan, msg.job_id, msg.round, request.dca_job_id, parties, seeded=params.seeded)
            if charged is not None and any(charged.get(k) != entry[k] for k in ("plan", "seeded", "parties")):
                raise ValueError(f"dp-gd job {shown(msg.job_id)} was charged for another plan or other parties")
            return entry, marker

        def compute():  # over the dataset's batches (bounded memory; on Dask if it names a cluster)
            return dpgd_contribution(ds, request.dataset, plan, msg.round, W, max(1, request.records_per_client))

        async def vector(params: DcaParams):
            return await computed(party, request.dca_job_id, request.dataset, compute)

        validate, bounds = dpgd_wire.expected_validation(plan, msg.round, request.records_per_client)
        accepted = AcceptedRound(request.dca_job_id, tuple(request.parties), check=lambda params: dpgd_wire.check_round_job(plan, msg, params), charge=charge,
                                 validate=validate, bounds=bounds)
        report = await contribute(party, context, accepted, vector)
        return contribution_pb2.ContributionReceipt(party=cfg.name, accepted_shares=report.accepted)


DPGD_ROUNDS: dict[str, Round] = {dpgd_wire.STATISTIC: _dpgd_round}
REGRESSION_ROUNDS: dict[str, Round] = {"linreg/std": _regression_round("std"), "linreg/main": _regression_round("main")}


# -- its place at the party (mpdp.registry: Hooks.party of every DCA-based protocol) ---------------------------------
def flow(site: "PartySite", protocol: registry.Protocol) -> "Flow":
    """The site's one contribution servicer (every DCA-based protocol's party side)."""
    from mpdp_services.party.flows import Flow

    def make() -> Flow:
        servicer = ContributingParty(site.party)
        return Flow(SERVICE, lambda server: contribution_pb2_grpc.add_ContributionPartyServicer_to_server(servicer, server), ROLES)

    return site.part("contribution", make)
