"""kill -9 of the curator in the middle of a Pathak job, then restart (docs/protocols/job-model.md §5 "Restarts", §8).

The curator runs a Pathak job's role machine in its own process, so a crash loses the machine. Expected: the job
is not forgotten (UNKNOWN_JOB) but FAILED with JOB_FAILED and "the curator restarted mid-job; nothing was released"
through the job host (watch, summary, list, release); the restarted curator
tells every party of the job to abort it, so each party ends the job long before the job's deadline; each party's
charge (spent at ProtocolStart) is kept as failed, or voided if nothing data-dependent had left that party
(docs/protocols/job-model.md §3); nothing is published; the restarted curator publishes the next Pathak job.
"""

from __future__ import annotations

import signal
import time

import grpc
import pytest

from mpdp.ledger import FAILED, SPENT, VOIDED
from mpdp.messages import common_pb2, operations_pb2 as ops, operations_pb2_grpc as ops_grpc

from .conftest import job_host, PARTIES, assert_all_serving, assert_ledgers_within_budget, ledger, operator_curator, pathak_job, pathak_published, pathak_spec, start_federation

RESTARTED = "the curator restarted mid-job; nothing was released"
DEADLINE = 600.0  # the job's own deadline: every wait below is far shorter, so a party that ended the job was told
PROMPT = 90.0  # seconds after the restart within which every party has ended the job


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    f = start_federation(tmp_path_factory.mktemp("curator-restart"))
    yield f
    f.stop()


def _entries(fed, party: str, job: str) -> list[dict]:
    return [e for e in ledger(fed, party)["entries"] if e.get("protocol") == "pathak2010" and e.get("job_id") == job]


def _until(check, timeout: float, what: str):
    """Poll ``check`` until it answers something truthy (a state read with a deadline, not a sleep as synchronisation)."""
    end = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < end, f"not within {timeout:g} s: {what}"
        time.sleep(0.02)


def _ended_on_abort(fed, party: str, job: str) -> bool:
    """The party's log says its machine took the curator's JobAbort for the job and is FAILED (the runtime logs every
    message a job's machine takes, with the state it is in after it)."""
    log = fed.workdir / party / "service.log"
    return log.exists() and f"job {job}: party received JobAbort from curator:curator, now FAILED" in log.read_text()


def _accepted(fed, party: str, job: str) -> bool:
    log = fed.workdir / "curator" / "service.log"
    return log.exists() and f"job {job}: curator received JobAcceptance from party:{party}" in log.read_text()


def _announced(fed, party: str, job: str) -> bool:
    log = fed.workdir / party / "service.log"
    return log.exists() and f"job {job} announced" in log.read_text()


def test_curator_killed_before_the_spend_fails_the_pathak_job_and_no_party_is_charged(fed):
    """Party-3 is stopped, so the job waits for its acceptance, before ProtocolStart: no party has spent. After the
    restart the job is FAILED, the parties that hold it end it at once (told by the curator), and no ledger has it."""
    import os

    stopped = PARTIES[-1]
    pid = fed.procs[stopped].popen.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        with operator_curator(fed) as ch:
            job = job_host(ch).SubmitJob(ops.JobSubmission(pathak2010=pathak_spec(seed=b"restart-unspent", deadline=DEADLINE)), timeout=60).job_id
        waiting = [p for p in PARTIES if p != stopped]
        # the others hold the job and their acceptances reached the curator (none in flight when it is killed)
        _until(lambda: all(_announced(fed, p, job) and _accepted(fed, p, job) for p in waiting), 60.0, "the other parties hold the job")
        fed.kill("curator", signal.SIGKILL)
        fed.restart("curator")
    finally:
        os.kill(pid, signal.SIGCONT)
    with operator_curator(fed) as ch:
        last = list(ops_grpc.JobOperationsStub(ch).WatchJob(common_pb2.JobRef(job_id=job), timeout=60))[-1]
    assert last.terminal and last.state == "FAILED" and RESTARTED in last.detail, last
    _until(lambda: all(_ended_on_abort(fed, p, job) for p in waiting), PROMPT, "the parties that held the job ended it on the curator's abort")
    assert all(not _entries(fed, p, job) for p in PARTIES), {p: _entries(fed, p, job) for p in PARTIES}  # killed before the spend: no charge
    assert_ledgers_within_budget(fed)
    assert_all_serving(fed)


def test_curator_killed_after_the_spend_fails_the_pathak_job_and_the_parties_settle_at_once(fed):
    job = None
    with operator_curator(fed) as ch:
        job = job_host(ch).SubmitJob(ops.JobSubmission(pathak2010=pathak_spec(seed=b"restart-spent", deadline=DEADLINE)), timeout=60).job_id
    # every party has spent (ProtocolStart: the leader P1 spends last, then the protocol runs): kill the curator now
    _until(lambda: all(len(_entries(fed, p, job)) == 1 for p in PARTIES), 120.0, "every party spent the job's charge")
    charged = {p: _entries(fed, p, job)[0] for p in PARTIES}
    fed.kill("curator", signal.SIGKILL)
    assert not (fed.workdir / "curator" / "state" / "models" / f"{job}.binpb").exists(), "the job published before the kill: no restart was tested"
    t0 = time.monotonic()
    fed.restart("curator")

    with operator_curator(fed) as ch:
        host = ops_grpc.JobOperationsStub(ch)
        last = list(host.WatchJob(common_pb2.JobRef(job_id=job), timeout=60))[-1]  # the host answers it ended, not UNKNOWN_JOB
        assert last.terminal and last.state == "FAILED" and last.problem == common_pb2.JOB_FAILED, last
        assert RESTARTED in last.detail, last
        listed = {s.job_id: s for s in host.ListJobs(ops.JobQuery(protocol="pathak2010"), timeout=30).jobs}
        assert job in listed and listed[job].state == "FAILED" and RESTARTED in listed[job].detail, listed.get(job)
        with pytest.raises(grpc.RpcError) as e:
            host.GetRelease(common_pb2.JobRef(job_id=job), timeout=30)
        assert e.value.code() == grpc.StatusCode.ABORTED and RESTARTED in e.value.details(), e.value.details()

    # each party ends the job at once (told by the restarted curator), not at its deadline; the charge is settled
    settled = _until(lambda: (lambda now: now if all(e["status"] != SPENT for e in now.values()) else None)(
        {p: _entries(fed, p, job)[0] for p in PARTIES}), PROMPT, "every party settled the job's charge")
    assert time.monotonic() - t0 < DEADLINE / 2
    for p in PARTIES:
        entry = settled[p]
        assert entry["status"] in (FAILED, VOIDED), entry
        assert entry["epsilon"] == charged[p]["epsilon"], (entry, charged[p])
    assert not pathak_published(fed, job)
    assert not (fed.workdir / "curator" / "state" / "models" / f"{job}.running.json").exists()
    assert_ledgers_within_budget(fed)

    pathak_job(fed, seed=b"after-restart")  # the restarted curator and the parties run the next job to the end
    assert_all_serving(fed)
    assert_ledgers_within_budget(fed)
