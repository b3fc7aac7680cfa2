"""Charlie for HCB16 ensembles without a trusted collector (mpdp.hamm2016.job; docs/protocols/hamm2016.md).

:meth:`EnsembleCurator.submit` (the job host's SubmitJob) checks the job and
starts it as the curator's own task, which runs it to the end: publish the auxiliary features (GetAuxiliary, voters only), create the
DCA job for the votes (a secure sum; for method pate a Gaussian DCA job whose noise the voters add), ask every voter to vote (EnsembleParty.Vote), close submissions once all
have answered, take the summed counts from the DCA aggregator in this process, train and perturb, publish.
The summed counts never leave this process and are dropped as soon as w_p exists; releases persist in
``state_dir/ensembles`` (a restart keeps them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import numpy as np

from mpdp import registry
from mpdp.data.loaders import DatasetError, load
from mpdp.hamm2016 import job as core
from mpdp.messages import common_pb2, hamm2016_pb2 as pb, hamm2016_pb2_grpc as pb_grpc
from mpdp.protocol import ProtocolError, Publish, Send
from mpdp_services.common import calls, errors, jobs, tracing
from mpdp_services.common.config import DatasetConfig
from mpdp_services.common.rpc import PeerChannels, caller, roles_by_method
from mpdp_services.common.store import MessageStore
from mpdp_services.curator.dca import DcaCurator
from mpdp_services.curator import turns
from mpdp_services.curator.links import require_linked
from mpdp_services.curator.admission import Admission

if TYPE_CHECKING:
    from mpdp_services.curator.hosting import CuratorSite, Hosting

log = logging.getLogger("mpdp.curator.ensemble")

SERVICE = "mpdp.messages.EnsembleCurator"
PARTY_SERVICE = "mpdp.messages.EnsembleParty"
ROLES = roles_by_method(SERVICE, {"GetAuxiliary": ("party",)})


VOTING = "VOTING"


@dataclass
class EnsembleJob(jobs.TaskJob):
    """A running ensemble: VOTING → PUBLISHED or FAILED, with what the voters fetch while it votes."""

    spec: pb.EnsembleJobSpec = field(default_factory=pb.EnsembleJobSpec)
    chunks: list[pb.AuxiliaryChunk] = field(default_factory=list)


class EnsembleCurator(pb_grpc.EnsembleCuratorServicer):
    def __init__(self, state_dir: Path, channels: PeerChannels, addresses: dict[str, str], dca: DcaCurator, auxiliary: dict[str, DatasetConfig], test_mode: bool,
                 *, max_live: int = jobs.MAX_LIVE, admission: Admission | None = None) -> None:
        self.store = MessageStore(Path(state_dir) / "ensembles", pb.EnsembleRelease)
        self.channels = channels
        self.addresses = addresses  # the parties registered with the curator
        self.dca = dca
        self.auxiliary = auxiliary
        self.test_mode = test_mode
        # running jobs (spec, auxiliary chunks, stage); a finished job's entry stays for the retention, then its record
        self.running: jobs.JobTable[EnsembleJob] = jobs.JobTable("hamm2016", jobs.task_outcome, max_live=max_live, admission=admission)
        self.tasks: jobs.TaskJobs[pb.EnsembleRelease] = jobs.TaskJobs(self.running, self.store.folder)

    async def cancel(self, job_id: str) -> bool:
        """The operator's `mpdp jobs cancel`: stop the job; its vote sum is aborted at the nodes, nothing is published."""
        return await self.tasks.cancel(job_id)

    async def submit(self, request: pb.EnsembleJobSpec) -> str:
        """Check the job, admit it and start it as the curator's own task (or queue it until it has an admission slot,
        holding its auxiliary features meanwhile); its id at once (errors.Refused otherwise)."""
        try:
            core.validate_spec(request)
        except core.EnsembleJobError as e:
            raise errors.Refused(common_pb2.INVALID_JOB, str(e)) from None
        if request.simulation_seed and not self.test_mode:
            raise errors.Refused(common_pb2.INVALID_JOB, "simulation_seed is refused outside test mode")
        unknown = [p for p in request.parties if p not in self.addresses]
        if unknown:
            raise errors.Refused(common_pb2.INVALID_JOB, f"parties {', '.join(errors.shown(p) for p in unknown[:4])} are not registered with the curator")
        aux_cfg = self.auxiliary.get(request.auxiliary)
        if aux_cfg is None:
            raise errors.Refused(common_pb2.INVALID_JOB, f"the curator has no auxiliary dataset {errors.shown(request.auxiliary)} ({len(self.auxiliary)} configured); "
                                 "add it under `auxiliary:` in the curator config")
        try:
            X_aux = await asyncio.to_thread(_load_auxiliary, aux_cfg)
        except core.EnsembleJobError as e:
            raise errors.Refused(common_pb2.INVALID_JOB, f"auxiliary dataset {errors.shown(request.auxiliary)}: {e}") from None
        except DatasetError as e:  # names the curator's file: logged here, never sent
            log.warning("auxiliary dataset %s cannot be loaded: %s", errors.shown(request.auxiliary), e)
            raise errors.Refused(common_pb2.INVALID_JOB, f"auxiliary dataset {errors.shown(request.auxiliary)} cannot be loaded (see the curator's log)") from None
        job_id = registry.new_job_id("hamm2016")
        try:
            if request.method == core.PATE:  # the queried points are the job's auxiliary set (a public choice)
                X_aux = core.pate_queries(request, X_aux)
            core.check_size(request, X_aux)
            vote_params = core.vote_job(request, "pending", X_aux.shape[0])
            if request.method != core.PATE:
                core.ensemble_params(request, X_aux.shape[0], len(request.parties))
        except ProtocolError as e:  # InvalidJob from the DCA parameters
            raise errors.Refused(common_pb2.INVALID_JOB, e.detail) from None
        except ValueError as e:  # our own validation messages (core.EnsembleJobError and the size checks)
            raise errors.Refused(common_pb2.INVALID_JOB, str(e) if isinstance(e, core.EnsembleJobError) else "the job's parameters are out of range") from None
        job = EnsembleJob(VOTING, spec=request, chunks=core.auxiliary_chunks(X_aux))
        try:  # runs at once, or waits QUEUED for an admission slot (no voter hears of it, GetAuxiliary refuses it meanwhile)
            self.tasks.submit(job_id, job, float(request.deadline_seconds or core.DEFAULT_DEADLINE) * 2 + 60.0,
                              lambda: self._train(job_id, request, vote_params, X_aux), {v: self.addresses[v] for v in request.parties})
        except ProtocolError as e:
            raise errors.Refused(e.problem, e.detail) from None
        return job_id

    async def _train(self, job_id: str, request: pb.EnsembleJobSpec, vote_params, X_aux: np.ndarray) -> pb.EnsembleRelease:
        with tracing.job_span(job_id, "hamm2016", "curator") as span:  # its vote-sum DCA job and the parties' votes are children
            dca_job, release = "", None
            try:
                await require_linked(self.channels, request.parties, tolerated=request.max_missing)  # before any voter is asked
                with calls.sub_job():  # the vote sum counts against the admission bounds but is never refused by them
                    create = asyncio.ensure_future(self.dca.create(vote_params.to_spec()))
                try:
                    dca_job = await asyncio.shield(create)
                except asyncio.CancelledError:  # stopped while the vote sum was being announced: it exists, and is aborted below
                    with contextlib.suppress(errors.Refused):
                        dca_job = await create
                    raise
                log.info("ensemble job %s (%s, ε=%g): %d voters, N=%d auxiliary points, d=%d, votes summed by DCA job %s",
                         job_id, request.method, request.epsilon, len(request.parties), X_aux.shape[0], X_aux.shape[1], dca_job)
                release = await self._run(job_id, dca_job, request, X_aux)
            except errors.Refused as e:
                log.warning("ensemble job %s failed: %s", job_id, e.detail)
                raise
            finally:
                held = self.running.get(job_id)
                if held is not None:
                    held.chunks = []  # the voters have what they need; the retained entry keeps no auxiliary data
                if dca_job:
                    if release is None:  # failed, cancelled or crashed: the nodes must drop the vote shares
                        await asyncio.shield(self.dca.abort(dca_job, f"ensemble job {job_id} ended without a release"))
                    self.dca.forget(dca_job)
            self.store.put(job_id, release)
            log.info("ensemble job %s published over %d voters (Δ₂=%.4g)", job_id, release.parties_included, release.sensitivity)
            span.done("PUBLISHED")
            return release

    async def _run(self, job_id: str, dca_job: str, spec: pb.EnsembleJobSpec, X_aux: np.ndarray) -> pb.EnsembleRelease:
        """Move Charlie's messages (core.CuratorRole decides): VoteRequests out, answers in, the vote sum in."""
        role = core.CuratorRole(job_id, dca_job, spec, X_aux)
        timeout = spec.deadline_seconds or core.DEFAULT_DEADLINE
        t0 = time.perf_counter()

        async def ask(send: Send) -> list:
            party = send.to.name
            try:
                answer = await self.channels.call(self.addresses[party], party, PARTY_SERVICE, "Vote", send.message, pb.VoteReceipt, timeout=timeout)
            except grpc.aio.AioRpcError as e:
                answer = f"{e.code().name}: {e.details()}"
            if role.state != core.ASK_VOTES:
                return []  # the job already failed: a late answer changes nothing
            if isinstance(answer, str):
                return role.vote_failed(party, answer)
            try:
                return role.receipt(party, answer)
            except ProtocolError as e:
                return role.vote_failed(party, errors.details(e))

        async with turns.turn(spec.parties):  # the voters of overlapping jobs decide their spends in one order
            asks = [asyncio.ensure_future(ask(s)) for s in role.start()]
            try:
                for done in asyncio.as_completed(asks):
                    abort = next((o for o in await done if isinstance(o, core.AbortVoteSum)), None)
                    if abort is not None:  # more than T voters failed: stop at once, the others need not vote
                        await self.dca.abort(dca_job, abort.detail)
                        budget = role.error is not None and role.error.problem == common_pb2.BUDGET_EXCEEDED
                        raise errors.Refused(common_pb2.BUDGET_EXCEEDED if budget else common_pb2.JOB_FAILED, abort.detail)
            finally:
                for a in asks:
                    a.cancel()
        if role.failures:
            log.warning("ensemble job %s: %d voter(s) missing (T = %d allows it): %s", job_id, len(role.failures), spec.max_missing, role.failures)
        t1 = time.perf_counter()
        await self.dca.close(dca_job)  # CloseVoteSum: every voter answered, no need to wait for the deadline
        try:
            vote_sum = await self.dca.result(dca_job)
        except errors.Refused as e:
            raise errors.Refused(common_pb2.JOB_FAILED, f"job {job_id}: the vote sum failed: {e.detail}") from None
        t2 = time.perf_counter()
        try:
            outs = await asyncio.to_thread(role.vote_sum, vote_sum)
        finally:
            del vote_sum
        if role.state != core.RELEASED:
            raise errors.Refused(common_pb2.JOB_FAILED, str(role.error))
        release = next(o.release for o in outs if isinstance(o, Publish))
        # Published: the voters' and the nodes' times. Not the fit's: its Newton steps depend on the exact counts.
        release.stage_seconds.update({"votes": t1 - t0, "vote_sum": t2 - t1})
        log.info("ensemble job %s: global fit and noise took %.3f s", job_id, time.perf_counter() - t2)
        return release

    async def GetAuxiliary(self, request: common_pb2.JobRef, context):
        if not jobs.valid_id(request.job_id):
            await errors.refuse(context, common_pb2.UNKNOWN_JOB, "no such job (not a job id)")
        entry = self.running.get(request.job_id)
        if entry is None or entry.state != VOTING:
            await errors.refuse(context, common_pb2.UNKNOWN_JOB, f"no running ensemble job {errors.shown(request.job_id)}")
        spec, chunks = entry.spec, entry.chunks
        who = caller(context).name
        if who not in spec.parties:
            await errors.refuse(context, common_pb2.WRONG_ROLE, f"the caller is not a voter of job {request.job_id}")
        for c in chunks:
            yield c


def _load_auxiliary(cfg: DatasetConfig) -> np.ndarray:
    """The auxiliary features (labels, if the file has any, are ignored), rows clipped onto ‖x‖ ≤ 1 (public)."""
    X, _ = load(cfg.path, cfg.format, cfg.n_features, cfg.label_column)
    from mpdp.learn.logreg import clip_rows

    return core.check_auxiliary(clip_rows(np.asarray(X, dtype=np.float64)))  # the one row map, as in-process (bit for bit)


# -- its place at the curator (mpdp.registry: Hooks.curator) ---------------------------------------------------------
def hosting(site: "CuratorSite", protocol: registry.Protocol) -> "Hosting":
    from mpdp_services.curator import catalog, dca
    from mpdp_services.curator.hosting import Hosting, Servicer
    from mpdp_services.curator.local import _recovered

    cfg, curator = site.cfg, site.curator
    ensemble = EnsembleCurator(site.state_dir, curator.channels, curator.addresses, dca.of(site), dict(cfg.auxiliary), cfg.test_mode,
                               max_live=site.max_live, admission=curator.admission)
    site.on_restart(protocol.name, lambda: _recovered(ensemble.tasks))
    source = catalog.Source(protocol.name, ensemble.running, lambda j: ensemble.store.get(j) is not None,
                            lambda: [*catalog.files(ensemble.store.folder, ".binpb", "PUBLISHED"), *ensemble.tasks.failures()], catalog.task_live,
                            failure=ensemble.tasks.failure)
    servicer = Servicer(SERVICE, lambda server: pb_grpc.add_EnsembleCuratorServicer_to_server(ensemble, server), ROLES)
    return Hosting(ensemble.submit, ensemble.store.get, ensemble.cancel, source, (servicer,), store=ensemble.store)
