"""Every role's plain-HTTP probes (``probe_listen``; services/common/readiness.py) over a real federation.

A party started before its curator exists cannot register: its /healthz answers 200 with no token and no client
certificate, its /readyz 503 for as long as that lasts (deterministic: the curator is not there). Once the curator is
started at the address the party keeps trying, the party registers, reports ready (MPDP-READY) and /readyz turns
200, with the gRPC health service SERVING; by then its log shows the kernels compiled. The curator's and a compute
node's probes answer 200 once they report ready. No other path, no other method; nothing about jobs or keys.
"""

from __future__ import annotations

import selectors
import socket
import urllib.error
import urllib.request

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from mpdp_services.common.channels import CHANNEL_OPTIONS, TlsFiles
from mpdp_services.launcher.federation import LocalFederation, Proc
from tests.linked import local_serving


def _get(port: int, path: str, method: str = "GET") -> tuple[int, str]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _line(proc: Proc, prefix: str, timeout: float = 180.0) -> str:
    """The next line of the process's start-up stream that starts with ``prefix`` (fails if it exits first)."""
    out = proc.popen.stdout
    assert out is not None
    sel = selectors.DefaultSelector()
    sel.register(out, selectors.EVENT_READ)
    try:
        while True:
            assert sel.select(timeout), f"{proc.name}: no {prefix} line in {timeout:g} s; log:\n{proc.log.read_text()[-3000:]}"
            line = out.readline().decode()
            assert line, f"{proc.name} exited (code {proc.popen.wait()}); log:\n{proc.log.read_text()[-3000:]}"
            if line.startswith(prefix):
                return line
    finally:
        sel.close()


def _word(line: str, key: str) -> int:
    return next(int(w.split("=", 1)[1]) for w in line.split() if w.startswith(key + "="))


def _config(fed: LocalFederation, site: str, file: str, **fields) -> None:
    path = fed.workdir / site / file
    data = yaml.safe_load(path.read_text())
    for k, v in fields.items():
        if isinstance(v, dict):
            data[k] = {**data.get(k, {}), **v}
        else:
            data[k] = v
    path.write_text(yaml.safe_dump(data))


def _health(fed: LocalFederation, port: int, site: str) -> int:
    d = fed.workdir / "operator"
    tls = TlsFiles(d / "site.crt", d / "site.key", d / "ca.crt")
    opts = CHANNEL_OPTIONS + [("grpc.ssl_target_name_override", site)]
    with grpc.secure_channel(f"127.0.0.1:{port}", tls.channel_credentials(), options=opts) as ch:
        return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=20).status


@pytest.fixture
def fed(tmp_path):
    f = LocalFederation(tmp_path / "fed", ["party-1"], test_mode=True, paillier_bits=768, dgk_bits=768, compute_nodes=["node-1"])
    f.provision()
    yield f
    f.stop()


def test_probes_answer_without_credentials_and_readyz_turns_200_only_when_the_role_can_serve(fed):
    held = socket.socket()  # the curator's future port: bound, not listening, so the party's attempts are refused
    held.bind(("127.0.0.1", 0))
    curator_port = held.getsockname()[1]
    _config(fed, "party-1", "party.yaml", probe_listen="127.0.0.1:0", curator={"address": f"127.0.0.1:{curator_port}"})
    party = fed.procs["party-1"] = fed._spawn("party-1", "party", fed.workdir / "party-1" / "party.yaml", [])
    probes = int(_line(party, "MPDP-PROBES ").split()[1])

    assert _get(probes, "/healthz") == (200, "ok\n")  # alive, no token, no certificate
    assert _get(probes, "/readyz") == (503, "starting\n")  # it cannot register: no curator yet
    assert _get(probes, "/metrics")[0] == 404 and _get(probes, "/")[0] == 404
    assert _get(probes, "/readyz", "POST")[0] == 405 and _get(probes, "/healthz", "DELETE")[0] == 405

    held.close()
    _config(fed, "curator", "curator.yaml", listen=f"127.0.0.1:{curator_port}", probe_listen="127.0.0.1:0")
    curator = fed.procs["curator"] = fed._spawn("curator", "curator", fed.workdir / "curator" / "curator.yaml", [])
    ready = _line(curator, "MPDP-READY ")
    assert _get(_word(ready, "probes"), "/readyz") == (200, "ready\n") and _get(_word(ready, "probes"), "/healthz") == (200, "ok\n")

    ready = _line(party, "MPDP-READY ")  # registered with the curator that now listens at the address it kept trying
    assert _word(ready, "probes") == probes
    assert "start-up: kernels compiled" in party.log.read_text()  # the kernels' step was done before it reported ready
    assert _get(probes, "/readyz") == (200, "ready\n")
    assert ready.split()[1] == "0" and local_serving(next(w[6:] for w in ready.split() if w.startswith("local=")))  # no gRPC port: serving on its local socket, over its link

    _config(fed, "node-1", "compute_node.yaml", probe_listen="127.0.0.1:0", curator={"address": f"127.0.0.1:{curator_port}"})
    node = fed.procs["node-1"] = fed._spawn("node-1", "compute-node", fed.workdir / "node-1" / "compute_node.yaml", [])
    node_probes = int(_line(node, "MPDP-PROBES ").split()[1])
    ready = _line(node, "MPDP-READY ")
    assert "start-up: kernels compiled" in node.log.read_text()
    assert _get(node_probes, "/readyz") == (200, "ready\n") and _get(node_probes, "/healthz") == (200, "ok\n")
    assert _health(fed, int(ready.split()[1]), "node-1") == health_pb2.HealthCheckResponse.SERVING
