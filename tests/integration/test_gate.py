"""The one gate in front of every servicer (services/common/rpc.py RoleInterceptor), tried with raw clients.

Real curator, parties and compute nodes over mutual TLS; the test mints extra certificates from the
federation's CA: a second curator-role certificate (CN=curator-2) and an outsider party. Bodies are sent
as raw bytes, so the servers see exactly what an attacker can send.
"""

from __future__ import annotations

import os
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from mpdp.messages import common_pb2, dca_pb2, pathak2010_pb2 as pb
from mpdp_services.common import pki
from mpdp_services.common.rpc import TlsFiles
from mpdp_services.launcher.federation import LocalFederation
from tests.linked import as_caller, local_call, local_serving

pytestmark = pytest.mark.integration

PARTIES = ["party-1", "party-2", "party-3"]
NODES = ["node-1", "node-2", "node-3"]


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    root = tmp_path_factory.mktemp("gate")
    f = LocalFederation(root / "fed", PARTIES, {}, test_mode=True, paillier_bits=1024, dgk_bits=1024, compute_nodes=NODES)
    f.start()
    yield f
    f.stop()


def _mint(fed: LocalFederation, role: str, site: str) -> TlsFiles:
    """A leaf certificate from the federation's own CA, as an insider with a stolen/extra identity would hold."""
    ca_dir = fed.workdir / "ca"
    ca_key = serialization.load_pem_private_key((ca_dir / "ca.key").read_bytes(), password=None)
    ca_cert = x509.load_pem_x509_certificate((ca_dir / "ca.crt").read_bytes())
    folder = fed.workdir.parent / "minted" / site
    if not (folder / "site.crt").exists():
        key, cert = pki.issue(ca_key, ca_cert, role, site, ["127.0.0.1", "localhost"])
        pki.write_site(folder, key, cert, ca_cert)
    return TlsFiles(folder / "site.crt", folder / "site.key", folder / "ca.crt")


def _site(fed: LocalFederation, site: str) -> TlsFiles:
    d = fed.workdir / site
    return TlsFiles(d / "site.crt", d / "site.key", d / "ca.crt")


def _raw_call(fed: LocalFederation, tls: TlsFiles, target: str, method: str, body: bytes, timeout: float = 30.0):
    addr = f"127.0.0.1:{fed.procs[target].port}"
    with grpc.secure_channel(addr, tls.channel_credentials(), options=[("grpc.ssl_target_name_override", target)]) as ch:
        rpc = ch.unary_unary(method, request_serializer=None, response_deserializer=None)
        return rpc(body, timeout=timeout)


def _refused(fed, tls, target, method, body) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        _raw_call(fed, tls, target, method, body)
    return info.value


def _clean(details: str) -> None:
    assert len(details) <= 300
    for leak in ("Traceback", "<class", "/tmp", str(Path.home()), "DecodeError"):
        assert leak not in details, details


def _serving(fed, target) -> None:
    """The service still answers a legitimate call (the operator reads the curator's keys / a node's health)."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    addr = f"127.0.0.1:{fed.procs[target].port}"
    tls = _site(fed, "operator")
    with grpc.secure_channel(addr, tls.channel_credentials(), options=[("grpc.ssl_target_name_override", target)]) as ch:
        assert health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10).status == health_pb2.HealthCheckResponse.SERVING
    if target == "curator":
        keys = pb.CuratorKeys.FromString(_raw_call(fed, tls, "curator", "/mpdp.messages.Curator/GetCuratorKeys", common_pb2.Ack().SerializeToString()))
        assert keys.paillier_n


def test_undecodable_body_is_malformed_not_unknown(fed):
    junk = os.urandom(64) + b"\xff\xff\xff\xff\x0f"
    e = _refused(fed, _site(fed, "operator"), "curator", "/mpdp.messages.JobOperations/SubmitJob", junk)
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.details().startswith("MALFORMED:")
    _clean(e.details())
    _serving(fed, "curator")


def test_role_is_checked_before_the_body_is_parsed(fed):
    junk = b"\xff" * 32
    e = _refused(fed, _site(fed, "party-1"), "curator", "/mpdp.messages.JobOperations/SubmitJob", junk)
    assert e.code() == grpc.StatusCode.PERMISSION_DENIED
    assert e.details().startswith("WRONG_ROLE:")
    _clean(e.details())


def test_second_curator_certificate_is_refused_at_nodes_and_parties(fed):
    rogue = _mint(fed, "curator", "curator-2")
    calls = {
        "/mpdp.messages.ComputeNode/AnnounceJob": dca_pb2.DcaJobAnnouncement().SerializeToString(),
        "/mpdp.messages.ComputeNode/CloseSubmissions": dca_pb2.SubmissionsClose().SerializeToString(),
        "/mpdp.messages.ComputeNode/GetPartialSum": common_pb2.JobRef(job_id="dca-x").SerializeToString(),
        "/mpdp.messages.ComputeNode/AbortJob": common_pb2.JobAbort(job_id="dca-x").SerializeToString(),
    }
    for node in NODES:
        for method, body in calls.items():
            e = _refused(fed, rogue, node, method, body)
            assert e.code() == grpc.StatusCode.PERMISSION_DENIED, (node, method, e.code())
            _clean(e.details())
        _serving(fed, node)
    # a party has no port to call: the rogue can only try the curator's link service, which takes parties only
    for method in ("/mpdp.messages.PartyLink/Open", "/mpdp.messages.PartyLink/Relay", "/mpdp.messages.PartyLink/Certificate"):
        with grpc.secure_channel(f"127.0.0.1:{fed.procs['curator'].port}", rogue.channel_credentials(), options=[("grpc.ssl_target_name_override", "curator")]) as ch:
            with pytest.raises(grpc.RpcError) as info:
                rpc = ch.unary_stream(method, request_serializer=None, response_deserializer=None) if method.endswith("Open") else \
                    ch.unary_unary(method, request_serializer=None, response_deserializer=None)
                result = rpc(b"", timeout=30)
                if method.endswith("Open"):
                    next(iter(result))
            assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED, (method, info.value.code())
            _clean(info.value.details())
    # and were a link client to forward a call naming it, each party's gate refuses the second curator name
    for party in PARTIES:
        socket = fed.procs[party].local_socket
        assert fed.procs[party].port == 0 and socket
        with pytest.raises(grpc.RpcError) as info:
            local_call(socket, "/mpdp.messages.Party/AnnounceJob", pb.JobAnnouncement(job_id="pk-rogue").SerializeToString(), as_caller("curator", "curator-2", fed.federation))
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        _clean(info.value.details())
        with pytest.raises(grpc.RpcError) as info:  # a call naming no caller at all
            local_call(socket, "/mpdp.messages.Party/AnnounceJob", pb.JobAnnouncement(job_id="pk-rogue").SerializeToString())
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert local_serving(socket)


def test_unknown_method_is_unimplemented_and_service_keeps_serving(fed):
    e = _refused(fed, _site(fed, "operator"), "curator", "/mpdp.messages.Curator/NoSuchMethod", b"")
    assert e.code() == grpc.StatusCode.UNIMPLEMENTED
    _serving(fed, "curator")
