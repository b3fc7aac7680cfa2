"""The curator's admission (services/curator/admission.py) and a job table's queue, sans IO on a fake clock: live
bounds, the fair queue's order (round-robin over operators, first come first served within one), its bounds,
cancelling and expiring a queued job (it never runs), and the seconds a job waited."""

from __future__ import annotations

import contextvars

import pytest

from mpdp.messages import common_pb2
from mpdp.protocol import ProtocolError
from mpdp_services.common import calls, jobs
from mpdp_services.common.pki import Identity
from mpdp_services.curator.admission import Admission

P = common_pb2


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def admission(federation: int, per_operator: int, **kw) -> tuple[Admission, Clock, list[tuple[str, float]]]:
    clock = Clock()
    granted: list[tuple[str, float]] = []
    return Admission(federation, per_operator, clock=clock, **kw), clock, granted


def queue(a: Admission, granted: list, job_id: str, operator: str) -> bool:
    return a.enqueue(job_id, operator, lambda waited: granted.append((job_id, waited)))


def test_a_free_slot_admits_at_once_and_a_full_federation_queues():
    a, _, granted = admission(2, 2)
    assert queue(a, granted, "a1", "A") and queue(a, granted, "a2", "A")
    assert not queue(a, granted, "a3", "A")
    assert (a.live(), a.queued(), a.is_queued("a3")) == (2, 1, True)
    a.release("a1")
    assert granted == [("a3", 0.0)] and a.live() == 2 and a.queued() == 0
    a.release("a1")  # idempotent: no second grant
    assert granted == [("a3", 0.0)]


def test_two_operators_are_served_round_robin_and_each_in_order():
    """Operator A queues 6 jobs before B queues 3: freed slots go A, B, A, B, A, B, then A's rest, each in order."""
    a, _, granted = admission(1, 1)
    assert queue(a, granted, "running", "C")
    for i in range(6):
        assert not queue(a, granted, f"A{i}", "A")
    for i in range(3):
        assert not queue(a, granted, f"B{i}", "B")
    order = []
    current = "running"
    for _ in range(9):
        a.release(current)
        current = granted[-1][0]
        order.append(current)
    assert order == ["A0", "B0", "A1", "B1", "A2", "B2", "A3", "A4", "A5"]


def test_an_operator_at_its_own_bound_does_not_hold_up_another():
    """A's queued job waits for one of A's own jobs to end; a slot another job frees goes to B, and A keeps its turn."""
    a, _, granted = admission(3, 2)
    assert queue(a, granted, "a1", "A") and queue(a, granted, "a2", "A") and queue(a, granted, "b1", "B")
    assert not queue(a, granted, "a3", "A")  # the federation is full (and A at its bound)
    assert not queue(a, granted, "b2", "B")
    a.release("b1")
    assert granted == [("b2", 0.0)]  # A is at its own bound: B's job takes the slot
    a.release("a1")
    assert granted[-1] == ("a3", 0.0)
    assert (a.live("A"), a.live("B")) == (2, 1)


def test_the_queue_is_bounded_per_operator_and_in_total():
    a, _, granted = admission(1, 1, queue_total=3, queue_per_operator=2)
    assert queue(a, granted, "x", "A")
    assert not queue(a, granted, "a1", "A") and not queue(a, granted, "a2", "A")
    with pytest.raises(ProtocolError) as e:
        queue(a, granted, "a3", "A")
    assert e.value.problem == P.OVERLOADED and "this operator" in e.value.detail
    assert not queue(a, granted, "b1", "B")
    with pytest.raises(ProtocolError) as e:
        queue(a, granted, "b2", "B")
    assert e.value.problem == P.OVERLOADED and "federation" in e.value.detail
    assert (a.queued(), a.queued("A"), a.queued("B"), a.is_queued("a3"), a.is_queued("b2")) == (3, 2, 1, False, False)


def test_no_queue_refuses_like_before():
    a, _, granted = admission(1, 1, queue_total=0)
    assert queue(a, granted, "x", "A")
    with pytest.raises(ProtocolError) as e:
        queue(a, granted, "y", "B")
    assert e.value.problem == P.OVERLOADED
    with pytest.raises(ProtocolError):  # the queue-less bound (no curator host uses it for an operator's job): refused whatever the queue
        a.admit("z", "B")


def test_a_withdrawn_job_never_gets_a_slot_and_the_wait_is_measured():
    a, clock, granted = admission(1, 1)
    assert queue(a, granted, "x", "A")
    assert not queue(a, granted, "a1", "A") and not queue(a, granted, "a2", "A")
    assert a.withdraw("a1") and not a.withdraw("a1") and not a.withdraw("x")
    clock.now += 7.5
    a.release("x")
    assert granted == [("a2", 7.5)] and a.live("A") == 1 and a.queued() == 0


# -- a job table with a shared admission: what the curator's services do ------------------------------------------

class Job:
    def __init__(self) -> None:
        self.state, self.terminal, self.problem = "RUNNING", False, P.PROBLEM_UNSPECIFIED


def outcome(j: Job) -> tuple[str, bool, int]:
    return j.state, j.terminal, j.problem


def as_operator(name: str, fn, *args, **kw):
    """Run ``fn`` as if serving an RPC of operator ``name`` (the gate sets the caller of the call's context)."""
    def run():
        calls.serving("/test/Submit", Identity("operator", name))
        return fn(*args, **kw)
    return contextvars.copy_context().run(run)


def test_a_queued_job_does_not_start_until_its_slot_then_runs_with_its_own_deadline():
    clock = Clock()
    adm = Admission(1, 1, clock=clock)
    t: jobs.JobTable[Job] = jobs.JobTable("test", outcome, clock=clock, admission=adm)
    started: list[str] = []
    first, second = Job(), Job()
    as_operator("A", t.admit, "j1", first, 10.0, start=lambda: started.append("j1"))
    rec = as_operator("B", t.admit, "j2", second, 10.0, start=lambda: started.append("j2"))
    assert started == ["j1"] and t.queued("j2") and rec.state == jobs.QUEUED and not rec.terminal
    assert t.live_count() == 1  # queued jobs are the admission's bound, not the table's
    clock.now += 8.0
    assert t.sweep() == []  # 8 s of its 10 s spent waiting: not overdue
    first.terminal, first.state = True, "RELEASED"
    t.observe("j1")  # j1 ended: its slot goes to j2
    assert started == ["j1", "j2"] and not t.queued("j2")
    r = t.record("j2")
    assert r.queue_seconds == 8.0 and [e.state for e in r.log()][:2] == [jobs.QUEUED, "ADMITTED"]
    clock.now += 9.0
    assert t.sweep() == []  # its deadline counts from its start: 10 s from then
    clock.now += 1.0
    assert t.sweep() == ["j2"]


def test_a_queued_job_cancelled_or_past_its_deadline_never_runs():
    clock = Clock()
    adm = Admission(1, 1, clock=clock)
    t: jobs.JobTable[Job] = jobs.JobTable("test", outcome, clock=clock, admission=adm)
    started: list[str] = []
    running = Job()
    as_operator("A", t.admit, "run", running, 100.0, start=lambda: started.append("run"))
    for j in ("c", "late", "next"):
        as_operator("B", t.admit, j, Job(), 5.0 if j == "late" else 100.0, start=lambda j=j: started.append(j))
    assert t.drop_queued("c", P.CANCELLED, "cancelled while queued")
    assert not t.drop_queued("c", P.CANCELLED, "again") and not t.drop_queued("run", P.CANCELLED, "not queued")
    clock.now += 6.0
    assert t.sweep() == ["late"]  # the reaper ends it with drop_queued
    assert t.drop_queued("late", P.PEER_UNREACHABLE, "waited past its deadline")
    for j, problem in (("c", P.CANCELLED), ("late", P.PEER_UNREACHABLE)):
        r = t.record(j)
        assert r.terminal and r.state == "FAILED" and r.problem == problem and r.detail, r
    assert adm.queued() == 1 and not adm.is_queued("c") and not adm.is_queued("late")
    running.terminal, running.state = True, "RELEASED"
    t.observe("run")
    assert started == ["run", "next"]  # neither dropped job ever started


def test_a_job_admitted_without_a_start_is_refused_and_a_sub_job_never_is():
    clock = Clock()
    adm = Admission(1, 1, clock=clock)
    t: jobs.JobTable[Job] = jobs.JobTable("test", outcome, clock=clock, admission=adm)
    as_operator("A", t.admit, "a", Job(), 10.0)
    with pytest.raises(ProtocolError) as e:
        as_operator("B", t.admit, "b", Job(), 10.0)  # no start: no queue (every curator host passes one)
    assert e.value.problem == P.OVERLOADED and "b" not in t

    def sub():
        with calls.sub_job():
            return t.admit("s", Job(), 10.0, start=lambda: None)
    rec = as_operator("A", sub)
    assert rec.state != jobs.QUEUED and adm.live() == 2  # counted, never refused or queued


def test_a_task_job_waits_in_the_same_queue_and_starts_as_its_submitter(tmp_path):
    """A job that is one asyncio task (LMGC, an ensemble) queues like any other (TaskJobs.submit): while it waits its
    state is QUEUED, its task does not exist and its durable mark is written; cancelled while queued it ends FAILED,
    CANCELLED, its mark a failure, its body never run; the other queued job starts when the slot frees, in its own
    submitter's call (not in the one that freed the slot)."""
    import asyncio

    ran: list[tuple[str, str]] = []

    async def main() -> None:
        adm = Admission(1, 1)
        table: jobs.JobTable[jobs.TaskJob] = jobs.JobTable("t", jobs.task_outcome, admission=adm)
        tasks: jobs.TaskJobs[str] = jobs.TaskJobs(table, tmp_path / "marks")
        gate = asyncio.Event()

        def body(job_id: str):
            async def run() -> str:
                ident = calls.caller()
                ran.append((job_id, ident.name if ident is not None else ""))
                if job_id == "t-1":
                    await gate.wait()
                return job_id
            return run

        held = {j: jobs.TaskJob("TRAINING") for j in ("t-1", "t-2", "t-3")}
        as_operator("A", tasks.submit, "t-1", held["t-1"], 60.0, body("t-1"))
        as_operator("B", tasks.submit, "t-2", held["t-2"], 60.0, body("t-2"))
        as_operator("C", tasks.submit, "t-3", held["t-3"], 60.0, body("t-3"))
        assert held["t-1"].task is not None and held["t-2"].task is None and held["t-3"].task is None
        assert table.queued("t-2") and held["t-2"].state == jobs.QUEUED and table.record("t-2").state == jobs.QUEUED
        assert (tmp_path / "marks" / "t-2.running.json").exists()  # a restart would report it
        assert await tasks.cancel("t-3")
        r = table.record("t-3")
        assert r.terminal and r.state == "FAILED" and r.problem == P.CANCELLED and "queued" in r.detail, r
        assert held["t-3"].state == "FAILED" and tasks.failure("t-3") == (P.CANCELLED, r.detail)
        assert not (tmp_path / "marks" / "t-3.running.json").exists() and not await tasks.cancel("t-3")
        gate.set()
        await asyncio.wait({held["t-1"].task})
        assert held["t-2"].task is not None  # t-1's end gave t-2 the slot
        await asyncio.wait({held["t-2"].task})
        assert table.record("t-2").state == "PUBLISHED" and table.record("t-2").queue_seconds > 0
        tasks.reaper.stop()

    asyncio.run(main())
    assert ran == [("t-1", "A"), ("t-2", "B")]  # t-3 never ran; t-2 ran as its own submitter
