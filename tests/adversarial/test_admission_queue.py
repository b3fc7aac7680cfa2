"""Admission as a queue: more Pathak jobs than slots, from two operators, over real processes and mutual TLS.

Raw operator clients (two certificates) submit through the job host while a party is paused (so the first jobs
hold their slots). Invariants:

* every submission past the live bounds answers at once QUEUED (never OVERLOADED while the queue has room);
* a queued job is told to no party: no party's ledger holds it while it waits, and a queued job cancelled never
  reaches any party at all;
* freed slots go to the two operators in turn (round-robin), each operator's jobs in the order submitted;
* every admitted job publishes, and each party is charged once per published job;
* an operator's DCA job (idle while it waits for clients) may not ask for a deadline past the slot cap.
"""

from __future__ import annotations

import os
import signal

import grpc
import pytest

from mpdp.messages import common_pb2, operations_pb2 as ops, operations_pb2_grpc as ops_grpc

from .conftest import (assert_all_serving, assert_clean, assert_status, channel, dca_spec, ledger_job_ids, mint, operator_curator, pathak_spec, refused,
                       start_federation)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    """Two live jobs in the federation (two per operator): the third job of anyone waits."""
    f = start_federation(tmp_path_factory.mktemp("queue"), budget=1000.0, nodes=[], key_bits=512,
                         curator_options={"max_live_jobs_federation": 2, "max_live_jobs_per_operator": 2})
    yield f
    f.stop()


def submit(ch, seed: str) -> ops.JobSummary:
    return ops_grpc.JobOperationsStub(ch).SubmitJob(ops.JobSubmission(pathak2010=pathak_spec(seed=seed.encode(), deadline=300.0)), timeout=60)


def last(ch, job_id: str) -> ops.JobSummary:
    end = None
    for end in ops_grpc.JobOperationsStub(ch).WatchJob(common_pb2.JobRef(job_id=job_id), timeout=300):
        if end.terminal:
            break
    assert end is not None and end.terminal, end
    return end


def started_at(summary: ops.JobSummary) -> float:
    """When the job got its slot: its ADMITTED event (after QUEUED) in the curator's state log."""
    return next(e.at_unix for e in summary.events if e.state == "ADMITTED")


def test_more_jobs_than_slots_from_two_operators_are_queued_served_in_turn_and_all_publish(fed):
    other = mint(fed, "operator", "operator-2")
    paused = fed.procs["party-3"].popen
    os.kill(paused.pid, signal.SIGSTOP)  # the first two jobs wait for party-3's acceptance: they hold both slots
    try:
        with operator_curator(fed) as a, channel(fed, "curator", other) as b:
            first_a = [submit(a, f"q-a{i}") for i in range(4)]
            first_b = [submit(b, f"q-b{i}") for i in range(4)]
            cancelled = submit(a, "q-a-cancel")
            assert cancelled.state == "QUEUED" and not cancelled.terminal
            gone = ops_grpc.JobOperationsStub(a).CancelJob(common_pb2.JobRef(job_id=cancelled.job_id), timeout=60)
            assert gone.terminal and gone.state == "FAILED" and gone.problem == common_pb2.CANCELLED and "queued" in gone.detail, gone
            marks = fed.workdir / "curator" / "state" / "models"  # its durable mark ended: a restart would not call it lost
            assert not (marks / f"{cancelled.job_id}.running.json").exists() and (marks / f"{cancelled.job_id}.failed.json").exists()
        assert [s.state == "QUEUED" for s in first_a] == [False, False, True, True], first_a
        assert all(s.state == "QUEUED" and s.stage == "queued" and not s.terminal for s in first_b), first_b
        queued = [s.job_id for s in first_a[2:] + first_b]
        for p in ("party-1", "party-2"):  # told to no party while they wait: no charge, no entry
            assert not ledger_job_ids(fed, p) & {*queued, cancelled.job_id}, p
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    with operator_curator(fed) as a, channel(fed, "curator", other) as b:
        ends = {s.job_id: last(a, s.job_id) for s in first_a} | {s.job_id: last(b, s.job_id) for s in first_b}
    assert all(e.state == "PUBLISHED" and e.released for e in ends.values()), {j: (e.state, e.detail) for j, e in ends.items()}
    for j in queued:
        assert ends[j].stage_seconds["QUEUED"] > 0, ends[j]  # the wait is in the summary
    a3, a4 = (s.job_id for s in first_a[2:])
    b1, b2, b3, b4 = (s.job_id for s in first_b)
    order = sorted(queued, key=lambda j: started_at(ends[j]))
    assert order == [a3, b1, a4, b2, b3, b4], order  # in turn, each operator's jobs in the order submitted
    for p in fed.parties:  # each published job charged once; the cancelled one never reached a party
        ids = ledger_job_ids(fed, p)
        assert ids >= set(ends) and cancelled.job_id not in ids, p
    assert_all_serving(fed)


def test_a_dca_job_may_not_hold_a_slot_longer_than_the_cap(fed):
    """An operator's DCA job waits idle for its clients: a deadline past ``max_dca_deadline_seconds`` (3600 s) is
    refused INVALID_JOB naming the cap, without echoing the request; the curator keeps serving."""
    with operator_curator(fed) as ch:
        e = refused(lambda: ops_grpc.JobOperationsStub(ch).SubmitJob(ops.JobSubmission(dca=dca_spec(deadline=86_400.0)), timeout=60))
    assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
    assert "INVALID_JOB" in (e.details() or "") and "at most 3600 s" in (e.details() or ""), e.details()
    assert_clean(e)
    assert_all_serving(fed)
