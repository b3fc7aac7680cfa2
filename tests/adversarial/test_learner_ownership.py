"""A curator-hosted learner job (dp-gd, regression) belongs to its operator like every other job.

operator-2 (a minted operator certificate from the federation's CA) learns operator-1's learner job id and asks
WatchLearner and GetLearnerModel for it: both must be refused UNKNOWN_JOB (NOT_FOUND), as JobOperations already
refuses GetJob/CancelJob. Before the fix the gate's ownership table (services/curator/ownership.py NAMES_JOB) did
not name the LearnerCurator methods, so operator-2 followed the job round by round and downloaded the released
model (weights, every iterate, the plan).
"""

from __future__ import annotations

import grpc

from mpdp.dpgd.model import Task
from mpdp.dpgd.plan import DpgdPlan
from mpdp.messages import common_pb2, learner_pb2_grpc, operations_pb2_grpc

from .conftest import NODES, PARTIES, assert_status, channel, mint, operator_curator, refused

SIZES = (40, 47, 54)


def _spec():
    from mpdp_services.operator.dpgd import dpgd_spec

    plan = DpgdPlan(Task("binary"), 4, 1.0, 1e-6, lam=1e-2, rounds=1, total_records=sum(SIZES))
    return dpgd_spec("synthetic", PARTIES, NODES, plan, 60, seed=b"review-ownership")


def test_another_operator_cannot_watch_or_fetch_a_learner_job(fed):
    with operator_curator(fed) as ch:
        stub = learner_pb2_grpc.LearnerCuratorStub(ch)
        job = stub.SubmitLearner(_spec(), timeout=60).job_id
        last = None
        for last in stub.WatchLearner(common_pb2.JobRef(job_id=job), timeout=180):
            pass
        assert last is not None and last.state == "DONE", last
        assert stub.GetLearnerModel(common_pb2.JobRef(job_id=job), timeout=30).job_id == job
    ref = common_pb2.JobRef(job_id=job)
    with channel(fed, "curator", mint(fed, "operator", "operator-2")) as ch:
        learner = learner_pb2_grpc.LearnerCuratorStub(ch)
        assert_status(refused(lambda: operations_pb2_grpc.JobOperationsStub(ch).GetJob(ref, timeout=20)), grpc.StatusCode.NOT_FOUND)
        assert_status(refused(lambda: learner.WatchLearner(ref, timeout=20)), grpc.StatusCode.NOT_FOUND)
        assert_status(refused(lambda: learner.GetLearnerModel(ref, timeout=20)), grpc.StatusCode.NOT_FOUND)
    with channel(fed, "curator", mint(fed, "admin", "admin-1")) as ch:  # the admin may
        assert learner_pb2_grpc.LearnerCuratorStub(ch).GetLearnerModel(ref, timeout=30).job_id == job
