"""kill -9 of each role mid-job, then restart.

Models crashes (or an attacker who can crash a site) at the worst moment: a party during a Pathak job, a
compute node during a DCA job, the curator during a Pathak job. Expected: the job ends FAILED with a reason
within its deadline (or, for a curator that lost it, is reported unknown or failed — never running forever);
nothing is published; no ledger exceeds its budget; the restarted role serves a new job.
"""

from __future__ import annotations

import signal
import time

import pytest

from mpdp.messages import common_pb2

from .conftest import (
    job_host,
    assert_all_serving,
    assert_ledgers_within_budget,
    create_dca,
    dca_job,
    dca_released,
    dca_spec,
    operator_curator,
    pathak_job,
    pathak_published,
    pathak_spec,
    start_federation,
    submit_clients,
    submit_pathak,
    wait_dca,
    wait_pathak,
)

DEADLINE = 40.0
SLACK = 15.0  # after the deadline: time for the failure to reach the operator on a loaded machine


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    f = start_federation(tmp_path_factory.mktemp("kill"))
    yield f
    f.stop()


def _running(fed, job: str) -> None:
    """Until the Pathak job is past setup (every party holds it and the protocol runs)."""
    with operator_curator(fed) as ch:
        for st in job_host(ch).WatchJob(common_pb2.JobRef(job_id=job), timeout=60):
            assert not st.terminal, f"the job ended before the kill: {st}"
            if st.stage != "setup":
                return


def test_party_killed_mid_pathak_job(fed):
    job = submit_pathak(fed, pathak_spec(seed=b"kill-party", deadline=DEADLINE))
    _running(fed, job)
    t0 = time.monotonic()
    fed.kill("party-3", signal.SIGKILL)
    try:
        st = wait_pathak(fed, job, timeout=DEADLINE + SLACK)
        assert time.monotonic() - t0 <= DEADLINE + SLACK
        assert st.state == "FAILED" and st.detail, st
        assert st.problem in (common_pb2.PEER_UNREACHABLE, common_pb2.JOB_FAILED), common_pb2.Problem.Name(st.problem)
        assert not pathak_published(fed, job)
    finally:
        fed.restart("party-3")
    assert_ledgers_within_budget(fed)
    pathak_job(fed, seed=b"after-party-kill")
    assert_ledgers_within_budget(fed)


def test_compute_node_killed_mid_dca_job(fed):
    job = create_dca(fed, dca_spec(n=3, deadline=20.0))
    submit_clients(fed, job, ["c-0", "c-1"])
    t0 = time.monotonic()
    fed.kill("node-2", signal.SIGKILL)
    try:
        st = wait_dca(fed, job, timeout=20.0 + SLACK + 10.0)
        assert time.monotonic() - t0 <= 20.0 + SLACK
        assert st.state == "FAILED" and st.detail, st
        assert not dca_released(fed, job)
    finally:
        fed.restart("node-2")
    dca_job(fed)
    assert_all_serving(fed)


def test_curator_killed_mid_pathak_job(fed):
    """The curator loses the job's machine: the restarted curator answers it FAILED with the restart's reason (never
    'running', never unknown); nothing is published; the parties drop it so a new job over the same parties publishes."""
    job = submit_pathak(fed, pathak_spec(seed=b"kill-curator", deadline=DEADLINE))
    _running(fed, job)
    t0 = time.monotonic()
    fed.kill("curator", signal.SIGKILL)
    fed.restart("curator")
    st = wait_pathak(fed, job, timeout=DEADLINE + SLACK)
    assert st.state == "FAILED" and st.problem == common_pb2.JOB_FAILED and "the curator restarted mid-job" in st.detail, st
    assert time.monotonic() - t0 <= DEADLINE + SLACK + 30.0  # + the restart
    assert not pathak_published(fed, job)
    assert_ledgers_within_budget(fed)
    pathak_job(fed, seed=b"after-curator-kill")
    assert_all_serving(fed)
    assert_ledgers_within_budget(fed)
