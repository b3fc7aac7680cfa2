"""Separate hosts: the curator, each party, each compute node and the operator in its own network namespace.

The test makes a switch namespace holding a bridge, and one namespace per site joined to it by a veth
pair, each with its own address (198.18.<n>.0/24, the benchmarking range, reachable only inside these
namespaces; the host's own network is never touched). Sites are provisioned with `mpdp provision` for
those addresses, so nothing can silently rely on localhost. Invariants checked:

- a Pathak job and a DCA job (the operator's load generator plays the DCA clients) across the namespaces
  are released;
- a party only dials out: every party namespace drops inbound TCP connection attempts (iptables, SYN → DROP),
  and the jobs still run;
- every TCP connection seen in each namespace (sampled during and after the jobs with `ss`) goes only
  where the protocols say: parties → curator:7000 (their links; party-to-party steps are relayed by the curator,
  sealed end to end), never to each other and never inbound; compute nodes ↔ curator:7000 and other nodes:7200;
  operator → curator:7000 and (as DCA router) nodes:7200. Nobody uses loopback, and the expected links
  (party→curator, node↔node, curator→node) do exist;
- a party configured with another federation's certificate and CA (impersonating party-1) is refused
  and exits, and a client holding a foreign certificate is refused by the curator;
- every process and namespace is gone afterwards, also on failure.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from mpdp_services.common import processes

from .conftest import PY, REPO, need_root, run
from tests.ready import wait_ready

pytestmark = [pytest.mark.deploy, pytest.mark.integration]

PARTIES = ["party-1", "party-2", "party-3"]
NODES = ["compute-1", "compute-2", "compute-3"]
CURATOR_PORT, NODE_PORT = 7000, 7200


@dataclass
class Lab:
    """Namespaces, veth pairs and a bridge made by this test; ``close`` removes all of them."""

    tag: str = field(default_factory=lambda: secrets.token_hex(2))
    subnet: str = field(default_factory=lambda: f"198.18.{secrets.randbelow(250) + 1}")
    hosts: dict[str, str] = field(default_factory=dict)  # site → namespace
    addresses: dict[str, str] = field(default_factory=dict)  # site → IP
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def switch(self) -> str:
        return f"mpdp-{self.tag}-switch"

    def open(self) -> None:
        run(["ip", "netns", "add", self.switch])
        run(["ip", "-n", self.switch, "link", "add", "br0", "type", "bridge"])
        run(["ip", "-n", self.switch, "link", "set", "br0", "up"])

    def add_host(self, site: str, octet: int) -> str:
        ns, i = f"mpdp-{self.tag}-{site}", len(self.hosts)
        a, b = f"vm{self.tag}{i}a", f"vm{self.tag}{i}b"
        self.hosts[site] = ns
        run(["ip", "netns", "add", ns])
        run(["ip", "link", "add", a, "type", "veth", "peer", "name", b])
        run(["ip", "link", "set", a, "netns", ns])
        run(["ip", "link", "set", b, "netns", self.switch])
        run(["ip", "-n", self.switch, "link", "set", b, "master", "br0", "up"])
        run(["ip", "-n", ns, "link", "set", a, "name", "eth0"])
        ip = f"{self.subnet}.{octet}"
        run(["ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0"])
        run(["ip", "-n", ns, "link", "set", "eth0", "up"])
        run(["ip", "-n", ns, "link", "set", "lo", "up"])
        self.addresses[site] = ip
        return ip

    def spawn(self, site: str, args: list[str], cwd: Path) -> subprocess.Popen:
        p = processes.spawn(
            ["ip", "netns", "exec", self.hosts[site], PY, "-m", "mpdp_services.cli.main", *args],
            cwd=cwd, stdout=subprocess.PIPE, stderr=open(cwd / "service.log", "ab"), env=dict(os.environ, PYTHONUNBUFFERED="1"), start_new_session=True,
        )
        self.procs.append(p)
        return p

    def connections(self, site: str) -> set[tuple[str, str, str]]:
        """(state, local, peer) of every TCP socket but listeners in the site's namespace."""
        out = run(["ip", "netns", "exec", self.hosts[site], "ss", "-tanH"]).stdout
        rows = set()
        for line in out.splitlines():
            f = line.split()
            if len(f) >= 5 and f[0] != "LISTEN":
                rows.add((f[0], _plain(f[3]), _plain(f[4])))
        return rows

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout:
                p.stdout.close()
        for ns in [*self.hosts.values(), self.switch]:
            run(["ip", "netns", "del", ns], check=False)


def _plain(endpoint: str) -> str:
    """'[::ffff:198.18.1.10]:7000' (IPv4 on a dual-stack socket) → '198.18.1.10:7000'."""
    return endpoint.replace("[::ffff:", "").replace("]", "") if endpoint.startswith("[::ffff:") else endpoint




def federation_yaml(path: Path, name: str, addresses: dict[str, str], parties: list[str], nodes: list[str] = ()) -> Path:
    spec = {
        "federation": name,
        "curator": {"name": "curator", "address": f"{addresses['curator']}:{CURATOR_PORT}", "state_dir": "state"},
        "compute_nodes": [{"name": n, "address": f"{addresses[n]}:{NODE_PORT}"} for n in nodes],
        "parties": [
            {"name": p, "hosts": [addresses[p]], "datasets": {"breast_cancer": {"path": str(path.parent / "data" / p / "breast_cancer.csv"), "format": "csv"}}}
            for p in parties
        ],
        "defaults": {"test_mode": True, "paillier_bits": 1024, "dgk_bits": 1024, "budget_epsilon": 100},
    }
    path.write_text(yaml.safe_dump(spec))
    return path


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
    for p in PARTIES:
        entries = json.loads((out / p / "state" / "ledger.json").read_text())["entries"]
        assert [e["job_id"] for e in entries] == [summary["job_id"]]

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
                inbound = local == me and host(peer) in (node_ips - {ip[site]}) | {ip["curator"], ip["operator"]}
                outbound = peer == curator_ep or peer in node_eps - {me}
                if not (inbound or outbound):
                    problems.append(f"{site}: unexpected {local} ↔ {peer}")
            else:
                if peer != curator_ep:
                    problems.append(f"{site}: unexpected {local} ↔ {peer} (a party only dials the curator here; nothing reaches it)")
    assert not problems, "\n".join(problems)
    # the check is not vacuous: parties reached the curator and each other, the operator reached the curator
    assert any(peer == curator_ep for _, _, peer in seen["operator"])
    for p in PARTIES:
        assert any(peer == curator_ep for _, _, peer in seen[p]), f"{p} never connected to the curator"
    for n in NODES:
        assert any(peer == curator_ep for _, _, peer in seen[n]), f"{n} never connected to the curator"
        assert any(peer in node_eps or (local in node_eps and host(peer) in node_ips) for _, local, peer in seen[n]), f"{n} never talked to another node"
    assert any(peer in node_eps for _, _, peer in seen["curator"]), "the curator never reached a compute node"
    assert all(proc.poll() is None for proc in [cur, *parties.values(), *nodes.values()]), "a service died during the jobs"
