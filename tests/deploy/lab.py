"""Sites in their own network namespaces, joined by a bridge: the lab of the network-namespace test
(tests/deploy/test_netns.py) and of the WAN benchmark (benchmarks/wan.py).

A switch namespace holds a bridge; each site gets a namespace and a veth pair to the bridge, with its own address
in 198.18.<n>.0/24 (the benchmarking range, reachable only inside these namespaces; the host's own network is never
touched). ``interface_bytes`` reads a site's interface counters.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from mpdp_services.common import processes

from .conftest import PY, run

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

    def interface_bytes(self, site: str) -> tuple[int, int]:
        """(received, sent) bytes of the site's eth0, from /proc/net/dev inside its namespace."""
        out = run(["ip", "netns", "exec", self.hosts[site], "cat", "/proc/net/dev"]).stdout
        for line in out.splitlines():
            name, _, rest = line.partition(":")
            if name.strip() == "eth0":
                f = rest.split()
                return int(f[0]), int(f[8])
        raise AssertionError(f"no eth0 in {site}'s namespace")

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


def federation_yaml(path: Path, name: str, addresses: dict[str, str], parties: list[str], nodes: list[str] = (), *, key_bits: int = 1024) -> Path:
    """A provisioning spec for these addresses; every party maps ``breast_cancer`` to data/<party>/breast_cancer.csv
    and the curator holds data/curator/breast_cancer_aux.csv as auxiliary data ``breast_cancer_aux`` (the files
    ``write_demo_data(path.parent / "data", parties)`` writes)."""
    aux = {"breast_cancer_aux": {"path": str(path.parent / "data" / "curator" / "breast_cancer_aux.csv"), "format": "csv"}}
    spec = {
        "federation": name,
        "curator": {"name": "curator", "address": f"{addresses['curator']}:{CURATOR_PORT}", "state_dir": "state", "auxiliary": aux},
        "compute_nodes": [{"name": n, "address": f"{addresses[n]}:{NODE_PORT}"} for n in nodes],
        "parties": [
            {"name": p, "hosts": [addresses[p]], "datasets": {"breast_cancer": {"path": str(path.parent / "data" / p / "breast_cancer.csv"), "format": "csv"}}}
            for p in parties
        ],
        "defaults": {"test_mode": key_bits < 2048, "paillier_bits": key_bits, "dgk_bits": key_bits, "budget_epsilon": 10_000},
    }
    path.write_text(yaml.safe_dump(spec))
    return path
