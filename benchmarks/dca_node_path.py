"""A validated DCA job's compute-node CPU per client, the whole node path (in process; clients' proofs built first).

    python benchmarks/dca_node_path.py [--dims 10,1000] [--clients 4096,68] [--nodes 3] [--seeded] [--profile]
        [--json benchmarks/results/dca_node_path.json]

Per d: N clients' ShareBatch messages of ValidatedShares (range predicate, discrete-Gaussian noise, as
``benchmarks/dca_validated.py``'s jobs: a roster, clients named by roster index, batches of
:func:`mpdp.dca.validation.batch_size` clients) are built first by :func:`mpdp.dca.client.validated_cohort` — the
clients' cost, excluded, as the paper's Table 1 excludes client-side encryption. Then the M compute-node machines
(:class:`mpdp.dca.compute_node.ComputeNodeMachine`, the code the node servers run) take every batch, exchange their
received-set reports with the verifier records, decide and fold, and send their partial sums to the aggregator, all
over the in-memory wire (:class:`mpdp.driver.Wire`: no gRPC, no TLS). Reported: CPU seconds inside each node's
``receive`` (share intake and parsing, seed expansion, joint randomness, query, the record exchange, decide, the sum)
divided by N, per node and averaged over nodes (``node_us``); ``verify_us`` the part spent in
:func:`mpdp.dca.validation.check_packed`, ``decide_us`` in :func:`mpdp.dca.validation.decide_records`. The job must
release with every client included. The machine is shared: the 1-minute load average is recorded with each row.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from mpdp.dca import validation
from mpdp.dca.aggregator import AggregatorMachine
from mpdp.dca.client import node_peer, validated_cohort
from mpdp.dca.compute_node import ComputeNodeMachine
from mpdp.dca.params import DcaParams
from mpdp.driver import Wire
from mpdp.math.drbg import Drbg
from mpdp.messages import dca_pb2 as pb
from mpdp.protocol import CURATOR, Peer


def params(d: int, m: int, n: int, *, seeded: bool) -> DcaParams:
    return DcaParams(job_id="bench", dimension=d, clients=n, max_missing=1, epsilon=1.0, delta=1e-5, sensitivity=2.0,
                     nodes=tuple(f"n{k}" for k in range(m)), frac_bits=16, noise="discrete-gaussian", validate="range",
                     seed_compressed=seeded, roster_range=("client-", 6))


class _Timed:
    """Wraps a function, adding the process CPU time it takes to ``totals[name]`` (CPU, not wall: the figures do not
    stretch with the other processes of a loaded machine)."""

    def __init__(self, fn: Any, totals: dict[str, float], name: str) -> None:
        self.fn, self.totals, self.name = fn, totals, name

    def __call__(self, *a: Any, **kw: Any) -> Any:
        t0 = time.process_time()
        try:
            return self.fn(*a, **kw)
        finally:
            self.totals[self.name] += time.process_time() - t0


def run(d: int, m: int, n: int, *, seeded: bool, profile: bool) -> dict:
    prm = params(d, m, n, seeded=seeded)
    ids = [f"client-{i:06d}" for i in range(n)]
    Z = np.random.default_rng(d).uniform(-1, 1, (n, d))
    t0 = time.perf_counter()
    batches = list(validated_cohort(prm, ids, Z, Drbg.from_os()))
    client_s = time.perf_counter() - t0
    agg = AggregatorMachine(prm, record=False)
    nodes: dict[str, ComputeNodeMachine] = {}
    totals: dict[str, float] = defaultdict(float)

    def spawn(to: Peer, msg: Any) -> list | None:
        if to.role != "compute_node" or not isinstance(msg, pb.DcaJobAnnouncement):
            return None
        node = ComputeNodeMachine.from_announcement(to.name, msg, record=False)
        node.receive = _Timed(node.receive, totals, to.name)  # type: ignore[method-assign]
        nodes[to.name] = wire.machines[to] = node
        return []

    wire = Wire(spawn=spawn)
    wire.machines[CURATOR] = agg
    wire.route(CURATOR, agg.announce())
    wire.pump()
    for node in list(nodes.values()):
        wire.route(node.me, node.start())
    wire.pump()
    totals.clear()
    real_check, real_decide = validation.check_packed, validation.decide_records
    validation.check_packed = _Timed(real_check, totals, "check_packed")  # type: ignore[assignment]
    validation.decide_records = _Timed(real_decide, totals, "decide_records")  # type: ignore[assignment]
    prof = cProfile.Profile() if profile else None
    load = os.getloadavg()[0]
    try:
        if prof:
            prof.enable()
        router = [Peer("operator", f"router-{k}") for k in range(m)]
        for _, msgs in batches:
            for k, msg in enumerate(msgs):
                wire.queue.append((router[k], node_peer(prm.nodes[k]), msg))
            wire.pump()
        if agg.state == "AWAIT_PARTIAL_SUMS":
            wire.route(CURATOR, agg.close_submissions())
        wire.pump()
        if prof:
            prof.disable()
    finally:
        validation.check_packed, validation.decide_records = real_check, real_decide  # type: ignore[assignment]
    release = wire.releases[0] if wire.releases else None
    if release is None or release.clients_included != n:
        raise SystemExit(f"d = {d}: the job did not release with all {n} clients ({wire.error or agg.error})")
    per_node = {name: 1e6 * totals[name] / n for name in prm.nodes}
    row = {"d": d, "M": m, "N": n, "seeded": seeded, "node_us": sum(per_node.values()) / m, "node_us_each": per_node,
           "verify_us": 1e6 * totals["check_packed"] / (n * m), "decide_us": 1e6 * totals["decide_records"] / (n * m),
           "client_build_s": client_s, "load_1min": [load, os.getloadavg()[0]], "commit": _commit()}
    if prof:
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    return row


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def cli(doc: str, run_one, clients: str, part: str, columns: list[tuple[str, str, int]]) -> None:
    """The per-client benchmarks' command line (this one's and benchmarks/dca_client_path.py's): for each d, a warm-up
    run then the measured one (``run_one(d, m, n, seeded=, profile=)``), a table row of ``columns`` (heading, row
    key, width) and the load, and every row to ``--json``."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dims", default="10,1000")
    ap.add_argument("--clients", default=clients, help="N per d (one value per --dims entry)")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--seeded", action="store_true", help="seed-compressed helper shares")
    ap.add_argument("--profile", action="store_true", help=f"print a cProfile of {part}")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    dims, ns = [int(x) for x in a.dims.split(",")], [int(x) for x in a.clients.split(",")]
    if len(ns) != len(dims):
        raise SystemExit("--clients takes one N per --dims entry")
    rows = []
    print(f"{'d':>5} {'M':>2} {'N':>6} {'seeded':>6} " + " ".join(f"{h:>{w}}" for h, _, w in columns) + f" {'load':>10}")
    for d, n in zip(dims, ns):
        run_one(d, a.nodes, min(n, 8), seeded=a.seeded, profile=False)  # warm-up: compiled kernels loaded, caches filled
        row = run_one(d, a.nodes, n, seeded=a.seeded, profile=a.profile)
        rows.append(row)
        print(f"{d:>5} {a.nodes:>2} {n:>6} {str(a.seeded):>6} " + " ".join(f"{row[k]:>{w}.1f}" for _, k, w in columns)
              + f" {row['load_1min'][0]:>4.1f}–{row['load_1min'][1]:.1f}", flush=True)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(rows, indent=1))


def main() -> None:
    cli(__doc__, run, "4096,68", "the nodes' part", [("node µs/client", "node_us", 14), ("verify µs", "verify_us", 9), ("decide µs", "decide_us", 9)])


if __name__ == "__main__":
    main()
