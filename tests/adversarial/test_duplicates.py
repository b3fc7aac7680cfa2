"""Duplicate names in party and node lists.

Models an operator (or a compromised operator client) that names a party or a compute node twice, so that
one site's contribution counts twice, one node sees two shares of a client, or a party's ledger misses a
release (the reported case: ``RequestContributions(parties=[p1, p1, p2, p3])`` released garbage and p1's
ledger had no entry). Expected: INVALID_ARGUMENT before anything runs, nothing released, no ledger entry.
"""

from __future__ import annotations

import grpc
import pytest

from mpdp.messages import (
    common_pb2,
    contribution_pb2,
    contribution_pb2_grpc,
    hamm2016_pb2,
    hamm2016_pb2_grpc,
    local_release_pb2,
    local_release_pb2_grpc,
    operations_pb2 as ops,
)
from mpdp.regression.plan import RegressionPlan

from .conftest import (
    NODES,
    PARTIES,
    assert_all_serving,
    assert_ledgers_within_budget,
    assert_status,
    create_dca,
    job_host,
    dca_released,
    dca_spec,
    ledger,
    ledger_job_ids,
    operator_curator,
    pathak_spec,
    refused,
    wait_dca,
)


def test_duplicate_party_in_a_contribution_round_is_refused(fed):
    plan = RegressionPlan((1.0,) * 4 + (1.0,), 5.0, 1e-4, grid_repeats=(2, 2))
    spec = plan.std_round().dca_params("pending", 4, NODES, records_per_client=100, deadline_seconds=8.0).to_spec()
    job = create_dca(fed, spec)
    req = contribution_pb2.StatisticRequest(dca_job_id=job, dataset="synthetic", unvalidated=True, statistic="linreg/std", bounds=list(plan.bounds), records_per_client=100)
    with operator_curator(fed) as ch:
        stub = contribution_pb2_grpc.ContributionCuratorStub(ch)
        e = refused(lambda: stub.RequestContributions(contribution_pb2.ContributionRound(request=req, parties=["party-1", "party-1", "party-2", "party-3"]), timeout=120))
    assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
    st = wait_dca(fed, job)
    assert st.state != "RELEASED" and not dca_released(fed, job), st
    for p in PARTIES:
        assert job not in ledger_job_ids(fed, p), f"{p} spent ε on a refused round"
    assert_ledgers_within_budget(fed)


@pytest.mark.parametrize("field,value", [
    ("compute_nodes", ["node-1", "node-1", "node-2"]),
    ("compute_nodes", ["node-1", "node-2", "node-2", "node-3"]),
    ("roster", ["party-1", "party-1", "party-2"]),
], ids=["nodes-first", "nodes-last", "roster"])
def test_duplicates_in_a_dca_spec_are_invalid_argument(fed, field, value):
    spec = dca_spec(n=3)
    spec.ClearField(field)
    getattr(spec, field).extend(value)
    with operator_curator(fed) as ch:
        e = refused(lambda: job_host(ch).SubmitJob(ops.JobSubmission(dca=spec), timeout=30))
    assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)


def test_duplicate_party_in_a_pathak_job_is_invalid_argument(fed):
    with operator_curator(fed) as ch:
        e = refused(lambda: job_host(ch).SubmitJob(ops.JobSubmission(pathak2010=pathak_spec(parties=["party-1", "party-1", "party-2"])), timeout=30))
    assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)


def test_duplicate_party_in_a_local_release_is_invalid_argument(fed):
    before = {p: len(ledger(fed, p)["entries"]) for p in PARTIES}
    spec = local_release_pb2.LocalModelJobSpec(dataset="synthetic", model="lmgc", mode=common_pb2.CORRECTED, epsilon=1.0, parties=["party-1", "party-2", "party-1"], ridge=1e-3, data_norm=1.0)
    setattr(spec, "lambda", 1e-3)
    with operator_curator(fed) as ch:
        e = refused(lambda: local_release_pb2_grpc.LocalModelCuratorStub(ch).SubmitLocalJob(spec, timeout=120))
    assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
    assert {p: len(ledger(fed, p)["entries"]) for p in PARTIES} == before


@pytest.mark.parametrize("parties,nodes", [
    (["party-1", "party-2", "party-2"], ["node-1", "node-2"]),
    (["party-1", "party-2", "party-3"], ["node-1", "node-1", "node-2"]),
], ids=["parties", "nodes"])
def test_duplicates_in_an_ensemble_spec_are_invalid_argument(fed, parties, nodes):
    before = {p: len(ledger(fed, p)["entries"]) for p in PARTIES}
    spec = hamm2016_pb2.EnsembleJobSpec(dataset="synthetic", auxiliary="aux", method="soft", lam=0.1, epsilon=1.0, classes=["-1", "1"],
                                        parties=parties, compute_nodes=nodes, deadline_seconds=30.0, simulation_seed=b"dup")
    with operator_curator(fed) as ch:
        e = refused(lambda: hamm2016_pb2_grpc.EnsembleCuratorStub(ch).TrainEnsemble(spec, timeout=120))
    assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
    assert {p: len(ledger(fed, p)["entries"]) for p in PARTIES} == before
    assert_all_serving(fed)
