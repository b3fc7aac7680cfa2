"""The curator's one job host (JobOperations): every protocol's job submitted, watched, cancelled and fetched the
same way, over real processes and mutual TLS.

A submission answers with the job's id and first summary at once (the curator runs the job; the operator may go
away); WatchJob streams the job's summary on every change until it ends; GetRelease gives what it published, the
message the curator's durable store holds. Ensembles and local releases run as the curator's own tasks: a
cancel stops one at once (FAILED, CANCELLED) and the parties' charges stay. Raw clients: a party or compute-node
certificate cannot submit, watch or cancel; another operator sees no job of ours; a malformed submission or id is
refused; the host keeps serving.
"""

from __future__ import annotations

import os
import re
import signal
import time

import grpc
import pytest

from mpdp.messages import common_pb2, hamm2016_pb2 as hm, local_release_pb2 as lr
from mpdp.messages import operations_pb2 as ops, operations_pb2_grpc as ops_grpc

from .conftest import (NODES, PARTIES, assert_all_serving, assert_status, channel, dca_spec, ledger_job_ids, mint, operator_curator, pathak_spec, refused,
                       site_tls)

pytestmark = pytest.mark.integration


def lmgc_spec(**kw) -> lr.LocalModelJobSpec:
    base = dict(dataset="synthetic", model="lmgc", epsilon=2.0, parties=PARTIES, mode=common_pb2.CORRECTED, ridge=1e-3, data_norm=1.0, simulation_seed=b"host")
    base.update(kw)
    spec = lr.LocalModelJobSpec(**base)
    setattr(spec, "lambda", 1e-3)
    return spec


def ensemble_spec(**kw) -> hm.EnsembleJobSpec:
    base = dict(dataset="synthetic", auxiliary="aux", method="soft", lam=1e-2, epsilon=2.0, classes=["-1", "1"], parties=PARTIES, compute_nodes=NODES,
                local_lam=1e-2, simulation_seed=b"host")
    base.update(kw)
    return hm.EnsembleJobSpec(**base)


def host(ch: grpc.Channel) -> ops_grpc.JobOperationsStub:
    return ops_grpc.JobOperationsStub(ch)


def watched(ch: grpc.Channel, job_id: str) -> list[ops.JobSummary]:
    return list(host(ch).WatchJob(common_pb2.JobRef(job_id=job_id), timeout=300))


@pytest.mark.parametrize("field, spec, stage", [("lmgc", lmgc_spec, "training"), ("hamm2016", ensemble_spec, "voting")])
def test_a_task_job_is_submitted_at_once_watched_to_its_end_and_fetched(fed, field, spec, stage):
    with operator_curator(fed) as ch:
        first = host(ch).SubmitJob(ops.JobSubmission(**{field: spec()}), timeout=60)
        assert first.protocol == field and not first.terminal and first.stage == stage  # the id at once; the job runs on
        seen = watched(ch, first.job_id)
        assert seen[0].job_id == first.job_id and seen[-1].terminal and seen[-1].state == "PUBLISHED" and seen[-1].released
        assert all(not s.terminal for s in seen[:-1])
        got = host(ch).GetRelease(common_pb2.JobRef(job_id=first.job_id), timeout=60)
    folder, kind = ("local", lr.LocalModelSet) if field == "lmgc" else ("ensembles", hm.EnsembleRelease)
    stored = kind.FromString((fed.workdir / "curator" / "state" / folder / f"{first.job_id}.binpb").read_bytes())
    assert got.protocol == field and getattr(got, field) == stored and stored.job_id == first.job_id  # what the curator's store holds
    for p in PARTIES:  # each party spent for it
        assert first.job_id in ledger_job_ids(fed, p)


def test_pathak_and_dca_jobs_go_through_the_same_host(fed):
    with operator_curator(fed) as ch:
        pk = host(ch).SubmitJob(ops.JobSubmission(pathak2010=pathak_spec(seed=b"host")), timeout=120)
        dca = host(ch).SubmitJob(ops.JobSubmission(dca=dca_spec(deadline=60.0)), timeout=60)
        assert pk.protocol == "pathak2010" and dca.protocol == "dca" and not dca.terminal
        assert watched(ch, pk.job_id)[-1].state == "PUBLISHED"
        assert host(ch).GetRelease(common_pb2.JobRef(job_id=pk.job_id), timeout=60).pathak2010.job_id == pk.job_id
        e = refused(lambda: host(ch).GetRelease(common_pb2.JobRef(job_id=dca.job_id), timeout=60))
        assert_status(e, grpc.StatusCode.FAILED_PRECONDITION)  # still waiting for its clients
        cancelled = host(ch).CancelJob(common_pb2.JobRef(job_id=dca.job_id), timeout=60)
        assert cancelled.terminal and cancelled.problem == common_pb2.CANCELLED
        e = refused(lambda: host(ch).GetRelease(common_pb2.JobRef(job_id=dca.job_id), timeout=60))
        assert_status(e, grpc.StatusCode.ABORTED)  # ended and published nothing


def test_cancel_stops_a_waiting_ensemble_at_once_and_the_charges_stay(fed):
    """party-3 is stopped (SIGSTOP): the curator's vote request to it hangs, so the job waits; the operator cancels."""
    pid = fed.procs["party-3"].popen.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        with operator_curator(fed) as ch:
            first = host(ch).SubmitJob(ops.JobSubmission(hamm2016=ensemble_spec(simulation_seed=b"cancel")), timeout=60)
            stream = host(ch).WatchJob(common_pb2.JobRef(job_id=first.job_id), timeout=300)
            next(stream)
            ended = host(ch).CancelJob(common_pb2.JobRef(job_id=first.job_id), timeout=60)
            assert ended.terminal and ended.state == "FAILED" and ended.problem == common_pb2.CANCELLED
            last = list(stream)[-1]
            assert last.terminal and last.problem == common_pb2.CANCELLED
            e = refused(lambda: host(ch).CancelJob(common_pb2.JobRef(job_id=first.job_id), timeout=60))
            assert_status(e, grpc.StatusCode.FAILED_PRECONDITION)  # nothing left to cancel
    finally:
        os.kill(pid, signal.SIGCONT)
    assert_all_serving(fed)


@pytest.mark.parametrize("site, role", [("party-1", "party"), ("node-1", "compute_node")])
def test_only_an_operator_may_use_the_host(fed, site, role):
    with channel(fed, "curator", site_tls(fed, site)) as ch:
        for call in (lambda: host(ch).SubmitJob(ops.JobSubmission(lmgc=lmgc_spec()), timeout=30),
                     lambda: list(host(ch).WatchJob(common_pb2.JobRef(job_id="lm-000000000000"), timeout=30)),
                     lambda: host(ch).GetRelease(common_pb2.JobRef(job_id="lm-000000000000"), timeout=30)):
            assert_status(refused(call), grpc.StatusCode.PERMISSION_DENIED)


def test_another_operator_sees_none_of_our_jobs_and_bad_submissions_are_refused(fed):
    with operator_curator(fed) as ch:
        mine = host(ch).SubmitJob(ops.JobSubmission(lmgc=lmgc_spec(simulation_seed=b"mine")), timeout=60)
        watched(ch, mine.job_id)
        assert_status(refused(lambda: host(ch).SubmitJob(ops.JobSubmission(), timeout=30)), grpc.StatusCode.INVALID_ARGUMENT)
        bad = lmgc_spec(parties=["party-1", "party-1"])
        assert_status(refused(lambda: host(ch).SubmitJob(ops.JobSubmission(lmgc=bad), timeout=30)), grpc.StatusCode.INVALID_ARGUMENT)
        for job_id in ("../../etc/passwd", "lm-ffffffffffff"):
            assert_status(refused(lambda: list(host(ch).WatchJob(common_pb2.JobRef(job_id=job_id), timeout=30))), grpc.StatusCode.NOT_FOUND)
    with channel(fed, "curator", mint(fed, "operator", "operator-2")) as ch:
        for call in (lambda: list(host(ch).WatchJob(common_pb2.JobRef(job_id=mine.job_id), timeout=30)),
                     lambda: host(ch).GetRelease(common_pb2.JobRef(job_id=mine.job_id), timeout=30),
                     lambda: host(ch).CancelJob(common_pb2.JobRef(job_id=mine.job_id), timeout=30)):
            assert_status(refused(call), grpc.StatusCode.NOT_FOUND)
    assert_all_serving(fed)


def test_an_ensemble_cancelled_while_its_vote_sum_is_announced_aborts_that_vote_sum(fed):
    """node-3 is stopped (SIGSTOP): the curator's announcement of the ensemble's vote-sum DCA job hangs there, and the
    operator cancels meanwhile. The vote sum exists (the other nodes have it): it is aborted with the ensemble, not
    left running until its own deadline."""
    log = fed.workdir / "curator" / "service.log"
    before = len(log.read_text())
    pid = fed.procs["node-3"].popen.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        with operator_curator(fed) as ch:
            first = host(ch).SubmitJob(ops.JobSubmission(hamm2016=ensemble_spec(simulation_seed=b"announce")), timeout=60)
            vote_sum = None
            for _ in range(600):  # the curator names the vote sum as it announces it (bounded wait on its log)
                found = re.search(r"DCA job (dca-[0-9a-f]+): d=", log.read_text()[before:])
                if found:
                    vote_sum = found.group(1)
                    break
                time.sleep(0.05)
            assert vote_sum is not None, "the vote sum was never announced"
            host(ch).CancelJob(common_pb2.JobRef(job_id=first.job_id), timeout=60)
    finally:
        os.kill(pid, signal.SIGCONT)
    with operator_curator(fed) as ch:
        last = watched(ch, first.job_id)[-1]
        assert last.terminal and last.problem == common_pb2.CANCELLED
        summary = host(ch).GetJob(common_pb2.JobRef(job_id=vote_sum), timeout=60)
        assert summary.terminal and summary.state == "FAILED", summary
    assert_all_serving(fed)
