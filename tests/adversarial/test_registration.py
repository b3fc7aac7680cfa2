"""Who may tell the curator where a site is, and what a taken job id tells another operator.

Registration (services/curator/registrations.py): only the federation's members (the curator config's ``members``,
``compute_node_members`` and provisioned sites) may register, refused WRONG_ROLE by the gate before the body is read;
an address in the curator's config is never changed by a registration; an address learned by registration can be
changed only by a certificate with the key that first registered it, and that pin survives a curator restart. So a
certificate minted under a new name cannot join, and one minted under an existing member's name cannot redirect the
curator's traffic to that member.

Job ids (services/common/jobs.py ``duplicate``): an operator who submits a learner job under an id another operator's
job holds gets the refusal any id it may not use gets (INVALID_JOB, no job, no owner); its own duplicate is REPLAY.
"""

from __future__ import annotations

import json

import grpc
import pytest

from mpdp.dpgd.model import Task
from mpdp.dpgd.plan import DpgdPlan
from mpdp.messages import common_pb2, dca_pb2, dca_pb2_grpc, operations_pb2_grpc, pathak2010_pb2 as pk, pathak2010_pb2_grpc as pk_grpc
from mpdp_services.common import jobs

from .conftest import NODES, PARTIES, address, assert_serving, assert_status, channel, mint, refused, site_tls, start_federation, submit_learner

FIXED = "party-fixed"  # a party whose address the curator's config fixes (as `mpdp provision` writes it)
FIXED_ADDRESS = "127.0.0.1:9"


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    f = start_federation(tmp_path_factory.mktemp("registration"), curator_options={"parties": {FIXED: FIXED_ADDRESS}})
    yield f
    f.stop()


def _registered(fed, kind: str) -> dict[str, dict]:
    return json.loads((fed.workdir / "curator" / "state" / f"{kind}.json").read_text())


def _register_party(fed, tls, where: str):
    with channel(fed, "curator", tls) as ch:
        return pk_grpc.CuratorStub(ch).RegisterParty(pk.PartyRegistration(address=where), timeout=20)


def _register_node(fed, tls, where: str):
    with channel(fed, "curator", tls) as ch:
        return dca_pb2_grpc.DcaCuratorStub(ch).RegisterComputeNode(dca_pb2.NodeRegistration(address=where), timeout=20)


def test_a_name_that_is_no_member_cannot_register(fed):
    e = refused(lambda: _register_party(fed, mint(fed, "party", "party-9"), "127.0.0.1:9"))
    assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
    e = refused(lambda: _register_node(fed, mint(fed, "compute_node", "node-9"), "127.0.0.1:9"))
    assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
    assert "party-9" not in _registered(fed, "parties") and "node-9" not in _registered(fed, "compute_nodes")


def test_a_second_certificate_under_a_members_name_cannot_move_it(fed):
    """party-1 and node-1 re-minted from the CA (a new key under the member's name): refused, addresses unchanged."""
    before_p, before_n = _registered(fed, "parties")["party-1"], _registered(fed, "compute_nodes")["node-1"]
    assert before_p["address"] == address(fed, "party-1") and before_p["key"].startswith("sha256:")
    e = refused(lambda: _register_party(fed, mint(fed, "party", "party-1"), "127.0.0.1:9"))
    assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
    e = refused(lambda: _register_node(fed, mint(fed, "compute_node", "node-1"), "127.0.0.1:9"))
    assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
    assert _registered(fed, "parties")["party-1"] == before_p and _registered(fed, "compute_nodes")["node-1"] == before_n


def test_a_member_moves_its_own_registration(fed):
    """A restarted site re-registers with its own certificate, possibly at another port: that is taken."""
    own = address(fed, "party-2")
    _register_party(fed, site_tls(fed, "party-2"), "127.0.0.1:9")
    assert _registered(fed, "parties")["party-2"]["address"] == "127.0.0.1:9"
    _register_party(fed, site_tls(fed, "party-2"), own)
    assert _registered(fed, "parties")["party-2"]["address"] == own
    _register_node(fed, site_tls(fed, "node-2"), address(fed, "node-2"))
    fed.kill("party-3")
    fed.restart("party-3")  # registers again at start-up with its own certificate
    assert_serving(fed, "party-3")


def test_a_provisioned_address_is_never_changed_by_registration(fed):
    tls = mint(fed, "party", FIXED)
    e = refused(lambda: _register_party(fed, tls, "127.0.0.1:10"))
    assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
    _register_party(fed, tls, FIXED_ADDRESS)  # the same address: answered as usual, nothing changes
    assert FIXED not in _registered(fed, "parties")  # the config's address is not a registration


def test_the_key_pin_survives_a_curator_restart(fed):
    fed.kill("curator")
    fed.restart("curator")
    e = refused(lambda: _register_party(fed, mint(fed, "party", "party-1"), "127.0.0.1:9"))
    assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
    e = refused(lambda: _register_party(fed, mint(fed, "party", "party-9"), "127.0.0.1:9"))
    assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
    _register_party(fed, site_tls(fed, "party-1"), address(fed, "party-1"))
    assert _registered(fed, "parties")["party-1"]["address"] == address(fed, "party-1")


def _learner_spec(job_id: str):
    from mpdp_services.operator.dpgd import dpgd_spec

    plan = DpgdPlan(Task("binary"), 4, 1.0, 1e-6, lam=1e-2, rounds=1, total_records=40 + 47 + 54)
    return dpgd_spec("synthetic", PARTIES, NODES, plan, 60, job_id=job_id, seed=b"registration-ids")


def test_a_taken_job_id_does_not_reveal_another_operators_job(fed):
    job = "dp-review-taken"
    assert submit_learner(fed, _learner_spec(job)) == job
    own = refused(lambda: submit_learner(fed, _learner_spec(job)))
    assert_status(own, grpc.StatusCode.ALREADY_EXISTS)  # the owner's own duplicate
    operator_2 = mint(fed, "operator", "operator-2")
    other = refused(lambda: submit_learner(fed, _learner_spec(job), operator_2))
    with channel(fed, "curator", operator_2) as ch:
        assert_status(refused(lambda: list(operations_pb2_grpc.JobOperationsStub(ch).WatchJob(common_pb2.JobRef(job_id=job), timeout=20))),
                      grpc.StatusCode.NOT_FOUND)
    assert_status(other, grpc.StatusCode.INVALID_ARGUMENT)
    assert other.details() == f"INVALID_JOB: {jobs.TAKEN}", other.details()  # names no job, no owner, no state
    admin = refused(lambda: submit_learner(fed, _learner_spec(job), mint(fed, "admin", "admin-1")))  # the admin may know of every job
    assert_status(admin, grpc.StatusCode.ALREADY_EXISTS)


def test_a_registration_file_of_an_earlier_version_is_pinned_by_the_next_registration(tmp_path):
    """An entry without a key (an earlier version's file) is pinned to the next registering key; entries of
    non-members are dropped; the config's address wins over the file's."""
    from mpdp_services.common import errors
    from mpdp_services.curator.registrations import Registrations

    path = tmp_path / "parties.json"
    path.write_text(json.dumps({"party-1": "127.0.0.1:7001", "sybil-1": "127.0.0.1:9", FIXED: "127.0.0.1:10"}))
    reg = Registrations("party", {FIXED: FIXED_ADDRESS}, ["party-1"], path)
    assert reg.addresses == {"party-1": "127.0.0.1:7001", FIXED: FIXED_ADDRESS}
    reg.register("party-1", "sha256:aa", "127.0.0.1:7002")
    with pytest.raises(errors.Refused) as e:
        reg.register("party-1", "sha256:bb", "127.0.0.1:9")
    assert e.value.problem == common_pb2.WRONG_ROLE
    again = Registrations("party", {FIXED: FIXED_ADDRESS}, ["party-1"], path)  # as after a restart
    assert again.addresses["party-1"] == "127.0.0.1:7002"
    with pytest.raises(errors.Refused):
        again.register("party-1", "sha256:bb", "127.0.0.1:9")
    assert json.loads(path.read_text()) == {"party-1": {"address": "127.0.0.1:7002", "key": "sha256:aa"}}
