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

from mpdp.messages import link_pb2, link_pb2_grpc
from mpdp_services.common.link import LINK_ADDRESS

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


def _register_party(fed, tls, where: str = ""):
    with channel(fed, "curator", tls) as ch:
        return pk_grpc.CuratorStub(ch).RegisterParty(pk.PartyRegistration(address=where), timeout=20)


def mint_twin(fed, name: str):
    """A second certificate under ``name`` with a new key (mint() reuses one folder per name)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    from mpdp_services.common import pki
    from mpdp_services.common.rpc import TlsFiles

    folder = fed.workdir / "minted" / f"twin-{name}"
    if not (folder / "site.crt").exists():
        ca = fed.workdir / "ca"
        key, cert = pki.issue(serialization.load_pem_private_key((ca / "ca.key").read_bytes(), None), x509.load_pem_x509_certificate((ca / "ca.crt").read_bytes()),
                              "party", name, ["127.0.0.1"])
        pki.write_site(folder, key, cert, x509.load_pem_x509_certificate((ca / "ca.crt").read_bytes()))
    return TlsFiles(folder / "site.crt", folder / "site.key", folder / "ca.crt")


def _register_node(fed, tls, where: str):
    with channel(fed, "curator", tls) as ch:
        return dca_pb2_grpc.DcaCuratorStub(ch).RegisterComputeNode(dca_pb2.NodeRegistration(address=where), timeout=20)


def test_a_name_that_is_no_member_cannot_register(fed):
    e = refused(lambda: _register_party(fed, mint(fed, "party", "party-9")))
    assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
    e = refused(lambda: _register_node(fed, mint(fed, "compute_node", "node-9"), "127.0.0.1:9"))
    assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
    assert "party-9" not in _registered(fed, "parties") and "node-9" not in _registered(fed, "compute_nodes")


def test_a_second_certificate_under_a_members_name_cannot_move_it(fed):
    """party-1 and node-1 re-minted from the CA (a new key under the member's name): refused, registrations unchanged;
    the re-minted party-1 can neither take over party-1's link nor relay in its name."""
    before_p, before_n = _registered(fed, "parties")["party-1"], _registered(fed, "compute_nodes")["node-1"]
    assert before_p["address"] == LINK_ADDRESS and before_p["key"].startswith("sha256:")
    twin = mint(fed, "party", "party-1")
    e = refused(lambda: _register_party(fed, twin))
    assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
    with channel(fed, "curator", twin) as ch:
        stub = link_pb2_grpc.PartyLinkStub(ch)
        assert_status(refused(lambda: next(iter(stub.Open(link_pb2.LinkHello(), timeout=20)))), grpc.StatusCode.PERMISSION_DENIED)
        assert_status(refused(lambda: stub.Relay(link_pb2.SealedCall(), timeout=20)), grpc.StatusCode.PERMISSION_DENIED)
        assert_status(refused(lambda: stub.Certificate(link_pb2.PartyCertificateRequest(name="party-2"), timeout=20)), grpc.StatusCode.PERMISSION_DENIED)
    e = refused(lambda: _register_node(fed, mint(fed, "compute_node", "node-1"), "127.0.0.1:9"))
    assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
    assert _registered(fed, "parties")["party-1"] == before_p and _registered(fed, "compute_nodes")["node-1"] == before_n


def test_a_member_moves_its_own_registration(fed):
    """A restarted site re-registers with its own certificate (a node possibly at another port): that is taken. A party
    registers no address (it listens nowhere): one that names an address is refused MALFORMED."""
    _register_party(fed, site_tls(fed, "party-2"))
    assert _registered(fed, "parties")["party-2"]["address"] == LINK_ADDRESS
    assert_status(refused(lambda: _register_party(fed, site_tls(fed, "party-2"), "127.0.0.1:9")), grpc.StatusCode.INVALID_ARGUMENT)
    _register_node(fed, site_tls(fed, "node-2"), address(fed, "node-2"))
    fed.kill("party-3")
    fed.restart("party-3")  # registers again at start-up with its own certificate
    assert_serving(fed, "party-3")


def test_a_party_named_in_the_config_registers_and_is_pinned_to_its_key(fed):
    """A party in the curator config's `parties` is a member; its address there is unused (it listens nowhere): it
    registers like any member and only its key may use its name afterwards."""
    tls = mint(fed, "party", FIXED)
    _register_party(fed, tls)
    assert _registered(fed, "parties")[FIXED]["address"] == LINK_ADDRESS
    twin = mint_twin(fed, FIXED)
    assert_status(refused(lambda: _register_party(fed, twin)), grpc.StatusCode.PERMISSION_DENIED)


def test_the_key_pin_survives_a_curator_restart(fed):
    fed.kill("curator")
    fed.restart("curator")
    e = refused(lambda: _register_party(fed, mint(fed, "party", "party-1")))
    assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
    e = refused(lambda: _register_party(fed, mint(fed, "party", "party-9")))
    assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
    _register_party(fed, site_tls(fed, "party-1"))
    assert _registered(fed, "parties")["party-1"]["address"] == LINK_ADDRESS


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
