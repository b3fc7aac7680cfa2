"""Benchmark HCB16 ensemble jobs over sockets: K parties vote on N auxiliary points, 3 compute nodes sum the votes.

    python benchmarks/hamm2016_federation.py [--parties 5,10] [--aux 1000,10000] [--per-party 2000] [--json FILE]

Data: Adult in LIBSVM form (../shared/data/a9a, d = 123, rows already ‖x‖ ≤ √14, clipped onto the unit ball by
every role): parties get disjoint slices of a9a's training file, the curator's auxiliary rows are another slice
(labels dropped), the test rows come from a9a.t. A local federation (separate processes, mutual TLS, production
key sizes) runs one warm-up job, then ``--repeats`` measured jobs per (K, N). Printed per job: wall time from
submission (the job host's SubmitJob) to the release, the curator's stage times (votes = auxiliary download + local training + voting +
shares reaching the nodes; vote_sum = node agreement and partial sums; train = the rest of the wall time: fit of
w_s, the noise and the reply — the release does not publish the fit's own time, which depends on the counts), the
bytes of vote shares (K·M·8·N) and test accuracy. No Paillier: the vote sum is additive sharing over Z_2^64.

The vote sums run unvalidated (``EnsembleJobSpec.unvalidated``, as ``mpdp train --validate none``): the table
measures the plain secure sum at N up to 10⁴, and a validated vote vector holds at most 4096 entries. The cost of
validated vote sums is measured by benchmarks/validated_rounds.py.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from sklearn.datasets import load_svmlight_file

from mpdp.hamm2016 import job as core
from mpdp.hamm2016.erm import predict
from mpdp.messages import hamm2016_pb2 as pb
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.operator.ensemble import train_ensemble
from mpdp_services.launcher.federation import LocalFederation

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "a9a"
NODES = ["node-1", "node-2", "node-3"]
KEEP = bool(os.environ.get("MPDP_BENCH_KEEP"))  # keep the federation folder (logs) for inspection


def _clip(X: np.ndarray) -> np.ndarray:
    return X / np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]


def run(K: int, n_aux: int, per_party: int, repeats: int, epsilon: float) -> list[dict]:
    X, y = load_svmlight_file(str(DATA / "a9a.gz"), n_features=123)
    Xt, yt = load_svmlight_file(str(DATA / "a9a.t.gz"), n_features=123)
    X, Xt = np.asarray(X.todense()), _clip(np.asarray(Xt.todense()))
    order = np.random.default_rng(K * 7919 + n_aux).permutation(len(y))  # public simulation data: who holds which rows
    if n_aux + K * per_party > len(y):
        raise SystemExit(f"a9a has {len(y)} rows; K·per_party + N = {K * per_party + n_aux} is too many")
    names = [f"party-{i + 1}" for i in range(K)]
    rows = []
    folder = contextlib.nullcontext(tempfile.mkdtemp(prefix="mpdp-bench-hamm-")) if KEEP else tempfile.TemporaryDirectory(prefix="mpdp-bench-hamm-")
    with folder as tmp:
        root = Path(tmp)
        aux = root / "data" / "aux.csv"
        aux.parent.mkdir(parents=True)
        np.savetxt(aux, np.column_stack([X[order[:n_aux]], np.zeros(n_aux)]), delimiter=",", fmt="%.10g")
        ds = {}
        for j, name in enumerate(names):
            idx = order[n_aux + j * per_party:n_aux + (j + 1) * per_party]
            p = root / "data" / f"{name}.csv"
            np.savetxt(p, np.column_stack([X[idx], y[idx]]), delimiter=",", fmt="%.10g")
            ds[name] = {"adult": {"path": str(p), "format": "csv"}}
        fed = LocalFederation(root / "fed", names, ds, budget_epsilon=1e9, compute_nodes=NODES, auxiliary={"adult_aux": {"path": str(aux), "format": "csv"}})
        with fed:
            ep = Endpoints.load(fed.workdir)
            spec = pb.EnsembleJobSpec(dataset="adult", auxiliary="adult_aux", method="soft", lam=1e-3, epsilon=epsilon, classes=["-1", "1"],
                                      parties=names, compute_nodes=NODES, local_lam=1e-3, unvalidated=True)
            for r in range(repeats + 1):
                t0 = time.perf_counter()
                rel = train_ensemble(ep, spec)
                wall = time.perf_counter() - t0
                acc = float(np.mean(predict(core.weights_of(rel), Xt) == (yt > 0)))
                if r == 0:
                    continue  # warm-up: imports and first connections
                stages = dict(rel.stage_seconds)
                stages["train"] = wall - stages["votes"] - stages["vote_sum"]  # fit + noise + transport (not published)
                rows.append({"parties": K, "aux": n_aux, "per_party": per_party, "epsilon": epsilon, "wall_seconds": wall,
                             "stage_seconds": stages, "share_bytes": K * len(NODES) * 8 * n_aux, "accuracy": acc,
                             "sensitivity": rel.sensitivity})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parties", default="5,10", help="comma-separated K values")
    ap.add_argument("--aux", default="1000,10000", help="comma-separated N values (auxiliary rows)")
    ap.add_argument("--per-party", type=int, default=1500)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "hamm2016_federation.json")
    a = ap.parse_args()
    results = []
    print(f"{'K':>3} {'N':>6} {'wall s':>7} {'votes s':>8} {'sum s':>6} {'train s':>8} {'shares MB':>9} {'acc':>6}")
    for K in (int(v) for v in a.parties.split(",")):
        for n in (int(v) for v in a.aux.split(",")):
            for row in run(K, n, a.per_party, a.repeats, a.epsilon):
                s = row["stage_seconds"]
                print(f"{K:>3} {n:>6} {row['wall_seconds']:>7.2f} {s['votes']:>8.2f} {s['vote_sum']:>6.2f} {s['train']:>8.2f} {row['share_bytes'] / 1e6:>9.2f} {row['accuracy']:>6.3f}", flush=True)
                results.append(row)
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps({"benchmark": "hamm2016_federation", "nodes": len(NODES), "rows": results}, indent=2))
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
