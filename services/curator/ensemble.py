"""Charlie for HCB16 ensembles without a trusted collector (mpdp.hamm2016.job; docs/protocols/hamm2016.md).

TrainEnsemble runs one job to the end: publish the auxiliary features (GetAuxiliary, voters only), create the
DCA job for the votes (a secure sum; for method pate a Gaussian DCA job whose noise the voters add), ask every voter to vote (EnsembleParty.Vote), close submissions once all
have answered, take the summed counts from the DCA aggregator in this process, train and perturb, publish.
The summed counts never leave this process and are dropped as soon as w_p exists; releases persist in
``state_dir/ensembles`` (a restart keeps them).
"""

from __future__ import annotations

import asyncio
import logging
import secrets as pysecrets
import time
from pathlib import Path

import grpc
import numpy as np

from mpdp.data.loaders import DatasetError, load
from mpdp.hamm2016 import job as core
from mpdp.messages import common_pb2, hamm2016_pb2 as pb, hamm2016_pb2_grpc as pb_grpc
from mpdp.protocol import ProtocolError, Publish, Send
from mpdp_services.common import calls, errors, jobs, tracing
from mpdp_services.common.config import DatasetConfig
from mpdp_services.common.rpc import PeerChannels, caller, roles_by_method
from mpdp_services.common.store import MessageStore
from mpdp_services.curator.dca import DcaCurator, DcaJobRefused
from mpdp_services.curator.admission import Admission

log = logging.getLogger("mpdp.curator.ensemble")

SERVICE = "mpdp.messages.EnsembleCurator"
PARTY_SERVICE = "mpdp.messages.EnsembleParty"
ROLES = roles_by_method(SERVICE, {"TrainEnsemble": ("operator",), "GetEnsemble": ("operator", "party"), "GetAuxiliary": ("party",)})


class EnsembleCurator(pb_grpc.EnsembleCuratorServicer):
    def __init__(self, state_dir: Path, channels: PeerChannels, addresses: dict[str, str], dca: DcaCurator, auxiliary: dict[str, DatasetConfig], test_mode: bool,
                 *, max_live: int = jobs.MAX_LIVE, admission: Admission | None = None) -> None:
        self.store = MessageStore(Path(state_dir) / "ensembles", pb.EnsembleRelease)
        self.channels = channels
        self.addresses = addresses  # the parties registered with the curator
        self.dca = dca
        self.auxiliary = auxiliary
        self.test_mode = test_mode
        # running jobs' (spec, auxiliary chunks); a finished job leaves at once, its value-free record stays
        self.running: jobs.JobTable[tuple[pb.EnsembleJobSpec, list[pb.AuxiliaryChunk]]] = jobs.JobTable("hamm2016", max_live=max_live, admission=admission)
        self.calls = jobs.CallJobs()  # running jobs' handlers (`mpdp jobs cancel`)

    async def cancel(self, job_id: str) -> bool:
        """The operator's `mpdp jobs cancel`: stop the job; its vote sum is aborted at the nodes, nothing is published."""
        return self.calls.cancel(job_id)

    async def TrainEnsemble(self, request: pb.EnsembleJobSpec, context) -> pb.EnsembleRelease:
        try:
            core.validate_spec(request)
        except core.EnsembleJobError as e:
            await errors.refuse(context, common_pb2.INVALID_JOB, str(e))
        if request.simulation_seed and not self.test_mode:
            await errors.refuse(context, common_pb2.INVALID_JOB, "simulation_seed is refused outside test mode")
        unknown = [p for p in request.parties if p not in self.addresses]
        if unknown:
            await errors.refuse(context, common_pb2.INVALID_JOB, f"parties {', '.join(errors.shown(p) for p in unknown[:4])} are not registered with the curator")
        aux_cfg = self.auxiliary.get(request.auxiliary)
        if aux_cfg is None:
            await errors.refuse(context, common_pb2.INVALID_JOB, f"the curator has no auxiliary dataset {errors.shown(request.auxiliary)} ({len(self.auxiliary)} configured); "
                                "add it under `auxiliary:` in the curator config")
        try:
            X_aux = await asyncio.to_thread(_load_auxiliary, aux_cfg)
        except core.EnsembleJobError as e:
            await errors.refuse(context, common_pb2.INVALID_JOB, f"auxiliary dataset {errors.shown(request.auxiliary)}: {e}")
        except DatasetError as e:  # names the curator's file: logged here, never sent
            log.warning("auxiliary dataset %s cannot be loaded: %s", errors.shown(request.auxiliary), e)
            await errors.refuse(context, common_pb2.INVALID_JOB, f"auxiliary dataset {errors.shown(request.auxiliary)} cannot be loaded (see the curator's log)")
        job_id = "hm-" + pysecrets.token_hex(6)
        try:
            if request.method == core.PATE:  # the queried points are the job's auxiliary set (a public choice)
                X_aux = core.pate_queries(request, X_aux)
            core.check_size(request, X_aux)
            vote_params = core.vote_job(request, "pending", X_aux.shape[0])
            if request.method != core.PATE:
                core.ensemble_params(request, X_aux.shape[0], len(request.parties))
        except ProtocolError as e:  # InvalidJob from the DCA parameters
            await errors.refuse(context, common_pb2.INVALID_JOB, e.detail)
        except ValueError as e:  # our own validation messages (core.EnsembleJobError and the size checks)
            await errors.refuse(context, common_pb2.INVALID_JOB, str(e) if isinstance(e, core.EnsembleJobError) else "the job's parameters are out of range")
        try:
            self.running.admit(job_id, (request, core.auxiliary_chunks(X_aux)), float(request.deadline_seconds or core.DEFAULT_DEADLINE) * 2 + 60.0)
        except ProtocolError as e:
            await errors.abort(context, e)
        with tracing.job_span(job_id, "hamm2016", "curator") as span:  # its vote-sum DCA job and the parties' votes are children
            release = await self._train(job_id, request, vote_params, X_aux, context)
            span.done("PUBLISHED")
            return release

    async def _train(self, job_id: str, request: pb.EnsembleJobSpec, vote_params, X_aux: np.ndarray, context) -> pb.EnsembleRelease:
        try:
            with calls.sub_job():  # the vote sum counts against the admission bounds but is never refused by them
                dca_job = await self.dca.create(vote_params.to_spec())
        except DcaJobRefused as e:
            self.running.finish(job_id, "FAILED", e.problem, keep=False)
            await errors.refuse(context, e.problem, e.detail)
        log.info("ensemble job %s (%s, ε=%g): %d voters, N=%d auxiliary points, d=%d, votes summed by DCA job %s",
                 job_id, request.method, request.epsilon, len(request.parties), X_aux.shape[0], X_aux.shape[1], dca_job)
        release = None
        failure: int = common_pb2.JOB_FAILED
        self.calls.track(job_id)
        try:
            release = await self._run(job_id, dca_job, request, X_aux)
        except _JobFailed as e:
            log.warning("ensemble job %s failed: %s", job_id, e.detail)
            failure = e.problem
            await errors.refuse(context, e.problem, e.detail)
        except asyncio.CancelledError:
            if not self.calls.cancelled(job_id):
                raise
            failure = common_pb2.CANCELLED
            await errors.refuse(context, common_pb2.CANCELLED, f"ensemble job {job_id} was cancelled by the operator")
        finally:
            if self.calls.end(job_id):
                failure = common_pb2.CANCELLED
            self.running.finish(job_id, "PUBLISHED" if release is not None else "FAILED", common_pb2.PROBLEM_UNSPECIFIED if release is not None else failure, keep=False)
            if release is None:  # failed, cancelled or crashed: the nodes must drop the vote shares
                await asyncio.shield(self.dca.abort(dca_job, f"ensemble job {job_id} ended without a release"))
            self.dca.forget(dca_job)
        self.store.put(job_id, release)
        log.info("ensemble job %s published over %d voters (Δ₂=%.4g)", job_id, release.parties_included, release.sensitivity)
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

        asks = [asyncio.ensure_future(ask(s)) for s in role.start()]
        try:
            for done in asyncio.as_completed(asks):
                abort = next((o for o in await done if isinstance(o, core.AbortVoteSum)), None)
                if abort is not None:  # more than T voters failed: stop at once, the others need not vote
                    await self.dca.abort(dca_job, abort.detail)
                    raise _JobFailed(common_pb2.JOB_FAILED, abort.detail)
        finally:
            for a in asks:
                a.cancel()
        if role.failures:
            log.warning("ensemble job %s: %d voter(s) missing (T = %d allows it): %s", job_id, len(role.failures), spec.max_missing, role.failures)
        t1 = time.perf_counter()
        await self.dca.close(dca_job)  # CloseVoteSum: every voter answered, no need to wait for the deadline
        try:
            vote_sum = await self.dca.result(dca_job)
        except DcaJobRefused as e:
            raise _JobFailed(common_pb2.JOB_FAILED, f"job {job_id}: the vote sum failed: {e.detail}") from None
        t2 = time.perf_counter()
        try:
            outs = await asyncio.to_thread(role.vote_sum, vote_sum)
        finally:
            del vote_sum
        if role.state != core.RELEASED:
            raise _JobFailed(common_pb2.JOB_FAILED, str(role.error))
        release = next(o.release for o in outs if isinstance(o, Publish))
        # Published: the voters' and the nodes' times. Not the fit's: its Newton steps depend on the exact counts.
        release.stage_seconds.update({"votes": t1 - t0, "vote_sum": t2 - t1})
        log.info("ensemble job %s: global fit and noise took %.3f s", job_id, time.perf_counter() - t2)
        return release

    async def GetEnsemble(self, request: common_pb2.JobRef, context) -> pb.EnsembleRelease:
        if not jobs.valid_id(request.job_id):
            await errors.refuse(context, common_pb2.UNKNOWN_JOB, "no such job (not a job id)")
        release = self.store.get(request.job_id)
        if release is None:
            record = self.running.record(request.job_id)
            if record is not None and record.terminal:
                await errors.refuse(context, common_pb2.JOB_FAILED, f"ensemble job {request.job_id} ended {record.state} ({record.problem_name}) and published nothing")
            if record is not None:
                await errors.refuse(context, common_pb2.STEP_OUT_OF_ORDER, f"ensemble job {request.job_id} is still running")
            await errors.refuse(context, common_pb2.UNKNOWN_JOB, f"no published ensemble {errors.shown(request.job_id)}")
        return release

    async def GetAuxiliary(self, request: common_pb2.JobRef, context):
        if not jobs.valid_id(request.job_id):
            await errors.refuse(context, common_pb2.UNKNOWN_JOB, "no such job (not a job id)")
        entry = self.running.get(request.job_id)
        if entry is None:
            await errors.refuse(context, common_pb2.UNKNOWN_JOB, f"no running ensemble job {errors.shown(request.job_id)}")
        spec, chunks = entry
        who = caller(context).name
        if who not in spec.parties:
            await errors.refuse(context, common_pb2.WRONG_ROLE, f"the caller is not a voter of job {request.job_id}")
        for c in chunks:
            yield c


class _JobFailed(Exception):
    def __init__(self, problem: int, detail: str) -> None:
        super().__init__(detail)
        self.problem, self.detail = problem, detail


def _load_auxiliary(cfg: DatasetConfig) -> np.ndarray:
    """The auxiliary features (labels, if the file has any, are ignored), rows clipped onto ‖x‖ ≤ 1 (public)."""
    X, _ = load(cfg.path, cfg.format, cfg.n_features, cfg.label_column)
    X = np.asarray(X, dtype=np.float64)
    X = X / np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    return core.check_auxiliary(X)
