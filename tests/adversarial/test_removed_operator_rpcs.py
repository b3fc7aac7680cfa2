"""The operator has one front at the curator: the job host (JobOperations). The per-protocol operator calls of the
learners (LearnerCurator), the ensemble (EnsembleCurator.TrainEnsemble, GetEnsemble), the local releases
(LocalModelCurator) and the direct contribution round (ContributionCurator.RequestContributions) are gone.

Raw clients over mutual TLS send each removed method's path, with a well-formed body, from the operator's
certificate and from a party's: every one answers UNIMPLEMENTED (no servicer has it; nothing is parsed or run), the
curator keeps serving, the ensemble's party call (GetAuxiliary) is still there, and the same jobs run through the
host: a one-round learner job is DONE and its model is the host's release.
"""

from __future__ import annotations

import grpc

from mpdp.messages import common_pb2, contribution_pb2, hamm2016_pb2, hamm2016_pb2_grpc, learner_pb2, local_release_pb2

from .conftest import (assert_all_serving, assert_ledgers_within_budget, assert_status, channel, host_release, learner_spec, operator_curator,
                       refused, site_tls, submit_learner, wait_learner)

REF = common_pb2.JobRef(job_id="dp-000000000000").SerializeToString()
# (service, method, streams its answer, a well-formed body)
REMOVED = [
    ("LearnerCurator", "SubmitLearner", False, learner_pb2.LearnerJobSpec(dataset="synthetic").SerializeToString()),
    ("LearnerCurator", "WatchLearner", True, REF),
    ("LearnerCurator", "GetLearnerModel", False, REF),
    ("EnsembleCurator", "TrainEnsemble", False, hamm2016_pb2.EnsembleJobSpec(dataset="synthetic", auxiliary="aux").SerializeToString()),
    ("EnsembleCurator", "GetEnsemble", False, REF),
    ("LocalModelCurator", "SubmitLocalJob", False, local_release_pb2.LocalModelJobSpec(dataset="synthetic", model="lmgc").SerializeToString()),
    ("LocalModelCurator", "GetLocalModels", False, REF),
    ("ContributionCurator", "RequestContributions", False, contribution_pb2.ContributionRound(
        request=contribution_pb2.StatisticRequest(dca_job_id="dca-000000000000", dataset="synthetic"), parties=["party-1"]).SerializeToString()),
]


def _call(ch: grpc.Channel, service: str, method: str, streams: bool, body: bytes):
    path = f"/mpdp.messages.{service}/{method}"
    if streams:
        return lambda: list(ch.unary_stream(path)(body, timeout=20))
    return lambda: ch.unary_unary(path)(body, timeout=20)


def test_the_removed_operator_calls_are_unimplemented_and_the_host_runs_the_jobs(fed):
    for who in ("operator", "party-1"):
        with channel(fed, "curator", site_tls(fed, who)) as ch:
            for service, method, streams, body in REMOVED:
                e = refused(_call(ch, service, method, streams, body))
                assert e.code() == grpc.StatusCode.UNIMPLEMENTED, f"{who} {service}.{method}: {e.code().name} {e.details()}"
    assert_all_serving(fed)
    with channel(fed, "curator", site_tls(fed, "party-1")) as ch:  # the voters' call stays: an unknown job, not a missing method
        e = refused(lambda: list(hamm2016_pb2_grpc.EnsembleCuratorStub(ch).GetAuxiliary(common_pb2.JobRef(job_id="hm-000000000000"), timeout=20)))
    assert e.code() != grpc.StatusCode.UNIMPLEMENTED, e.code()
    assert_status(e, e.code())
    job = submit_learner(fed, learner_spec(seed=b"removed-rpcs"))
    assert wait_learner(fed, job).state == "DONE"
    model = host_release(fed, job).learner
    assert model.job_id == job and model.protocol == "dpgd" and len(model.dca_jobs) == 1  # rounds = 0: one contribution round
    with operator_curator(fed) as ch:  # and the job is the host's like any other
        e = refused(_call(ch, "LearnerCurator", "GetLearnerModel", False, common_pb2.JobRef(job_id=job).SerializeToString()))
    assert e.code() == grpc.StatusCode.UNIMPLEMENTED
    assert_ledgers_within_budget(fed)
