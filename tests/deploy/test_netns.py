"""Separate hosts: the curator, each party, each compute node and the operator in its own network namespace.

The lab (tests/deploy/lab.py) makes a switch namespace holding a bridge, and one namespace per site joined to it
by a veth pair, each with its own address (198.18.<n>.0/24, the benchmarking range, reachable only inside these
namespaces; the host's own network is never touched). Sites are provisioned with `mpdp provision` for
those addresses, so nothing can silently rely on localhost. Invariants checked:

- a Pathak job, a dp-gd job (one validated round), an ensemble (hamm2016, votes proven valid) and a validated
  DCA job (the operator's load generator plays the DCA clients, each proving its vector in range) across the
  namespaces are released, each party paying for its jobs in its own ledger;
- a party only dials out: every party namespace drops inbound TCP connection attempts (iptables, SYN → DROP),
  and the jobs still run;
- every TCP connection seen in each namespace (sampled during and after the jobs with `ss`) goes only
  where the protocols say: parties → curator:7000 (their links; party-to-party steps are relayed by the curator,
  sealed end to end) and, as the DCA clients of dp-gd and ensemble rounds, → nodes:7200; never to each other
  and never inbound; compute nodes ↔ curator:7000 and other nodes:7200, and ← parties;
  operator → curator:7000 and (as DCA router) nodes:7200. Nobody uses loopback, and the expected links
  (party→curator, node↔node, curator→node) do exist;
- a party configured with another federation's certificate and CA (impersonating party-1) is refused
  and exits, and a client holding a foreign certificate is refused by the curator;
- every process and namespace is gone afterwards, also on failure.
"""

from __future__ import annotations

import json
import subprocess
import threading

import numpy as np
import pytest
import yaml

from .conftest import PY, REPO, need_root, run
from .lab import CURATOR_PORT, NODE_PORT, Lab, federation_yaml
from tests.ready import wait_ready

pytestmark = [pytest.mark.deploy, pytest.mark.integration]

PARTIES = ["party-1", "party-2", "party-3"]
NODES = ["compute-1", "compute-2", "compute-3"]


@pytest.fixture
def lab():
    need_root("the network-namespace test")
    if subprocess.run(["which", "ip"], capture_output=True).returncode != 0 or subprocess.run(["which", "ss"], capture_output=True).returncode != 0:
        run(["apt-get", "install", "-y", "-qq", "iproute2"], timeout=300)
    lab = Lab()
    try:
        lab.open()
        yield lab
    finally:
        lab.close()
        left = run(["ip", "netns", "list"]).stdout
        assert lab.tag not in left, f"namespaces left behind: {left}"


def test_job_across_namespaces_only_talks_where_the_protocol_says(lab, tmp_path):
    from mpdp_services.provisioning.provision import load_spec, provision, write_demo_data

    sites = ["curator", *PARTIES, *NODES, "operator"]
    for i, s in enumerate(sites):
        lab.add_host(s, 10 + i)
    lab.add_host("intruder", 99)
    write_demo_data(tmp_path / "data", PARTIES)
    provision(load_spec(federation_yaml(tmp_path / "federation.yaml", "netns-fed", lab.addresses, PARTIES, NODES)), tmp_path / "sites")
    out = tmp_path / "sites"
    # sanity: the configs name the namespace addresses, not localhost
    assert yaml.safe_load((out / "party-1" / "party.yaml").read_text())["curator"]["address"] == f"{lab.addresses['curator']}:{CURATOR_PORT}"

    for p in PARTIES:  # a hospital network: nothing may connect in to a party (it dials out only)
        run(["ip", "netns", "exec", lab.hosts[p], "iptables", "-A", "INPUT", "-p", "tcp", "--syn", "-j", "DROP"])
    cur = lab.spawn("curator", ["serve", "curator", "--config", "curator.yaml"], out / "curator")
    assert wait_ready(cur, out / "curator" / "service.log") == CURATOR_PORT
    parties = {p: lab.spawn(p, ["serve", "party", "--config", "party.yaml"], out / p) for p in PARTIES}
    nodes = {n: lab.spawn(n, ["serve", "compute-node", "--config", "compute_node.yaml"], out / n) for n in NODES}
    for p, proc in parties.items():
        assert wait_ready(proc, out / p / "service.log") == 0  # no gRPC port: linked to the curator
    for n, proc in nodes.items():
        assert wait_ready(proc, out / n / "service.log") == NODE_PORT

    # Another federation's party-1 (its own CA and certificate) tries to register with our curator.
    other_addresses = dict(lab.addresses, **{"party-1": lab.addresses["intruder"]})
    provision(load_spec(federation_yaml(tmp_path / "other.yaml", "other-fed", other_addresses, ["party-1"])), tmp_path / "other")
    other = tmp_path / "other" / "party-1"
    other_cfg = yaml.safe_load((other / "party.yaml").read_text())
    other_cfg["curator"]["address"] = f"{lab.addresses['curator']}:{CURATOR_PORT}"
    (other / "party.yaml").write_text(yaml.safe_dump(other_cfg))
    impostor = lab.spawn("intruder", ["serve", "party", "--config", "party.yaml"], other)
    assert impostor.wait(60) == 2
    log = (other / "service.log").read_text()
    assert "cannot register with curator" in log and "CERTIFICATE_VERIFY_FAILED" in log, log[-2000:]
    # ... and a client that trusts our CA but shows the other federation's certificate is refused by the curator
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for f in ("site.crt", "site.key"):
        (mixed / f).write_bytes((other / f).read_bytes())
    (mixed / "ca.crt").write_bytes((out / "operator" / "ca.crt").read_bytes())
    refused = run(["ip", "netns", "exec", lab.hosts["intruder"], PY, "-m", "mpdp_services.cli.health", "--address", f"{lab.addresses['curator']}:{CURATOR_PORT}", "--tls-dir", str(mixed), "--server-name", "curator"], check=False, cwd=REPO)
    assert refused.returncode == 1 and "UNAVAILABLE" in refused.stderr, refused.stderr

    # The job, from the operator's namespace, while every namespace's connections are sampled.
    seen: dict[str, set] = {s: set() for s in sites}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            for s in sites:
                seen[s] |= lab.connections(s)
            done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    def operator(*args: str) -> str:
        return run(["ip", "netns", "exec", lab.hosts["operator"], PY, "-m", "mpdp_services.cli.main", *args], timeout=240, cwd=REPO).stdout.strip().splitlines()[-1]

    ep = str(out / "operator")
    try:
        train = operator("train", "logreg", "--endpoints", ep, "--dataset", "breast_cancer", "--parties", ",".join(PARTIES), "--epsilon", "1", "--lam", "0.1", "--json")
        total = sum(len(np.loadtxt(tmp_path / "data" / p / "breast_cancer.csv", delimiter=",")) for p in PARTIES)
        gd = json.loads(operator("train", "dp-gd", "--endpoints", ep, "--dataset", "breast_cancer", "--parties", ",".join(PARTIES), "--epsilon", "2",
                                 "--lam", "0.01", "--dimension", "30", "--total-records", str(total), "--records-per-party", "200", "--rounds", "1", "--json"))
        ensemble = json.loads(operator("train", "hamm2016", "--endpoints", ep, "--dataset", "breast_cancer", "--auxiliary", "breast_cancer_aux",
                                       "--parties", ",".join(PARTIES), "--epsilon", "50", "--lam", "0.01", "--json"))
        dca_job = json.loads(operator("dca", "create", "--endpoints", ep, "-d", "4", "-n", "40", "-t", "2", "--epsilon", "1", "--delta", "1e-5", "--sensitivity", "4", "--nodes", ",".join(NODES), "--json"))["job_id"]
        load = json.loads(operator("dca", "loadgen", "--endpoints", ep, "--job", dca_job, "--clients", "40", "--json"))
        dca_status = json.loads(operator("dca", "watch", "--endpoints", ep, "--job", dca_job, "--json"))
    finally:
        done.set()
        sampler.join(30)
    for s in sites:
        seen[s] |= lab.connections(s)
    summary = json.loads(train)
    assert summary["parties"] == 3 and summary["dimension"] == 30
    assert load["accepted_shares"] == 3 * 40 and dca_status["state"] == "RELEASED" and dca_status["clients_included"] == 40, (load, dca_status)
    assert gd["parties"] == PARTIES and gd["stored"] == "curator", gd
    assert ensemble["model"] == "hamm2016" and ensemble["parties_included"] == 3, ensemble
    for p in PARTIES:  # every party paid for each job in its own ledger, and for nothing else
        paid = [e["job_id"] for e in json.loads((out / p / "state" / "ledger.json").read_text())["entries"]]
        assert paid[0] == summary["job_id"] and len(paid) >= 3, (p, paid)
        for job in (gd["job_id"], ensemble["job_id"]):
            assert any(job in j for j in paid), (p, job, paid)

    ip = lab.addresses
    curator_ep = f"{ip['curator']}:{CURATOR_PORT}"
    node_eps = {f"{ip[n]}:{NODE_PORT}" for n in NODES}
    party_ips, node_ips = {ip[p] for p in PARTIES}, {ip[n] for n in NODES}

    def host(ep: str) -> str:
        return ep.rsplit(":", 1)[0]

    problems = []
    for site, conns in seen.items():
        for state, local, peer in conns:
            if "127.0.0.1" in local or "127.0.0.1" in peer or "[::1]" in local:
                problems.append(f"{site}: loopback connection {local} ↔ {peer}")
            elif site == "operator":
                if peer != curator_ep and peer not in node_eps:
                    problems.append(f"operator talks to {peer}, not only the curator and (as DCA router) the compute nodes")
            elif site == "curator":
                inbound = local == curator_ep and host(peer) in party_ips | node_ips | {ip["operator"], ip["intruder"]}
                outbound = peer in node_eps  # never to a party: parties dial in
                if not (inbound or outbound):
                    problems.append(f"curator: unexpected {local} ↔ {peer}")
            elif site in NODES:
                me = f"{ip[site]}:{NODE_PORT}"
                inbound = local == me and host(peer) in (node_ips - {ip[site]}) | party_ips | {ip["curator"], ip["operator"]}
                outbound = peer == curator_ep or peer in node_eps - {me}
                if not (inbound or outbound):
                    problems.append(f"{site}: unexpected {local} ↔ {peer}")
            elif peer != curator_ep and peer not in node_eps:
                problems.append(f"{site}: unexpected {local} ↔ {peer} (a party only dials the curator and, as a DCA client, the nodes)")
    assert not problems, "\n".join(problems)
    # the check is not vacuous: parties reached the curator and each other, the operator reached the curator
    assert any(peer == curator_ep for _, _, peer in seen["operator"])
    for p in PARTIES:
        assert any(peer == curator_ep for _, _, peer in seen[p]), f"{p} never connected to the curator"
    for n in NODES:
        assert any(peer == curator_ep for _, _, peer in seen[n]), f"{n} never connected to the curator"
        assert any(peer in node_eps or (local in node_eps and host(peer) in node_ips) for _, local, peer in seen[n]), f"{n} never talked to another node"
    assert any(peer in node_eps for _, _, peer in seen["curator"]), "the curator never reached a compute node"
    for p in PARTIES:  # dp-gd and ensemble rounds: each party is a DCA client, dialling the nodes itself
        assert any(peer in node_eps for _, _, peer in seen[p]), f"{p} never sent its shares to a compute node"
    assert all(proc.poll() is None for proc in [cur, *parties.values(), *nodes.values()]), "a service died during the jobs"
