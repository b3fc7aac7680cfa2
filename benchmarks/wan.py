"""Jobs over a shaped wide-area network: wall time against round-trip time, sequential round trips, bytes per site.

Every site (the curator, each party, each compute node, the operator) runs in its own network namespace
(tests/deploy/lab.py), provisioned with `mpdp provision` for those addresses. Every party's namespace drops
inbound TCP connection attempts (it only dials out, as deployed). The sites' interfaces are TUN devices joined
by benchmarks/wan_router.py, which holds every packet RTT/2 before forwarding it (this machine's kernel has no
``netem``), so any two sites are one RTT apart; a ``tbf`` qdisc caps every site's egress at R Mbit/s. For each RTT the jobs run one after another from the operator's namespace (a driver process there
times the Python API call itself; start-up and imports are outside the timing), and each site's
``/proc/net/dev`` eth0 counters are read before and after each job.

Sequential round trips of a job = the slope of its wall time against the RTT (least squares over the RTTs
measured): a job that waits for n round trips one after another grows by n·ΔRTT; work that overlaps the wait
does not count.

    sudo PYTHONPATH=.:$PYTHONPATH python benchmarks/wan.py --rtts 20 50 100 --out benchmarks/results/wan_matrix.json

Needs root (namespaces, tc, iptables). Everything made is removed on exit, also on failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
WORKLOADS = ("pathak5", "pathak20", "dpgd", "dca")
# the measured RTT: a TCP handshake (SYN → SYN-ACK) takes one round trip; median of 5, in ms
PROBE = """import socket, statistics, sys, time
ts = []
for _ in range(5):
    s = socket.socket(); t = time.perf_counter(); s.connect((sys.argv[1], int(sys.argv[2]))); ts.append(time.perf_counter() - t); s.close()
print(f"median {1000 * statistics.median(ts):.1f} ms")"""


# -- the driver: one job from the operator's namespace ------------------------------------------------------
def drive(a: argparse.Namespace) -> None:
    import numpy as np

    import mpdp

    t0 = time.perf_counter()
    fed = mpdp.Federation.connect(a.endpoints, dataset="breast_cancer")
    connect = time.perf_counter() - t0
    parties = a.parties.split(",")
    t0 = time.perf_counter()
    if a.workload.startswith("pathak"):
        r = fed.logistic_regression(epsilon=1.0, lam=0.1, parties=parties)
    elif a.workload == "dpgd":
        r = fed.dp_gd(epsilon=2.0, lam=0.01, rounds=a.rounds, total_records=a.total_records, records_per_party=a.records_per_party,
                      dimension=30, parties=parties)
    elif a.workload == "dca":
        Z = np.random.default_rng(1).uniform(-1, 1, size=(a.clients, a.dimension))  # public simulation vectors
        r = fed.dca_sum(Z, epsilon=1.0, delta=1e-5)
    else:
        raise SystemExit(f"unknown workload {a.workload}")
    seconds = time.perf_counter() - t0
    fed.close()
    print(json.dumps({"seconds": seconds, "connect_seconds": connect, "job_id": r.job_id, "operations": r.operations}, default=str))


# -- the lab ---------------------------------------------------------------------------------------------------
def _ready_words(procs: dict[str, subprocess.Popen], timeout: float) -> dict[str, list[str]]:
    """Each process's MPDP-READY line, split into words."""
    sel = selectors.DefaultSelector()
    for name, p in procs.items():
        sel.register(p.stdout, selectors.EVENT_READ, name)  # type: ignore[arg-type]
    words: dict[str, list[str]] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(words) < len(procs):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"not ready: {sorted(set(procs) - set(words))}")
            for key, _ in sel.select(left):
                line = procs[key.data].stdout.readline().decode()  # type: ignore[union-attr]
                if not line:
                    raise RuntimeError(f"{key.data} exited during start-up (code {procs[key.data].wait()})")
                if line.startswith("MPDP-READY "):
                    words[key.data] = line.split()
                    sel.unregister(key.fileobj)
    finally:
        sel.close()
    return words


def _wait_precomputed(sockets: dict[str, str], timeout: float) -> None:
    """Every party's randomness pools full (its health service ``mpdp.precompute`` over its local socket)."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    creds = grpc.local_channel_credentials(grpc.LocalConnectionType.UDS)
    for sock in sockets.values():
        with grpc.secure_channel(f"unix:{sock}", creds) as ch:
            for resp in health_pb2_grpc.HealthStub(ch).Watch(health_pb2.HealthCheckRequest(service="mpdp.precompute"), timeout=timeout):
                if resp.status == health_pb2.HealthCheckResponse.SERVING:
                    break


class WanLab:
    """The sites' namespaces joined by benchmarks/wan_router.py instead of a bridge: each site's eth0 is a TUN
    interface whose packets the router forwards after the one-way delay, with a ``tbf`` rate cap on its egress.
    (Used where the kernel has no ``netem``; the one-way delay is RTT/2 for every packet, so any two sites are
    one RTT apart.)"""

    def __init__(self, lab: Any, sites: list[str], mtu: int) -> None:
        self.lab, self.sites, self.mtu = lab, sites, mtu
        self.router: subprocess.Popen | None = None

    def open(self) -> None:
        from tests.deploy.conftest import run

        lab = self.lab
        for i, site in enumerate(self.sites):
            lab.addresses[site] = f"{lab.subnet}.{10 + i}"
            lab.hosts[site] = f"mpdp-{lab.tag}-{site}"
        tuns = {site: f"wt{lab.tag}{i}" for i, site in enumerate(self.sites)}
        self.router = subprocess.Popen([sys.executable, str(REPO / "benchmarks" / "wan_router.py"), *(f"{tuns[s]}={lab.addresses[s]}" for s in self.sites)],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.router.stdout is not None and self.router.stdout.readline().strip() == "READY"
        for site in self.sites:
            ns = lab.hosts[site]
            run(["ip", "netns", "add", ns])
            run(["ip", "link", "set", tuns[site], "netns", ns])
            run(["ip", "-n", ns, "link", "set", tuns[site], "name", "eth0"])
            run(["ip", "-n", ns, "link", "set", "eth0", "mtu", str(self.mtu)])
            run(["ip", "-n", ns, "addr", "add", f"{lab.addresses[site]}/24", "dev", "eth0"])
            run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])

    def shape(self, rtt_ms: float, rate_mbit: float) -> None:
        from tests.deploy.conftest import run

        assert self.router is not None and self.router.stdin is not None and self.router.stdout is not None
        self.router.stdin.write(f"delay {rtt_ms / 2000}\n")
        self.router.stdin.flush()
        assert self.router.stdout.readline().startswith("delay")
        burst = max(64 * 1024, 4 * self.mtu)
        for site in self.sites:
            run(["ip", "netns", "exec", self.lab.hosts[site], "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf",
                 "rate", f"{rate_mbit:g}mbit", "burst", str(burst), "latency", "2s"])

    def close(self) -> None:
        try:
            self.lab.close()
        finally:
            if self.router is not None:
                if self.router.stdin is not None:
                    self.router.stdin.close()
                try:
                    self.router.wait(10)
                except subprocess.TimeoutExpired:
                    self.router.kill()
                    self.router.wait()


def _load() -> float:
    return os.getloadavg()[0]


def _slope(xs: list[float], ys: list[float]) -> float | None:
    if len(set(xs)) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def _measured_ms(row: dict[str, Any]) -> float | None:
    words = str(row.get("measured_rtt", "")).split()
    return float(words[1]) if len(words) == 3 and words[0] == "median" else None


def summarise(runs: list[dict[str, Any]], workloads: list[str]) -> dict[str, Any]:
    """Per workload: every run's seconds by set RTT, and the sequential round trips as the slope of wall time
    against the set RTT and against the RTT measured in the namespaces (a TCP handshake, which also carries the
    router's scheduling delay on a loaded machine)."""
    summary: dict[str, Any] = {}
    for workload in workloads:
        rows = [r for r in runs if r["workload"] == workload]
        by: dict[str, list[float]] = {}
        for r in rows:
            by.setdefault(f"{r['rtt_ms']:g}", []).append(r["seconds"])
        slope = _slope([r["rtt_ms"] / 1000 for r in rows], [r["seconds"] for r in rows])
        measured = [_measured_ms(r) for r in rows]
        slope_m = _slope([m / 1000 for m in measured], [r["seconds"] for r in rows]) if all(m is not None for m in measured) else None  # type: ignore[operator]
        summary[workload] = {"seconds_by_rtt": by, "round_trips_vs_set_rtt": None if slope is None else round(slope, 1),
                             "round_trips_vs_measured_rtt": None if slope_m is None else round(slope_m, 1),
                             "measured_rtt_ms": sorted({m for m in measured if m is not None})}
    return summary


def bench(a: argparse.Namespace) -> None:
    from mpdp_services.provisioning.provision import load_spec, provision, write_demo_data
    from tests.deploy.conftest import PY, run
    from tests.deploy.lab import Lab, federation_yaml

    if os.geteuid() != 0:
        raise SystemExit("benchmarks/wan.py needs root (network namespaces, tc, iptables)")
    parties = [f"party-{i + 1}" for i in range(a.parties)]
    nodes = [f"compute-{i + 1}" for i in range(a.nodes)]
    tmp = Path(tempfile.mkdtemp(prefix="mpdp-wan-"))
    sites = ["curator", *parties, *nodes, "operator"]
    lab = Lab()
    net = WanLab(lab, sites, a.mtu)
    result: dict[str, Any] = {
        "command": " ".join(["python", "benchmarks/wan.py", *sys.argv[1:]]),
        "setup": {"parties": a.parties, "compute_nodes": a.nodes, "key_bits": a.key_bits, "rate_mbit": a.rate, "rtts_ms": a.rtts,
                  "dpgd_rounds": a.rounds, "dca_clients": a.clients, "dca_dimension": a.dimension, "dca_validate": "range",
                  "dpgd_validate": True, "mtu": a.mtu,
                  "delay": "benchmarks/wan_router.py: every packet held RTT/2 (one hop through the router), tbf rate cap on every site's egress",
                  "party_inbound_tcp": "dropped (iptables SYN → DROP)", "cpus": os.cpu_count()},
        "runs": [],
    }
    try:
        net.open()
        data = tmp / "data"
        write_demo_data(data, ["party-1"])  # every party holds the same demo rows (a timing benchmark: the data do not matter)
        rows = len((data / "party-1" / "breast_cancer.csv").read_text().splitlines())
        for p in parties[1:]:
            (data / p).mkdir(parents=True, exist_ok=True)
            shutil.copy(data / "party-1" / "breast_cancer.csv", data / p / "breast_cancer.csv")
        provision(load_spec(federation_yaml(tmp / "federation.yaml", "wan-fed", lab.addresses, parties, nodes, key_bits=a.key_bits)), tmp / "sites")
        out = tmp / "sites"
        for p in parties:
            run(["ip", "netns", "exec", lab.hosts[p], "iptables", "-A", "INPUT", "-p", "tcp", "--syn", "-j", "DROP"])
        t0 = time.monotonic()
        cur = lab.spawn("curator", ["serve", "curator", "--config", "curator.yaml"], out / "curator")
        _ready_words({"curator": cur}, 120)
        procs = {p: lab.spawn(p, ["serve", "party", "--config", "party.yaml"], out / p) for p in parties}
        procs |= {n: lab.spawn(n, ["serve", "compute-node", "--config", "compute_node.yaml"], out / n) for n in nodes}
        words = _ready_words(procs, 600)
        _wait_precomputed({p: next(w[6:] for w in words[p] if w.startswith("local=")) for p in parties}, 1200)
        result["setup"]["start_seconds"] = round(time.monotonic() - t0, 1)
        print(f"federation up in {result['setup']['start_seconds']} s (load {_load():.1f})", flush=True)

        def job(workload: str, rtt: float) -> dict[str, Any]:
            k = 20 if workload == "pathak20" else 5
            args = [PY, str(REPO / "benchmarks" / "wan.py"), "drive", "--endpoints", str(out / "operator"), "--workload", workload,
                    "--parties", ",".join(parties[:k]), "--rounds", str(a.rounds), "--total-records", str(k * rows),
                    "--records-per-party", str(rows), "--clients", str(a.clients), "--dimension", str(a.dimension)]
            before = {s: lab.interface_bytes(s) for s in sites}
            load0 = _load()
            p = run(["ip", "netns", "exec", lab.hosts["operator"], *args], timeout=3600, cwd=REPO,
                    env=dict(os.environ, PYTHONPATH=f"{REPO}:{os.environ.get('PYTHONPATH', '')}"))
            after = {s: lab.interface_bytes(s) for s in sites}
            r = json.loads(p.stdout.strip().splitlines()[-1])
            per_site = {s: {"rx": after[s][0] - before[s][0], "tx": after[s][1] - before[s][1]} for s in sites}
            used = {s: v for s, v in per_site.items() if v["rx"] + v["tx"] > 0}
            row = {"workload": workload, "rtt_ms": rtt, "seconds": round(r["seconds"], 3), "connect_seconds": round(r["connect_seconds"], 3),
                   "job_id": r["job_id"], "load_before": round(load0, 2), "load_after": round(_load(), 2),
                   "bytes": used, "bytes_total_tx": sum(v["tx"] for v in per_site.values())}
            print(json.dumps({k2: v for k2, v in row.items() if k2 != "bytes"}), flush=True)
            return row

        for rtt in a.rtts:
            net.shape(rtt, a.rate)
            probe = run(["ip", "netns", "exec", lab.hosts["operator"], PY, "-c", PROBE, lab.addresses["curator"], "7000"], check=False)
            rtt_line = probe.stdout.strip() or probe.stderr.strip()[-200:]
            print(f"RTT {rtt} ms: TCP connect operator → curator {rtt_line}", flush=True)
            for workload in a.workloads:
                for _ in range(a.repeats):
                    row = job(workload, rtt)
                    row["measured_rtt"] = rtt_line
                    result["runs"].append(row)
            Path(a.out).write_text(json.dumps(result, indent=1))  # partial results survive a later failure
        result["summary"] = summarise(result["runs"], a.workloads)
        summary = result["summary"]
        print(json.dumps(summary, indent=1), flush=True)
        Path(a.out).write_text(json.dumps(result, indent=1))
    finally:
        net.close()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd")
    d = sub.add_parser("drive", help="(internal) run one job from the operator's namespace")
    d.add_argument("--endpoints", required=True)
    d.add_argument("--workload", choices=WORKLOADS, required=True)
    d.add_argument("--parties", required=True)
    d.add_argument("--rounds", type=int, default=10)
    d.add_argument("--total-records", type=int, default=0)
    d.add_argument("--records-per-party", type=int, default=0)
    d.add_argument("--clients", type=int, default=1000)
    d.add_argument("--dimension", type=int, default=10)
    ap.add_argument("--rtts", type=float, nargs="+", default=[20, 50, 100], help="round-trip times, ms")
    ap.add_argument("--rate", type=float, default=100.0, help="every site's egress cap, Mbit/s")
    ap.add_argument("--parties", type=int, default=20, help="parties started (Pathak K = 5 uses the first 5; dp-gd too)")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--mtu", type=int, default=1500, help="every site's interface MTU")
    ap.add_argument("--key-bits", type=int, default=2048, help="Paillier and DGK moduli (below 2048 only as a test federation)")
    ap.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    ap.add_argument("--rounds", type=int, default=10, help="dp-gd rounds R")
    ap.add_argument("--clients", type=int, default=1000, help="validated DCA clients N")
    ap.add_argument("--dimension", type=int, default=10, help="validated DCA vector length d")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "wan.json"))
    a = ap.parse_args()
    if a.cmd == "drive":
        drive(a)
    else:
        bench(a)


if __name__ == "__main__":
    main()
