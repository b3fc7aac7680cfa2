"""A curator-hosted learner job (dp-gd, regression) belongs to its operator like every other job.

operator-2 (a minted operator certificate from the federation's CA) learns operator-1's learner job id and asks
the job host for it: GetJob, WatchJob, GetRelease and CancelJob must each be refused UNKNOWN_JOB (NOT_FOUND), the
answer for an id never issued, so operator-2 can neither follow the job round by round nor download the released
model (weights, every iterate, the plan); the job is untouched. An ``admin`` certificate may fetch it.
"""

from __future__ import annotations

import grpc

from mpdp.messages import common_pb2, operations_pb2_grpc

from .conftest import assert_status, channel, host_release, learner_spec, mint, refused, submit_learner, wait_learner


def test_another_operator_cannot_watch_or_fetch_a_learner_job(fed):
    job = submit_learner(fed, learner_spec(rounds=1, seed=b"review-ownership"))
    last = wait_learner(fed, job)
    assert last.state == "DONE", last
    assert host_release(fed, job).learner.job_id == job
    ref = common_pb2.JobRef(job_id=job)
    with channel(fed, "curator", mint(fed, "operator", "operator-2")) as ch:
        host = operations_pb2_grpc.JobOperationsStub(ch)
        for call in (host.GetJob, host.WatchJob, host.GetRelease, host.CancelJob):
            assert_status(refused(lambda: call(ref, timeout=20)), grpc.StatusCode.NOT_FOUND)
    assert wait_learner(fed, job).state == "DONE"
    assert host_release(fed, job, mint(fed, "admin", "admin-1")).learner.job_id == job  # the admin may
