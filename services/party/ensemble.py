"""The party as an HCB16 voter (mpdp.hamm2016.job.VoterRole): train h_i, vote on the public auxiliary points,
secret-share the votes to the compute nodes of the job's DCA vote sum (a secure sum; for method pate a Gaussian
DCA job, so this party's share of the noise is added before sharing), having spent (ε, δ) in the ledger first.

What leaves the party: additive shares of its vote vector (one per compute node, each uniformly random
alone) and a receipt without votes, counts or sizes.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import grpc

from mpdp.data.dataset import DoesNotFit, SchemaMismatch, load_dataset, require_schema
from mpdp.data.loaders import DatasetError
from mpdp.dca.params import DcaParams
from mpdp.hamm2016 import job as core
from mpdp.hamm2016.local import CLASSIFIERS
from mpdp.ledger import FAILED
from mpdp.messages import common_pb2, hamm2016_pb2 as pb, hamm2016_pb2_grpc as pb_grpc
from mpdp.contribution import check_members
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.common import errors, tracing
from mpdp_services.common.errors import shown
from mpdp_services.common.rpc import CHANNEL_OPTIONS, caller, roles_by_method
from mpdp_services.dca_client.client import fetch_job, submit_vector

if TYPE_CHECKING:
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
        if spec.dataset not in cfg.datasets:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name} has no dataset {shown(spec.dataset)} (configured: {sorted(cfg.datasets)})")
        try:
            require_schema(cfg.datasets[spec.dataset], spec.schema_sha256)
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
        vote_sum = shown(request.dca_job_id)
        # the vote job must be the secure sum Charlie announced for this ensemble, with this party on its roster
        try:
            ann = await fetch_job(cfg.curator.address, cfg.curator.name, tls, request.dca_job_id)
            params = DcaParams.from_spec(request.dca_job_id, ann.spec)
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                await errors.refuse(context, Problem.UNKNOWN_JOB, f"party {cfg.name}: the curator has no vote sum {vote_sum}")
            await errors.refuse(context, Problem.PEER_UNREACHABLE, f"party {cfg.name} could not fetch vote sum {vote_sum} from its curator ({e.code().name})")
        except ValueError as e:
            await errors.refuse(context, Problem.INVALID_JOB, f"vote sum {vote_sum}: {e}")
        if (params.seeded and not cfg.test_mode) or params.seeded != bool(spec.simulation_seed):
            await errors.refuse(context, Problem.INVALID_JOB, f"DCA job {vote_sum} carries a simulation seed the ensemble job does not (or is seeded outside test mode)")
        try:  # the vote job this party accepts: exactly the one the ensemble spec implies (pate: its noise, Δ₂, ε, δ)
            expected = core.vote_job(spec, request.dca_job_id, request.auxiliary_rows)
        except ValueError as e:
            await errors.refuse(context, Problem.INVALID_JOB, f"vote sum {vote_sum}: {e}")
        if not _same_noise(params, expected):
            await errors.refuse(context, Problem.INVALID_JOB, f"DCA job {vote_sum} is not the ensemble's vote sum (its noise, sensitivity or privacy parameters differ from the job's)")
        expected_d = expected.dimension
        if params.dimension != expected_d or cfg.name not in params.roster or set(params.roster) != set(spec.parties) or params.nodes != tuple(spec.compute_nodes):
            await errors.refuse(context, Problem.INVALID_JOB, f"DCA job {vote_sum} does not match the ensemble job (d = {params.dimension}, expected {expected_d}; roster and nodes must be the job's)")
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

        ds = cfg.datasets[spec.dataset]
        try:
            z = await asyncio.to_thread(compute)
        except DatasetError as e:
            log.error("ensemble job %s: dataset %s: %s", shown(request.job_id), spec.dataset, e)
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name} cannot read its dataset {shown(spec.dataset)}; see its log")
        except DoesNotFit as e:  # names the job's public parameter only; what was read stays in this party's log
            log.warning("ensemble job %s: dataset %s: %s", shown(request.job_id), spec.dataset, e.private)
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name}: {e}")
        except (ValueError, RuntimeError) as e:  # from training on the records: the detail stays in this party's log
            log.error("ensemble job %s: dataset %s: %s", shown(request.job_id), spec.dataset, e)
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name} could not train its classifier on dataset {shown(spec.dataset)}; see its log")
        # Spend ε before any share leaves, in one durable step (check and entry together, shared with every
        # other protocol of this party): a vote that may reach a node is counted even if the job later fails.
        await party.spend(context, core.ledger_entry(request.job_id, spec, request.dca_job_id, request.auxiliary_rows))
        try:
            report = await submit_vector(Endpoints(cfg.curator.address, cfg.curator.name, tls), tls, cfg.name, request.dca_job_id, z, announcement=ann)
        except grpc.aio.AioRpcError as e:
            await party.mark(PROTOCOL, request.job_id, FAILED)
            await errors.refuse(context, Problem.PEER_UNREACHABLE, f"party {cfg.name} could not submit its vote shares ({e.code().name})")
        except BaseException:
            await party.mark(PROTOCOL, request.job_id, FAILED)
            raise
        if report.rejected:
            await party.mark(PROTOCOL, request.job_id, FAILED)
            await errors.refuse(context, Problem.JOB_FAILED, f"party {cfg.name}'s vote shares were refused ({errors.problem_name(report.rejected[0].problem)})")
        log.info("ensemble job %s: voted on %d auxiliary points with %s (vote sum %s)", shown(request.job_id), request.auxiliary_rows, cfg.local_classifier, vote_sum)
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
            and params.clients == expected.clients and params.max_missing == expected.max_missing and params.sigma_client >= expected.sigma_client)
