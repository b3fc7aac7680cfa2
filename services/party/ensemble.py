"""The party as an HCB16 voter (mpdp.hamm2016.job.VoterRole): train h_i, vote on the public auxiliary points,
secret-share the votes to the compute nodes of the job's DCA vote sum (a secure sum; for method pate a Gaussian
DCA job, so this party's share of the noise is added before sharing), having spent (ε, δ) in the ledger first —
through the party's one contribution step (``services/party/contribute.py``).

What leaves the party: additive shares of its vote vector (one per compute node, each uniformly random
alone) and a receipt without votes, counts or sizes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import grpc

from mpdp import registry
from mpdp.contribution import AcceptedRound, check_members
from mpdp.data.dataset import SchemaMismatch, load_dataset, require_schema
from mpdp.dca.params import DcaParams
from mpdp.hamm2016 import job as core
from mpdp.hamm2016.local import CLASSIFIERS
from mpdp.messages import common_pb2, hamm2016_pb2 as pb, hamm2016_pb2_grpc as pb_grpc
from mpdp_services.common import errors, tracing
from mpdp_services.common.errors import shown
from mpdp_services.common.rpc import CHANNEL_OPTIONS, caller, roles_by_method
from mpdp_services.party.contribute import computed, contribute

if TYPE_CHECKING:
    from mpdp_services.party.flows import Flow, PartySite
    from mpdp_services.party.server import Party

log = logging.getLogger("mpdp.party.ensemble")

SERVICE = "mpdp.messages.EnsembleParty"
CURATOR_SERVICE = "mpdp.messages.EnsembleCurator"
ROLES = roles_by_method(SERVICE, {"Vote": ("curator",)})
PROTOCOL = "hamm2016"
Problem = common_pb2.Problem


class EnsembleVoter(pb_grpc.EnsemblePartyServicer):
    def __init__(self, party: "Party") -> None:
        self.party = party

    async def Vote(self, request: pb.VoteRequest, context) -> pb.VoteReceipt:
        party = self.party
        await party.ready(context)
        cfg = party.cfg
        job = shown(request.job_id)
        if caller(context).name != cfg.curator.name:
            await errors.refuse(context, Problem.WRONG_ROLE, f"only the curator of party {cfg.name} may ask for votes")
        spec = request.spec
        try:
            core.validate_spec(spec)
        except core.EnsembleJobError as e:
            await errors.refuse(context, Problem.INVALID_JOB, str(e))
        if cfg.name not in spec.parties:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name} is not a voter of job {job}")
        try:  # more voters mean less noise per vote: only the federation's members count
            check_members(list(spec.parties), cfg.members)
        except ValueError as e:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name}: {e}")
        if spec.simulation_seed and not cfg.test_mode:
            await errors.refuse(context, Problem.INVALID_JOB, "simulation_seed is refused outside test mode")
        ds = await party.dataset(context, spec.dataset)
        try:
            require_schema(ds, spec.schema_sha256)
        except SchemaMismatch as e:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name} refuses: dataset {shown(spec.dataset)}: {e}")
        if cfg.local_classifier not in CLASSIFIERS:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name} is configured with local_classifier {cfg.local_classifier!r}; use one of {sorted(CLASSIFIERS)}")
        with tracing.job_span(request.job_id, PROTOCOL, "party") as span:  # a child of the curator's span that asked
            async with party.claimed(context, PROTOCOL, request.job_id):
                await party.precheck(context, spec.epsilon, spec.delta)  # advisory, before the costly local fit
                receipt = await self._vote(party, request, context)
            span.done("VOTED")
            return receipt

    async def _vote(self, party: "Party", request: pb.VoteRequest, context) -> pb.VoteReceipt:
        cfg, spec = party.cfg, request.spec
        tls = cfg.tls.files()
        ds = cfg.datasets[spec.dataset]
        try:  # the vote job this party accepts: exactly the one the ensemble spec implies (pate: its noise, Δ₂, ε, δ)
            expected = core.vote_job(spec, request.dca_job_id, request.auxiliary_rows)
        except ValueError as e:
            await errors.refuse(context, Problem.INVALID_JOB, f"vote sum {shown(request.dca_job_id)}: {e}")

        def check(params: DcaParams) -> None:
            if not _same_noise(params, expected):
                raise ValueError("it is not the ensemble's vote sum (its noise, sensitivity or privacy parameters differ from the job's)")
            if params.dimension != expected.dimension:
                raise ValueError(f"it sums {params.dimension} values, the ensemble's votes are {expected.dimension}")
            if params.vote_classes != expected.vote_classes:
                raise ValueError("its vote validation does not hold one vote per point over the ensemble's classes")

        async def votes(params: DcaParams):
            try:
                chunks = [c async for c in self._auxiliary(cfg, tls, request.job_id)]
                X_aux = core.assemble_auxiliary(chunks, request)
            except grpc.aio.AioRpcError as e:
                await errors.refuse(context, Problem.PEER_UNREACHABLE, f"party {cfg.name} could not fetch the auxiliary data ({e.code().name})")
            except core.EnsembleJobError as e:
                await errors.refuse(context, Problem.MALFORMED, str(e))

            def compute():
                data = load_dataset(ds, name=spec.dataset)
                return core.VoterRole(cfg.name, cfg.local_classifier).vote(spec, data.X, data.y, X_aux)

            return await computed(party, request.job_id, spec.dataset, compute, doing="train its classifier on")

        # the vote sum Charlie announced for this ensemble: its voters, nodes, noise and seeding are the job's; the
        # ensemble's ε is spent (core.ledger_entry) in one durable step before any vote share leaves, and a vote that
        # may reach a node is counted even if the job later fails
        accepted = AcceptedRound(request.dca_job_id, tuple(spec.parties), nodes=tuple(spec.compute_nodes), secure_sum=expected.secure_sum,
                                 seeded=bool(spec.simulation_seed), check=check, validate=expected.validate, bounds=expected.clip_bounds,
                                 charge=lambda params: (core.ledger_entry(request.job_id, spec, request.dca_job_id, request.auxiliary_rows),))
        report = await contribute(party, context, accepted, votes, what="vote shares")
        log.info("ensemble job %s: voted on %d auxiliary points with %s (vote sum %s)", shown(request.job_id), request.auxiliary_rows, cfg.local_classifier,
                 shown(request.dca_job_id))
        return pb.VoteReceipt(job_id=request.job_id, party=cfg.name, accepted_shares=report.accepted, local_model=cfg.local_classifier)

    async def _auxiliary(self, cfg, tls, job_id: str):
        opts = CHANNEL_OPTIONS + [("grpc.ssl_target_name_override", cfg.curator.name)]
        async with grpc.aio.secure_channel(cfg.curator.address, tls.channel_credentials(), options=opts) as ch:
            async for c in pb_grpc.EnsembleCuratorStub(ch).GetAuxiliary(common_pb2.JobRef(job_id=job_id), timeout=120):
                yield c


def _same_noise(params: DcaParams, expected: DcaParams) -> bool:
    """The announced vote sum adds the noise the ensemble job promises (none for soft/vote, pate's σ otherwise)."""
    return (params.secure_sum == expected.secure_sum and params.mode == expected.mode and params.noise == expected.noise
            and params.epsilon == expected.epsilon and params.delta == expected.delta and params.sensitivity == expected.sensitivity
            and params.clients == expected.clients and params.max_missing == expected.max_missing and params.sigma_client >= expected.sigma_client
            and params.sigma_node >= expected.sigma_node)


# -- its place at the party (mpdp.registry: Hooks.party) -------------------------------------------------------------
def flow(site: "PartySite", protocol: registry.Protocol) -> "Flow":
    from mpdp_services.party.flows import Flow

    voter = EnsembleVoter(site.party)
    return Flow(SERVICE, lambda server: pb_grpc.add_EnsemblePartyServicer_to_server(voter, server), ROLES)
