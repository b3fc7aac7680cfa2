"""Noise dilution by parties minted under new names (party certificates from the federation's CA).

The roster rule (docs/protocols/dca.md "Rosters", mpdp.contribution.check_roster) holds a contribution round to
exactly the parties it was asked with, and a node takes a listed client's share only over that client's own party
certificate. But *who is a party* is whatever the CA signs and the curator registers: whoever holds the CA key (the
provisioning host, run by the same organisation as the curator and the operator: docs/deploy.md) mints party
certificates ``sybil-1 … sybil-8``, tries to register them at the curator (it registers only the federation's members,
so these are refused), and submits a one-round learner job over ``[party-1, sybil-1, …, sybil-8]`` (N = 9, T = 0),
whose round's roster would be exactly those parties, every party check passing. party-1 adds σ²_std/(N − T − 1) = σ²_std/8 and spends the job's (ε, δ); the
sybils submit zero vectors with noise the attacker knows. Subtracting it leaves party-1's statistic under noise of
variance σ²_std/8 — an (ε, δ) guarantee that does not hold, for a charge that says it does.

Invariant (dca.md: "the release still sums at least N − T own slices, so its noise variance stays ≥ σ²_std"): a
release that includes a party's contribution carries at least σ²_std of noise the operator's side does not know.
Expected: the party (or the curator) refuses a round over identities that are not members of its federation.
"""

from __future__ import annotations

import grpc

from mpdp.messages import operations_pb2, operations_pb2_grpc, pathak2010_pb2 as pk, pathak2010_pb2_grpc as pk_grpc

from .conftest import assert_ledgers_within_budget, assert_status, channel, learner_spec, ledger_job_ids, mint, operator_curator, refused, submit_learner

SYBILS = [f"sybil-{i}" for i in range(1, 9)]


def test_sybil_parties_dilute_a_real_partys_noise(fed):
    for s in SYBILS:  # a minted party certificate under a new name is no member: the curator does not register it
        with channel(fed, "curator", mint(fed, "party", s)) as ch:
            e = refused(lambda: pk_grpc.CuratorStub(ch).RegisterParty(pk.PartyRegistration(address="127.0.0.1:9"), timeout=20))
        assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
    roster = ["party-1", *SYBILS]
    before = ledger_job_ids(fed, "party-1")
    with operator_curator(fed) as ch:
        dca_before = _dca_jobs(ch)
    e = refused(lambda: submit_learner(fed, learner_spec(roster, max_missing=0), timeout=120))
    assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
    assert "not registered" in (e.details() or ""), e.details()
    with operator_curator(fed) as ch:
        assert _dca_jobs(ch) == dca_before  # no round's DCA job: party-1 was never asked
    assert ledger_job_ids(fed, "party-1") == before
    assert_ledgers_within_budget(fed)


def _dca_jobs(ch) -> set[str]:
    return {j.job_id for j in operations_pb2_grpc.JobOperationsStub(ch).ListJobs(operations_pb2.JobQuery(protocol="dca", limit=1000), timeout=30).jobs}
