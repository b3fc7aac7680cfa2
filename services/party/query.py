"""The DP query at the party (docs/protocols/query.md): the party's round of a query job, contributed through the
one contribution servicer (``mpdp.registry``: ``Hooks.contribution``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mpdp.contribution import AcceptedRound
from mpdp.dca.params import DcaParams
from mpdp.messages import common_pb2, contribution_pb2
from mpdp.query import role as query_role
from mpdp.query.evaluate import dataset_vector
from mpdp.query.release import VALIDATION, check_job
from mpdp_services.common import errors
from mpdp_services.party.contribute import check_carries, computed, contribute, dataset_for
from mpdp_services.party.contribution import PROTOCOL

if TYPE_CHECKING:
    from mpdp_services.party.server import Party

Problem = common_pb2.Problem


async def contribute_query(party: "Party", request: contribution_pb2.StatisticRequest, context) -> contribution_pb2.ContributionReceipt:
    """Recompile the query against this party's own schema (the job's digest), hold the DCA job to the plan (validated
    RANGE within the public row bound, Δ₂ at least the plan's, the query's (ε, δ)), then contribute its vector."""
    async with party.claimed(context, PROTOCOL, request.dca_job_id):  # a DCA job is contributed to once (REPLAY otherwise)
        return await _query(party, request, context)


async def _query(party: "Party", request: contribution_pb2.StatisticRequest, context) -> contribution_pb2.ContributionReceipt:
    cfg = party.cfg
    await check_carries(context, request, "query", "a query request carries its query")
    ds = await dataset_for(party, context, request.dataset, request.schema_sha256, request.records_per_client)
    spec = request.query
    try:
        plan = query_role.plan_of(spec, request.dataset, request.schema_sha256)
    except ValueError as e:  # QueryError included: refused before anything is read or spent
        await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name}: {e}")
    records = request.records_per_client

    def compute():  # over the dataset's batches (bounded memory)
        return dataset_vector(ds, request.dataset, plan, records)

    async def vector(params: DcaParams):
        return await computed(party, request.dca_job_id, request.dataset, compute, doing="evaluate the query over")

    accepted = AcceptedRound(request.dca_job_id, tuple(request.parties), check=lambda params: check_job(plan, params, spec.epsilon, spec.delta),
                             validate=VALIDATION, bounds=(float(records),))
    report = await contribute(party, context, accepted, vector)
    return contribution_pb2.ContributionReceipt(party=cfg.name, accepted_shares=report.accepted)


ROUNDS = {query_role.STATISTIC: contribute_query}
