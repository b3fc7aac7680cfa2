"""Duplicate names in party and node lists.

Models an operator (or a compromised operator client) that names a party or a compute node twice, so that
one site's contribution counts twice, one node sees two shares of a client, or a party's ledger misses a
release (the reported case: a contribution round over ``[p1, p1, p2, p3]`` released garbage and p1's ledger had
no entry; a round is now a learner job's, submitted through the job host). Expected: INVALID_ARGUMENT before
anything runs, nothing released, no ledger entry.
"""

from __future__ import annotations

import grpc
import pytest

from mpdp.messages import (
    common_pb2,
    hamm2016_pb2,
    local_release_pb2,
    operations_pb2 as ops,
)

from .conftest import (
    PARTIES,
    assert_all_serving,
    assert_ledgers_within_budget,
    assert_status,
    job_host,
    dca_spec,
    host_submit,
    learner_spec,
    ledger,
    operator_curator,
    pathak_spec,
    refused,
    submit_learner,
)


def test_duplicate_party_in_a_learner_job_is_refused(fed):
    """A one-round learner job (its round's parties are the job's) naming party-1 twice: refused before its DCA
    job exists or any party is asked."""
    before = {p: len(ledger(fed, p)["entries"]) for p in PARTIES}
    with operator_curator(fed) as ch:
        dca_before = len(_jobs(ch, "dca"))
        e = refused(lambda: submit_learner(fed, learner_spec(["party-1", "party-1", "party-2", "party-3"]), timeout=120))
        assert len(_jobs(ch, "dca")) == dca_before  # no round's DCA job was made
    assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
    assert {p: len(ledger(fed, p)["entries"]) for p in PARTIES} == before
    assert_ledgers_within_budget(fed)


def _jobs(ch, protocol: str) -> list:
    from mpdp.messages import operations_pb2, operations_pb2_grpc

    return list(operations_pb2_grpc.JobOperationsStub(ch).ListJobs(operations_pb2.JobQuery(protocol=protocol, limit=1000), timeout=30).jobs)


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
    e = refused(lambda: host_submit(fed, timeout=120, lmgc=spec))
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
    e = refused(lambda: host_submit(fed, timeout=120, hamm2016=spec))
    assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
    assert {p: len(ledger(fed, p)["entries"]) for p in PARTIES} == before
    assert_all_serving(fed)
