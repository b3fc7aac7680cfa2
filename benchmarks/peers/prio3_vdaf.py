"""Prio3 beside mpdp's validated DCA, per client and per node, in one run on this machine.

    python benchmarks/peers/prio3_vdaf.py [--dims 10,1000] [--reports 200,4] [--clients 2048,68] [--nodes 3]
        [--json benchmarks/results/peers_prio3.json] [--cache .venv-peers]

Prio3 is the IETF's verifiable distributed aggregation function (draft-irtf-cfrg-vdaf) built on the same fully
linear proofs (Boneh, Boyle, Corrigan-Gibbs, Gilboa & Ishai, CRYPTO 2019) as our validated mode. The peer run here
is divviup-ts's ``@divviup/prio3`` 0.8.0 (draft 08, TypeScript on Node.js, pinned in ``prio3/package-lock.json`` and
installed with ``npm ci`` under ``--cache``, never a project dependency): it is the only Prio3 that installs here
from a package registry (libprio-rs is a Rust crate and crates.io is out of reach). It computes with JavaScript
BigInt, so its figures say what a browser client of Prio3 costs, not what Divvi Up's Rust aggregators achieve.

For every d, interleaved (mpdp, Prio3, mpdp, Prio3):

* **mpdp**: a validated job's client (``benchmarks/dca_client_path.py``: values, encoding, shares, joint
  randomness, the FLP proofs, the messages) and a compute node's whole per-client work
  (``benchmarks/dca_node_path.py``: its shares read from the message, the query, the verifier exchange's share,
  the decision), CPU µs a client; with full shares to every node and seed-compressed (nodes 2…M get a 32-byte
  seed, as Prio3's helpers do: their node figure is a helper's). The job's circuit is the range predicate (d coordinates of 18 bits) plus the L2
  ball that bounds the client's noise share (``mpdp.dca.validation.plan``), over Field64 with two proofs.
* **Prio3SumVec** (Field128, one proof, TurboSHAKE128) with the same data predicate: ``length = d``, ``bits = 18``;
  and with as many measurement bits as our circuit checks (range and noise together): ``length = ⌈n_ours / 18⌉``.
  ``shard`` is the client; ``prepareInit`` + ``prepareNext`` is one aggregator's part (the preparation shares'
  combination, done once by the leader, is reported apart). CPU µs a report, ``M`` shares.

Bytes are the report's upload (public share and every input share). The machine is shared: CPU, not wall, time is
measured and the 1-minute load average is recorded with each row.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

BITS = 18  # the range predicate's bits per coordinate in the benchmark jobs (RangeVec(bits=18), dca_node_path.params)


def ensure_node_modules(cache: Path) -> Path:
    """``cache/prio3`` holding ``@divviup/prio3`` as pinned by ``prio3/package-lock.json`` (``npm ci`` when missing or changed)."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise SystemExit("Node.js and npm are needed for the Prio3 peer: apt-get install nodejs npm")
    src, dst = HERE / "prio3", cache / "prio3"
    lock = (src / "package-lock.json").read_bytes()
    marker = dst / ".lock-sha256"
    digest = hashlib.sha256(lock).hexdigest()
    if not (marker.exists() and marker.read_text().strip() == digest):
        dst.mkdir(parents=True, exist_ok=True)
        for name in ("package.json", "package-lock.json", "bench.mjs"):
            shutil.copy2(src / name, dst / name)
        print(f"[npm] npm ci in {dst}", flush=True)
        subprocess.run([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"], cwd=dst, check=True, capture_output=True)
        marker.write_text(digest + "\n")
    shutil.copy2(src / "bench.mjs", dst / "bench.mjs")  # the script may change without the lock
    return dst


def prio3(where: Path, cells: list[dict], shares: int) -> list[dict]:
    out = subprocess.run(["node", "bench.mjs", json.dumps({"shares": shares, "cells": cells})], cwd=where, check=True, capture_output=True, text=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def ours(d: int, m: int, clients: int, *, seeded: bool) -> dict:
    import dca_client_path
    import dca_node_path

    circuit = dca_node_path.params(d, m, clients, seeded=seeded).validation.circuit
    dca_client_path.run(d, m, min(clients, 8), seeded=seeded, profile=False)  # warm-up: compiled kernels, caches
    client = dca_client_path.run(d, m, clients, seeded=seeded, profile=False)
    dca_node_path.run(d, m, min(clients, 8), seeded=seeded, profile=False)
    node = dca_node_path.run(d, m, clients, seeded=seeded, profile=False)
    return {"d": d, "M": m, "clients": clients, "seeded": seeded, "measurement_bits": circuit.meas_len, "proofs": circuit.proofs,
            "client_us": client["client_us"], "prove_us": client["prove_us"], "node_us": node["node_us"], "bytes_per_client": client["bytes_per_client"],
            "load_1min": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dims", default="10,1000")
    ap.add_argument("--reports", default="200,4", help="Prio3 reports per d (one per --dims entry)")
    ap.add_argument("--clients", default="2048,68", help="mpdp clients per d (one per --dims entry)")
    ap.add_argument("--nodes", type=int, default=3, help="M: compute nodes (Prio3: shares)")
    ap.add_argument("--cache", type=Path, default=REPO / ".venv-peers")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    dims = [int(x) for x in a.dims.split(",")]
    reports, clients = [int(x) for x in a.reports.split(",")], [int(x) for x in a.clients.split(",")]
    if not len(dims) == len(reports) == len(clients):
        raise SystemExit("--reports and --clients take one value per --dims entry")
    where = ensure_node_modules(a.cache)
    rows: list[dict] = []
    print(f"{'d':>5} {'system':<34} {'bits':>6} {'client µs':>10} {'node µs':>9} {'bytes':>9} {'load':>5}", flush=True)
    for d, n_reports, n_clients in zip(dims, reports, clients):
        for seeded in (False, True):
            mine = ours(d, a.nodes, n_clients, seeded=seeded)
            rows.append({"system": "mpdp", **mine})
            label = "mpdp validated" + (", seed-compressed" if seeded else "")
            print(f"{d:>5} {label:<34} {mine['measurement_bits']:>6} {mine['client_us']:>10.0f} {mine['node_us']:>9.1f} "
                  f"{mine['bytes_per_client']:>9.0f} {mine['load_1min']:>5.1f}", flush=True)
        cells = [{"kind": "sumvec", "length": d, "bits": BITS, "reports": n_reports},
                 {"kind": "sumvec", "length": math.ceil(mine["measurement_bits"] / BITS), "bits": BITS, "reports": n_reports}]
        for cell in prio3(where, cells, a.nodes):
            row = {"system": "prio3", "d": d, **cell, "load_1min": os.getloadavg()[0]}
            rows.append(row)
            label = f"Prio3SumVec({cell['length']}×{BITS} bits)"
            print(f"{d:>5} {label:<34} {cell['length'] * BITS:>6} {cell['shard_us']:>10.0f} {cell['prepare_us_per_aggregator']:>9.1f} "
                  f"{cell['report_bytes']:>9.0f} {row['load_1min']:>5.1f}", flush=True)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
