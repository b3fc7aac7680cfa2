"""The party's local DP release (LMGC): trains and releases a DP model on its own records, spending ε first; the
release (or a refusal from the training) leaves no earlier than ``local_work_seconds`` after the training began
(:class:`~mpdp_services.party.local_work.LocalWork`), so its latency does not time the party's row count.

:class:`mpdp.local_release.LocalReleaseParty` decides: its Spend is spent before the training, its release is the
answer to the curator's call; this servicer checks the caller, keeps the job table and runs the training."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mpdp import registry
from mpdp.data.dataset import SchemaMismatch, load_dataset, require_schema
from mpdp.data.loaders import DatasetError
from mpdp.ledger import FAILED, RELEASED
from mpdp.local_release import PROTOCOL, LocalReleaseParty, ReleaseError, party_release
from mpdp.math.drbg import Drbg
from mpdp.messages import common_pb2, local_release_pb2, local_release_pb2_grpc
from mpdp.protocol import ProtocolError, Reply, Spend
from mpdp_services.common import config as cfgmod, errors, jobs, tracing
from mpdp_services.common.errors import shown
from mpdp_services.common.rpc import caller, roles_by_method
from mpdp_services.party.local_work import LocalWork

if TYPE_CHECKING:
    from mpdp_services.party.flows import Flow, PartySite
    from mpdp_services.party.server import Party

log = logging.getLogger("mpdp.party")
Problem = common_pb2.Problem

SERVICE = "mpdp.messages.LocalModelParty"
ROLES = roles_by_method(SERVICE, {"TrainLocalModel": ("curator",)})


TRAINING = "TRAINING"


@dataclass
class LocalJob:
    """One release at this party, while its request runs and for the retention after: no values."""

    state: str = TRAINING  # TRAINING → RELEASED | FAILED
    problem: int = Problem.PROBLEM_UNSPECIFIED


def _outcome(job: LocalJob) -> tuple[str, bool, int]:
    return job.state, job.state != TRAINING, job.problem


class LocalParty(local_release_pb2_grpc.LocalModelPartyServicer):
    """Trains and releases a DP model on this party's own records (LMGC), spending its ε first.

    The job lives as long as its request, at most ``job_deadline_seconds`` (then it fails, keeping its charge).
    """

    def __init__(self, party: "Party") -> None:
        self.party = party
        cfg = party.cfg
        self.jobs: jobs.JobTable[LocalJob] = jobs.JobTable(PROTOCOL, _outcome, max_live=cfg.max_live_jobs, retention=cfg.job_retention_seconds, max_retained=cfg.max_retained_jobs)

    async def TrainLocalModel(self, request: local_release_pb2.LocalModelRequest, context) -> local_release_pb2.LocalModelRelease:
        party = self.party
        await party.ready(context)
        cfg = party.cfg
        if caller(context).name != cfg.curator.name:
            await errors.refuse(context, Problem.WRONG_ROLE, f"only the curator of party {cfg.name} may request releases")
        if request.spec.simulation_seed and not cfg.test_mode:
            await errors.refuse(context, Problem.INVALID_JOB, "simulation_seed is refused outside test mode")
        role = LocalReleaseParty(cfg.name, request)
        try:
            charge = next(o for o in role.requested() if isinstance(o, Spend))
        except ProtocolError as e:
            await errors.refuse(context, e.problem, f"party {cfg.name}: {e.detail}")
        ds = await party.dataset(context, request.spec.dataset)
        try:
            require_schema(ds, request.spec.schema_sha256)
        except SchemaMismatch as e:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name} refuses: dataset {shown(request.spec.dataset)}: {e}")
        if request.job_id in self.jobs:
            await errors.refuse(context, Problem.REPLAY, f"party {cfg.name}: job {shown(request.job_id)} was already requested")
        job = LocalJob()
        try:  # admitted (a job id, at most max_live_jobs at once) before anything is spent
            self.jobs.admit(request.job_id, job, cfg.job_deadline_seconds)
        except ProtocolError as e:
            await errors.abort(context, e)
        try:
            with tracing.job_span(request.job_id, PROTOCOL, "party") as span:  # a child of the curator's span that asked
                try:
                    async with party.claimed(context, PROTOCOL, request.job_id):
                        for entry in charge.entries:  # before training: the release is the first data-dependent message
                            await party.spend(context, entry)
                        return await self._release(party, role, ds, job, context)
                finally:
                    span.done(job.state if job.state != TRAINING else "FAILED", errors.problem_name(job.problem) if job.problem else "")
        finally:
            if job.state == TRAINING:  # refused, cancelled or out of time
                job.state, job.problem = "FAILED", job.problem or Problem.JOB_FAILED
            self.jobs.finish(request.job_id, job.state, job.problem)
            self.jobs.sweep()
            log.info("party %s: %s jobs in memory: %d running, %d held", cfg.name, PROTOCOL, self.jobs.live_count(), len(self.jobs.held()))

    async def _release(self, party: "Party", role: LocalReleaseParty, ds: cfgmod.DatasetConfig, job: LocalJob, context) -> local_release_pb2.LocalModelRelease:
        cfg, request = party.cfg, role.request
        rng = Drbg.from_seed(request.spec.simulation_seed).child(f"party/{cfg.name}") if request.spec.simulation_seed else party.rng.child(f"local/{request.job_id}")

        def train():
            data = load_dataset(ds, name=request.spec.dataset)
            return party_release(cfg.name, request, data.X, data.y, rng)

        work = LocalWork(cfg.local_work_seconds, shown(request.job_id), "the local release's training")  # before the records are read
        try:
            async with asyncio.timeout(cfg.job_deadline_seconds):  # the job's deadline, counted from the spend
                made, details = await asyncio.to_thread(train)
            release = next(o.message for o in role.trained(made) if isinstance(o, Reply))
        except BaseException as e:  # any failure after spending keeps the charge, marked failed
            role.fail(Problem.JOB_FAILED, "the release was not made")
            job.state, job.problem = "FAILED", Problem.PEER_UNREACHABLE if isinstance(e, TimeoutError) else Problem.JOB_FAILED
            await party.mark(PROTOCOL, request.job_id, FAILED)
            if isinstance(e, Exception):  # a refusal that read the records leaves at the pad's deadline, as the release would
                await work.done()
            if isinstance(e, TimeoutError):
                await errors.refuse(context, Problem.JOB_FAILED, f"party {cfg.name}: job {request.job_id} did not end by its deadline")
            if not isinstance(e, Exception):
                raise
            if isinstance(e, DatasetError):
                log.error("local job %s: dataset %s: %s", shown(request.job_id), request.spec.dataset, e)
                await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name} cannot read its dataset {shown(request.spec.dataset)}; see its log")
            if isinstance(e, ReleaseError):  # the spec's own fields and the guarantee it asks for
                await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name} cannot release: {e}")
            if isinstance(e, ProtocolError):  # the release it made is not one the job may publish
                log.error("local job %s: %s", shown(request.job_id), e.detail)
                await errors.refuse(context, Problem.INTERNAL, f"party {cfg.name} could not make a publishable release; see its log")
            if isinstance(e, (ValueError, RuntimeError)):  # from training on the records: the detail stays in this party's log
                log.error("local job %s: dataset %s: %s", shown(request.job_id), request.spec.dataset, e)
                await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name} could not train on dataset {shown(request.spec.dataset)}; see its log")
            log.exception("local job %s failed", shown(request.job_id))
            await errors.refuse(context, Problem.INTERNAL, f"party {cfg.name} could not train; see its log")
        await work.done()  # the release leaves no earlier than local_work_seconds after the records were first read
        job.state = "RELEASED"
        await party.mark(PROTOCOL, request.job_id, RELEASED, details)
        log.info("local job %s: released %s (ε=%g)", shown(request.job_id), request.spec.model, request.spec.epsilon)
        return release


# -- its place at the party (mpdp.registry: Hooks.party) -------------------------------------------------------------
def flow(site: "PartySite", protocol: registry.Protocol) -> "Flow":
    from mpdp_services.party.flows import Flow

    servicer = LocalParty(site.party)
    return Flow(SERVICE, lambda server: local_release_pb2_grpc.add_LocalModelPartyServicer_to_server(servicer, server), ROLES)
