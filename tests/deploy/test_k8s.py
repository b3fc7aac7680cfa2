"""The Kubernetes manifests (deploy/k8s/: curator, party, compute node) are valid objects of the Kubernetes API
(kubernetes-validate's bundled schemas, strict: an unknown field fails; no network) and keep what the roles need:
one replica that stops before the next starts, the site folder from a Secret mounted read-only, a volume for the
curator's state and the party's ledger, a writable /tmp (the kernels' cache) on a read-only root filesystem, a
non-root user, resource limits, and the plain-HTTP probes at the port the role is told to serve them on.
"""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
VERSION = "1.30.0"
KINDS = {"curator.yaml": "curator", "party.yaml": "party", "compute-node.yaml": "compute-node"}


def _docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]


def test_there_is_one_manifest_per_site_kind():
    assert sorted(p.name for p in K8S.glob("*.yaml")) == sorted(KINDS)


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_object_is_valid_for_the_kubernetes_api(name):
    for doc in _docs(name):
        kubernetes_validate.validate(doc, VERSION, strict=True)  # raises ValidationError naming the field


@pytest.mark.parametrize("name", sorted(KINDS))
def test_the_role_runs_as_the_manifest_says(name):
    docs = _docs(name)
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"]["type"] == "Recreate"
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["command"][:3] == ["mpdp", "serve", KINDS[name]]
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] == 10001
    assert c["securityContext"]["readOnlyRootFilesystem"] and c["securityContext"]["allowPrivilegeEscalation"] is False
    assert {"cpu", "memory"} <= set(c["resources"]["limits"])
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert "secret" in volumes[mounts["/site"]["name"]] and mounts["/site"]["readOnly"]  # keys and certificates
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]  # NUMBA_CACHE_DIR of the image lives on /tmp
    claims = {d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"}
    state = volumes[mounts["/state"]["name"]]
    if KINDS[name] in ("curator", "party"):  # published models, releases, the privacy ledger: durable
        assert state["persistentVolumeClaim"]["claimName"] in claims
    env = {e["name"]: e["value"] for e in c["env"]}
    if KINDS[name] == "party":
        assert env["MPDP_LEDGER"].startswith("/state/")
    probe_port = int(env["MPDP_PROBE_LISTEN"].rsplit(":", 1)[1])
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["probes"] == probe_port
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz" and c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert c[probe]["httpGet"]["port"] in ("probes", probe_port)
    if KINDS[name] == "party":  # it listens on no gRPC port (it dials the curator): no Service, no gRPC port to expose
        assert "MPDP_LISTEN" not in env and set(ports) == {"probes"}
        assert not [d for d in docs if d["kind"] == "Service"]
        return
    grpc_port = int(env["MPDP_LISTEN"].rsplit(":", 1)[1])
    (svc,) = [d for d in docs if d["kind"] == "Service"]
    assert [p["port"] for p in svc["spec"]["ports"]] == [grpc_port]  # the probes are not published by the Service
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
