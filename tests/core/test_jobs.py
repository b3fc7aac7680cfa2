"""JobTable: one lifecycle (created → running → terminal → record), deadlines, retention and bounds, on a fake clock."""

from __future__ import annotations

import pytest

from mpdp.messages import common_pb2
from mpdp.protocol import ProtocolError
from mpdp_services.common import errors, jobs

P = common_pb2


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Job:
    """A stand-in for a hosted machine: the table reads (state, terminal, problem) through ``outcome``."""

    def __init__(self) -> None:
        self.state, self.terminal, self.problem = "RUNNING", False, P.PROBLEM_UNSPECIFIED
        self.values = bytearray(1024)


def outcome(j: Job) -> tuple[str, bool, int]:
    return j.state, j.terminal, j.problem


def table(**kw) -> tuple[jobs.JobTable[Job], Clock]:
    clock = Clock()
    return jobs.JobTable("test", outcome, clock=clock, **kw), clock


@pytest.mark.parametrize("job_id", ["dca-0a1b2c", "pk-1", "a", "A.b_c-9", "x" * 64])
def test_ids_that_could_be_ours_are_valid(job_id):
    assert jobs.valid_id(job_id) and jobs.check_id(job_id) == job_id


@pytest.mark.parametrize("job_id", ["", "x" * 65, "x" * 300, "x" * 20_000, "../etc", ".hidden", "a/b", "a b", "a\nb", "é", "-a", "a:b"])
def test_ids_that_cannot_be_ours_name_no_job(job_id):
    assert not jobs.valid_id(job_id)
    with pytest.raises(ProtocolError) as e:
        jobs.check_id(job_id)
    assert e.value.problem == P.UNKNOWN_JOB
    assert len(job_id) < 5 or job_id[:5] not in e.value.detail  # never echoed


def test_lifecycle_running_terminal_then_record_after_retention():
    t, clock = table(retention=60.0)
    j = Job()
    rec = t.admit("job-1", j, 30.0)
    assert rec.lifecycle == jobs.RUNNING and t.get("job-1") is j and t.live_count() == 1
    j.state, j.terminal = "RELEASED", True
    clock.now += 5
    assert t.sweep() == []
    rec = t.record("job-1")
    assert rec.terminal and rec.state == "RELEASED" and rec.ended == 1005.0 and t.live_count() == 0
    assert t.get("job-1") is j  # retained: a late peer still gets its answer
    clock.now += 59.9
    t.sweep()
    assert t.get("job-1") is j
    clock.now += 0.2
    t.sweep()
    assert t.get("job-1") is None  # left memory
    rec = t.record("job-1")
    assert rec is not None and rec.terminal and rec.state == "RELEASED" and rec.problem == P.PROBLEM_UNSPECIFIED
    assert (rec.created, rec.ended) == (1000.0, 1005.0)
    assert not any(isinstance(v, (bytes, bytearray)) for v in vars(rec).values())  # value-free
    assert "job-1" in t  # and never admitted again
    with pytest.raises(ProtocolError) as e:
        t.admit("job-1", Job(), 30.0)
    assert e.value.problem == P.REPLAY


def test_created_then_started():
    t, _ = table()
    rec = t.admit("job-1", Job(), 30.0, running=False)
    assert rec.lifecycle == jobs.CREATED
    t.start("job-1")
    assert t.record("job-1").lifecycle == jobs.RUNNING


def test_deadline_returns_live_jobs_only():
    t, clock = table()
    a, b = Job(), Job()
    t.admit("a", a, 10.0)
    t.admit("b", b, 10.0)
    b.terminal, b.state = True, "RELEASED"
    clock.now += 9.9
    assert t.sweep() == []
    clock.now += 0.1
    assert t.sweep() == ["a"]
    t.finish("a", "FAILED", P.PEER_UNREACHABLE)
    assert t.sweep() == []
    rec = t.record("a")
    assert rec.terminal and rec.problem == P.PEER_UNREACHABLE and rec.problem_name == "PEER_UNREACHABLE"


def test_failure_reason_comes_from_the_entry():
    t, _ = table()
    j = Job()
    t.admit("a", j, 10.0)
    j.state, j.terminal, j.problem = "FAILED", True, P.INSUFFICIENT_NOISE
    t.finish("a", "IGNORED", P.JOB_FAILED)  # the entry's own outcome wins over the caller's guess
    rec = t.record("a")
    assert (rec.state, rec.problem) == ("FAILED", P.INSUFFICIENT_NOISE)


def test_live_jobs_are_bounded_and_terminal_ones_do_not_count():
    t, _ = table(max_live=2)
    a = Job()
    t.admit("a", a, 10.0)
    t.admit("b", Job(), 10.0)
    with pytest.raises(ProtocolError) as e:
        t.admit("c", Job(), 10.0)
    assert e.value.problem == P.OVERLOADED and "c" not in t
    a.terminal, a.state = True, "RELEASED"
    t.admit("c", Job(), 10.0)
    assert t.live_count() == 2


def test_retained_entries_are_bounded_by_count():
    t, _ = table(retention=3600.0, max_retained=3)
    for i in range(10):
        t.admit(f"j{i}", Job(), 10.0)
        t.finish(f"j{i}", "RELEASED")
    t.sweep()
    assert t.held() == ["j7", "j8", "j9"]  # the newest terminal entries; the rest are records
    assert all(t.record(f"j{i}").state == "RELEASED" for i in range(10))


def test_records_are_bounded_oldest_first():
    t, _ = table(retention=0.0, max_records=4)
    for i in range(10):
        t.admit(f"j{i}", Job(), 10.0)
        t.finish(f"j{i}", "RELEASED", keep=False)
    assert [t.record(f"j{i}") is not None for i in range(10)] == [False] * 6 + [True] * 4
    assert t.held() == []


def test_forget_keeps_a_record_of_an_unfinished_job_as_failed():
    t, _ = table()
    t.admit("a", Job(), 10.0)
    t.forget("a")
    rec = t.record("a")
    assert t.get("a") is None and rec.terminal and rec.problem == P.JOB_FAILED and t.live_count() == 0


def test_a_string_that_is_no_id_is_never_looked_up_or_admitted():
    t, _ = table()
    assert t.get("x" * 300) is None and t.record("x" * 300) is None and ("x" * 300) not in t
    with pytest.raises(ProtocolError) as e:
        t.admit("x" * 300, Job(), 10.0)
    assert e.value.problem == P.MALFORMED and "xxxx" not in e.value.detail


def test_hard_deadline_leaves_a_grace_period():
    assert jobs.hard_deadline(5.0) == 15.0 and jobs.hard_deadline(100.0) == 120.0


def test_bad_bounds_are_refused():
    with pytest.raises(ValueError):
        jobs.JobTable("x", max_live=0)


def test_task_jobs_run_detached_end_cancelled_on_cancel_and_say_how_they_ended():
    """TaskJobs (ensembles and local releases run as the curator's own tasks): a cancel fails a job CANCELLED (its
    own cleanup runs) and leaves the others running; a refusal fails it with its Problem; a release publishes it; an
    unknown or finished job cannot be cancelled. Every end bumps the watchers' counter."""
    import asyncio

    P = jobs.P
    cleaned: list[str] = []

    async def main() -> None:
        table: jobs.JobTable[jobs.TaskJob] = jobs.JobTable("t", jobs.task_outcome)
        tasks: jobs.TaskJobs[str] = jobs.TaskJobs(table)
        gate = asyncio.Event()

        async def waits(job_id: str) -> str:
            try:
                await gate.wait()
                return f"release of {job_id}"
            finally:
                cleaned.append(job_id)

        async def refused() -> str:
            raise errors.Refused(P.JOB_FAILED, "a party refused")

        async def ended(job_id: str):
            """The job's own task, once it has ended: its release, or the errors.Refused it failed with."""
            task = table.get(job_id).task
            await asyncio.wait({task})
            return task.exception() or task.result()

        for job_id in ("t-1", "t-2"):
            job = jobs.TaskJob("RUNNING")
            table.admit(job_id, job, 60.0)
            tasks.start(job_id, job, lambda j=job_id: waits(j))
        table.admit("t-3", failing := jobs.TaskJob("RUNNING"), 60.0)
        tasks.start("t-3", failing, refused)
        await asyncio.sleep(0)  # the jobs' tasks have started (as a submit's answer lets them before any cancel)
        before = jobs.changes.version
        assert await tasks.cancel("t-2") and not await tasks.cancel("t-9")
        assert table.record("t-2").state == "FAILED" and table.record("t-2").problem == P.CANCELLED and jobs.changes.version > before
        e = await ended("t-2")
        assert isinstance(e, errors.Refused) and e.problem == P.CANCELLED and not await tasks.cancel("t-2")
        e = await ended("t-3")
        assert isinstance(e, errors.Refused) and e.problem == P.JOB_FAILED and table.record("t-3").state == "FAILED"
        assert table.record("t-1").state == "RUNNING"
        gate.set()
        assert await ended("t-1") == "release of t-1" and table.record("t-1").state == "PUBLISHED"

    asyncio.run(main())
    assert sorted(cleaned) == ["t-1", "t-2"]


def test_a_second_cancel_does_not_cut_the_first_ones_cleanup_short():
    """An operator who cancels a task job again while its cleanup runs (a vote sum being aborted at the nodes, then
    dropped from memory) gets the same answer; the cleanup runs to its end and the job ends CANCELLED."""
    import asyncio

    P = jobs.P
    cleaned: list[str] = []

    async def main() -> None:
        table: jobs.JobTable[jobs.TaskJob] = jobs.JobTable("t", jobs.task_outcome)
        tasks: jobs.TaskJobs[str] = jobs.TaskJobs(table)
        started, cleaning, finish = asyncio.Event(), asyncio.Event(), asyncio.Event()

        async def runs() -> str:
            try:
                started.set()
                await asyncio.Event().wait()  # runs until cancelled
                return "never"
            finally:
                cleaning.set()
                await finish.wait()  # e.g. the nodes acknowledging the abort
                cleaned.append("t-1")

        job = jobs.TaskJob("RUNNING")
        table.admit("t-1", job, 60.0)
        tasks.start("t-1", job, runs)
        await started.wait()
        first = asyncio.ensure_future(tasks.cancel("t-1"))
        await cleaning.wait()
        second = asyncio.ensure_future(tasks.cancel("t-1"))
        await asyncio.sleep(0)  # the second cancel has run its first step
        finish.set()
        assert await first and await second
        record = table.record("t-1")
        assert record is not None and record.state == "FAILED" and record.problem == P.CANCELLED

    asyncio.run(main())
    assert cleaned == ["t-1"]


def test_a_task_job_cancelled_before_its_task_ran_ends_cancelled():
    """A cancel that lands before the job's task took its first step (its body never runs, so no ``except`` in it can
    end the job) still ends the job FAILED, CANCELLED, at once, not RUNNING until its deadline."""
    import asyncio

    ran: list[str] = []

    async def main() -> None:
        table: jobs.JobTable[jobs.TaskJob] = jobs.JobTable("t", jobs.task_outcome)
        tasks: jobs.TaskJobs[str] = jobs.TaskJobs(table)

        async def body() -> str:
            ran.append("t-1")
            return "release"

        job = jobs.TaskJob("RUNNING")
        table.admit("t-1", job, 60.0)
        tasks.start("t-1", job, body)
        before = jobs.changes.version
        assert await tasks.cancel("t-1")  # no await between start and cancel: the task has not run
        record = table.record("t-1")
        assert record is not None and record.state == "FAILED" and record.problem == jobs.P.CANCELLED, record
        assert jobs.changes.version > before and not await tasks.cancel("t-1")
        tasks.reaper.stop()

    asyncio.run(main())
    assert ran == []


def test_a_task_job_past_its_deadline_is_stopped_like_a_cancel():
    """TaskJobs sweep their table: a job still running past its deadline ends FAILED, PEER_UNREACHABLE, and its own
    cleanup runs (the vote sum of an ensemble is aborted the same way as on a cancel)."""
    import asyncio

    cleaned: list[str] = []

    async def main() -> None:
        table: jobs.JobTable[jobs.TaskJob] = jobs.JobTable("t", jobs.task_outcome)
        tasks: jobs.TaskJobs[str] = jobs.TaskJobs(table)

        async def forever() -> str:
            try:
                await asyncio.Event().wait()
                return "never"
            finally:
                cleaned.append("t-late")

        job = jobs.TaskJob("RUNNING")
        table.admit("t-late", job, 0.0)  # already past its deadline: the first sweep stops it
        tasks.start("t-late", job, forever)
        await asyncio.wait({job.task}, timeout=30)  # the job's own task, to its end
        assert job.task.done(), "the sweep did not stop the job"
        e = job.task.exception()
        assert isinstance(e, errors.Refused) and e.problem == jobs.P.PEER_UNREACHABLE and table.record("t-late").state == "FAILED"
        tasks.reaper.stop()

    asyncio.run(main())
    assert cleaned == ["t-late"]


def test_job_marks_survive_a_restart_as_failures_with_the_sites_to_tell(tmp_path):
    """A job's durable mark (0600 in a 0700 folder) from admission; at a restart, every job still marked running is
    FAILED with the restart's detail and its sites are handed back; a job that ended leaves no running mark."""
    import os
    import stat

    marks = jobs.JobMarks(tmp_path / "pk", "pathak2010")
    marks.running("pk-1", {"party-1": "127.0.0.1:1", "party-2": "127.0.0.1:2"})
    marks.running("pk-2", {"party-1": "127.0.0.1:1"})
    marks.ended("pk-2", None)  # published: its protocol's store holds it, no failure
    marks.running("pk-3", {})
    marks.ended("pk-3", (common_pb2.CANCELLED, "cancelled by the operator"))
    assert stat.S_IMODE(os.stat(tmp_path / "pk").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "pk" / "pk-1.running.json").st_mode) == 0o600

    again = jobs.JobMarks(tmp_path / "pk", "pathak2010")  # the restarted process
    assert again.recover() == [("pk-1", {"party-1": "127.0.0.1:1", "party-2": "127.0.0.1:2"})]
    assert again.recover() == []  # once
    assert again.failure("pk-1") == (common_pb2.JOB_FAILED, jobs.RESTARTED)
    assert again.failure("pk-2") is None
    assert again.failure("pk-3") == (common_pb2.CANCELLED, "cancelled by the operator")
    assert sorted(j for j, state, _ in again.failures()) == ["pk-1", "pk-3"] and {s for _, s, _ in again.failures()} == {jobs.FAILED}
    assert again.failure("../pk-1") is None  # not an id: no file is looked up


def test_job_marks_keep_a_bounded_number_of_failures_oldest_forgotten_first(tmp_path):
    import os

    marks = jobs.JobMarks(tmp_path, "hamm2016", max_failures=3)
    for i in range(5):
        marks.running(f"hm-{i}")
        marks.ended(f"hm-{i}", (common_pb2.JOB_FAILED, "lost"))
        os.utime(tmp_path / f"hm-{i}.failed.json", (1000.0 + i, 1000.0 + i))  # distinct ages whatever the clock's resolution
    assert sorted(j for j, _, _ in marks.failures()) == ["hm-2", "hm-3", "hm-4"]
