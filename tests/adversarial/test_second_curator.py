"""A second curator-role certificate: OU=curator, CN=curator-2, signed by the federation's own CA.

Models a compromised or mis-issued certificate that carries the curator role but not the curator's name
(and certificates that carry the curator's name under another role). Roles are not enough: compute nodes and
parties must obey only the curator named in their configuration. Expected: PERMISSION_DENIED for every
curator-only RPC (partial sums, closing submissions, aborts, announcements, release requests, contribution
and vote requests), the running jobs untouched (they release / publish), nothing spent from any ledger.
"""

from __future__ import annotations

import grpc
import pytest

from mpdp.messages import (
    common_pb2,
    contribution_pb2,
    contribution_pb2_grpc,
    dca_pb2,
    dca_pb2_grpc,
    hamm2016_pb2,
    hamm2016_pb2_grpc,
    local_release_pb2,
    local_release_pb2_grpc,
    pathak2010_pb2 as pk,
    pathak2010_pb2_grpc as pk_grpc,
)

from .conftest import (
    dca_release,
    NODES,
    PARTIES,
    assert_all_serving,
    assert_ledgers_within_budget,
    assert_status,
    channel,
    create_dca,
    dca_released,
    dca_spec,
    ledger,
    mint,
    pathak_published,
    pathak_spec,
    refused,
    submit_clients,
    submit_pathak,
    wait_dca,
    wait_pathak,
)


@pytest.fixture(scope="module")
def rogue(fed):
    return mint(fed, "curator", "curator-2")


def _node_attack(rpc: str, job: str):
    abort = common_pb2.JobAbort(job_id=job, problem=common_pb2.INTERNAL, detail="stop", reported_by="curator-2")
    return {
        "GetPartialSum": lambda stub: stub.GetPartialSum(common_pb2.JobRef(job_id=job), timeout=20),
        "CloseSubmissions": lambda stub: stub.CloseSubmissions(dca_pb2.SubmissionsClose(job_id=job), timeout=20),
        "AbortJob": lambda stub: stub.AbortJob(abort, timeout=20),
        "AnnounceJob": lambda stub: stub.AnnounceJob(dca_pb2.DcaJobAnnouncement(job_id=job, spec=dca_spec(n=3), node_addresses={}), timeout=20),
    }[rpc]


@pytest.mark.parametrize("rpc", ["GetPartialSum", "CloseSubmissions", "AbortJob", "AnnounceJob"])
def test_second_curator_cannot_drive_compute_nodes(fed, rogue, rpc):
    job = create_dca(fed, dca_spec(n=3, nodes=NODES, deadline=30.0))
    submit_clients(fed, job, ["c-0", "c-1"])  # two of three clients in: a partial sum now would leak a sub-sum
    for node in NODES:
        with channel(fed, node, rogue) as ch:
            e = refused(lambda: _node_attack(rpc, job)(dca_pb2_grpc.ComputeNodeStub(ch)))
        assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
    submit_clients(fed, job, ["c-2"])
    st = wait_dca(fed, job)
    assert st.state == "RELEASED" and dca_release(fed, job).clients_included == 3, f"{st.state} {common_pb2.Problem.Name(st.problem)} {st.detail[:200]!r}"
    assert dca_released(fed, job)


ROGUE_JOBS = {"pk-rogue", "local-rogue", "dca-rogue", "hcb-rogue"}


def _party_attack(rpc: str, job: str):
    abort = common_pb2.JobAbort(job_id=job, problem=common_pb2.INTERNAL, detail="stop", reported_by="curator-2")
    local = local_release_pb2.LocalModelRequest(job_id="local-rogue", spec=local_release_pb2.LocalModelJobSpec(
        dataset="synthetic", model="lmgc", mode=common_pb2.CORRECTED, epsilon=1.0, parties=PARTIES, ridge=1e-3, data_norm=1.0))
    stat = contribution_pb2.StatisticRequest(dca_job_id="dca-rogue", dataset="synthetic", unvalidated=True, statistic="linreg/std", bounds=[1.0] * 5, records_per_client=100)
    vote = hamm2016_pb2.VoteRequest(job_id="hcb-rogue", dca_job_id="dca-rogue", spec=hamm2016_pb2.EnsembleJobSpec(dataset="synthetic"))
    return {
        "Party.AbortJob": lambda ch: pk_grpc.PartyStub(ch).AbortJob(abort, timeout=20),
        "Party.StartProtocol": lambda ch: pk_grpc.PartyStub(ch).StartProtocol(pk.ProtocolStart(job_id=job, dimension=4), timeout=20),
        "Party.AnnounceJob": lambda ch: pk_grpc.PartyStub(ch).AnnounceJob(pk.JobAnnouncement(job_id="pk-rogue", spec=pathak_spec(seed=b"x"), party_addresses={}), timeout=20),
        "LocalModelParty.TrainLocalModel": lambda ch: local_release_pb2_grpc.LocalModelPartyStub(ch).TrainLocalModel(local, timeout=30),
        "ContributionParty.Contribute": lambda ch: contribution_pb2_grpc.ContributionPartyStub(ch).Contribute(stat, timeout=30),
        "EnsembleParty.Vote": lambda ch: hamm2016_pb2_grpc.EnsemblePartyStub(ch).Vote(vote, timeout=30),
    }[rpc]


@pytest.mark.parametrize("rpc", ["Party.AbortJob", "Party.StartProtocol", "Party.AnnounceJob", "LocalModelParty.TrainLocalModel",
                                 "ContributionParty.Contribute", "EnsembleParty.Vote"])
def test_second_curator_cannot_drive_parties(fed, rogue, rpc):
    """Sent to every party while a Pathak job runs (whether or not the party has the job yet)."""
    job = submit_pathak(fed, pathak_spec(seed=f"rogue-{rpc}".encode()))
    for p in PARTIES:
        with channel(fed, p, rogue) as ch:
            e = refused(lambda: _party_attack(rpc, job)(ch))
        assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
    st = wait_pathak(fed, job)
    assert st.state == "PUBLISHED", f"{st.state} {common_pb2.Problem.Name(st.problem)} {st.detail[:200]!r}"
    assert pathak_published(fed, job)
    for p in PARTIES:  # the Pathak job's entry; nothing the rogue asked for
        ids = {e["job_id"] for e in ledger(fed, p)["entries"]}
        assert job in ids and not ids & ROGUE_JOBS, ids
    assert_ledgers_within_budget(fed)


@pytest.mark.parametrize("role", ["party", "operator", "compute_node"])
def test_the_curators_name_under_another_role_is_not_the_curator(fed, role):
    """CN=curator but OU≠curator: the role check refuses before the name could matter."""
    impostor = mint(fed, role, "curator")
    with channel(fed, "party-1", impostor) as ch:
        announce = pk.JobAnnouncement(job_id="pk-impostor", spec=pathak_spec(seed=b"x"), party_addresses={})
        assert_status(refused(lambda: pk_grpc.PartyStub(ch).AnnounceJob(announce, timeout=20)), grpc.StatusCode.PERMISSION_DENIED)
    with channel(fed, "node-1", impostor) as ch:
        assert_status(refused(lambda: dca_pb2_grpc.ComputeNodeStub(ch).GetPartialSum(common_pb2.JobRef(job_id="dca-x"), timeout=20)), grpc.StatusCode.PERMISSION_DENIED)
    assert_all_serving(fed)
    assert_ledgers_within_budget(fed)
