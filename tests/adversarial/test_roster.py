"""Attacks on who a contribution round's noise comes from: an operator who sets a DCA job's N and roster.

Each client of a DCA job adds noise of variance σ²_std/(N − T − 1), so a job over 3 parties whose roster is padded
with invented ids (N = 300) would give each real party a slice 1/297 as large; if the operator could then fill the
invented slots with zero shares, the release would carry a twelfth of the noise the parties were charged for.
And an operator who submits shares under a party's name first (squatting) would have that party's own shares
refused as replays and the job release a garbage sum. Expected:

- each party refuses a contribution round whose DCA job's roster is not exactly the round's parties, even when the
  request reaches it from a certificate with its curator's name (the operator has no call that runs a round on a
  DCA job of its choosing: a round is a learner job's, its DCA job made by the curator over the job's parties);
- a compute node takes a named client's share only over that client's own certificate: an operator's shares or
  batches for a named roster (an invented id or a party's) are refused and nothing is summed;
- the squatted job and round still release the sum of the parties' own shares; no ε spent on a refused round.
"""

from __future__ import annotations

import asyncio
import os

import grpc
import numpy as np
import pytest

from mpdp.messages import operations_pb2 as ops
from mpdp.messages import common_pb2, contribution_pb2, contribution_pb2_grpc, dca_pb2, dca_pb2_grpc, pathak2010_pb2 as pk, pathak2010_pb2_grpc as pk_grpc
from mpdp.regression.plan import RegressionPlan
from mpdp.regression.statistics import main_round_spec
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.dca_client.client import submit_vector

from tests.adversarial.conftest import (job_host, dca_release, client_ledger,
    NODES,
    PARTIES,
    assert_all_serving,
    assert_ledgers_within_budget,
    assert_status,
    channel,
    create_dca,
    dca_released,
    dca_spec,
    ledger_job_ids,
    mint,
    operator_curator,
    pathak_spec,
    refused,
    site_tls,
    spec_digest_of,
    wait_dca,
)

GHOSTS = [f"ghost-{i:03d}" for i in range(297)]
PLAN = RegressionPlan((1.0,) * 4 + (1.0,), 5.0, 1e-4, grid_repeats=(2, 2))


def std_round_job(fed, roster: list[str], max_missing: int = 0, deadline: float = 20.0) -> tuple[str, contribution_pb2.StatisticRequest]:
    """A regression std round's DCA job (d = 5) over ``roster``, and the request a round would send."""
    spec = PLAN.std_round().dca_params("pending", len(roster), NODES, records_per_client=100, roster=roster, max_missing=max_missing,
                                       deadline_seconds=deadline).to_spec()
    job = create_dca(fed, spec)
    req = contribution_pb2.StatisticRequest(dca_job_id=job, dataset="synthetic", unvalidated=True, statistic="linreg/std", bounds=list(PLAN.bounds),
                                            records_per_client=100)
    return job, req


def request_round(fed, req: contribution_pb2.StatisticRequest, parties: list[str]) -> contribution_pb2.ContributionSummary:
    """The round as the curator sends it (each party asked with the round's parties), here from a certificate with
    the curator's name; the first refusal is raised (grpc.RpcError), as the curator fails the round on it."""
    sent = contribution_pb2.StatisticRequest()
    sent.CopyFrom(req)
    del sent.parties[:]
    sent.parties.extend(parties)
    rogue = mint(fed, "curator", "curator")
    receipts = []
    for p in parties:
        with channel(fed, p, rogue) as ch:
            receipts.append(contribution_pb2_grpc.ContributionPartyStub(ch).Contribute(sent, timeout=120))
    return contribution_pb2.ContributionSummary(receipts=receipts)


def assert_nothing_spent(fed, job: str) -> None:
    for p in PARTIES:
        assert job not in ledger_job_ids(fed, p), f"{p} spent ε on a refused round"
    assert_ledgers_within_budget(fed)


@pytest.mark.parametrize("round_name", ["std", "main"])
def test_a_round_whose_dca_job_declares_a_smaller_sensitivity_than_its_statistic_is_refused_by_every_party(fed, round_name):
    """An operator's DCA job over the parties, its noise calibrated to a Δ₂ a thousand times below what one record
    changes the statistic by (for the clip box the request names): the release would carry a thousandth of the noise
    the parties are charged ε for. Each party refuses it INVALID_JOB before it computes or spends anything."""
    spec = PLAN.std_round() if round_name == "std" else main_round_spec(PLAN.bounds, 1.0, 1e-4, "corrected")
    params = spec.dca_params("pending", len(PARTIES), NODES, records_per_client=100, roster=PARTIES, deadline_seconds=20.0).to_spec()
    params.sensitivity = spec.sensitivity / 1000
    job = create_dca(fed, params)
    req = contribution_pb2.StatisticRequest(dca_job_id=job, dataset="synthetic", unvalidated=True, statistic=f"linreg/{round_name}", bounds=list(spec.bounds),
                                            records_per_client=100)
    e = refused(lambda: request_round(fed, req, PARTIES))
    assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
    assert "sensitivity" in (e.details() or "") or "Δ₂" in (e.details() or "")
    assert_nothing_spent(fed, job)


def test_a_padded_roster_is_refused_before_anyone_spends(fed):
    job, req = std_round_job(fed, PARTIES + GHOSTS)
    e = refused(lambda: request_round(fed, req, PARTIES))
    assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
    assert "roster" in e.details()
    assert_nothing_spent(fed, job)
    assert_all_serving(fed)
    with operator_curator(fed) as ch:  # and the operator's old direct round is no call of the curator's
        e = refused(lambda: ch.unary_unary("/mpdp.messages.ContributionCurator/RequestContributions")(
            contribution_pb2.ContributionRound(request=req, parties=PARTIES).SerializeToString(), timeout=20))
    assert e.code() == grpc.StatusCode.UNIMPLEMENTED, e.code()


def test_a_roster_without_a_party_or_by_range_is_refused(fed):
    job, req = std_round_job(fed, PARTIES[:2] + ["ghost-000"])
    assert_status(refused(lambda: request_round(fed, req, PARTIES)), grpc.StatusCode.INVALID_ARGUMENT)
    ranged = create_dca(fed, PLAN.std_round().dca_params("pending", 3, NODES, records_per_client=100, deadline_seconds=20.0).to_spec())
    req.dca_job_id = ranged  # no roster at all: any client id could be relayed
    assert_status(refused(lambda: request_round(fed, req, PARTIES)), grpc.StatusCode.INVALID_ARGUMENT)
    assert_nothing_spent(fed, job)
    assert_nothing_spent(fed, ranged)


def test_each_party_holds_the_round_to_its_parties_itself(fed):
    """The same padded job sent to a party directly from a certificate with the curator's name (a curator that
    skips its own check): the party refuses it as invalid and spends nothing."""
    job, req = std_round_job(fed, PARTIES + GHOSTS)
    req.parties.extend(PARTIES)
    rogue = mint(fed, "curator", "curator")
    for p in PARTIES:
        with channel(fed, p, rogue) as ch:
            e = refused(lambda: contribution_pb2_grpc.ContributionPartyStub(ch).Contribute(req, timeout=60))
        assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
        assert "roster" in e.details()
    del req.parties[:]  # a request that names no parties at all
    with channel(fed, "party-1", rogue) as ch:
        assert_status(refused(lambda: contribution_pb2_grpc.ContributionPartyStub(ch).Contribute(req, timeout=60)), grpc.StatusCode.INVALID_ARGUMENT)
    assert_nothing_spent(fed, job)


def _operator_shares(fed, job: str, clients: list[str], d: int) -> list[dca_pb2.ShareReceipt | grpc.RpcError]:
    """The operator streams a share for each of ``clients`` to every node, then sends the same as one batch."""
    out: list = []
    op = site_tls(fed, "operator")
    digest = spec_digest_of(fed, job)  # bound to the job's spec: refused for the roster alone
    for node in NODES:
        with channel(fed, node, op) as ch:
            stub = dca_pb2_grpc.ComputeNodeStub(ch)
            shares = [dca_pb2.ClientShare(job_id=job, spec_digest=digest, client_id=c, masked_vector=bytes(8 * d)) for c in clients]
            try:
                out.append(stub.SubmitShares(iter(shares), timeout=20))
            except grpc.RpcError as e:
                out.append(e)
            batch = dca_pb2.ShareBatch(job_id=job, spec_digest=digest, client_ids=clients, masked_vectors=bytes(8 * d * len(clients)))
            try:
                out.append(stub.SubmitShareBatch(batch, timeout=20))
            except grpc.RpcError as e:
                out.append(e)
    return out


def _assert_all_refused(results: list, n: int) -> None:
    for r in results:
        if isinstance(r, grpc.RpcError):
            assert_status(r, grpc.StatusCode.PERMISSION_DENIED)
        else:
            assert r.accepted == 0 and len(r.rejected) == n, r
            assert all(x.problem == common_pb2.WRONG_ROLE for x in r.rejected), r


def test_an_operator_cannot_fill_invented_slots(fed):
    """N = 300 with T = 297: the three parties would each add σ²/2. The operator's zero shares for the 297 invented
    ids are refused at every node, so they stay missing and the job's own T bound is all that releases it."""
    job = create_dca(fed, dca_spec(n=300, d=3, max_missing=297, roster=PARTIES + GHOSTS, deadline=20.0))
    _assert_all_refused(_operator_shares(fed, job, GHOSTS[:50], 3), 50)
    ep = Endpoints.load(fed.workdir)
    for p in PARTIES:
        rep = asyncio.run(submit_vector(ep, site_tls(fed, p), p, job, np.full(3, 0.25), ledger=client_ledger(fed, p)))
        assert rep.accepted == len(NODES) and not rep.rejected, rep
    st = wait_dca(fed, job)
    assert st.state == "RELEASED" and dca_release(fed, job).clients_included == 3, st  # the parties' own shares only


def test_a_squatted_slot_stays_the_partys(fed):
    """The operator submits under party-3's name first (stream and batch, every node): refused; party-3's own
    shares are then accepted and the job releases the parties' sum (not a sum with the operator's garbage)."""
    job = create_dca(fed, dca_spec(n=3, d=3, roster=PARTIES, deadline=20.0))
    squat = [dca_pb2.ClientShare(job_id=job, spec_digest=spec_digest_of(fed, job), client_id="party-3", masked_vector=os.urandom(24))]
    for node in NODES:
        with channel(fed, node, site_tls(fed, "operator")) as ch:
            try:
                r = dca_pb2_grpc.ComputeNodeStub(ch).SubmitShares(iter(squat), timeout=20)
            except grpc.RpcError as e:
                assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
            else:
                assert r.accepted == 0 and [x.problem for x in r.rejected] == [common_pb2.WRONG_ROLE], r
    _assert_all_refused(_operator_shares(fed, job, ["party-3"], 3), 1)
    ep = Endpoints.load(fed.workdir)
    for p in PARTIES:
        rep = asyncio.run(submit_vector(ep, site_tls(fed, p), p, job, np.full(3, 0.25), ledger=client_ledger(fed, p)))
        assert rep.accepted == len(NODES) and not rep.rejected, rep
    st = wait_dca(fed, job)
    assert st.state == "RELEASED" and dca_release(fed, job).clients_included == 3, st
    assert dca_released(fed, job)
    with operator_curator(fed) as ch:
        release = job_host(ch).GetRelease(common_pb2.JobRef(job_id=job), timeout=30).dca
    assert np.all(np.abs(np.array(release.values)) < 1e3), release.values  # 0.75 + noise, not a sum of random words


def test_a_squatted_contribution_round_still_releases(fed):
    """The same squat before a real contribution round: the round publishes, every party's receipt counts its
    shares, and each party spent exactly once."""
    job, req = std_round_job(fed, PARTIES, deadline=60.0)
    _assert_all_refused(_operator_shares(fed, job, ["party-3"], 5), 1)
    summary = request_round(fed, req, PARTIES)
    assert sorted(r.party for r in summary.receipts) == PARTIES and all(r.accepted_shares == len(NODES) for r in summary.receipts)
    st = wait_dca(fed, job)
    assert st.state == "RELEASED" and dca_release(fed, job).clients_included == 3, st
    for p in PARTIES:
        assert job in ledger_job_ids(fed, p)
    assert_ledgers_within_budget(fed)
    assert_all_serving(fed)


def test_a_pathak_job_with_a_non_member_is_refused(fed):
    """A party certificate minted under a new name cannot register at the curator (only the federation's members
    may), so a Pathak job naming it is refused before any party hears of it (in gaussian-distributed mode each party
    adds σ²/(K − t): an outsider would thin it; every party also checks its own members list)."""
    with channel(fed, "curator", mint(fed, "party", "sybil-9")) as ch:
        e = refused(lambda: pk_grpc.CuratorStub(ch).RegisterParty(pk.PartyRegistration(address="127.0.0.1:9"), timeout=20))
    assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
    with operator_curator(fed) as ch:
        e = refused(lambda: job_host(ch).SubmitJob(ops.JobSubmission(pathak2010=pathak_spec(parties=[*PARTIES, "sybil-9"], seed=b"sybil-pathak")), timeout=60))
    assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
    assert "not registered" in (e.details() or ""), e.details()
    assert_ledgers_within_budget(fed)
