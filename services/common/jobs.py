"""One job lifecycle for every service: created → running → terminal (with a reason), then forgotten.

A :class:`JobTable` holds a service's jobs (any entry type: a hosted machine, a running request's state).
It owns what every role must do the same way and no protocol cares about:

- **Admission.** A job id is checked (:func:`check_id`) before it reaches a store, a file or a dict; at most
  ``max_live`` jobs are not terminal at once (more is OVERLOADED); an id is never admitted twice (REPLAY, or to a
  caller who may not know of the job INVALID_JOB without naming it: :func:`duplicate`); a
  shared ``admission`` (the curator's per-federation and per-operator bounds) queues an operator's job it has no
  slot for (every curator protocol admits its jobs with a ``start``, :meth:`JobTable.admit`): the job is QUEUED,
  nothing of it runs and no peer hears of it until the admission gives it a slot, then ``start()`` runs it; only
  a full queue refuses it OVERLOADED. :meth:`TaskJobs.submit` is the same for a job that is one asyncio task.
- **Deadline.** Every job has one (``hard_deadline``). :meth:`JobTable.sweep` returns the jobs past it that are not
  terminal; the service fails them (the machine's ``fail()``, which notifies the peers).
- **Retention.** A terminal job keeps its entry ``retention`` seconds (at most ``max_retained`` of them), so a
  late peer still gets its answer; then only a :class:`JobRecord` remains: id, protocol, state, problem name and
  times, no values. Records are bounded too (``max_records``, oldest dropped first).

The table is sans-IO (the clock is injected); :class:`Reaper` is the one asyncio task that sweeps it. A job that
is one asyncio task of the curator's own (an ensemble, local releases) runs under :class:`TaskJobs`; every change
of any job bumps :data:`changes`, which the operators' watchers wait on.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import time
from collections import OrderedDict, deque
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Generic, Protocol, TypeVar

from mpdp import limits
from mpdp.messages import common_pb2
from mpdp.protocol import RemoteProtocolError
from mpdp_services.common import calls, errors, metrics
from mpdp_services.common.durable import make_private_dir, write_atomic

log = logging.getLogger("mpdp.jobs")

T = TypeVar("T")
P = common_pb2.Problem

CREATED, RUNNING, TERMINAL = "CREATED", "RUNNING", "TERMINAL"
PUBLISHED, FAILED = "PUBLISHED", "FAILED"
QUEUED = "QUEUED"  # the state of a job waiting for an admission slot (its record's state; lifecycle CREATED)
RETENTION_SECONDS = 600.0
MAX_LIVE = 256
MAX_RETAINED = 64
MAX_RECORDS = 10_000
MAX_EVENTS = 16  # per job: the states it passed through (the first and the last always kept)
SWEEP_SECONDS = 1.0
CANCEL_WAIT = 5.0  # seconds a cancel waits for the job's task to clean up and end


def valid_id(job_id: str) -> bool:
    """A job id this federation could have issued (:func:`mpdp.limits.is_id`: 1–64 letters, digits, ``.``, ``_``, ``-``)."""
    return limits.is_id(job_id)


def check_id(job_id: str) -> str:
    """The job id, or UNKNOWN_JOB: a string that cannot be a job id names no job (and never a file)."""
    if not valid_id(job_id):
        raise RemoteProtocolError(P.UNKNOWN_JOB, "no such job (not a job id: 1-64 letters, digits, '.', '_' or '-')")
    return job_id


TAKEN = "this job id cannot be used; choose another, or leave job_id empty for a fresh one"


def duplicate(job_id: str) -> RemoteProtocolError:
    """The refusal of an id that names a job already: REPLAY to a caller who may know of that job (its owner, an
    admin, a peer, the service itself), and to anyone else INVALID_JOB :data:`TAKEN`, which names no job and no
    owner (the curator's job ownership, :func:`calls.may_see`)."""
    if calls.may_see(job_id):
        return RemoteProtocolError(P.REPLAY, f"job {job_id} already exists")
    return RemoteProtocolError(P.INVALID_JOB, TAKEN)


def hard_deadline(seconds: float) -> float:
    """A role's last word on a job whose spec deadline is ``seconds``: the deadline plus a grace period for the
    steps after it (closing, agreement, release)."""
    return seconds + max(10.0, 0.2 * seconds)


class Admission(Protocol):
    """Bounds shared by several tables (the curator's: :mod:`mpdp_services.curator.admission`)."""

    def admit(self, job_id: str, operator: str, *, refuse: bool = True) -> None: ...

    def release(self, job_id: str) -> None: ...

    def enqueue(self, job_id: str, operator: str, grant: Callable[[float], None]) -> bool: ...

    def withdraw(self, job_id: str) -> bool: ...


@dataclass(frozen=True)
class JobEvent:
    """One step of a job's life as this role saw it: wall-clock time and the state it entered (no values)."""

    at: float  # Unix time
    state: str
    problem: int = P.PROBLEM_UNSPECIFIED


@dataclass
class JobRecord:
    """What is left of a job once it leaves memory: no values, no peer text.

    ``events`` is the job's state log at this role (at most :data:`MAX_EVENTS`: the admission, then the latest
    states; the terminal one is always last), the source of ``mpdp jobs logs`` and the dashboard's timeline.
    """

    job_id: str
    protocol: str
    state: str  # the protocol's state name (e.g. RELEASED, FAILED, PUBLISHED)
    problem: int  # the failure's Problem, PROBLEM_UNSPECIFIED when none
    created: float
    ended: float | None = None
    lifecycle: str = CREATED
    created_at: float = field(default_factory=time.time)  # Unix time of admission (``created`` is the table's clock)
    events: deque[JobEvent] = field(default_factory=lambda: deque(maxlen=MAX_EVENTS - 1))
    first: JobEvent | None = None
    queue_seconds: float = 0.0  # seconds it waited for an admission slot (while QUEUED: so far, at its last reading)
    detail: str = ""  # the table's own words when it ended a job that never ran (cancelled or expired while queued)

    def note(self, state: str, problem: int = P.PROBLEM_UNSPECIFIED) -> None:
        """Log a state this job entered (a repeat of the last state is not logged)."""
        event = JobEvent(time.time(), state, problem)
        if self.first is None:
            self.first = event
        elif not self.events or self.events[-1].state != state or self.events[-1].problem != problem:
            self.events.append(event)
        else:
            return  # no change (reading a job notes its state again)
        changes.bump()

    def log(self) -> list[JobEvent]:
        """The state log, oldest first."""
        return ([self.first] if self.first is not None else []) + list(self.events)

    @property
    def ended_at(self) -> float | None:
        """Unix time the job became terminal at this role."""
        if self.ended is None:
            return None
        return self.created_at + (self.ended - self.created)

    @property
    def terminal(self) -> bool:
        return self.lifecycle == TERMINAL

    @property
    def problem_name(self) -> str:
        try:
            return P.Name(P.ValueType(self.problem))
        except ValueError:
            return "PROBLEM_UNSPECIFIED"


@dataclass
class _Live(Generic[T]):
    entry: T | None
    record: JobRecord
    deadline: float
    queued: bool = False
    run_seconds: float = 0.0  # a queued job's deadline once it gets its slot


class JobTable(Generic[T]):
    """A service's jobs; see the module docstring. ``outcome(entry)`` reads an entry's (state, terminal, problem)."""

    def __init__(
        self,
        protocol: str,
        outcome: Callable[[T], tuple[str, bool, int]] | None = None,
        *,
        max_live: int = MAX_LIVE,
        retention: float = RETENTION_SECONDS,
        max_retained: int = MAX_RETAINED,
        max_records: int = MAX_RECORDS,
        clock: Callable[[], float] = time.monotonic,
        admission: "Admission | None" = None,
    ) -> None:
        if max_live < 1 or retention < 0 or max_retained < 0 or max_records < 1:
            raise ValueError("max_live and max_records must be ≥ 1, retention and max_retained ≥ 0")
        self.protocol = protocol
        metrics.watch_live_jobs(protocol, self.live_count)
        self._outcome = outcome
        self.max_live, self.retention, self.max_retained, self.max_records = max_live, retention, max_retained, max_records
        self._clock = clock
        self.admission = admission  # shared bounds across tables (the curator's per-federation and per-operator limits)
        self._jobs: dict[str, _Live[T]] = {}  # not yet forgotten: live, or terminal within retention
        self._retained: OrderedDict[str, None] = OrderedDict()  # terminal entries still held, oldest first
        self._records: OrderedDict[str, JobRecord] = OrderedDict()  # forgotten jobs, oldest first
        self.on_end: list[Callable[[JobRecord], None]] = []  # called with a job's record as it becomes terminal (e.g. its times kept on disk)
        # called with the record of a job the table ended while it was queued (cancelled or expired: it never ran), after
        # the ``on_end`` hooks: the service ends its own durable record of the job with the table's words (``record.detail``)
        self.on_dropped: list[Callable[[JobRecord], None]] = []

    # -- admission ------------------------------------------------------------------------------------
    def admit(self, job_id: str, entry: T, deadline_seconds: float, *, running: bool = True,
              start: Callable[[], None] | None = None) -> JobRecord:
        """Add a job (its id checked); OVERLOADED past ``max_live`` live jobs, REPLAY for an id already seen.

        With ``start`` and an operator's call, a job the shared admission has no slot for waits QUEUED (its record's
        state, :meth:`queued`) instead of being refused; ``start()`` is called when it gets its slot (then its
        deadline is ``deadline_seconds`` from that moment). While queued its deadline is ``deadline_seconds`` from
        now: :meth:`sweep` reports it like any overdue job and :meth:`drop_queued` ends it. A job past the queue's
        bounds is refused OVERLOADED. Without ``start`` (only jobs no operator asked for: recovered at start-up,
        created by another job) the job is counted, never queued."""
        if not valid_id(job_id):
            raise RemoteProtocolError(P.MALFORMED, "not a job id (1-64 letters, digits, '.', '_' or '-')")
        if job_id in self._jobs or job_id in self._records:
            raise duplicate(job_id)
        self.sweep()
        if self.live_count() >= self.max_live:
            raise RemoteProtocolError(P.OVERLOADED, f"{self.max_live} {self.protocol} jobs are running; try again later")
        queued = False
        if self.admission is not None:
            ident = calls.caller()
            operator = ident.name if ident is not None else ""
            may_refuse = ident is not None and not calls.in_sub_job()
            if start is not None and may_refuse:
                queued = not self.admission.enqueue(job_id, operator, lambda waited: self._granted(job_id, waited, start))
            else:
                self.admission.admit(job_id, operator, refuse=may_refuse)
        now = self._clock()
        record = JobRecord(job_id, self.protocol, "", P.PROBLEM_UNSPECIFIED, now, lifecycle=RUNNING if running and not queued else CREATED)
        live = _Live(entry, record, now + deadline_seconds, queued=queued, run_seconds=deadline_seconds)
        if queued:
            record.state = QUEUED
            record.note(QUEUED)
        else:
            record.note("ADMITTED")
        self._jobs[job_id] = live
        calls.admitted(job_id)  # who asked for it (the curator's job ownership)
        if start is not None and not queued:
            start()
        return record

    def queued(self, job_id: str) -> bool:
        """The job waits for an admission slot (nothing of it has run)."""
        live = self._jobs.get(job_id)
        return live is not None and live.queued

    def drop_queued(self, job_id: str, problem: int, detail: str) -> bool:
        """End a queued job without ever running it (cancelled, or past its deadline): FAILED with ``problem`` and
        ``detail``; it leaves the queue. False if the job is not queued."""
        live = self._jobs.get(job_id)
        if live is None or not live.queued:
            return False
        if self.admission is not None:
            self.admission.withdraw(job_id)
        live.queued = False
        live.record.queue_seconds = max(0.0, self._clock() - live.record.created)
        live.record.detail = detail[:240]
        metrics.queue_ended("dropped", live.record.queue_seconds)
        self._end(job_id, live, FAILED, problem)
        for hook in self.on_dropped:
            try:
                hook(live.record)
            except Exception:  # noqa: BLE001 - bookkeeping after the job's end must never change its outcome
                log.exception("job %s: after-drop hook failed", job_id)
        return True

    def cancel_queued(self, job_id: str) -> bool:
        """The operator's cancel of a queued job: it leaves the queue and ends FAILED, CANCELLED, having never run
        (no peer ever heard of it). False if the job is not queued (then the service stops it as a running job)."""
        return self.drop_queued(job_id, P.CANCELLED, f"job {job_id} was cancelled by the operator while queued; it never ran")

    def _granted(self, job_id: str, waited: float, start: Callable[[], None]) -> None:
        """The admission gave a queued job its slot: it runs from now, with its own deadline from now."""
        live = self._jobs.get(job_id)
        if live is None or not live.queued:  # ended meanwhile (cannot happen: ending it withdraws it); give the slot back
            if self.admission is not None:
                self.admission.release(job_id)
            return
        live.queued = False
        live.deadline = self._clock() + live.run_seconds
        live.record.queue_seconds = waited
        live.record.lifecycle = RUNNING
        live.record.state = ""
        live.record.note("ADMITTED")
        metrics.queue_ended("started", waited)
        start()

    def observe(self, job_id: str) -> None:
        """Note now whether a held job became terminal (its outcome function), so records and metrics follow at once."""
        live = self._jobs.get(job_id)
        if live is not None:
            self._observe(job_id, live)

    def start(self, job_id: str) -> None:
        live = self._jobs.get(job_id)
        if live is not None and live.record.lifecycle == CREATED:
            live.record.lifecycle = RUNNING

    # -- lookups ----------------------------------------------------------------------------------------
    def get(self, job_id: str) -> T | None:
        """The job's entry while it is held (live or retained), else None (also for a string that is no id)."""
        live = self._jobs.get(job_id) if valid_id(job_id) else None
        return None if live is None else live.entry

    def record(self, job_id: str) -> JobRecord | None:
        """The job's value-free record, held or forgotten; None if this process never had it (or dropped it)."""
        if not valid_id(job_id):
            return None
        live = self._jobs.get(job_id)
        if live is not None:
            self._observe(job_id, live)
            return live.record
        return self._records.get(job_id)

    def __contains__(self, job_id: object) -> bool:
        return isinstance(job_id, str) and (job_id in self._jobs or job_id in self._records)

    def live_count(self) -> int:
        """Jobs admitted to a slot and not yet terminal (queued jobs are the admission's bound, not this one's)."""
        return sum(1 for live in self._jobs.values() if not live.record.terminal and not live.queued)

    def held(self) -> list[str]:
        return list(self._jobs)

    def records(self) -> list[JobRecord]:
        """Every job this table knows (held and forgotten), as value-free records, oldest first."""
        self.sweep_states()
        return list(self._records.values()) + [live.record for live in self._jobs.values()]

    def sweep_states(self) -> None:
        """Note the current state of every held job (its outcome function), without forgetting or expiring any."""
        for job_id, live in list(self._jobs.items()):
            self._observe(job_id, live)

    def entries(self) -> list[T]:
        return [live.entry for live in self._jobs.values() if live.entry is not None]

    # -- lifecycle ---------------------------------------------------------------------------------------
    def finish(self, job_id: str, state: str, problem: int = P.PROBLEM_UNSPECIFIED, *, keep: bool = True) -> None:
        """Mark a job terminal (if not already); ``keep=False`` forgets its entry at once."""
        live = self._jobs.get(job_id)
        if live is None:
            return
        self._observe(job_id, live)
        if not live.record.terminal:
            self._end(job_id, live, state, problem)
        if not keep:
            self._forget(job_id)

    def forget(self, job_id: str) -> None:
        """Drop a job's entry now, keeping its record (terminal or not: a job given up on counts as ended)."""
        live = self._jobs.get(job_id)
        if live is None:
            return
        if not live.record.terminal:
            self._observe(job_id, live)
        if not live.record.terminal:
            self._end(job_id, live, live.record.state or "FAILED", P.JOB_FAILED)
        self._forget(job_id)

    def sweep(self) -> list[str]:
        """Note jobs that became terminal, forget those past retention, and return the live jobs past their deadline."""
        now = self._clock()
        expired: list[str] = []
        for job_id, live in list(self._jobs.items()):
            self._observe(job_id, live)
            if not live.record.terminal and now >= live.deadline:
                expired.append(job_id)  # a queued one too: the service ends it with drop_queued (nothing to tell a peer)
        while self._retained:
            job_id = next(iter(self._retained))
            live = self._jobs[job_id]
            ended = live.record.ended if live.record.ended is not None else now
            if len(self._retained) <= self.max_retained and now - ended < self.retention:
                break
            self._forget(job_id)
        return expired

    def deadline(self, job_id: str) -> float | None:
        live = self._jobs.get(job_id)
        return None if live is None else live.deadline

    # -- internals ---------------------------------------------------------------------------------------
    def _observe(self, job_id: str, live: _Live[T]) -> None:
        if live.queued:
            live.record.queue_seconds = max(0.0, self._clock() - live.record.created)
            return
        if live.record.terminal or live.entry is None or self._outcome is None:
            return
        state, terminal, problem = self._outcome(live.entry)
        live.record.state = state
        if not terminal and state:
            live.record.note(state)
        if terminal:
            self._end(job_id, live, state, problem)

    def _end(self, job_id: str, live: _Live[T], state: str, problem: int) -> None:
        r = live.record
        r.state, r.problem, r.lifecycle, r.ended = state, problem, TERMINAL, self._clock()
        r.note(state, problem)
        if self.admission is not None:
            self.admission.release(job_id)
        self._retained[job_id] = None
        metrics.job_ended(self.protocol, state, r.ended - r.created)
        metrics.stages_ended(self.protocol, state_seconds(r))
        for hook in self.on_end:
            try:
                hook(r)
            except Exception:  # noqa: BLE001 - bookkeeping after the job's end must never change its outcome
                log.exception("job %s: after-end hook failed", job_id)

    def _forget(self, job_id: str) -> None:
        live = self._jobs.pop(job_id)
        self._retained.pop(job_id, None)
        live.entry = None
        self._records[job_id] = live.record
        while len(self._records) > self.max_records:
            self._records.popitem(last=False)


def state_seconds(record: JobRecord) -> dict[str, float]:
    """Seconds a job spent in each state, from its state log (the terminal state has none)."""
    log = record.log()
    out: dict[str, float] = {}
    for event, after in zip(log, log[1:]):
        out[event.state] = out.get(event.state, 0.0) + max(0.0, after.at - event.at)
    return out




@dataclass
class TaskJob:
    """A curator job that runs as one asyncio task (an ensemble, a set of local releases): its stage while it
    runs, then PUBLISHED or FAILED with the Problem and the curator's own words."""

    state: str
    problem: int = P.PROBLEM_UNSPECIFIED
    detail: str = ""
    task: "asyncio.Task | None" = None
    stop: tuple[int, str] | None = None  # (Problem, detail) of a cancel


def task_outcome(job: TaskJob) -> tuple[str, bool, int]:
    return job.state, job.state in (PUBLISHED, FAILED), job.problem


RESTARTED = "the curator restarted mid-job; nothing was released"


class JobMarks:
    """The durable record of a curator's jobs of one protocol, in one layout for every protocol that has no store of
    its own (``folder``, 0700): ``<job>.running.json`` from admission to the end (its protocol and the sites named
    by its spec, so that a restart can tell them), ``<job>.failed.json`` once it failed (Problem and detail). A
    published job is its protocol's store. Every file is written by ``write_atomic`` (fsync, 0600). At most
    ``max_failures`` failures are kept, the oldest forgotten first; running marks are bounded by the live jobs."""

    RUNNING_SUFFIX, FAILED_SUFFIX = ".running.json", ".failed.json"

    def __init__(self, folder: "str | Path", protocol: str, max_failures: int = MAX_RECORDS) -> None:
        self.folder = make_private_dir(folder)
        self.protocol = protocol
        self.max_failures = max_failures
        self._failures = sum(1 for _ in self.folder.glob("*" + self.FAILED_SUFFIX))

    def running(self, job_id: str, sites: "dict[str, str] | None" = None) -> None:
        """Admitted: the job's mark, with the sites its spec names (name → address) to tell if the curator restarts."""
        write_atomic(self.folder / f"{job_id}{self.RUNNING_SUFFIX}", json.dumps({"protocol": self.protocol, "sites": dict(sites or {})}))

    def ended(self, job_id: str, failure: "tuple[int, str] | None") -> None:
        """Ended: the failure (Problem, detail) if it failed, then the running mark goes."""
        if failure is not None:
            self._write_failure(job_id, *failure)
        (self.folder / f"{job_id}{self.RUNNING_SUFFIX}").unlink(missing_ok=True)

    def recover(self, reason: str = RESTARTED) -> "list[tuple[str, dict[str, str]]]":
        """After a restart: every job still marked running is FAILED (JOB_FAILED, ``reason``); (job id, sites) of each."""
        lost = []
        for mark in self.folder.glob("*" + self.RUNNING_SUFFIX):
            job_id = mark.name[: -len(self.RUNNING_SUFFIX)]
            if valid_id(job_id):
                try:
                    sites = json.loads(mark.read_text()).get("sites", {})
                except (OSError, ValueError, AttributeError):
                    sites = {}
                self._write_failure(job_id, P.JOB_FAILED, reason)
                lost.append((job_id, {str(k): str(v) for k, v in dict(sites).items()}))
            mark.unlink(missing_ok=True)
        return lost

    def failure(self, job_id: str) -> "tuple[int, str] | None":
        """(Problem, detail) of a job that failed, from disk (an earlier run's too); None otherwise."""
        p = self.folder / f"{job_id}{self.FAILED_SUFFIX}"
        if not valid_id(job_id) or not p.exists():
            return None
        try:
            d = json.loads(p.read_text())
            return int(d.get("problem", P.JOB_FAILED)), str(d.get("detail", ""))
        except (OSError, ValueError, AttributeError):
            return P.JOB_FAILED, ""

    def failures(self) -> "list[tuple[str, str, float]]":
        """(job id, FAILED, mtime) of the failures on disk (the catalog's jobs of an earlier run)."""
        out = []
        for p in self.folder.glob("*" + self.FAILED_SUFFIX):
            job_id = p.name[: -len(self.FAILED_SUFFIX)]
            if valid_id(job_id):
                out.append((job_id, FAILED, p.stat().st_mtime))
        return out

    def _write_failure(self, job_id: str, problem: int, detail: str) -> None:
        path = self.folder / f"{job_id}{self.FAILED_SUFFIX}"
        if not path.exists():
            self._failures += 1
        write_atomic(path, json.dumps({"problem": int(problem), "detail": detail[:240]}))
        if self._failures > self.max_failures:  # bounded: the oldest failures are forgotten first
            old = sorted(self.folder.glob("*" + self.FAILED_SUFFIX), key=lambda q: q.stat().st_mtime)
            for q in old[: len(old) - self.max_failures]:
                q.unlink(missing_ok=True)
            self._failures = min(len(old), self.max_failures)


class TaskJobs(Generic[T]):
    """Runs each job of ``table`` (entries are :class:`TaskJob`) as its own task, so that the operator's call returns
    at once and the job goes on without it: :meth:`start` runs it, :meth:`stage` notes where it is, :meth:`cancel`
    stops it (FAILED, CANCELLED), :meth:`wait` gives its release or raises :class:`errors.Refused` as it failed."""

    def __init__(self, table: "JobTable[Any]", folder: "Path | None" = None) -> None:
        self.table = table
        self.reaper = Reaper(table, self._expire)  # a job past its deadline is stopped like a cancel, PEER_UNREACHABLE
        # ``folder``: the jobs' durable marks (:class:`JobMarks`), so that a curator killed mid-job reports the job
        # FAILED after its restart (:meth:`recover`) instead of not knowing it
        self.marks = JobMarks(folder, table.protocol) if folder is not None else None
        table.on_dropped.append(self._dropped)

    def submit(self, job_id: str, job: TaskJob, deadline_seconds: float, run: Callable[[], Awaitable[T]],
               sites: "dict[str, str] | None" = None) -> None:
        """Admit the job (:meth:`JobTable.admit`: ProtocolError OVERLOADED or REPLAY) and run it (:meth:`start`) once
        it has its admission slot: at once, or later from the admission queue. While queued its state is QUEUED,
        nothing of it runs and no party hears of it; its durable mark is written at once either way, so a restart
        reports it. It starts in the submitter's context (its caller), not in that of the job whose end freed the slot."""
        first = job.state
        submitted = contextvars.copy_context()

        def start() -> None:
            job.state = first
            submitted.copy().run(self.start, job_id, job, run, sites)

        self.table.admit(job_id, job, deadline_seconds, start=start)
        if self.table.queued(job_id):
            job.state = QUEUED
            if self.marks is not None:
                self.marks.running(job_id, sites)
            self.reaper.ensure_running()  # it also ends a queued job past its deadline

    def _dropped(self, record: JobRecord) -> None:
        """The table ended a queued job (cancelled or expired): the job and its durable mark end with the table's words."""
        job = self.table.get(record.job_id)
        if isinstance(job, TaskJob):
            job.state, job.problem, job.detail = FAILED, record.problem, record.detail
        if self.marks is not None:
            self.marks.ended(record.job_id, (record.problem, record.detail))
        changes.bump()

    def recover(self, reason: str = RESTARTED + "; the parties' charges are kept") -> "list[tuple[str, dict[str, str]]]":
        """After a restart: every job that was running when the process died is FAILED (JOB_FAILED, ``reason``);
        (job id, the sites its spec named) of each."""
        return self.marks.recover(reason) if self.marks is not None else []

    def failures(self) -> "list[tuple[str, str, float]]":
        """(job id, FAILED, mtime) of the failures on disk (the catalog's jobs of an earlier run)."""
        return self.marks.failures() if self.marks is not None else []

    def failure(self, job_id: str) -> "tuple[int, str] | None":
        return self.marks.failure(job_id) if self.marks is not None else None

    def start(self, job_id: str, job: TaskJob, run: Callable[[], Awaitable[T]], sites: "dict[str, str] | None" = None) -> None:
        """Run the job as its own task; ``sites``: the parties its spec names (name → address), told if the curator restarts."""
        if self.marks is not None:
            self.marks.running(job_id, sites)

        async def body() -> T:
            try:
                result = await run()
            except errors.Refused as e:
                self._end(job_id, job, FAILED, e.problem, e.detail)
                raise
            except asyncio.CancelledError:
                if job.stop is None:  # the server is stopping
                    self._end(job_id, job, FAILED, P.JOB_FAILED, "the curator stopped mid-job")
                    raise
                self._end(job_id, job, FAILED, *job.stop)
                raise errors.Refused(*job.stop) from None
            except Exception:
                log.exception("%s job %s: the host raised", self.table.protocol, job_id)
                self._end(job_id, job, FAILED, P.INTERNAL, "internal error (see the curator's log)")
                raise errors.Refused(P.INTERNAL, "internal error (see the curator's log)") from None
            self._end(job_id, job, PUBLISHED, P.PROBLEM_UNSPECIFIED, "")
            return result

        def unstarted(task: "asyncio.Task") -> None:
            """A task cancelled before its body ran ends the job here (its ``except`` above never ran)."""
            if task.cancelled() and job.state not in (PUBLISHED, FAILED):
                self._end(job_id, job, FAILED, *(job.stop or (P.JOB_FAILED, "the curator stopped mid-job")))

        job.task = asyncio.ensure_future(body())
        job.task.add_done_callback(unstarted)
        job.task.add_done_callback(_retrieved)
        self.reaper.ensure_running()

    def stage(self, job_id: str, job: TaskJob, state: str) -> None:
        job.state = state
        self.table.observe(job_id)
        changes.bump()

    async def _expire(self, job_id: str) -> None:
        await self._stop(job_id, (P.PEER_UNREACHABLE, f"job {job_id} did not end by its deadline"))

    async def cancel(self, job_id: str) -> bool:
        """Stop the job (it ends FAILED, CANCELLED; its own ``finally`` cleans up; a queued one leaves the queue, never
        run); False if it is neither running nor queued. A job already being stopped is not cancelled again (that would cut its cleanup short): the call waits like the first."""
        if self.table.cancel_queued(job_id):
            return True
        return await self._stop(job_id, (P.CANCELLED, f"job {job_id} was cancelled by the operator"))

    async def _stop(self, job_id: str, why: tuple[int, str]) -> bool:
        job = self.table.get(job_id)
        if not isinstance(job, TaskJob) or job.task is None or job.task.done():
            return False
        if job.stop is None:
            job.stop = why
            job.task.cancel()
        await asyncio.wait({job.task}, timeout=CANCEL_WAIT)
        return True

    def _end(self, job_id: str, job: TaskJob, state: str, problem: int, detail: str) -> None:
        job.state, job.problem, job.detail = state, problem, detail
        self.table.finish(job_id, state, problem)
        if self.marks is not None:
            self.marks.ended(job_id, (problem, detail) if state == FAILED else None)
        changes.bump()


def _retrieved(task: "asyncio.Task") -> None:
    """A job's task ended: its failure is the job's (recorded), not an unhandled error of the event loop."""
    if not task.cancelled():
        task.exception()


class Changes:
    """One counter every job change bumps (a state noted, a hosted machine's step), so that a watcher of any job
    wakes when something changed and reads the job's summary again (JobOperations.WatchJob)."""

    def __init__(self) -> None:
        self.version = 0
        self._event: asyncio.Event | None = None

    def bump(self) -> None:
        self.version += 1
        if self._event is not None:
            self._event.set()
            self._event = None

    async def wait(self, since: int, timeout: float) -> int:
        """Wait until the counter moves past ``since`` (or ``timeout`` seconds pass); returns the counter."""
        if self.version == since:
            if self._event is None:
                self._event = asyncio.Event()
            try:
                await asyncio.wait_for(self._event.wait(), timeout)
            except TimeoutError:
                pass
        return self.version


changes = Changes()


class Reaper:
    """The asyncio side of a :class:`JobTable`: sweep it every ``every`` seconds and fail the jobs past their
    deadline with ``expire(job_id)``. Started on first use (it needs the running loop)."""

    def __init__(self, table: JobTable, expire: Callable[[str], Awaitable[None]], every: float = SWEEP_SECONDS) -> None:
        self.table = table
        self._expire = expire
        self._every = every
        self._task: asyncio.Task | None = None

    def ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._every)
            for job_id in self.table.sweep():
                if self.table.drop_queued(job_id, P.PEER_UNREACHABLE, f"job {job_id} waited for an admission slot past its deadline; it never ran "
                                          "and no party heard of it"):
                    await wake(self.table.get(job_id))
                    continue
                try:
                    await self._expire(job_id)
                except Exception:  # noqa: BLE001 - one job's failure path must not stop the sweeping
                    log.exception("%s job %s: failing it at its deadline raised", self.table.protocol, job_id)
                self.table.finish(job_id, "FAILED", P.PEER_UNREACHABLE)  # ended either way: never swept again

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()


async def wake(entry: Any) -> None:
    """Wake the watchers of a job's entry that a table changed without its machine (a queued job ended): a hosted
    machine's ``notify``; other entries have no watchers of their own (:data:`changes` is bumped already)."""
    notify = getattr(entry, "notify", None)
    if notify is not None:
        await notify()


def machine_outcome(hosted) -> tuple[str, bool, int]:
    """(state, terminal, problem) of a hosted role machine (``Hosted`` in :mod:`mpdp_services.common.runtime`): never
    a machine half-changed by a step in a worker thread (then it is the outcome from before the step)."""
    return hosted.outcome()


def read_outcome(m) -> tuple[str, bool, int]:
    """(state, terminal, problem) of a role machine no one is changing (on the event loop, no step in a thread)."""
    error = getattr(m, "error", None)
    return m.state, bool(m.terminal), (error.problem if error is not None else P.PROBLEM_UNSPECIFIED)
