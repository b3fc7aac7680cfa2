"""Noise dilution by parties minted under new names (party certificates from the federation's CA).

The roster rule (docs/protocols/dca.md "Rosters", mpdp.contribution.check_roster) holds a contribution round to
exactly the parties it was asked with, and a node takes a listed client's share only over that client's own party
certificate. But *who is a party* is whatever the CA signs and the curator registers: whoever holds the CA key (the
provisioning host, run by the same organisation as the curator and the operator: docs/deploy.md) mints party
certificates ``sybil-1 … sybil-8``, tries to register them at the curator (it registers only the federation's members,
so these are refused), and asks party-1 for a round whose roster is ``[party-1, sybil-1, …, sybil-8]`` (N = 9, T = 0). Every check passes:
the roster *is* the round's parties. party-1 adds σ²_std/(N − T − 1) = σ²_std/8 and spends the job's (ε, δ); the
sybils submit zero vectors with noise the attacker knows. Subtracting it leaves party-1's statistic under noise of
variance σ²_std/8 — an (ε, δ) guarantee that does not hold, for a charge that says it does.

Invariant (dca.md: "the release still sums at least N − T own slices, so its noise variance stays ≥ σ²_std"): a
release that includes a party's contribution carries at least σ²_std of noise the operator's side does not know.
Expected: the party (or the curator) refuses a round over identities that are not members of its federation.
"""

from __future__ import annotations

import asyncio

import grpc
import numpy as np

from mpdp.dca.client import ClientMachine
from mpdp.dca.params import DcaParams
from mpdp.math.drbg import Drbg
from mpdp.messages import common_pb2, contribution_pb2, contribution_pb2_grpc, dca_pb2_grpc, pathak2010_pb2 as pk, pathak2010_pb2_grpc as pk_grpc
from mpdp.protocol import Send
from mpdp.regression.statistics import party_statistics
from mpdp_services.dca_client.client import carry_out

from .conftest import job_host, assert_ledgers_within_budget, assert_status, channel, create_dca, dca_spec, ledger_job_ids, mint, operator_curator, refused, wait_dca

SYBILS = [f"sybil-{i}" for i in range(1, 9)]
BOUNDS = [1.0] * 5  # d = 4 features and the label, each within [-1, 1]


async def _nothing_to_spend(entries: tuple[dict, ...]) -> None:  # a sybil keeps no ledger
    raise AssertionError("the shares alone carry no Spend")


def test_sybil_parties_dilute_a_real_partys_noise(fed):
    for s in SYBILS:  # a minted party certificate under a new name is no member: the curator does not register it
        with channel(fed, "curator", mint(fed, "party", s)) as ch:
            e = refused(lambda: pk_grpc.CuratorStub(ch).RegisterParty(pk.PartyRegistration(address="127.0.0.1:9"), timeout=20))
        assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
    roster = ["party-1", *SYBILS]
    job = create_dca(fed, dca_spec(n=len(roster), d=5, roster=roster, clip_bounds=[100.0], sensitivity=5.0, deadline=60.0))
    with operator_curator(fed) as ch:
        ann = dca_pb2_grpc.DcaCuratorStub(ch).GetJob(common_pb2.JobRef(job_id=job), timeout=20)
    params = DcaParams.from_spec(job, ann.spec)
    known = np.zeros(5)
    for s in SYBILS:  # zero statistics; the attacker keeps each noise slice
        m = ClientMachine(params, s, np.zeros(5), Drbg.from_os(), keep_noise=True)
        outs = [o for o in m.submit() if isinstance(o, Send)]
        rep = asyncio.run(carry_out(ann, mint(fed, "party", s), params, outs, _nothing_to_spend))
        assert not rep.rejected, rep.rejected[:1]
        known += m.noise
    request = contribution_pb2.StatisticRequest(dca_job_id=job, dataset="synthetic", unvalidated=True, statistic="linreg/std", bounds=BOUNDS, records_per_client=1000)
    with operator_curator(fed) as ch:
        try:  # the curator also asks the sybils, who do not answer: the round "fails", after party-1 submitted
            contribution_pb2_grpc.ContributionCuratorStub(ch).RequestContributions(
                contribution_pb2.ContributionRound(request=request, parties=roster), timeout=120)
        except grpc.RpcError:
            pass
    st = wait_dca(fed, job)
    charged = job in ledger_job_ids(fed, "party-1")
    if st.state != "RELEASED":
        return  # nothing released: the attack failed
    with operator_curator(fed) as ch:
        rel = job_host(ch).GetRelease(common_pb2.JobRef(job_id=job), timeout=20).dca
    data = np.loadtxt(fed.workdir.parent / "data" / "party-1.csv", delimiter=",", ndmin=2)
    truth = party_statistics(data[:, :-1], data[:, -1], "std", BOUNDS)
    residual = np.asarray(rel.values) - known - truth  # party-1's own noise slice, nothing else
    unknown_sd = rel.sigma_client  # one honest slice
    assert_ledgers_within_budget(fed)
    assert unknown_sd >= rel.sigma_std * (1 - 1e-9), (
        f"party-1 (charged: {charged}) released its statistic under noise σ = {unknown_sd:.4g} the attacker does not know, "
        f"where the guarantee needs σ_std = {rel.sigma_std:.4g}; residual after subtracting the sybils' noise: {np.round(residual, 3)}")
