"""The curator's jobs of every protocol, as value-free summaries: what `mpdp jobs` and the dashboard show.

Each protocol's servicer keeps its own :class:`~mpdp_services.common.JobTable` (the one job lifecycle) and its
own store of what it published. A :class:`Catalog` reads them all and answers one :class:`JobSummary` per job: id,
protocol, state, failure, its state log at the curator and per-stage seconds (``QUEUED``: the seconds it waited for an
admission slot, while it waits and after). Nothing else: no data, dataset
sizes, keys or released values (an operator fetches a release from the protocol's own service).

Jobs this process ran come from the tables (their records outlive the job's memory); jobs of an earlier run of the
curator come from the stores (what was published or failed survives a restart, its state log does not), with the
times each job was admitted and ended, which the catalog keeps in ``times_dir`` as each job ends.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from mpdp.messages import common_pb2
from mpdp.messages import operations_pb2 as pb
from mpdp_services.common.jobs import QUEUED, JobRecord, JobTable, state_seconds, valid_id

P = common_pb2.Problem
DEFAULT_LIMIT, MAX_LIMIT = 100, 1000


@dataclass
class Source:
    """One protocol's jobs at the curator.

    ``released(job_id)`` says whether something was published; ``stored()`` lists (job_id, state, Unix time) of
    jobs on disk (an earlier run's too); ``live(entry)`` reads a held entry's (failure detail, stage seconds);
    ``stage(entry)`` where a running job is, in words ("round 3 of 11"; its state by default).
    """

    protocol: str
    table: JobTable
    released: Callable[[str], bool]
    stored: Callable[[], Iterable[tuple[str, str, float]]] = lambda: ()
    live: Callable[[Any], tuple[str, dict[str, float]]] | None = None
    stage: Callable[[Any], str] | None = None
    failure: Callable[[str], "tuple[int, str] | None"] | None = None  # (Problem, detail) of a stored failed job


@dataclass
class Catalog:
    sources: list[Source] = field(default_factory=list)
    times_dir: Path | None = None  # <job_id>.json: {"created", "ended"} (Unix times) of every job that ended, for later runs

    def __post_init__(self) -> None:
        for source in self.sources:
            source.table.on_end.append(self._keep_times)

    def add(self, source: Source) -> None:
        self.sources.append(source)
        source.table.on_end.append(self._keep_times)

    def _keep_times(self, record: JobRecord) -> None:
        """A job ended: its admission and end times, durably, so a restarted curator lists it with its real duration."""
        if self.times_dir is None or record.ended_at is None or not valid_id(record.job_id):
            return
        from mpdp_services.common.durable import PUBLIC, write_atomic

        self.times_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(self.times_dir / f"{record.job_id}.json", json.dumps({"created": record.created_at, "ended": record.ended_at}), PUBLIC)

    def _times(self, job_id: str) -> tuple[float, float] | None:
        """(created, ended) kept for a job of an earlier run, if any (our own file; anything unreadable counts as none)."""
        if self.times_dir is None or not valid_id(job_id):
            return None
        try:
            doc = json.loads((self.times_dir / f"{job_id}.json").read_text())
            created, ended = float(doc["created"]), float(doc["ended"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return (created, ended) if 0 < created <= ended else None

    def protocols(self) -> list[str]:
        return [s.protocol for s in self.sources]

    def jobs(self, protocol: str = "", live_only: bool = False, limit: int = DEFAULT_LIMIT) -> list[pb.JobSummary]:
        """Summaries, newest first, at most ``limit`` (≤ :data:`MAX_LIMIT`)."""
        limit = min(max(limit, 0) or DEFAULT_LIMIT, MAX_LIMIT)
        out: list[pb.JobSummary] = []
        for source in self.sources:
            if protocol and source.protocol != protocol:
                continue
            seen: set[str] = set()
            for record in source.table.records():
                seen.add(record.job_id)
                out.append(self._summary(source, record))
            if not live_only:
                out.extend(_stored(source, job_id, state, at, self._times(job_id)) for job_id, state, at in source.stored() if job_id not in seen)
        if live_only:
            out = [s for s in out if not s.terminal]
        out.sort(key=lambda s: s.created_unix, reverse=True)
        return out[:limit]

    def job(self, job_id: str) -> pb.JobSummary | None:
        if not valid_id(job_id):
            return None
        for source in self.sources:
            record = source.table.record(job_id)
            if record is not None:
                return self._summary(source, record)
        for source in self.sources:
            for stored_id, state, at in source.stored():
                if stored_id == job_id:
                    return _stored(source, job_id, state, at, self._times(job_id))
        return None

    def busy(self, job_id: str) -> bool:
        """A worker thread is running a step of the job now: its summary would be the one from before the step."""
        for source in self.sources:
            entry = source.table.get(job_id)
            if entry is not None:
                return bool(getattr(entry, "stepping", False))
        return False

    def _summary(self, source: Source, record: JobRecord) -> pb.JobSummary:
        s = pb.JobSummary(
            job_id=record.job_id, protocol=source.protocol, state=record.state or "ADMITTED", terminal=record.terminal,
            problem=P.ValueType(record.problem), created_unix=record.created_at, ended_unix=record.ended_at or 0.0,
        )
        s.events.extend(pb.JobEvent(at_unix=e.at, state=e.state, problem=P.ValueType(e.problem)) for e in record.log())
        entry = source.table.get(record.job_id)
        s.held = entry is not None
        if getattr(entry, "stepping", False):  # half-changed by a step in a worker thread: its record alone answers
            entry = None
        stages: dict[str, float] = {}
        if entry is not None and source.live is not None:
            detail, stages = source.live(entry)
            if record.problem != P.PROBLEM_UNSPECIFIED:
                s.detail = detail[:240]
        s.stage_seconds.update(stages or state_seconds(record))
        if record.queue_seconds > 0 or record.state == QUEUED:  # the wait for an admission slot (job-model.md §5)
            s.stage_seconds[QUEUED] = record.queue_seconds
        if record.detail and not s.detail:  # ended by the table itself (cancelled or expired while queued)
            s.detail = record.detail
        if record.terminal or entry is None or source.stage is None or record.state == QUEUED:
            s.stage = (record.state or "admitted").lower()
        else:
            s.stage = source.stage(entry)
        s.released = record.terminal and record.problem == P.PROBLEM_UNSPECIFIED and source.released(record.job_id)
        return s


def _stored(source: Source, job_id: str, state: str, at: float, times: tuple[float, float] | None = None) -> pb.JobSummary:
    """A job of an earlier run, from its store: admitted and ended at the times kept for it, else both at ``at``
    (its file's time: a job that ended before times were kept)."""
    failed = state == "FAILED"
    created, ended = times if times is not None else (at, at)
    problem, detail = (source.failure(job_id) if failed and source.failure is not None else None) or (P.JOB_FAILED if failed else P.PROBLEM_UNSPECIFIED, "")
    return pb.JobSummary(job_id=job_id, protocol=source.protocol, state=state, terminal=True, created_unix=created, ended_unix=ended, stage=state.lower(),
                         problem=P.ValueType(problem), detail=detail[:240], released=not failed)


def files(folder: Path, suffix: str, state: str) -> Iterable[tuple[str, str, float]]:
    """(job_id, state, mtime) of ``folder/<job_id><suffix>`` files: the jobs a store holds."""
    if not folder.is_dir():
        return
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.endswith(suffix) and entry.is_file():
                job_id = entry.name[: -len(suffix)]
                if valid_id(job_id):
                    yield job_id, state, entry.stat().st_mtime


def task_live(job: Any) -> tuple[str, dict[str, float]]:
    """A task job's (:class:`jobs.TaskJob`) failure detail; it keeps no stage clock."""
    return job.detail, {}


def hosted_stage(hosted: Any) -> str:
    """A hosted role machine's stage: its stage clock's current stage, else its state."""
    stages = getattr(hosted.machine, "stages", None)
    current = getattr(stages, "_current", None) if stages is not None else None
    return current or str(hosted.machine.state).lower()


def hosted_live(hosted: Any) -> tuple[str, dict[str, float]]:
    """A hosted role machine's failure detail and stage seconds (machines with a StageClock)."""
    m = hosted.machine
    detail = m.error.detail if getattr(m, "error", None) is not None else ""
    stages = getattr(m, "stages", None)
    return detail, dict(stages.seconds) if stages is not None else {}
