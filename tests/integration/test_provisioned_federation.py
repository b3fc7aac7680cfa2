"""A provisioned federation (`mpdp provision` from a federation description, one party's key made at home through the
CSR flow) started the way institutions start it: each site `mpdp serve ROLE --config` in its own folder, as separate
processes on loopback, no `mpdp federation up`. The operator's folder alone then runs the DCA protocols from the
Python API: its endpoints.json names the compute nodes, so ``Federation.connect(sites/operator).dp_gd`` publishes a
model the parties paid for in their ledgers, validated or (``validate=False``) not; `mpdp train dp-gd --endpoints
sites/operator` (compute nodes from the same file) and a DCA sum the operator submits as a cohort are released too.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

import mpdp
from mpdp_services.cli.main import cli
from mpdp_services.common import processes
from tests.ready import wait_ready

pytestmark = pytest.mark.integration
FEDERATION = "provisioned-fed"
PARTIES = ["hospital-a", "hospital-b", "hospital-c"]
NODES = ["compute-1", "compute-2"]
HOME_PARTY = "hospital-c"  # keeps its key at home: the description names its CSR


def _free_ports(n: int) -> list[int]:
    """n loopback ports the kernel had free a moment ago (held together, so distinct)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()




def _invoke(*args: str) -> str:
    r = CliRunner().invoke(cli, list(args))
    assert r.exit_code == 0, r.output
    return r.output


@pytest.fixture(scope="module")
def provisioned(tmp_path_factory):
    root = tmp_path_factory.mktemp("provisioned")
    _invoke("provision", "demo-data", "--parties", ",".join(PARTIES), "--out", str(root / "data"))
    home = root / "home"  # the institution's own machine: its key never leaves it
    _invoke("provision", "csr", "--role", "party", "--site", HOME_PARTY, "--federation", FEDERATION, "--out", str(home))
    cur_port, *ports = _free_ports(1 + len(PARTIES) + len(NODES))
    port = dict(zip([*PARTIES, *NODES], ports))

    def site(name: str) -> dict:
        return {"name": name, "address": f"127.0.0.1:{port[name]}", "listen": f"127.0.0.1:{port[name]}"}

    spec = {
        "federation": FEDERATION,
        "curator": {"name": "curator", "address": f"127.0.0.1:{cur_port}", "listen": f"127.0.0.1:{cur_port}"},
        "compute_nodes": [site(n) for n in NODES],
        "parties": [{"name": p, "datasets": {"breast_cancer": {"path": str(root / "data" / p / "breast_cancer.csv"), "format": "csv"}},
                     **({"csr": str(home / "site.csr")} if p == HOME_PARTY else {})} for p in PARTIES],
        "defaults": {"test_mode": True, "paillier_bits": 1024, "dgk_bits": 1024, "budget_epsilon": 100},
    }
    (root / "federation.yaml").write_text(yaml.safe_dump(spec))
    out = root / "sites"
    _invoke("provision", str(root / "federation.yaml"), "--out", str(out))
    assert not (out / HOME_PARTY / "site.key").exists()
    (out / HOME_PARTY / "site.key").write_bytes((home / "site.key").read_bytes())  # the institution puts its own key beside its certificate
    (out / HOME_PARTY / "site.key").chmod(0o600)
    _invoke("provision", "check", str(out / HOME_PARTY))

    procs: list[subprocess.Popen] = []

    def serve(name: str, role: str, config: str) -> subprocess.Popen:
        log = out / name / "service.log"
        with open(log, "ab") as stderr:
            p = processes.spawn([sys.executable, "-m", "mpdp_services.cli.main", "serve", role, "--config", config], cwd=out / name,
                                stdout=subprocess.PIPE, stderr=stderr, env=dict(os.environ, PYTHONUNBUFFERED="1"), start_new_session=True)
        procs.append(p)
        return p

    try:
        cur = serve("curator", "curator", "curator.yaml")
        assert wait_ready(cur, out / "curator" / "service.log", 240.0) == cur_port
        started = {p: serve(p, "party", "party.yaml") for p in PARTIES} | {n: serve(n, "compute-node", "compute_node.yaml") for n in NODES}
        for name, proc in started.items():
            assert wait_ready(proc, out / name / "service.log", 240.0) == (0 if name in PARTIES else port[name])  # a party listens nowhere
        yield out, root / "data"
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout:
                p.stdout.close()


def _ledger(out: Path, party: str) -> list[dict]:
    return json.loads((out / party / "state" / "ledger.json").read_text())["entries"]


def test_the_operator_endpoints_name_the_compute_nodes(provisioned):
    out, _ = provisioned
    doc = json.loads((out / "operator" / "endpoints.json").read_text())
    assert sorted(doc["compute_nodes"]) == NODES and sorted(doc["parties"]) == PARTIES
    fed = mpdp.Federation.connect(out / "operator", dataset="breast_cancer")
    assert fed.backend == "live" and fed.parties == tuple(PARTIES) and fed.compute_nodes == tuple(NODES)


def test_dp_gd_from_the_python_api_publishes_on_a_provisioned_federation(provisioned):
    out, data = provisioned
    test = np.loadtxt(data / "operator" / "breast_cancer_test.csv", delimiter=",")
    Xte, yte = test[:, :-1], test[:, -1]
    total = sum(len(np.loadtxt(data / p / "breast_cancer.csv", delimiter=",")) for p in PARTIES)
    fed = mpdp.Federation.connect(out / "operator", dataset="breast_cancer")
    gd = fed.dp_gd(epsilon=2.0, rounds=1, total_records=total, records_per_party=200, dimension=Xte.shape[1])
    assert gd.backend == "live" and gd.protocol == "dp-gd" and gd.operations["dca_jobs"] == 2
    assert gd.noise == "discrete-gaussian" and "proven on its shares" in gd.guarantee.statement and gd.score(Xte, yte) > 0.6
    summary = {j["job_id"]: j for j in fed.jobs()}[gd.job_id]
    assert summary["terminal"] and summary["released"] and fed.export(gd.job_id)["job_id"] == gd.job_id
    plain = fed.dp_gd(epsilon=2.0, rounds=0, total_records=total, records_per_party=200, dimension=Xte.shape[1], validate=False)
    assert plain.noise == "gaussian" and "not proven valid" in plain.guarantee.statement and plain.operations["dca_jobs"] == 1
    for p in PARTIES:  # every party, the one whose key stayed at home too, paid for both jobs in its own ledger
        paid = {e["job_id"] for e in _ledger(out, p)}
        assert any(gd.job_id in j for j in paid) and any(plain.job_id in j for j in paid), (p, paid)


def test_the_cli_and_a_dca_sum_use_the_operator_endpoints_compute_nodes(provisioned):
    out, data = provisioned
    total = sum(len(np.loadtxt(data / p / "breast_cancer.csv", delimiter=",")) for p in PARTIES)
    summary = json.loads(_invoke("train", "dp-gd", "--endpoints", str(out / "operator"), "--dataset", "breast_cancer", "--parties", ",".join(PARTIES),
                                 "--epsilon", "2", "--lam", "0.01", "--dimension", "30", "--total-records", str(total), "--records-per-party", "200",
                                 "--rounds", "0", "--json").strip().splitlines()[-1])
    assert summary["parties"] == PARTIES and summary["stored"] == "curator", summary
    assert {j["job_id"]: j for j in mpdp.Federation.connect(out / "operator").jobs()}[summary["job_id"]]["released"]
    Z = np.random.default_rng(3).uniform(-1, 1, size=(12, 4))  # public simulation vectors
    s = mpdp.Federation.connect(out / "operator").dca_sum(Z, epsilon=1.0, delta=1e-5)
    assert s.model.clients_included == 12 and s.operations["accepted_shares"] == 12 * len(NODES)
    assert np.all(np.abs(s.model.values - Z.sum(axis=0)) < 8 * np.sqrt(s.model.noise_variance))
