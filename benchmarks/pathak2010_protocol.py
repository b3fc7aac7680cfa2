"""Benchmark the Pathak 2010 protocol: full jobs over sockets (real processes, mutual TLS) and the core alone.

    python benchmarks/pathak2010_protocol.py [--parties 3,5,10] [--dimension 123] [--key-bits 2048] [--repeats 2] [--no-memory] [--json FILE]

For each K: a local federation of K parties (2048-bit Paillier and DGK keys, production mode) runs one
warm-up job (fills the parties' precomputed randomness pools and spare keys), then ``--repeats`` measured
jobs. Before each job it waits until every party's pools are full and then until the whole federation is idle
(its processes use less than 1 % of a core each, on average, over two seconds: the curator's DGK pool and the
parties' refills done; a refill is a whole core), and records the 1-minute load. Printed per job: wall time from submission to publication,
Charlie's per-stage wall times, the CPU seconds the job cost (utime + stime from /proc, summed over the curator,
P1 and the other parties), and the Paillier/DGK operation counts summed over every role. The in-memory driver runs the same protocol without
sockets, so protocol cost and transport cost can be told apart (``--no-memory`` skips it: at K = 50 its cold
pools make it a minute of one core). K up to the spec's limit (64, docs/protocols/limits.md): K party processes
of ≈ 150 MB each, started and precomputed before the warm-up job.
"""

from __future__ import annotations

import argparse
import json
import statistics
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from mpdp.pathak2010 import driver
from mpdp.pathak2010.resources import CuratorSecrets
from mpdp_services.operator.pathak2010 import make_spec
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.operator.pathak2010 import OperatorClient
from mpdp_services.launcher.federation import LocalFederation


def parts(K: int, d: int, n: int = 400, seed: int = 0):
    g = np.random.default_rng(seed)
    w = g.normal(size=d)
    out = []
    for k in range(K):
        X = (g.random(size=(n + 37 * k, d)) < 0.1).astype(float)  # sparse binary rows like a9a
        y = np.where(X @ w + 0.5 * g.normal(size=len(X)) > 0, 1.0, -1.0)
        out.append((X, y))
    return out


TICKS = os.sysconf("SC_CLK_TCK")
IDLE_SHARE = 0.01  # the federation is idle when its processes use less than this share of a core each, on average,
IDLE_WINDOW = 2.0  # … over this many seconds (an idle party's event loop and health stream: ≈ 0.2 %)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/<pid>/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def federation_cpu(fed: LocalFederation) -> dict[str, float]:
    return {name: cpu_seconds(proc.popen.pid) for name, proc in fed.procs.items()}


def wait_idle(fed: LocalFederation, timeout: float = 600.0) -> float:
    """Block until the federation's processes use < IDLE_SHARE of a core each on average over IDLE_WINDOW seconds
    (every background refill done); the seconds waited."""
    t0 = time.perf_counter()
    while True:
        before = sum(federation_cpu(fed).values())
        time.sleep(IDLE_WINDOW)
        if sum(federation_cpu(fed).values()) - before < IDLE_SHARE * IDLE_WINDOW * len(fed.procs) or time.perf_counter() - t0 > timeout:
            return time.perf_counter() - t0


def job_cpu(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds between two snapshots: all processes, the curator, P1 (party-1), and the other parties."""
    d = {n: after[n] - before[n] for n in after}
    others = [v for n, v in d.items() if n not in ("curator", "party-1")]
    return {"total": sum(d.values()), "curator": d.get("curator", 0.0), "party-1": d.get("party-1", 0.0),
            "other_parties": sum(others), "other_party_max": max(others, default=0.0)}


def socket_run(K: int, d: int, bits: int, repeats: int) -> list[dict]:
    names = [f"party-{i + 1}" for i in range(K)]
    with tempfile.TemporaryDirectory(prefix="mpdp-bench-") as tmp:
        root = Path(tmp)
        ds = {}
        for name, (X, y) in zip(names, parts(K, d)):
            p = root / "data" / f"{name}.csv"
            p.parent.mkdir(parents=True, exist_ok=True)
            np.savetxt(p, np.column_stack([X, y]), delimiter=",", fmt="%.17g")
            ds[name] = {"bench": {"path": str(p), "format": "csv"}}
        fed = LocalFederation(root / "fed", names, ds, test_mode=bits < 2048, paillier_bits=bits, dgk_bits=bits, budget_epsilon=1e9)
        rows = []
        with fed, OperatorClient(Endpoints.load(fed.workdir)) as client:
            for r in range(repeats + 1):
                fed.wait_precomputed()  # the parties' pools full …
                waited = wait_idle(fed)  # … and nothing else running in the federation: measure the job, not a refill
                load = os.getloadavg()[0]  # the host's 1-minute load average as the job starts
                cpu0 = federation_cpu(fed)
                t0 = time.perf_counter()
                job = client.submit(make_spec("bench", names, 1.0, 0.01, "corrected"))
                st = client.wait(job, timeout=600)
                wall = time.perf_counter() - t0
                cpu = job_cpu(cpu0, federation_cpu(fed))
                if st.state != "PUBLISHED":
                    raise SystemExit(f"job failed: {st.detail}")
                m = client.model(job)
                if r == 0:
                    continue  # warm-up: the first job also teaches the parties this job's d and K
                rows.append({"K": K, "d": d, "key_bits": bits, "path": "sockets", "seconds": wall, "stage_seconds": dict(m.stage_seconds), "ops": dict(m.paillier_ops),
                             "load_1min": load, "cpu_seconds": cpu, "idle_wait_seconds": waited})
    return rows


def memory_run(K: int, d: int, bits: int) -> dict:
    secrets = CuratorSecrets.generate(bits, bits)
    data = {f"party-{i + 1}": p for i, p in enumerate(parts(K, d))}
    t0 = time.perf_counter()
    r = driver.run_job(data, make_spec("bench", list(data), 1.0, 0.01, "corrected"), secrets, party_key_bits=bits, test_mode=bits < 2048)
    wall = time.perf_counter() - t0
    assert r.model is not None, r.error
    return {"K": K, "d": d, "key_bits": bits, "path": "in-memory (cold pools, incl. ξ keygen)", "seconds": wall, "stage_seconds": dict(r.model.stage_seconds), "ops": dict(r.model.paillier_ops)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parties", default="3,5,10", help="comma-separated K values")
    ap.add_argument("--dimension", type=int, default=123, help="d")
    ap.add_argument("--key-bits", type=int, default=2048, help="Paillier and DGK modulus bits")
    ap.add_argument("--repeats", type=int, default=2, help="measured jobs per K over sockets")
    ap.add_argument("--no-memory", action="store_true", help="skip the in-memory run (cold pools, one process)")
    ap.add_argument("--json", dest="json_out", help="write every row to this JSON file")
    args = ap.parse_args()
    rows = []
    for K in [int(k) for k in args.parties.split(",")]:
        if not args.no_memory:
            rows.append(memory_run(K, args.dimension, args.key_bits))
        rows.extend(socket_run(K, args.dimension, args.key_bits, args.repeats))
    print(f"{'K':>3} {'d':>4} {'path':<40} {'total s':>8} {'setup':>6} {'stage1':>7} {'stage2':>7} {'stage3':>7} {'load':>6} {'CPU s':>6} {'Charlie':>7} {'P1':>5} {'others':>6}  ops")
    for r in rows:
        s = r["stage_seconds"]
        c = r.get("cpu_seconds")
        cpu = f"{c['total']:>6.2f} {c['curator']:>7.2f} {c['party-1']:>5.2f} {c['other_parties']:>6.2f}" if c else " " * 28
        ops = ", ".join(f"{k}={v}" for k, v in sorted(r["ops"].items()))
        print(f"{r['K']:>3} {r['d']:>4} {r['path']:<40} {r['seconds']:>8.2f} {s.get('setup', 0):>6.2f} {s.get('stage1', 0):>7.2f} {s.get('stage2', 0):>7.2f} {s.get('stage3', 0):>7.2f} "
              f"{r.get('load_1min', float('nan')):>6.2f} {cpu}  {ops}")
    for K in sorted({r["K"] for r in rows}):
        wall = sorted(r["seconds"] for r in rows if r["K"] == K and r["path"] == "sockets")
        if wall:
            cpu = [r["cpu_seconds"]["total"] for r in rows if r["K"] == K and r["path"] == "sockets"]
            print(f"K = {K}, sockets: median {statistics.median(wall):.2f} s of {len(wall)} jobs (min {wall[0]:.2f}, max {wall[-1]:.2f}); "
                  f"CPU per job (all processes) median {statistics.median(cpu):.2f} s")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
