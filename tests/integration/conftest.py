"""Real processes on loopback with real TLS: a curator and parties started by LocalFederation."""

from __future__ import annotations

import queue
from pathlib import Path

import grpc
import numpy as np
import pytest

from mpdp.messages import common_pb2, pathak2010_pb2 as pb, pathak2010_pb2_grpc as pb_grpc
from mpdp_services.common import pki
from mpdp_services.common.rpc import TlsFiles
from mpdp_services.launcher.federation import LocalFederation
from tests.linked import LinkedServer

PARTIES = ["party-1", "party-2", "party-3"]
D = 4


def synthetic_parts(sizes: list[int], seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    g = np.random.default_rng(seed)
    out = []
    for n in sizes:
        X = g.normal(size=(n, D))
        y = np.where(X @ np.array([1.0, -0.5, 0.2, 0.0]) + 0.3 * g.normal(size=n) > 0, 1.0, -1.0)
        out.append((X, y))
    return out


def write_parts(root: Path, names: list[str], parts) -> dict[str, dict[str, dict]]:
    ds = {}
    for name, (X, y) in zip(names, parts):
        p = root / "data" / f"{name}.csv"
        p.parent.mkdir(parents=True, exist_ok=True)
        np.savetxt(p, np.column_stack([X, y]), delimiter=",", fmt="%.17g")
        ds[name] = {"synthetic": {"path": str(p), "format": "csv"}}
    return ds


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    root = tmp_path_factory.mktemp("fed")
    parts = synthetic_parts([60, 45, 52])
    fed = LocalFederation(root / "fed", PARTIES, write_parts(root, PARTIES, parts), test_mode=True, paillier_bits=1024, dgk_bits=1024,
                          members=[*PARTIES, "party-mock"])  # party-mock: a provisioned member played by a test server
    fed.start()
    fed.parts = dict(zip(PARTIES, parts))  # type: ignore[attr-defined]
    yield fed
    fed.stop()


def site_tls(fed: LocalFederation, site: str) -> TlsFiles:
    d = fed.workdir / site
    return TlsFiles(d / "site.crt", d / "site.key", d / "ca.crt")


def curator_channel(fed: LocalFederation, tls: TlsFiles | None) -> grpc.Channel:
    addr = f"127.0.0.1:{fed.procs['curator'].port}"
    opts = [("grpc.ssl_target_name_override", "curator")]
    creds = tls.channel_credentials() if tls else grpc.ssl_channel_credentials(root_certificates=(fed.workdir / "ca" / "ca.crt").read_bytes())
    return grpc.secure_channel(addr, creds, options=opts)


class MockParty(pb_grpc.PartyServicer):
    """A participant the test drives by hand: it records what Charlie sends and acknowledges everything."""

    def __init__(self) -> None:
        self.inbox: queue.Queue = queue.Queue()

    def __getattribute__(self, name):
        if name[:1].isupper() and name != "inbox":
            inbox = object.__getattribute__(self, "inbox")

            def handler(request, context):
                inbox.put(request)
                return common_pb2.Ack()

            return handler
        return object.__getattribute__(self, name)


@pytest.fixture(scope="module")
def mock_party(federation):
    """'party-mock': a certificate from the federation CA, a server that records, registered with Charlie."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    ca_dir = federation.workdir / "ca"
    ca_key = serialization.load_pem_private_key((ca_dir / "ca.key").read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate((ca_dir / "ca.crt").read_bytes())
    key, cert = pki.issue(ca_key, ca_cert, "party", "party-mock", ["127.0.0.1"])
    pki.write_site(federation.workdir / "party-mock", key, cert, ca_cert)
    tls = site_tls(federation, "party-mock")
    ch = curator_channel(federation, tls)
    stub = pb_grpc.CuratorStub(ch)
    stub.RegisterParty(pb.PartyRegistration(), timeout=30)  # a party listens nowhere: Charlie reaches it over its link
    servicer = MockParty()
    linked = LinkedServer(f"127.0.0.1:{federation.procs['curator'].port}", "party-mock", tls, federation.federation,
                          lambda server: pb_grpc.add_PartyServicer_to_server(servicer, server))
    linked.wait_up()
    yield stub, servicer
    ch.close()
    linked.stop()


DEMO_PARTIES = ["party-1", "party-2", "party-3"]


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    """``mpdp ARGV`` in this process: (exit code, stdout, stderr)."""
    from mpdp_services.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def demo_federation(root: Path, extra_datasets=lambda part: {}) -> tuple[LocalFederation, np.ndarray]:
    """A started local federation (3 parties, 3 compute nodes, test mode, 512-bit keys) over the breast-cancer demo
    parts as dataset ``bc`` (plus ``extra_datasets(part CSV)`` per party), and the pooled rows of the three parts."""
    from mpdp_services.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["provision", "demo-data", "--parties", ",".join(DEMO_PARTIES), "--out", str(root / "demo")])
    assert not exc.value.code
    parts = {p: root / "demo" / p / "breast_cancer.csv" for p in DEMO_PARTIES}
    ds = {p: {"bc": {"path": str(f)}, **extra_datasets(f)} for p, f in parts.items()}
    fed = LocalFederation(root / "fed", DEMO_PARTIES, ds, test_mode=True, paillier_bits=512, dgk_bits=512, compute_nodes=["node-1", "node-2", "node-3"])
    try:
        fed.start()
    except BaseException:
        fed.stop()
        raise
    return fed, np.vstack([np.loadtxt(f, delimiter=",") for f in parts.values()])
