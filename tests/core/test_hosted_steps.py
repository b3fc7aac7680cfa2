"""A hosted machine's step runs in a worker thread (services/common/runtime.py ``Hosted.deliver``): while it runs, the
machine is half-changed, and nobody on the event loop may see it so.

A watcher builds its status from several reads of the machine (state, then terminal, then the error). If the worker
thread takes the interpreter between two of them, the status mixes two states: the state before the step with the
``terminal`` after it, which ends a watch (Hosted.watch) on "AWAIT_…, terminal, no problem" although the job published.
The toy machine below opens that window on purpose: reading ``terminal`` on the event loop while its step is
parked hands the interpreter to the worker thread until the step has made its transition (what a thread switch at
that instruction does). Watchers must wait for the step's end; the job table must keep the state before the step."""

from __future__ import annotations

import asyncio
import threading

import pytest

from mpdp.messages import common_pb2, dca_pb2
from mpdp.protocol import Machine, Peer, ProtocolError, RemoteProtocolError, row
from mpdp_services.common import jobs
from mpdp_services.common.runtime import Hosted

CURATOR = Peer("curator", "curator")
PARTY = Peer("party", "party-1")
GUARD = 60.0  # seconds: only so that a broken run fails instead of hanging


class Toy(Machine):
    """Waits for the party's last message, then publishes (or fails, as the message asks) in one step."""

    __module__ = "mpdp.toy.curator"
    ROLE = "curator"
    STATES = ("AWAIT_LAST_SHARE", "PUBLISHED", "FAILED")
    TERMINAL = ("PUBLISHED", "FAILED")
    TABLE = (row("AWAIT_LAST_SHARE", "JobRef", "party", "PUBLISHED"),)
    PARTICIPANTS = frozenset({"party"})

    def __init__(self, job_id: str) -> None:
        super().__init__(job_id, CURATOR)
        self.loop_thread = threading.get_ident()
        self.entered, self.go, self.moved = threading.Event(), threading.Event(), threading.Event()

    def _kinds(self, sender: Peer) -> frozenset[str]:
        return frozenset({"party"}) if sender == PARTY else frozenset()

    def _on_JobRef(self, sender, message):
        self.entered.set()
        assert self.go.wait(GUARD)
        if message.job_id.endswith("-fails"):
            raise RemoteProtocolError(common_pb2.MALFORMED, "the last share is not in the ring")
        self.state = "PUBLISHED"
        self.moved.set()
        return []

    def _fail(self, e: ProtocolError) -> None:
        super()._fail(e)
        self.moved.set()

    @property
    def terminal(self) -> bool:
        if threading.get_ident() == self.loop_thread and self.entered.is_set() and not self.moved.is_set():
            # read on the event loop mid-step: the worker thread runs here until it has made its transition
            self.go.set()
            assert self.moved.wait(GUARD)
        return self.state in self.TERMINAL


def status(m: Toy) -> dca_pb2.DcaJobStatus:
    """As the curator builds a hosted machine's status (the DCA aggregator's, mpdp.dca.aggregator): the state, then
    terminal, then the failure."""
    st = dca_pb2.DcaJobStatus(job_id=m.job_id, state=m.state, terminal=m.terminal)
    if m.error is not None:
        st.problem, st.detail = m.error.problem, m.error.detail
    return st


async def _nothing(hosted, outputs) -> None:
    return None


async def _last_step(hosted: Hosted, job_id: str) -> asyncio.Future:
    """Deliver the job's last message (its step runs in a worker thread) and return once the step is inside it."""
    m = hosted.machine
    step = asyncio.ensure_future(hosted.deliver(PARTY, common_pb2.JobRef(job_id=job_id)))
    assert await asyncio.to_thread(m.entered.wait, GUARD)
    return step


async def _end(step: asyncio.Future) -> None:
    try:
        await step
    except ProtocolError:
        pass  # the failing step's refusal of the message


@pytest.mark.parametrize("job_id, state, problem", [("pk-toy", "PUBLISHED", common_pb2.PROBLEM_UNSPECIFIED), ("pk-toy-fails", "FAILED", common_pb2.MALFORMED)])
def test_a_watcher_woken_mid_step_sees_the_final_state_not_a_mix(job_id, state, problem):
    async def main() -> dca_pb2.DcaJobStatus:
        hosted = Hosted(Toy(job_id), _nothing)
        watch = hosted.watch(lambda: status(hosted.machine))
        first = await anext(watch)
        assert (first.state, first.terminal) == ("AWAIT_LAST_SHARE", False)
        step = await _last_step(hosted, job_id)
        await hosted.notify()  # another change of the job (an earlier message's) wakes the watcher
        seen = asyncio.ensure_future(anext(watch))
        asyncio.get_running_loop().call_soon(hosted.machine.go.set)  # runs after the watcher's first turn
        st = await seen
        await _end(step)
        return st

    st = asyncio.run(main())
    assert st.terminal
    assert (st.state, st.problem) == (state, problem), st
    assert bool(st.detail) == (problem != common_pb2.PROBLEM_UNSPECIFIED)


@pytest.mark.parametrize("job_id, state, problem", [("pk-toy", "PUBLISHED", common_pb2.PROBLEM_UNSPECIFIED), ("pk-toy-fails", "FAILED", common_pb2.MALFORMED)])
def test_the_job_table_read_mid_step_keeps_the_state_before_it_and_records_the_final_one(job_id, state, problem):
    async def main() -> tuple[jobs.JobRecord, jobs.JobRecord]:
        table: jobs.JobTable[Hosted[Toy]] = jobs.JobTable("toy", jobs.machine_outcome)
        hosted = Hosted(Toy(job_id), _nothing)
        hosted.on_change = table.observe
        table.admit(job_id, hosted, 60.0)
        step = await _last_step(hosted, job_id)
        table.sweep()  # the reaper's sweep (or a WatchJob's record lookup) while the step runs
        during = table.record(job_id)
        assert during is not None
        during = jobs.JobRecord(**{k: getattr(during, k) for k in ("job_id", "protocol", "state", "problem", "created", "ended", "lifecycle")})
        hosted.machine.go.set()
        await _end(step)
        after = table.record(job_id)
        assert after is not None
        return during, after

    during, after = asyncio.run(main())
    assert (during.state, during.terminal) == ("AWAIT_LAST_SHARE", False)  # the state before the step, whole
    assert (after.state, after.terminal, after.problem) == (state, True, problem)


def test_the_job_catalog_mid_step_answers_from_the_state_before_it():
    """`mpdp jobs` (the curator's catalog): mid-step a job's summary is its record's, whole; its live parts (the stage
    in words, the failure detail) are not read until the step has ended, and the catalog says the job is busy."""
    from mpdp_services.curator import catalog as catalogs

    def stage(hosted: Hosted[Toy]) -> str:
        m = hosted.machine
        return "published" if m.terminal else "waiting for the last share"

    async def main():
        table: jobs.JobTable[Hosted[Toy]] = jobs.JobTable("toy", jobs.machine_outcome)
        cat = catalogs.Catalog([catalogs.Source("toy", table, lambda j: False, stage=stage)])
        hosted = Hosted(Toy("pk-toy"), _nothing)
        hosted.on_change = table.observe
        table.admit("pk-toy", hosted, 60.0)
        before = cat.job("pk-toy")
        step = await _last_step(hosted, "pk-toy")
        during, busy = cat.job("pk-toy"), cat.busy("pk-toy")
        hosted.machine.go.set()
        await _end(step)
        return before, during, busy, cat.job("pk-toy"), cat.busy("pk-toy")

    before, during, busy, after, busy_after = asyncio.run(main())
    assert (before.state, before.terminal, before.stage) == ("AWAIT_LAST_SHARE", False, "waiting for the last share")
    assert busy and (during.state, during.terminal, during.stage) == ("AWAIT_LAST_SHARE", False, "await_last_share"), during
    assert not busy_after and (after.state, after.terminal, after.stage) == ("PUBLISHED", True, "published")
