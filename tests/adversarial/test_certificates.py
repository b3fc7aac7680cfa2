"""Certificates the federation's CA signed that must still not open a door: no organisation (federation), no
clientAuth extended key usage.

Invariants: a certificate without an O is refused (PERMISSION_DENIED) at every role, whatever role it claims; a
certificate whose extended key usage omits clientAuth (serverAuth only, code signing) never gets past the TLS
handshake (UNAVAILABLE, no servicer runs); one with no EKU extension at all (X.509's "any purpose", which the
handshake lets through) is refused by the gate (PERMISSION_DENIED). Refusals are clean; every role keeps serving.
"""

from __future__ import annotations

import grpc
import pytest
from cryptography.x509.oid import ExtendedKeyUsageOID as EKU, NameOID

from mpdp.messages import operations_pb2 as ops, operations_pb2_grpc as ops_grpc
from mpdp_services.common import pki

from .conftest import PARTY_SERVICE, assert_all_serving, assert_status, channel, mint, mint_custom, pathak_spec, raw_unary, refused

ORG, OU, CN = NameOID.ORGANIZATION_NAME, NameOID.ORGANIZATIONAL_UNIT_NAME, NameOID.COMMON_NAME
BOTH = [EKU.SERVER_AUTH, EKU.CLIENT_AUTH]


def _operator(fed, label: str, subject, usages):
    return mint_custom(fed, label, subject, usages)


@pytest.mark.parametrize("label, subject, usages", [
    ("no-org-operator", [(OU, "operator"), (CN, "operator")], BOTH),
    ("no-eku-operator", [(ORG, "local"), (OU, "operator"), (CN, "operator")], None),
])
def test_a_certificate_without_organisation_or_eku_is_refused_by_the_gate(fed, label, subject, usages):
    tls = _operator(fed, label, subject, usages)
    with channel(fed, "curator", tls) as ch:
        stub = ops_grpc.JobOperationsStub(ch)
        for call in (lambda: stub.ListJobs(ops.JobQuery(), timeout=20), lambda: stub.SubmitJob(ops.JobSubmission(pathak2010=pathak_spec(seed=label.encode())), timeout=20)):
            assert_status(refused(call), grpc.StatusCode.PERMISSION_DENIED)
    assert_all_serving(fed)


@pytest.mark.parametrize("target, role, name, method", [
    ("party-1", "curator", "curator", "AnnounceJob"),  # the pinned curator's name and role, but no O
    ("node-1", "curator", "curator", "AnnounceJob"),
])
def test_the_curators_identity_without_organisation_is_not_the_curator(fed, target, role, name, method):
    tls = _operator(fed, f"no-org-{role}-{target}", [(OU, role), (CN, name)], BOTH)
    service = PARTY_SERVICE if target.startswith("party") else "mpdp.messages.ComputeNode"
    with channel(fed, target, tls) as ch:
        e = refused(lambda: raw_unary(ch, service, method)(b"", timeout=20))
    assert_status(e, grpc.StatusCode.PERMISSION_DENIED)


@pytest.mark.parametrize("label, usages", [("server-auth-only", [EKU.SERVER_AUTH]), ("code-signing", [EKU.CODE_SIGNING])])
def test_a_certificate_without_client_auth_is_no_caller(fed, label, usages):
    tls = _operator(fed, label, [(ORG, "local"), (OU, "operator"), (CN, "operator")], usages)
    with channel(fed, "curator", tls) as ch:
        e = refused(lambda: ops_grpc.JobOperationsStub(ch).ListJobs(ops.JobQuery(), timeout=20))
    assert e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.PERMISSION_DENIED), e
    assert_all_serving(fed)


def test_the_federations_own_certificates_carry_both_usages_and_an_organisation(fed):
    for site in ["curator", *fed.parties, *fed.compute_nodes, "operator"]:
        pem = (fed.workdir / site / "site.crt").read_bytes()
        ident = pki.identity_from_pem(pem)
        assert ident.client_auth and ident.federation == "local", (site, ident)
        assert pki.check_server_certificate(pem) == "local"
    ident = pki.identity_from_pem(mint(fed, "operator", "op-x").cert.read_bytes())
    assert ident.client_auth and ident.federation == "local"


def test_a_server_refuses_its_own_certificate_without_server_auth_or_organisation(fed):
    no_server = mint_custom(fed, "client-only", [(ORG, "local"), (OU, "party"), (CN, "party-8")], [EKU.CLIENT_AUTH])
    with pytest.raises(ValueError, match="serverAuth"):
        pki.check_server_certificate(no_server.cert.read_bytes())
    no_org = mint_custom(fed, "no-org-party", [(OU, "party"), (CN, "party-8")], BOTH)
    with pytest.raises(ValueError, match="federation"):
        pki.check_server_certificate(no_org.cert.read_bytes())
