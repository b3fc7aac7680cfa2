"""Outsiders: sites of the federation (valid certificates, right role) that are not participants of a job.

Models a party (or compute node) of the same federation that learns a running job's id and sends protocol
messages for it: AcceptJob or AbortJob to the curator, SendPartySecrets or AbortJob to a member party
(Pathak); received-set reports, aborts and partial sums from a compute node that is not one of the job's
nodes (DCA); shares from a client that is not on a contribution round's roster. Expected: every such message
is refused (PERMISSION_DENIED, or a per-client rejection in a share receipt) and never touches the job —
the job completes and publishes, nobody's ledger goes past its budget.
"""

from __future__ import annotations

import grpc
import pytest

from mpdp.messages import common_pb2, dca_pb2, dca_pb2_grpc, pathak2010_pb2 as pk, pathak2010_pb2_grpc as pk_grpc

from .conftest import (job_host, dca_release, client_ledger,
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
    pathak_published,
    pathak_spec,
    refused,
    site_tls,
    spec_digest_of,
    submit_clients,
    submit_pathak,
    wait_dca,
    wait_pathak,
)


def _wait_announced(fed, job: str) -> None:
    """Until the curator has left job setup (every member has the job): the outsider then attacks a running job."""
    with operator_curator(fed) as ch:
        for st in job_host(ch).WatchJob(common_pb2.JobRef(job_id=job), timeout=120):
            if st.terminal or st.stage != "setup":
                return


def _assert_published(fed, job: str) -> None:
    st = wait_pathak(fed, job)
    assert st.state == "PUBLISHED", f"the outsider's message ended the job: {st.state} {common_pb2.Problem.Name(st.problem)} {st.detail[:200]!r}"
    assert pathak_published(fed, job)
    assert_ledgers_within_budget(fed)


def _abort(job: str, by: str) -> common_pb2.JobAbort:
    return common_pb2.JobAbort(job_id=job, problem=common_pb2.INTERNAL, detail="stop", reported_by=by)


def test_pathak_outsider_accept_job_at_curator(fed):
    """An outsider party (minted party-9, same CA) sends AcceptJob for a running job: PERMISSION_DENIED, job publishes."""
    job = submit_pathak(fed, pathak_spec(seed=b"outsider-accept"))
    with channel(fed, "curator", mint(fed, "party", "party-9")) as ch:
        e = refused(lambda: pk_grpc.CuratorStub(ch).AcceptJob(pk.JobAcceptance(job_id=job, dimension=4), timeout=20))
    assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
    _assert_published(fed, job)


def test_pathak_outsider_abort_at_curator(fed):
    job = submit_pathak(fed, pathak_spec(seed=b"outsider-abort-curator"))
    with channel(fed, "curator", mint(fed, "party", "party-9")) as ch:
        e = refused(lambda: pk_grpc.CuratorStub(ch).AbortJob(_abort(job, "party-9"), timeout=20))
    assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
    _assert_published(fed, job)


def test_pathak_outsider_party_secrets_to_member(fed):
    """After the members have the job, the outsider sends SendPartySecrets (a forged key ξ) to member party-2."""
    job = submit_pathak(fed, pathak_spec(seed=b"outsider-secrets"))
    _wait_announced(fed, job)
    secrets = pk.PartySecrets(job_id=job, paillier_p=(2**127 - 1).to_bytes(16, "big"), paillier_q=(2**89 - 1).to_bytes(12, "big"))
    with channel(fed, "party-2", mint(fed, "party", "party-9")) as ch:
        e = refused(lambda: pk_grpc.PartyStub(ch).SendPartySecrets(secrets, timeout=20))
    assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
    _assert_published(fed, job)


def test_pathak_outsider_abort_to_member(fed):
    job = submit_pathak(fed, pathak_spec(seed=b"outsider-abort-member"))
    _wait_announced(fed, job)
    with channel(fed, "party-1", mint(fed, "party", "party-9")) as ch:
        e = refused(lambda: pk_grpc.PartyStub(ch).AbortJob(_abort(job, "party-9"), timeout=20))
    assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
    _assert_published(fed, job)


def test_pathak_non_member_party_of_the_federation_cannot_touch_a_job(fed):
    """party-3 is registered and serving but not in a (party-1, party-2) job: same refusals, same outcome."""
    job = submit_pathak(fed, pathak_spec(parties=["party-1", "party-2"], seed=b"outsider-member"))
    with channel(fed, "curator", site_tls(fed, "party-3")) as ch:
        assert_status(refused(lambda: pk_grpc.CuratorStub(ch).AcceptJob(pk.JobAcceptance(job_id=job, dimension=4), timeout=20)), grpc.StatusCode.PERMISSION_DENIED)
    _wait_announced(fed, job)
    with channel(fed, "party-1", site_tls(fed, "party-3")) as ch:
        secrets = pk.PartySecrets(job_id=job, paillier_p=b"\x0b", paillier_q=b"\x0d")
        assert_status(refused(lambda: pk_grpc.PartyStub(ch).SendPartySecrets(secrets, timeout=20)), grpc.StatusCode.PERMISSION_DENIED)
    st = wait_pathak(fed, job)
    assert st.state == "PUBLISHED", f"{st.state} {common_pb2.Problem.Name(st.problem)} {st.detail[:200]!r}"
    assert job not in ledger_job_ids(fed, "party-3")
    assert_ledgers_within_budget(fed)


def test_dca_outsider_node_cannot_touch_a_job(fed):
    """A job over node-1 and node-2; node-3 (a compute node of the federation, not of the job) reports a forged
    final received set and an abort to node-1, and a forged partial sum to the curator."""
    job = create_dca(fed, dca_spec(n=3, nodes=["node-1", "node-2"], deadline=30.0))
    with channel(fed, "node-1", site_tls(fed, "node-3")) as ch:
        stub = dca_pb2_grpc.ComputeNodeStub(ch)
        forged = dca_pb2.ReceivedClients(job_id=job, sequence=0, client_ids=[], final=True, total=0, digest=bytes(32))
        assert_status(refused(lambda: stub.ReportReceivedClients(forged, timeout=20)), grpc.StatusCode.PERMISSION_DENIED)
        assert_status(refused(lambda: stub.AbortJob(common_pb2.JobAbort(job_id=job, problem=common_pb2.INTERNAL, detail="stop", reported_by="node-3"), timeout=20)),
                      grpc.StatusCode.PERMISSION_DENIED)
    with channel(fed, "curator", site_tls(fed, "node-3")) as ch:
        stub = dca_pb2_grpc.DcaCuratorStub(ch)
        forged_sum = dca_pb2.PartialSum(job_id=job, partial_sum=bytes(24), clients_included=3, agreed_set_digest=bytes(32))
        assert_status(refused(lambda: stub.SendPartialSum(forged_sum, timeout=20)), grpc.StatusCode.PERMISSION_DENIED)
        assert_status(refused(lambda: stub.AbortJob(common_pb2.JobAbort(job_id=job, problem=common_pb2.INTERNAL, detail="stop", reported_by="node-3"), timeout=20)),
                      grpc.StatusCode.PERMISSION_DENIED)
    submit_clients(fed, job, ["c-0", "c-1", "c-2"])
    st = wait_dca(fed, job)
    assert st.state == "RELEASED", f"{st.state} {common_pb2.Problem.Name(st.problem)} {st.detail[:200]!r}"
    assert_all_serving(fed)


def test_dca_client_off_the_roster_is_rejected_and_the_round_releases(fed):
    """A contribution-style job with a roster of the three parties; party-9 (valid party certificate, not on the
    roster) streams a share to every node first: refused (PERMISSION_DENIED or a per-client rejection in the
    receipt); the round releases over the roster only."""
    import asyncio
    import os

    import numpy as np

    from mpdp_services.common.endpoints import Endpoints
    from mpdp_services.dca_client.client import submit_vector

    job = create_dca(fed, dca_spec(n=3, d=3, nodes=NODES, roster=PARTIES, deadline=30.0))
    for node in NODES:
        with channel(fed, node, mint(fed, "party", "party-9")) as ch:
            share = dca_pb2.ClientShare(job_id=job, spec_digest=spec_digest_of(fed, job), client_id="party-9", masked_vector=os.urandom(24))
            try:
                receipt = dca_pb2_grpc.ComputeNodeStub(ch).SubmitShares(iter([share]), timeout=20)
            except grpc.RpcError as e:
                assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
            else:
                assert receipt.accepted == 0 and len(receipt.rejected) == 1, receipt
    ep = Endpoints.load(fed.workdir)
    for p in PARTIES:
        rep = asyncio.run(submit_vector(ep, site_tls(fed, p), p, job, np.full(3, 0.25), ledger=client_ledger(fed, p)))
        assert rep.accepted == len(NODES) and not rep.rejected, rep
        assert [e["job_id"] for e in client_ledger(fed, p).entries if e["job_id"] == job] == [job]  # spent once, before its shares
    st = wait_dca(fed, job)
    assert st.state == "RELEASED" and dca_release(fed, job).clients_included == 3, st
    assert dca_released(fed, job)


def test_a_dca_client_whose_ledger_cannot_pay_sends_nothing(fed):
    """submit_vector has no ledger-less form: a client whose own ledger cannot pay the job's (ε, δ) is refused
    BudgetExceeded before any share leaves (the nodes count no submission from it) and its ledger is unchanged."""
    import asyncio
    import inspect

    import numpy as np

    from mpdp.ledger import BudgetExceeded, Ledger
    from mpdp_services.common.endpoints import Endpoints
    from mpdp_services.dca_client.client import submit_vector

    assert inspect.signature(submit_vector).parameters["ledger"].default is inspect.Parameter.empty
    job = create_dca(fed, dca_spec(n=3, d=3, nodes=NODES, roster=PARTIES, deadline=30.0))
    poor = Ledger(fed.workdir / "client-ledgers" / "poor-party-1.json", budget_epsilon=1e-6, budget_delta=1e-6)
    with pytest.raises(BudgetExceeded):
        asyncio.run(submit_vector(Endpoints.load(fed.workdir), site_tls(fed, "party-1"), "party-1", job, np.full(3, 0.25), ledger=poor))
    assert poor.entries == []
    ep = Endpoints.load(fed.workdir)
    for p in PARTIES:  # nothing of party-1 reached a node: its own paid submission is still its first, and accepted
        rep = asyncio.run(submit_vector(ep, site_tls(fed, p), p, job, np.full(3, 0.25), ledger=client_ledger(fed, p)))
        assert rep.accepted == len(NODES) and not rep.rejected, rep
    assert wait_dca(fed, job).released and dca_release(fed, job).clients_included == 3
