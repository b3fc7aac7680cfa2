"""kill -9 of the curator in the middle of a curator-hosted dp-gd job, then restart (docs/protocols/job-model.md §7).

The curator runs the job's rounds itself, so a crash loses the job's task. Expected (the simple, sound outcome):
after the restart the job is FAILED with JOB_FAILED and "the curator restarted mid-job", never running forever and
never half-released; nothing is in the model store; every party keeps the job's dp-gd charge (its ledger is not
touched) and no ledger exceeds its budget; the restarted curator runs a new learner job to the end.
"""

from __future__ import annotations

import json
import signal
import time

import grpc
import pytest

from mpdp.dpgd.model import Task
from mpdp.dpgd.plan import DpgdPlan
from mpdp.messages import common_pb2, operations_pb2_grpc

from .conftest import (NODES, PARTIES, assert_all_serving, assert_ledgers_within_budget, host_release, ledger, operator_curator, start_federation, submit_learner,
                       wait_linked)

SIZES = (40, 47, 54)  # conftest.start_federation's synthetic rows per party


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    f = start_federation(tmp_path_factory.mktemp("learner-kill"))
    yield f
    f.stop()


def _spec(rounds: int, job_id: str = ""):
    from mpdp_services.operator.dpgd import dpgd_spec

    plan = DpgdPlan(Task("binary"), 4, 1.0, 1e-6, lam=1e-2, rounds=rounds, total_records=sum(SIZES))
    return dpgd_spec("synthetic", PARTIES, NODES, plan, 60, job_id=job_id, seed=b"learner-kill", deadline=30.0)


def _watch(fed, job: str, timeout: float = 60.0):
    """The job host's summaries of the job (WatchJob), until it ends."""
    with operator_curator(fed) as ch:
        yield from operations_pb2_grpc.JobOperationsStub(ch).WatchJob(common_pb2.JobRef(job_id=job), timeout=timeout)


def _round(stage: str) -> int:
    """The running round (0-based) of a learner job's stage "round r of R"; -1 for any other stage."""
    words = stage.split()
    return int(words[1]) - 1 if len(words) == 4 and words[0] == "round" else -1


def test_curator_killed_mid_dpgd_job(fed):
    job = submit_learner(fed, _spec(rounds=60))
    for st in _watch(fed, job):  # until round 2 runs: every party has paid the job's one charge in round 1
        assert not st.terminal, st
        if _round(st.stage) >= 1:
            break
    charged = {p: [e for e in ledger(fed, p)["entries"] if e.get("protocol") == "dpgd" and e.get("job_id") == job] for p in PARTIES}
    assert all(len(c) == 1 and c[0]["epsilon"] > 0 for c in charged.values()), charged

    fed.kill("curator", signal.SIGKILL)
    t0 = time.monotonic()
    fed.restart("curator")
    last = None
    for last in _watch(fed, job):
        if last.terminal:
            break
    assert last is not None and last.terminal and last.state == "FAILED", last
    assert last.problem == common_pb2.JOB_FAILED and "the curator restarted mid-job" in last.detail, last
    assert time.monotonic() - t0 < 60.0
    with pytest.raises(grpc.RpcError) as e:
        host_release(fed, job)
    assert e.value.code() == grpc.StatusCode.ABORTED and "published nothing" in e.value.details()
    assert not (fed.workdir / "curator" / "state" / "learners" / f"{job}.model.binpb").exists()

    from mpdp_services.common.endpoints import Endpoints
    from mpdp_services.operator.jobs import get_job

    ep = Endpoints.load(fed.workdir)
    summary = get_job(ep, job)  # the catalog of the restarted curator knows it, ended
    assert summary["protocol"] == "dpgd" and summary["state"] == "FAILED" and summary["terminal"], summary
    state = json.loads((fed.workdir / "curator" / "state" / "learners" / f"{job}.state.json").read_text())
    if state["dca_job"]:  # the round that was running: its DCA job was aborted at the restart, not left to its deadline
        try:  # or it was never created (the kill fell between naming it in the job's state and creating it)
            assert get_job(ep, state["dca_job"])["terminal"]
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.NOT_FOUND, (e.code(), e.details())
    from mpdp.messages import operations_pb2 as ops

    with operator_curator(fed) as ch:  # every round's DCA job has ended, the one being announced at the kill too
        rounds = operations_pb2_grpc.JobOperationsStub(ch).ListJobs(ops.JobQuery(protocol="dca"), timeout=30).jobs
    assert rounds and all(s.terminal for s in rounds), [s.job_id for s in rounds if not s.terminal]
    for p in PARTIES:  # the charge stays: the ledger entry is still there with its (ε, δ)
        kept = [e for e in ledger(fed, p)["entries"] if e.get("protocol") == "dpgd" and e.get("job_id") == job]
        assert len(kept) == 1 and kept[0]["epsilon"] == charged[p][0]["epsilon"], kept
    assert_ledgers_within_budget(fed)

    # the restarted curator runs a new learner job to the end; the killed job's id stays taken
    with pytest.raises(grpc.RpcError) as e:
        submit_learner(fed, _spec(rounds=0, job_id=job))
    assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS
    fresh = submit_learner(fed, _spec(rounds=0))
    states = [st.state for st in _watch(fed, fresh, timeout=120)]
    assert states[-1] == "DONE", states
    assert_all_serving(fed)
    assert_ledgers_within_budget(fed)


def test_curator_killed_mid_ensemble_then_the_job_is_failed_not_forgotten(fed):
    """An ensemble runs as the curator's own task: killed with the process, it is FAILED after the restart (the job
    host's watch, summary and release say so), and the restarted curator publishes the next ensemble."""
    import os

    from mpdp.messages import hamm2016_pb2 as hm, operations_pb2 as ops, operations_pb2_grpc as ops_grpc

    spec = hm.EnsembleJobSpec(dataset="synthetic", auxiliary="aux", method="soft", lam=1e-2, epsilon=1.0, classes=["-1", "1"], parties=PARTIES,
                              compute_nodes=NODES, local_lam=1e-2, simulation_seed=b"kill")
    wait_linked(fed)  # every party reached the curator again since an earlier test restarted it
    pid = fed.procs["party-3"].popen.pid
    os.kill(pid, signal.SIGSTOP)  # its vote never comes: the job waits
    try:
        with operator_curator(fed) as ch:
            earlier = {s.job_id for s in ops_grpc.JobOperationsStub(ch).ListJobs(ops.JobQuery(protocol="dca"), timeout=30).jobs}
            job = ops_grpc.JobOperationsStub(ch).SubmitJob(ops.JobSubmission(hamm2016=spec), timeout=60).job_id
            assert (fed.workdir / "curator" / "state" / "ensembles" / f"{job}.running.json").exists()
            # the job's vote sum (a DCA job the earlier tests did not make) is open at the nodes before the kill
            end = time.monotonic() + 60
            while not {s.job_id for s in ops_grpc.JobOperationsStub(ch).ListJobs(ops.JobQuery(protocol="dca"), timeout=30).jobs} - earlier:
                assert time.monotonic() < end, "the ensemble opened no vote sum"
                time.sleep(0.05)
        fed.kill("curator", signal.SIGKILL)
        fed.restart("curator")
    finally:
        os.kill(pid, signal.SIGCONT)
    with operator_curator(fed) as ch:
        host = ops_grpc.JobOperationsStub(ch)
        last = list(host.WatchJob(common_pb2.JobRef(job_id=job), timeout=60))[-1]
        assert last.terminal and last.state == "FAILED" and last.problem == common_pb2.JOB_FAILED, last
        assert "the curator restarted mid-job; nothing was released" in last.detail, last
        listed = {s.job_id: s for s in host.ListJobs(ops.JobQuery(protocol="hamm2016"), timeout=30).jobs}
        assert listed[job].state == "FAILED" and "the curator restarted mid-job" in listed[job].detail, listed[job]
        with pytest.raises(grpc.RpcError) as e:
            host.GetRelease(common_pb2.JobRef(job_id=job), timeout=30)
        assert e.value.code() == grpc.StatusCode.ABORTED and "the curator restarted mid-job" in e.value.details()
        sums = [s for s in host.ListJobs(ops.JobQuery(protocol="dca"), timeout=30).jobs if s.job_id not in earlier]
        assert sums and all(s.terminal for s in sums), sums  # the lost ensemble's vote sum ended too (not left running)
        spec.simulation_seed = b"after"
        again = host.SubmitJob(ops.JobSubmission(hamm2016=spec), timeout=60)
        assert list(host.WatchJob(common_pb2.JobRef(job_id=again.job_id), timeout=300))[-1].state == "PUBLISHED"
    assert not (fed.workdir / "curator" / "state" / "ensembles" / f"{job}.running.json").exists()
    assert_ledgers_within_budget(fed)
    assert_all_serving(fed)
