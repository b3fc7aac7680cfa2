"""A party whose contribution cannot reach a compute node pays nothing: it connects to every node of the DCA job
before it spends, so a node that is down (here killed after the job was announced) refuses the contribution
PEER_UNREACHABLE with no ledger entry at all. (A failure after the spend and before any share was handed to the
network voids the charge instead: tests/core/test_unsent_charge.py.) The round is sent to each party as the
curator sends a learner job's round, from a certificate with the curator's name: the party's check is what is tested.
"""

from __future__ import annotations

import grpc
import pytest

from mpdp.messages import contribution_pb2, contribution_pb2_grpc

from .conftest import assert_ledgers_within_budget, channel, create_dca, dca_spec, ledger, mint, start_federation

BOUNDS = [1.0] * 5  # d = 4 features and the label, each within [-1, 1]
PAIR = ["party-1", "party-2"]


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    f = start_federation(tmp_path_factory.mktemp("unsent"), parties=PAIR)
    yield f
    f.stop()


def test_a_contribution_to_a_job_with_a_dead_node_is_refused_before_anything_is_spent(fed):
    job = create_dca(fed, dca_spec(n=2, d=5, roster=PAIR, clip_bounds=[100.0], sensitivity=5.0, deadline=120.0))
    fed.kill("node-3")  # announced to every node, then one of them is gone
    request = contribution_pb2.StatisticRequest(dca_job_id=job, dataset="synthetic", unvalidated=True, statistic="linreg/std", bounds=BOUNDS,
                                                records_per_client=1000, parties=PAIR)
    curator = mint(fed, "curator", "curator")
    for p in PAIR:
        with channel(fed, p, curator) as ch, pytest.raises(grpc.RpcError) as refused:
            contribution_pb2_grpc.ContributionPartyStub(ch).Contribute(request, timeout=120)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, refused.value.details()
        assert "node-3 could not be reached" in refused.value.details()
    for p in PAIR:
        assert [e for e in ledger(fed, p)["entries"] if e.get("job_id") == job] == [], p  # not spent: neither failed nor voided
    assert_ledgers_within_budget(fed)
