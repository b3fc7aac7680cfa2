"""The party as an HCB16 voter (mpdp.hamm2016.job.VoterRole): train h_i, vote on the public auxiliary points,
secret-share the votes to the compute nodes of the job's secure-sum DCA job, record the release in the ledger.

What leaves the party: additive shares of its vote vector (one per compute node, each uniformly random
alone) and a receipt without votes, counts or sizes.
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from mpdp.data.loaders import DatasetError, load
from mpdp.dca.params import DcaParams
from mpdp.hamm2016 import job as core
from mpdp.hamm2016.local import CLASSIFIERS
from mpdp.ledger import BudgetExceeded
from mpdp.messages import common_pb2, hamm2016_pb2 as pb, hamm2016_pb2_grpc as pb_grpc
from services.client import Endpoints
from services.common.rpc import CHANNEL_OPTIONS, caller, roles_by_method
from services.dca_client import _fetch_job, submit_vector

log = logging.getLogger("mpdp.party.ensemble")

SERVICE = "mpdp.messages.EnsembleParty"
CURATOR_SERVICE = "mpdp.messages.EnsembleCurator"
ROLES = roles_by_method(SERVICE, {"Vote": ("curator",)})


class EnsembleVoter(pb_grpc.EnsemblePartyServicer):
    def __init__(self, holder: dict) -> None:
        self._holder = holder
        self._busy: set[str] = set()
        self._ledger_lock = asyncio.Lock()

    async def Vote(self, request: pb.VoteRequest, context) -> pb.VoteReceipt:
        party = self._holder.get("party")
        if party is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "party is starting up")
        cfg = party.cfg
        if caller(context).name != cfg.curator.name:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"WRONG_ROLE: only curator {cfg.curator.name} may ask for votes")
        spec = request.spec
        try:
            core.validate_spec(spec)
        except core.EnsembleJobError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"INVALID_JOB: {e}")
        if cfg.name not in spec.parties:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"INVALID_JOB: party {cfg.name} is not a voter of job {request.job_id}")
        if request.job_id in self._busy or any(e.get("protocol") == "hamm2016" and e.get("job_id") == request.job_id for e in party.ledger.entries):
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, f"REPLAY: party {cfg.name} already voted in job {request.job_id}")
        if spec.simulation_seed and not cfg.test_mode:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_JOB: simulation_seed is refused outside test mode")
        ds = cfg.datasets.get(spec.dataset)
        if ds is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"INVALID_JOB: party {cfg.name} has no dataset {spec.dataset!r} (configured: {sorted(cfg.datasets)})")
        if cfg.local_classifier not in CLASSIFIERS:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"INVALID_JOB: party {cfg.name} is configured with local_classifier {cfg.local_classifier!r}; use one of {sorted(CLASSIFIERS)}")
        try:
            party.ledger.check(spec.epsilon, 0.0)
        except BudgetExceeded as e:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"BUDGET_EXCEEDED: party {cfg.name}: {e}")
        self._busy.add(request.job_id)
        try:
            return await self._vote(party, request, context)
        finally:
            self._busy.discard(request.job_id)

    async def _vote(self, party, request: pb.VoteRequest, context) -> pb.VoteReceipt:
        cfg, spec = party.cfg, request.spec
        tls = cfg.tls.files()
        # the vote job must be the secure sum Charlie announced for this ensemble, with this party on its roster
        try:
            ann = await _fetch_job(cfg.curator.address, cfg.curator.name, tls, request.dca_job_id)
            params = DcaParams.from_spec(request.dca_job_id, ann.spec)
        except grpc.aio.AioRpcError as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"UNKNOWN_JOB: vote sum {request.dca_job_id}: {e.details()}")
        except ValueError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"INVALID_JOB: vote sum {request.dca_job_id}: {e}")
        if not params.secure_sum or (params.seeded and not cfg.test_mode) or params.seeded != bool(spec.simulation_seed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"INVALID_JOB: DCA job {request.dca_job_id} is not the ensemble's secure vote sum (or carries a simulation seed the job does not)")
        expected_d = core.vote_dimension(request.auxiliary_rows, len(spec.classes))
        if params.dimension != expected_d or cfg.name not in params.roster or set(params.roster) != set(spec.parties) or params.nodes != tuple(spec.compute_nodes):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"INVALID_JOB: DCA job {request.dca_job_id} does not match the ensemble job (d = {params.dimension}, expected {expected_d}; roster and nodes must be the job's)")
        try:
            chunks = [c async for c in self._auxiliary(cfg, tls, request.job_id)]
            X_aux = core.assemble_auxiliary(chunks, request)
        except grpc.aio.AioRpcError as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"PEER_UNREACHABLE: party {cfg.name} could not fetch the auxiliary data: {e.details()}")
        except core.EnsembleJobError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"MALFORMED: {e}")

        def compute():
            X, y = load(ds.path, ds.format, ds.n_features, ds.label_column)
            return core.VoterRole(cfg.name, cfg.local_classifier).vote(spec, X, y, X_aux)

        ds = cfg.datasets[spec.dataset]
        try:
            z = await asyncio.to_thread(compute)
        except (DatasetError, ValueError, RuntimeError) as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"INVALID_JOB: party {cfg.name}: {e}")
        # Spend ε before any share leaves: a vote that may reach a node is counted even if the job later fails,
        # and the check and the entry are one step, so concurrent jobs cannot overspend the budget.
        async with self._ledger_lock:
            try:
                party.ledger.check(spec.epsilon, 0.0)
            except BudgetExceeded as e:
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"BUDGET_EXCEEDED: party {cfg.name}: {e}")
            party.record(core.ledger_entry(request.job_id, spec, request.dca_job_id, request.auxiliary_rows))
        try:
            report = await submit_vector(Endpoints(cfg.curator.address, cfg.curator.name, tls), tls, cfg.name, request.dca_job_id, z)
        except grpc.aio.AioRpcError as e:
            await context.abort(grpc.StatusCode.ABORTED, f"PEER_UNREACHABLE: party {cfg.name} could not submit its vote shares: {e.details()}")
        if report.rejected:
            await context.abort(grpc.StatusCode.ABORTED, f"JOB_FAILED: party {cfg.name}'s vote shares were refused: {report.rejected[0].detail}")
        log.info("ensemble job %s: voted on %d auxiliary points with %s (vote sum %s)", request.job_id, request.auxiliary_rows, cfg.local_classifier, request.dca_job_id)
        return pb.VoteReceipt(job_id=request.job_id, party=cfg.name, accepted_shares=report.accepted, local_model=cfg.local_classifier)

    async def _auxiliary(self, cfg, tls, job_id: str):
        opts = CHANNEL_OPTIONS + [("grpc.ssl_target_name_override", cfg.curator.name)]
        async with grpc.aio.secure_channel(cfg.curator.address, tls.channel_credentials(), options=opts) as ch:
            async for c in pb_grpc.EnsembleCuratorStub(ch).GetAuxiliary(common_pb2.JobRef(job_id=job_id), timeout=120):
                yield c
