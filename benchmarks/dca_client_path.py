"""A validated DCA client's CPU, the whole load-generator path (in process; no network).

    python benchmarks/dca_client_path.py [--dims 10,1000] [--clients 4096,136] [--nodes 3] [--seeded] [--profile]
        [--json benchmarks/results/dca_client_path.json]

Per d: N clients (range predicate, discrete-Gaussian noise, a roster, clients named by roster index, as
``benchmarks/dca_node_path.py``'s and ``benchmarks/dca_validated.py``'s jobs) are built by
:func:`mpdp.dca.client.validated_cohort`, the code the load generator runs: values (clipping, rounding, the exact
discrete-Gaussian noise), encoding, sharing, joint-randomness parts, the FLP proofs, the ShareBatch messages, in
batches of :func:`mpdp.dca.validation.batch_size` clients. Reported: process CPU µs per client for the whole path
(``client_us``), the part in :func:`mpdp.dca.client.validated_values_many` (``values_us``: rounding and noise, the
same as an unvalidated client's) and the rest (``prove_us``: encoding, shares, parts, proofs, messages), and the
part in :meth:`mpdp.math.flp.Circuit.prove` alone (``flp_us``). Every batch is checked by M compute-node machines
afterwards (not timed): the cohort must be accepted whole. The machine is shared: the 1-minute load average is
recorded with each row, and CPU (not wall) time is what is measured.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from dca_node_path import _commit, _Timed, params  # the node-path benchmark's job and timer

from mpdp.dca import client as dca_client
from mpdp.dca import validation
from mpdp.math import flp
from mpdp.math.drbg import Drbg


def _accepted(prm: Any, ids: list[str], batches: list) -> bool:
    """Every client's shares verify at every node (node 0's view of each client's records is enough to decide)."""
    plan = prm.validation
    keys = [validation.verify_key_piece() for _ in range(prm.M)]
    vk = validation.verify_key(prm.job_id, keys)
    at = 0
    for names, msgs in batches:
        records: list[list[bytes]] = [[] for _ in names]
        for k, msg in enumerate(msgs):
            v = msg.validated
            packed = validation.PackedShares(len(names), v.measurements, v.proofs, v.share_seeds, v.blinds, v.joint_rand_parts)
            for i, res in enumerate(validation.check_packed(plan, packed, job_id=prm.job_id, client_ids=names, k=k, nodes=prm.M,
                                                            seeded=prm.seed_compressed, verify_key=vk)):
                if isinstance(res, Exception):
                    return False
                records[i].append(res[1])
        if not bool(np.all(validation.decide_many(plan, records))):
            return False
        at += len(names)
    return at == len(ids)


def run(d: int, m: int, n: int, *, seeded: bool, profile: bool) -> dict:
    prm = params(d, m, n, seeded=seeded)
    ids = [f"client-{i:06d}" for i in range(n)]
    Z = np.random.default_rng(d).uniform(-1, 1, (n, d))
    totals: dict[str, float] = defaultdict(float)
    real_values, real_prove = dca_client.validated_values_many, flp.Circuit.prove
    dca_client.validated_values_many = _Timed(real_values, totals, "values")  # type: ignore[assignment]
    timed_prove = _Timed(real_prove, totals, "flp")
    flp.Circuit.prove = lambda self, *a, **kw: timed_prove(self, *a, **kw)  # type: ignore[method-assign]
    prof = cProfile.Profile() if profile else None
    load = os.getloadavg()[0]
    try:
        if prof:
            prof.enable()
        t0 = time.process_time()
        batches = list(dca_client.validated_cohort(prm, ids, Z, Drbg.from_os()))
        total = time.process_time() - t0
        if prof:
            prof.disable()
    finally:
        dca_client.validated_values_many, flp.Circuit.prove = real_values, real_prove  # type: ignore[assignment, method-assign]
    load_after = os.getloadavg()[0]
    if not _accepted(prm, ids, batches):
        raise SystemExit(f"d = {d}: a client's shares were refused")
    row = {"d": d, "M": m, "N": n, "seeded": seeded, "client_us": 1e6 * total / n, "values_us": 1e6 * totals["values"] / n,
           "prove_us": 1e6 * (total - totals["values"]) / n, "flp_us": 1e6 * totals["flp"] / n,
           "bytes_per_client": sum(len(msg.SerializeToString()) for _, msgs in batches for msg in msgs) / n,
           "load_1min": [load, load_after], "commit": _commit()}
    if prof:
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dims", default="10,1000")
    ap.add_argument("--clients", default="4096,136", help="N per d (one value per --dims entry)")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--seeded", action="store_true", help="seed-compressed helper shares")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of the clients' path")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    dims, ns = [int(x) for x in a.dims.split(",")], [int(x) for x in a.clients.split(",")]
    if len(ns) != len(dims):
        raise SystemExit("--clients takes one N per --dims entry")
    rows = []
    print(f"{'d':>5} {'M':>2} {'N':>6} {'seeded':>6} {'client µs':>10} {'values µs':>9} {'prove µs':>9} {'flp µs':>8} {'load':>10}")
    for d, n in zip(dims, ns):
        run(d, a.nodes, min(n, 8), seeded=a.seeded, profile=False)  # warm-up: compiled kernels loaded, caches filled
        row = run(d, a.nodes, n, seeded=a.seeded, profile=a.profile)
        rows.append(row)
        print(f"{d:>5} {a.nodes:>2} {n:>6} {str(a.seeded):>6} {row['client_us']:>10.1f} {row['values_us']:>9.1f} {row['prove_us']:>9.1f} "
              f"{row['flp_us']:>8.1f} {row['load_1min'][0]:>4.1f}–{row['load_1min'][1]:.1f}", flush=True)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
