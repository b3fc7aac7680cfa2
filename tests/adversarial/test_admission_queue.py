"""Admission as a queue: more jobs than slots, from two operators, over real processes and mutual TLS; Pathak jobs and
the other protocols' (LMGC, dp-gd, DCA) in the one queue.

Raw operator clients (two certificates) submit through the job host while the first jobs hold their slots (a paused
party, or operator DCA jobs idle for want of clients). Invariants:

* every submission past the live bounds answers at once QUEUED (never OVERLOADED while the queue has room);
* a queued job is told to no party: no party's ledger holds it while it waits, and a queued job cancelled never
  reaches any party at all;
* freed slots go to the two operators in turn (round-robin), each operator's jobs in the order submitted;
* every admitted job publishes, and each party is charged once per published job;
* an operator's DCA job (idle while it waits for clients) may not ask for a deadline past the slot cap;
* jobs of every protocol wait in the same queue, in the same order, and publish once they have a slot; a queued DCA
  job is fetched by no client (GetJob answers as for no job), and a queued job cancelled reaches no party.
"""

from __future__ import annotations

import os
import signal

import grpc
import pytest

from mpdp.messages import common_pb2, dca_pb2_grpc, local_release_pb2, operations_pb2 as ops, operations_pb2_grpc as ops_grpc

from .conftest import (assert_all_serving, assert_clean, assert_status, channel, dca_spec, learner_spec, ledger_job_ids, mint, operator_curator, pathak_spec,
                       refused, site_tls, start_federation)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    """Two live jobs in the federation (two per operator): the third job of anyone waits."""
    f = start_federation(tmp_path_factory.mktemp("queue"), budget=1000.0, key_bits=512,
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


def lmgc(seed: str) -> ops.JobSubmission:
    spec = local_release_pb2.LocalModelJobSpec(dataset="synthetic", model="lmgc", mode=common_pb2.CORRECTED, epsilon=1.0, parties=["party-1", "party-2", "party-3"],
                                               ridge=1e-3, data_norm=1.0, simulation_seed=seed.encode())
    setattr(spec, "lambda", 1e-3)
    return ops.JobSubmission(lmgc=spec)


def test_jobs_of_every_protocol_wait_in_the_one_queue_in_turn_and_publish(fed):
    """Operator A's two DCA jobs (idle: no client submits) hold both slots. Then A queues an LMGC and a dp-gd job, B
    the same, a DCA job and an LMGC job it cancels: every one answers QUEUED at once (none OVERLOADED); no party's
    ledger holds a queued job; a client (party certificate) asking for the queued DCA job is answered as for a job
    that does not exist. B's cancels end FAILED, CANCELLED. A's DCA jobs are cancelled (their slots free): the queued
    jobs get the slots A, B, A, B (each operator's in the order submitted) and all publish; the cancelled LMGC job
    reached no party."""
    other = mint(fed, "operator", "operator-2")
    with operator_curator(fed) as a, channel(fed, "curator", other) as b:
        sa, sb = ops_grpc.JobOperationsStub(a), ops_grpc.JobOperationsStub(b)
        holders = [sa.SubmitJob(ops.JobSubmission(dca=dca_spec(deadline=300.0)), timeout=60) for _ in range(2)]
        assert all(h.state != "QUEUED" and not h.terminal for h in holders), holders
        a_jobs = [sa.SubmitJob(lmgc("mix-a-lmgc"), timeout=60), sa.SubmitJob(ops.JobSubmission(learner=learner_spec(seed=b"mix-a-dpgd")), timeout=60)]
        b_jobs = [sb.SubmitJob(lmgc("mix-b-lmgc"), timeout=60), sb.SubmitJob(ops.JobSubmission(learner=learner_spec(seed=b"mix-b-dpgd")), timeout=60)]
        b_dca = sb.SubmitJob(ops.JobSubmission(dca=dca_spec(deadline=300.0)), timeout=60)
        b_cancel = sb.SubmitJob(lmgc("mix-b-cancel"), timeout=60)
        waiting = [*a_jobs, *b_jobs, b_dca, b_cancel]
        assert all(s.state == "QUEUED" and s.stage == "queued" and not s.terminal for s in waiting), [(s.protocol, s.state) for s in waiting]
        assert [s.protocol for s in waiting] == ["lmgc", "dpgd", "lmgc", "dpgd", "dca", "lmgc"], waiting
        with channel(fed, "curator", site_tls(fed, "party-1")) as client:  # a client of the queued DCA job cannot fetch it
            getjob = dca_pb2_grpc.DcaCuratorStub(client).GetJob
            e_queued = refused(lambda: getjob(common_pb2.JobRef(job_id=b_dca.job_id), timeout=30))
            e_none = refused(lambda: getjob(common_pb2.JobRef(job_id=b_dca.job_id[:-1] + ("0" if b_dca.job_id[-1] != "0" else "1")), timeout=30))
        assert e_queued.code() == e_none.code() and "UNKNOWN_JOB" in (e_queued.details() or ""), (e_queued.code(), e_queued.details())
        for p in fed.parties:  # told to no party while queued
            assert not ledger_job_ids(fed, p) & {s.job_id for s in waiting}, p
        for s in (b_dca, b_cancel):
            gone = sb.CancelJob(common_pb2.JobRef(job_id=s.job_id), timeout=60)
            assert gone.terminal and gone.state == "FAILED" and gone.problem == common_pb2.CANCELLED and "queued" in gone.detail, gone
        for h in holders:  # each cancel frees a slot for the queue
            assert sa.CancelJob(common_pb2.JobRef(job_id=h.job_id), timeout=60).terminal
    with operator_curator(fed) as a, channel(fed, "curator", other) as b:
        ends = {s.job_id: last(a, s.job_id) for s in a_jobs} | {s.job_id: last(b, s.job_id) for s in b_jobs}
        assert all(e.state in ("PUBLISHED", "DONE") and e.released for e in ends.values()), {j: (e.protocol, e.state, e.detail) for j, e in ends.items()}
        e = refused(lambda: ops_grpc.JobOperationsStub(b).GetRelease(common_pb2.JobRef(job_id=b_cancel.job_id), timeout=60))
        assert "JOB_FAILED" in (e.details() or ""), e.details()
    for j in ends:
        assert ends[j].stage_seconds["QUEUED"] > 0, ends[j]  # the wait is in the summary
    order = sorted(ends, key=lambda j: started_at(ends[j]))
    assert order == [a_jobs[0].job_id, b_jobs[0].job_id, a_jobs[1].job_id, b_jobs[1].job_id], [ends[j].protocol for j in order]
    lmgc_ids = {a_jobs[0].job_id, b_jobs[0].job_id}
    for p in fed.parties:  # the published LMGC jobs reached every party; the cancelled one none
        ids = ledger_job_ids(fed, p)
        assert ids >= lmgc_ids and b_cancel.job_id not in ids, (p, ids)
    assert_all_serving(fed)
