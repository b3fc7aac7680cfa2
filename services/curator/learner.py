"""Charlie hosts multi-round learners (each registry entry whose hooks name a :class:`Learner`: dp-gd, regression, …)
as his own jobs (docs/protocols/job-model.md §7).

The operator submits a :class:`~mpdp.messages.learner_pb2.LearnerJobSpec` through the job host (JobOperations.SubmitJob,
``JobSubmission.learner``) and gets the job id at once. Every field is checked first (``mpdp.limits``, then the plan
and round 0's DCA parameters); the spec and the job's state are written to ``state_dir/learners`` before the id
leaves. A job that finds no admission slot waits QUEUED (docs/protocols/job-model.md §5): nothing of it runs and no
party hears of it until it has one. Once it has its slot the curator drives the protocol's sans-IO role (its
:class:`Learner`'s ``role``, e.g. :class:`mpdp.dpgd.role.DpgdRole`) in one asyncio task: for each
``RunRound`` it creates the round's DCA job with its own DCA host (:meth:`DcaCurator.create`), runs the contribution
round with its own contribution logic (:meth:`ContributionCurator.run`) and feeds the DP release back to the role.
The operator may disconnect; it watches the job (WatchJob: state and "round r of R"), cancels it (CancelJob) and
fetches the model (GetRelease) from the durable store (``<job>.model.binpb``, 0600, fsync'd), like any other job.

Time: every job keeps a stage clock from its start (its admission slot) to its release, one stage after the other with no gap, all
measured at the curator (never a duration a party measured: a party's timing shows its data size): ``setup``, then
per round the round itself (its DCA job, the parties' contributions, the nodes' release) and the curator's step after
it (regression: ``std_round``, ``grid_search``, ``main_round``, ``posterior``; dp-gd: ``r0``, ``r0_step``, …). The
stages are the job summary's ``stage_seconds`` and the model's ``seconds``, so they add up to the job's running time (a
wait for the slot is the summary's ``QUEUED``, outside the model). A
regression's grid search reads only public values; it starts in a worker thread when the job starts (it overlaps
the std round) and the host keeps the last few results, so a job of the same plan and N reuses it.

Failures: a round that fails (a DCA job refused or failed, a party's refusal) fails the job naming the round, and
its DCA job is aborted at once (the nodes drop their shares); a cancel or the job's deadline stops the task the same
way. A curator killed mid-job loses the task: at start-up every job whose state file is not terminal is marked
FAILED (JOB_FAILED, "the curator restarted mid-job"), its running DCA job aborted; the parties' ledgers are not
touched, so every charge already made stays.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from mpdp import limits, registry
from mpdp.dca.errors import InvalidJob
from mpdp.dpgd.model import Task
from mpdp.dpgd.plan import VALIDATE_L2, VALIDATE_NONE, DpgdPlan
from mpdp.dpgd.role import DpgdRole, RunRound as DpgdRound
from mpdp.dpgd.wire import MODE_NAMES, STATISTIC as DPGD_STATISTIC
from mpdp.messages import common_pb2, contribution_pb2 as cpb, dca_pb2, learner_pb2 as pb
from mpdp.protocol import Machine, ProtocolError, Publish, StageClock
from mpdp.regression.plan import RegressionPlan
from mpdp.regression.role import RegressionRole, RunRound as RegressionRound
from mpdp_services.common import calls, errors, jobs
from mpdp_services.common.durable import make_private_dir, write_atomic
from mpdp_services.common.runtime import Hosted
from mpdp_services.curator.contribution import ContributionCurator
from mpdp_services.curator.dca import DcaCurator

if TYPE_CHECKING:
    from mpdp_services.curator.hosting import CuratorSite, Hosting

log = logging.getLogger("mpdp.curator.learner")

DEFAULT_DEADLINE = 600.0
RESTARTED = "the curator restarted mid-job"
PREPARED_KEPT = 8  # public precomputations (a regression's grid search) the host keeps for later jobs of the same plan


# -- one adapter per learner: its role, its round's request, its stage, its release ------------------------------
@dataclass(frozen=True)
class Learner:
    protocol: str  # its registry name (the catalog's protocol)
    prefix: str  # of its job ids
    role: Callable[[pb.LearnerJobSpec, str], Machine]
    request: Callable[[pb.LearnerJobSpec, Any, str], cpb.StatisticRequest]  # (spec, RunRound, DCA job) → the parties' request
    progress: Callable[[Any], tuple[int, int]]  # role → (running round, rounds)
    model: Callable[[pb.LearnerJobSpec, Any, str], pb.LearnerModel]  # (spec, published run, job id) → the store's entry
    asks: type  # the role's output that asks for a round (its RunRound): a DCA job and the parties' contributions
    stages: Callable[[int], tuple[str, str]] = lambda r: (f"r{r}", f"r{r}_step")  # round r → (its stage, the curator's step after it)
    # role → (key, public computation) to start at once in a worker thread, or None; its result goes to ``use``
    # (role, result) before round 0's release is fed back; equal keys give equal results (the host keeps a few)
    prepare: Callable[[Any], tuple[Any, Callable[[], Any]] | None] = lambda role: None
    use: Callable[[Any, Any], None] = lambda role, result: None
    # (host, spec) → None, or errors.Refused: a check of the spec against what the curator holds, before the job is admitted
    check: Callable[["LearnerHost", pb.LearnerJobSpec], None] = lambda host, spec: None


def _dpgd_role(spec: pb.LearnerJobSpec, job_id: str) -> DpgdRole:
    s = spec.dpgd
    task = Task(s.task, s.classes)
    plan = DpgdPlan(task, s.dimension, s.epsilon, s.delta, lam=s.lam, rounds=s.rounds, total_records=s.total_records, mode=MODE_NAMES[s.mode],
                     validate=VALIDATE_NONE if s.unvalidated else VALIDATE_L2)
    return DpgdRole(plan, list(spec.parties), list(spec.compute_nodes), spec.records_per_party, job_id=job_id, max_missing=spec.max_missing,
                    seed=spec.simulation_seed, deadline=spec.deadline_seconds or DEFAULT_DEADLINE)


def _dpgd_request(spec: pb.LearnerJobSpec, ask: DpgdRound, dca_job: str) -> cpb.StatisticRequest:
    return cpb.StatisticRequest(dca_job_id=dca_job, dataset=spec.dataset, statistic=DPGD_STATISTIC, records_per_client=ask.records_per_party,
                                dpgd=ask.request, schema_sha256=spec.schema_sha256)


def _dpgd_progress(role: DpgdRole) -> tuple[int, int]:
    return (role.asked.round if role.asked is not None else 0), role.plan.rounds + 1


def _regression_role(spec: pb.LearnerJobSpec, job_id: str) -> RegressionRole:
    s = spec.regression
    plan = RegressionPlan(tuple(s.bounds), s.epsilon, s.delta, MODE_NAMES[s.mode], grid_repeats=(s.grid_repeats_x or 20, s.grid_repeats_y or 20))
    noise = "discrete-gaussian" if s.noise == dca_pb2.DISCRETE_GAUSSIAN else "gaussian"
    return RegressionRole(plan, list(spec.parties), list(spec.compute_nodes), s.total_records, spec.records_per_party, seed=spec.simulation_seed,
                          deadline=spec.deadline_seconds or DEFAULT_DEADLINE, job_id=job_id, noise=noise, validate=not s.unvalidated)


def _regression_request(spec: pb.LearnerJobSpec, ask: RegressionRound, dca_job: str) -> cpb.StatisticRequest:
    return cpb.StatisticRequest(dca_job_id=dca_job, dataset=spec.dataset, statistic=ask.statistic, bounds=list(ask.bounds),
                                records_per_client=ask.records_per_party, schema_sha256=spec.schema_sha256, unvalidated=spec.regression.unvalidated)


def _regression_progress(role: RegressionRole) -> tuple[int, int]:
    return (1 if role.asked is not None and role.asked.spec.round == "main" else 0), 2


def _regression_stages(r: int) -> tuple[str, str]:
    """Round r's stage and the curator's step after it: std_round, grid_search; main_round, posterior (the registry's)."""
    _, std_round, grid_search, main_round, posterior = registry.BY_NAME["regression"].stages
    return ((std_round, grid_search), (main_round, posterior))[r]


def _regression_prepare(role: RegressionRole) -> tuple[Any, Callable[[], Any]]:
    """The grid search (Algorithm 2 step 3): public plan and N only, so it runs while the std round does, on a thread
    per CPU the curator may use (its score table is the same on any number)."""
    plan, n = role.plan, role.total_records
    return ("regression", plan, n), lambda: plan.multipliers(n, workers=None)


def _regression_use(role: RegressionRole, multipliers: Any) -> None:
    role.multipliers = multipliers


DPGD = Learner("dpgd", registry.prefix("dpgd"), _dpgd_role, _dpgd_request, _dpgd_progress, lambda spec, run, job: run.message(), DpgdRound)
REGRESSION = Learner("regression", registry.prefix("regression"), _regression_role, _regression_request, _regression_progress,
                     lambda spec, run, job: run.message(job, spec.parties, dca_pb2.DISCRETE_GAUSSIAN if not spec.regression.unvalidated
                                                             else spec.regression.noise, spec.regression.total_records, spec.regression.unvalidated),
                     RegressionRound, stages=_regression_stages, prepare=_regression_prepare, use=_regression_use)


def learners() -> dict[str, Learner]:
    """Protocol → its learner: every registry entry whose hooks name one (``Hooks.learner``), in registry order."""
    return registry.hooked("learner")


# -- the store ------------------------------------------------------------------------------------------------------
class LearnerStore:
    """``state_dir/learners``: per job its spec (at submission), its state (each change) and its model (once
    released), every file written durably and 0600 (services/common/durable.py)."""

    def __init__(self, folder: Path) -> None:
        self.folder = make_private_dir(folder)

    def _path(self, job_id: str, suffix: str) -> Path | None:
        return self.folder / f"{job_id}{suffix}" if jobs.valid_id(job_id) else None

    def put_spec(self, job_id: str, spec: pb.LearnerJobSpec) -> None:
        write_atomic(self.folder / f"{job_id}.spec.binpb", spec.SerializeToString())

    def put_state(self, job_id: str, state: dict[str, Any]) -> None:
        write_atomic(self.folder / f"{job_id}.state.json", json.dumps(state))

    def put_model(self, model: pb.LearnerModel) -> None:
        write_atomic(self.folder / f"{model.job_id}.model.binpb", model.SerializeToString())

    def spec(self, job_id: str) -> pb.LearnerJobSpec | None:
        p = self._path(job_id, ".spec.binpb")
        return pb.LearnerJobSpec.FromString(p.read_bytes()) if p is not None and p.exists() else None

    def state(self, job_id: str) -> dict[str, Any] | None:
        p = self._path(job_id, ".state.json")
        return json.loads(p.read_text()) if p is not None and p.exists() else None

    def model(self, job_id: str) -> pb.LearnerModel | None:
        p = self._path(job_id, ".model.binpb")
        return pb.LearnerModel.FromString(p.read_bytes()) if p is not None and p.exists() else None

    def states(self) -> Iterable[tuple[str, dict[str, Any], float]]:
        """(job id, state, mtime) of every job on disk."""
        for p in self.folder.glob("*.state.json"):
            job_id = p.name[: -len(".state.json")]
            if jobs.valid_id(job_id):
                try:
                    yield job_id, json.loads(p.read_text()), p.stat().st_mtime
                except (OSError, ValueError):
                    continue


class LearnerJob(Hosted[Machine]):
    """A hosted learner role and what its task needs: the spec, the running round's DCA job, why it was stopped."""

    def __init__(self, machine: Machine, route, learner: Learner, spec: pb.LearnerJobSpec) -> None:
        super().__init__(machine, route)
        self.learner, self.spec = learner, spec
        self.dca_job = ""
        self.task: asyncio.Task | None = None
        self.stop: tuple[int, str] | None = None  # (Problem, detail) of a cancel or the deadline
        self.stages = StageClock(time.perf_counter)  # from its start (its admission slot), contiguous: they add up to its running time

    def seconds(self) -> dict[str, float]:
        """Seconds per stage so far, the running stage's too."""
        out = dict(self.stages.seconds)
        if self.stages._current is not None:
            out[self.stages._current] = out.get(self.stages._current, 0.0) + self.stages.clock() - self.stages._since
        return out


class LearnerHost:
    """The learners' jobs at the curator: the job host's ``HostedProtocol`` of each learner (:func:`learners`)."""

    def __init__(self, state_dir: Path, dca: DcaCurator, contribution: ContributionCurator, addresses: dict[str, str], test_mode: bool, *,
                 retention: float = jobs.RETENTION_SECONDS, max_live: int = jobs.MAX_LIVE, admission: jobs.Admission | None = None,
                 published: Callable[[str], Any] | None = None) -> None:
        self.store = LearnerStore(Path(state_dir) / "learners")
        self.published = published  # a Pathak job's published model by id (an evaluation's model is checked against it)
        self.dca, self.contribution = dca, contribution
        self.addresses = addresses  # the parties registered with the curator
        self.test_mode = test_mode
        self.tables: dict[str, jobs.JobTable[LearnerJob]] = {
            p: jobs.JobTable(p, jobs.machine_outcome, retention=retention, max_live=max_live, admission=admission) for p in learners()
        }
        self.reapers = {p: jobs.Reaper(t, self._expire) for p, t in self.tables.items()}
        for t in self.tables.values():
            t.on_dropped.append(self._dropped)
        self.prepared: OrderedDict[Any, asyncio.Future] = OrderedDict()  # key → a public precomputation (Learner.prepare)

    # -- restart ------------------------------------------------------------------------------------------------------
    async def recover(self) -> None:
        """After a restart (call after :meth:`DcaCurator.recover`): a job that was running lost its task, so it is
        FAILED, and its running round's DCA job is aborted. Nothing at the parties changes: their charges stay."""
        for job_id, state, _ in list(self.store.states()):
            if state.get("terminal"):
                continue
            r, rounds = state.get("round", 0), state.get("rounds", 0)
            detail = f"{RESTARTED} (round {r + 1} of {rounds}); nothing was released; the parties' charges are kept"
            if state.get("dca_job"):
                await self.dca.abort(state["dca_job"], f"learner job {job_id}: {RESTARTED}")
            self.store.put_state(job_id, {**state, "state": "FAILED", "terminal": True, "problem": common_pb2.JOB_FAILED, "detail": detail})
            log.warning("learner job %s: %s; marked FAILED", job_id, RESTARTED)

    # -- the job host's calls -----------------------------------------------------------------------------------------
    async def submit(self, spec: pb.LearnerJobSpec) -> str:
        """Check, admit and start a learner job; its id at once (errors.Refused otherwise)."""
        try:
            return self._admit(spec).machine.job_id
        except ProtocolError as e:
            raise errors.Refused(e.problem, e.detail) from None

    def _admit(self, spec: pb.LearnerJobSpec) -> LearnerJob:
        """Check every field, build the role and round 0, persist, start the task; errors.Refused(INVALID_JOB, …) otherwise."""
        try:
            limits.check_learner_job_spec(spec)
        except limits.SpecError as e:
            raise errors.Refused(common_pb2.INVALID_JOB, str(e)) from None
        learner = learners()[str(spec.WhichOneof("learner"))]
        learner.check(self, spec)
        if spec.simulation_seed and not self.test_mode:
            raise errors.Refused(common_pb2.INVALID_JOB, "simulation_seed makes a release non-private; the curator is not in test mode")
        unknown = [p for p in spec.parties if p not in self.addresses]
        if unknown:
            raise errors.Refused(common_pb2.INVALID_JOB, f"parties {', '.join(errors.shown(p) for p in unknown[:4])} are not registered with the curator")
        missing = [n for n in spec.compute_nodes if n not in self.dca.nodes]
        if missing:
            raise errors.Refused(common_pb2.INVALID_JOB, f"compute nodes {', '.join(errors.shown(n) for n in missing[:4])} are not registered with the curator")
        job_id = spec.job_id or registry.new_job_id(learner.protocol)
        if not job_id.startswith(learner.prefix):
            raise errors.Refused(common_pb2.INVALID_JOB, f"a {learner.protocol} job id starts with {learner.prefix}")
        if any(job_id in t for t in self.tables.values()) or self.store.state(job_id) is not None:
            taken = jobs.duplicate(job_id)  # REPLAY to its owner; to another operator a refusal that names no job
            raise errors.Refused(taken.problem, taken.detail)
        try:
            role: Any = learner.role(spec, job_id)
            outputs = role.start()  # round 0's DCA parameters are checked here, before anything runs
        except (ValueError, InvalidJob) as e:
            raise errors.Refused(common_pb2.INVALID_JOB, f"not a valid {learner.protocol} job: {e}") from None
        except ProtocolError as e:
            raise errors.Refused(common_pb2.INVALID_JOB, f"not a valid {learner.protocol} job: {e.detail}") from None
        job = LearnerJob(role, self._route, learner, spec)
        job.on_change = self.tables[learner.protocol].observe
        _, rounds = learner.progress(role)
        deadline = rounds * jobs.hard_deadline(spec.deadline_seconds or DEFAULT_DEADLINE) + 60.0
        submitted = contextvars.copy_context()  # the submitter's call: a queued job starts in it, not in the call that freed its slot

        def start() -> None:  # the job has its admission slot (now, or later from the queue): its task runs it
            job.stages.enter("setup")
            job.task = submitted.copy().run(asyncio.ensure_future, self._drive(job, outputs))

        table = self.tables[learner.protocol]
        table.admit(job_id, job, deadline, start=start)  # REPLAY, OVERLOADED; or QUEUED: told to no party until it has a slot
        self.reapers[learner.protocol].ensure_running()  # also ends a queued job past its deadline
        self.store.put_spec(job_id, spec)  # on disk before its task runs (it runs at the next await at the earliest)
        self._persist(job)
        log.info("%s job %s submitted%s: %d parties, %d compute nodes, %d rounds, dataset %s", learner.protocol, job_id,
                 " (queued)" if table.queued(job_id) else "", len(spec.parties), len(spec.compute_nodes), rounds, spec.dataset)
        return job

    async def cancel(self, job_id: str) -> bool:
        """`mpdp jobs cancel`: stop the job's task (its round's DCA job is aborted at once), or take it out of the
        admission queue (it never ran); it ends FAILED, CANCELLED."""
        job = self._job(job_id)
        if job is not None and self.tables[job.learner.protocol].cancel_queued(job_id):
            await job.notify()
            return True
        return await self._stop(job_id, common_pb2.CANCELLED, f"job {job_id} was cancelled by the operator")

    def _dropped(self, record: jobs.JobRecord) -> None:
        """A table ended a queued job (cancelled or expired; it never ran): its role and its state file end with the
        table's words."""
        job = self._job(record.job_id)
        if job is None:
            return
        job.machine.fail(record.problem, record.detail)
        self._persist(job)

    async def _expire(self, job_id: str) -> None:
        job = self._job(job_id)
        state = job.machine.state if job is not None else "?"
        await self._stop(job_id, common_pb2.PEER_UNREACHABLE, f"job {job_id} did not end by its deadline (state {state})")

    async def _stop(self, job_id: str, problem: int, detail: str) -> bool:
        job = self._job(job_id)
        if job is None or job.machine.terminal or job.task is None or job.task.done():
            return False
        if job.stop is None:  # a job already being stopped is not cancelled again (that would cut its cleanup short)
            job.stop = (problem, detail)
            job.task.cancel()
        await asyncio.wait({job.task}, timeout=jobs.CANCEL_WAIT)
        return True

    # -- the job's task --------------------------------------------------------------------------------------------------
    async def _drive(self, job: LearnerJob, outputs: list[Any]) -> None:
        """The role's loop (as :func:`mpdp.rounds.drive`, asynchronously): run each round it asks for, feed the release.
        Each round and each step after it is a stage of ``job.stages``."""
        role: Any = job.machine  # DpgdRole or RegressionRole: start, released, round_failed, result
        learner = job.learner
        try:
            prepared = self._prepare(learner, role)
            await job.start([o for o in outputs if not isinstance(o, learner.asks)])
            while not role.terminal:
                ask = next(o for o in outputs if isinstance(o, learner.asks))
                r, _ = learner.progress(role)
                round_stage, step_stage = learner.stages(r)
                job.stages.enter(round_stage)
                dca_job, release = await self._round(job, ask)
                job.stages.enter(step_stage)
                if prepared is not None:  # the public precomputation the round's step needs (it ran during the round)
                    try:
                        learner.use(role, await asyncio.shield(prepared))
                    except Exception:  # the role's step computes it itself and fails the job in its own words
                        log.warning("%s job %s: the precomputation failed; the step runs it", learner.protocol, role.job_id, exc_info=True)
                    prepared = None
                async with job.lock:  # the curator's step (dp-gd) or the grid search (regression), off the event loop
                    outputs = await job.in_thread(role.released, dca_job, release)
                job.dca_job = ""
                run = next((o.release for o in outputs if isinstance(o, Publish)), None)
                if run is not None:
                    run.seconds = job.seconds()
                    self.store.put_model(learner.model(job.spec, run, role.job_id))  # durable before the job says DONE
                    log.info("%s job %s released (%s)", learner.protocol, role.job_id, ", ".join(f"{k} {v:.2f} s" for k, v in run.seconds.items()))
                self._persist(job)
                await job.notify()
        except errors.Refused as e:
            await self._failed(job, e.problem, e.detail)
        except ProtocolError as e:  # the role refused a release (not this round's, not finite): FAILED already
            await self._failed(job, e.problem, e.detail)
        except asyncio.CancelledError:
            if job.stop is None:  # the server is stopping: the state on disk stays running; a restart marks it FAILED
                raise
            await self._failed(job, *job.stop)
        except Exception:
            log.exception("%s job %s: the host raised", learner.protocol, role.job_id)
            await self._failed(job, common_pb2.INTERNAL, "internal error (see the curator's log)")
        finally:
            job.stages.stop()

    def _prepare(self, learner: Learner, role: Any) -> asyncio.Future | None:
        """Start the learner's public precomputation in a worker thread, or reuse a kept one of the same key."""
        prep = learner.prepare(role)
        if prep is None:
            return None
        key, compute = prep
        fut = self.prepared.get(key)
        if fut is None or (fut.done() and (fut.cancelled() or fut.exception() is not None)):
            fut = asyncio.ensure_future(asyncio.to_thread(compute))
            self.prepared[key] = fut
        self.prepared.move_to_end(key)
        while len(self.prepared) > PREPARED_KEPT:
            self.prepared.popitem(last=False)
        return fut

    async def _round(self, job: LearnerJob, ask: Any) -> tuple[str, dca_pb2.DpSum]:
        """One round: the DCA job, the parties' contributions, the release; errors.Refused naming the round otherwise."""
        r, rounds = job.learner.progress(job.machine)
        name = f"round {r + 1} of {rounds}"
        # the job's state names the round's DCA job before it exists: a curator killed while it is being announced
        # finds it at the restart and aborts it (recover), rather than leaving it waiting for partial sums. A seeded
        # (test-mode) job's round is named after the job, as the in-memory driver names it: its seeded noise streams
        # are keyed by the DCA job's id, so the same seeded job releases the same sums here and in memory
        job.dca_job = registry.round_dca_job_id(job.machine.job_id, r) if job.spec.simulation_seed else registry.new_job_id("dca")
        self._persist(job)
        with calls.sub_job():  # the round's DCA job counts against the bounds but is never refused by them
            create = asyncio.ensure_future(self.dca.create(ask.params.to_spec(), job.dca_job))
        try:
            dca_job = await asyncio.shield(create)
        except asyncio.CancelledError:  # stopped while the DCA job was being announced: it exists, and is aborted with the job
            try:
                job.dca_job = await create
            except errors.Refused:
                pass
            raise
        except errors.Refused as e:
            job.dca_job = ""  # never created
            raise errors.Refused(e.problem, f"{name}: the curator refused its DCA job: {e.detail}") from None
        job.dca_job = dca_job
        self._persist(job)
        await job.notify()
        request = job.learner.request(job.spec, ask, dca_job)
        try:
            await self.contribution.run(cpb.ContributionRound(request=request, parties=list(job.spec.parties)))
        except errors.Refused as e:  # a party's budget or a party that is down says why; any other failure is the job's
            kept = e.problem in (common_pb2.BUDGET_EXCEEDED, common_pb2.PEER_UNREACHABLE)
            raise errors.Refused(e.problem if kept else common_pb2.JOB_FAILED, f"{name} ({dca_job}): {e.detail}") from None
        try:
            release = await self.dca.result(dca_job)
        except errors.Refused as e:
            raise errors.Refused(common_pb2.JOB_FAILED, f"{name} ({dca_job}) released nothing: {e.detail}") from None
        return dca_job, release

    async def _failed(self, job: LearnerJob, problem: int, detail: str) -> None:
        """End the job FAILED with (problem, detail); its running round's DCA job is aborted at once."""
        if job.dca_job:
            dca_job, job.dca_job = job.dca_job, ""
            if problem == common_pb2.CANCELLED:
                await asyncio.shield(self.dca.cancel(dca_job))
            else:
                await asyncio.shield(self.dca.abort(dca_job, f"learner job {job.machine.job_id} failed: {detail}"))
        job.machine.fail(problem, detail)  # no-op when the role failed itself (its own error stays)
        log.warning("%s job %s failed: %s", job.learner.protocol, job.machine.job_id, job.machine.error.detail if job.machine.error else detail)
        self._persist(job)
        await job.notify()

    async def _route(self, job: Hosted[Machine], outputs: list[Any]) -> None:
        return None  # a learner role's outputs are the host's own steps (_drive); nothing goes to a peer

    # -- state ------------------------------------------------------------------------------------------------------------
    def _job(self, job_id: str) -> LearnerJob | None:
        for t in self.tables.values():
            job = t.get(job_id)
            if job is not None:
                return job
        return None

    def _persist(self, job: LearnerJob) -> None:
        st = self.status(job)
        self.store.put_state(st.job_id, {"protocol": st.protocol, "state": st.state, "round": st.round, "rounds": st.rounds, "dca_job": st.dca_job_id,
                                         "terminal": st.terminal, "problem": int(st.problem), "detail": st.detail})

    def live(self, job: LearnerJob) -> tuple[str, dict[str, float]]:
        """The job catalog's view of a held job: its failure detail and its stage seconds (the host's stage clock)."""
        m = job.machine
        return (m.error.detail if m.error is not None else ""), job.seconds()

    def status(self, job: LearnerJob) -> pb.LearnerStatus:
        m = job.machine
        r, rounds = job.learner.progress(m)
        st = pb.LearnerStatus(job_id=m.job_id, protocol=job.learner.protocol, state=str(m.state), round=r, rounds=rounds, dca_job_id=job.dca_job,
                              terminal=m.terminal, stage=str(m.state).lower() if m.terminal else f"round {r + 1} of {rounds}")
        if m.error is not None:
            st.problem, st.detail = m.error.problem, m.error.detail
        return st

    def failure(self, job_id: str) -> tuple[int, str] | None:
        """(Problem, detail) of a learner job that failed, this run or an earlier one (its state file): the job
        host's summary of a job the curator no longer holds, e.g. one a restart marked FAILED."""
        s = self.store.state(job_id)
        if s is None or s.get("state") != "FAILED":
            return None
        return int(s.get("problem") or common_pb2.JOB_FAILED), str(s.get("detail", ""))

    def stored(self, protocol: str) -> Iterable[tuple[str, str, float]]:
        """(job id, state, mtime) of the protocol's jobs on disk (the catalog's jobs of an earlier run)."""
        for job_id, s, at in self.store.states():
            if s.get("protocol") == protocol and s.get("terminal"):
                yield job_id, s.get("state", "FAILED"), at


# -- their place at the curator (mpdp.registry: Hooks.curator) --------------------------------------------------------
def host(site: "CuratorSite") -> LearnerHost:
    """The site's one learner host (every learner's jobs; its rounds run on the site's DCA host)."""
    from mpdp_services.curator import dca as dca_host

    def make() -> LearnerHost:
        curator, dca = site.curator, dca_host.of(site)
        contribution = ContributionCurator(curator.channels, curator.addresses, dca.trace_context, dca.store.spec)
        return LearnerHost(site.state_dir, dca, contribution, curator.addresses, site.cfg.test_mode, retention=site.retention, max_live=site.max_live,
                           admission=curator.admission, published=curator.registry.get)

    return site.part("learner", make)


def hosting(site: "CuratorSite", protocol: registry.Protocol) -> "Hosting":
    """One learner protocol's jobs on the site's learner host (recovered once, after the DCA host's)."""
    from mpdp_services.curator import catalog
    from mpdp_services.curator.hosting import Hosting

    learner = host(site)
    site.on_restart("learner", learner.recover)
    source = catalog.Source(protocol.name, learner.tables[protocol.name], lambda j: learner.store.model(j) is not None,
                            lambda: learner.stored(protocol.name), learner.live, lambda job: learner.status(job).stage, failure=learner.failure)
    return Hosting(learner.submit, learner.store.model, learner.cancel, source, store=learner.store)
