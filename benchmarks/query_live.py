"""DP queries end to end on a local federation, against OpenDP's central release: per cell, the mean absolute error
of R real queries beside R central draws, their ratio, and each query's wall time.

    python benchmarks/query_live.py [--runs 20] [--epsilon 1] [--delta 1e-6] [--json benchmarks/results/query_live.json] [--markdown]

UCI Adult (``../shared/data/adult/adult.data.gz``) split row by row over three parties as ``examples/adult/run.sh``
splits it (CSV files in a temporary folder, removed at the end), the schema ``examples/adult/schema.yaml``, the
worked queries of docs/protocols/query.md. A LocalFederation (curator, 3 parties, 3 compute nodes, each its own
process over mutual TLS; test mode, 512-bit keys: only the Paillier/DGK keys, which a query does not use, are
small) answers each query R times through ``Federation.query``, each a fresh job with fresh noise and its own charge
at every party; the wall time is the operator's call, from submission to the DataFrame. The central arm is OpenDP's
Gaussian at the same Δ₂ and (ε, δ) added to the true vector (``benchmarks/query_vs_opendp.py``: ``central_scale``),
decoded by the same code, R draws. Truth: every cell over the pooled clamped rows.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from query_vs_opendp import QUERIES, central_scale, parties, truth_table  # noqa: E402

PARTIES = ["party-1", "party-2", "party-3"]
NODES = ["node-1", "node-2", "node-3"]
SCHEMA = ROOT / "examples" / "adult" / "schema.yaml"
DATA = ROOT.parent / "shared" / "data" / "adult" / "adult.data.gz"


def split(folder: Path) -> dict[str, Path]:
    """adult.data's non-empty lines dealt to the three parties in turn (run.sh's split)."""
    import gzip

    files = {p: folder / f"{p}.csv" for p in PARTIES}
    handles = {p: f.open("w") for p, f in files.items()}
    with gzip.open(DATA, "rt") as fh:
        n = 0
        for line in fh:
            if line.strip():
                handles[PARTIES[n % 3]].write(line)
                n += 1
    for h in handles.values():
        h.close()
    return files


def run(runs: int, epsilon: float, delta: float) -> dict:
    import mpdp
    from mpdp.query.evaluate import vector
    from mpdp.query.plan import compile_query
    from mpdp.query.release import decode
    from mpdp.schema import Schema
    from mpdp_services.launcher.federation import LocalFederation

    schema = Schema.load(SCHEMA)
    cols = parties(schema, DATA)
    g = np.random.default_rng()
    out: dict = {"epsilon": epsilon, "delta": delta, "runs": runs, "rows": [len(next(iter(c.values()))) for c in cols], "queries": []}
    with tempfile.TemporaryDirectory(prefix="mpdp-query-live-") as tmp:
        files = split(Path(tmp))
        ds = {p: {"adult": {"path": str(f), "schema": str(SCHEMA)}} for p, f in files.items()}
        fed = LocalFederation(Path(tmp) / "fed", PARTIES, ds, test_mode=True, paillier_bits=512, dgk_bits=512, compute_nodes=NODES,
                              budget_epsilon=1000.0)
        t0 = time.perf_counter()
        fed.start()
        out["start_seconds"] = time.perf_counter() - t0
        try:
            with mpdp.Federation.connect(fed.workdir, schema=SCHEMA) as client:
                for sql in QUERIES:
                    plan = compile_query(sql, schema, "adult")
                    Z = np.stack([vector(plan, iter([(c, len(next(iter(c.values()))))]), 20_000, schema.missing_values) for c in cols])
                    truth_list = truth_table(plan, cols, schema.missing_values)
                    s = central_scale(plan.sensitivity, epsilon, delta)
                    names = [a.name for a in plan.aggregates]
                    truth: dict[tuple[str, str], float] = {}
                    errs: dict[str, dict[tuple[str, str], list[float]]] = {"mpdp": {}, "opendp": {}}
                    hits: dict[str, dict[tuple[str, str], int]] = {"mpdp": {}, "opendp": {}}
                    walls, sds = [], set()
                    for i in range(runs):
                        central = decode(plan, Z.sum(axis=0) + g.normal(0.0, s, size=plan.dimension), s * s, 0, 0)
                        k = 0
                        for groups, cells in central:
                            for a, c in zip(plan.aggregates, cells):
                                key = (" / ".join(groups) or "all", a.name)
                                truth[key] = truth_list[k]
                                k += 1
                                _tally(errs["opendp"], hits["opendp"], key, c.estimate, c.low, c.high, truth[key])
                        t1 = time.perf_counter()
                        df = client.query(sql, epsilon=epsilon, delta=delta)
                        walls.append(time.perf_counter() - t1)
                        gcols = [c for c in df.columns if c not in names and not any(c.startswith(n + "_") for n in names)]
                        for _, row in df.iterrows():
                            label = " / ".join(str(row[c]) for c in gcols) or "all"
                            for n in names:
                                est = row[n]
                                est = math.nan if est is None or (isinstance(est, float) and math.isnan(est)) else float(est)
                                if row.get(f"{n}_noise_sd") is not None and not (isinstance(row[f"{n}_noise_sd"], float) and math.isnan(row[f"{n}_noise_sd"])):
                                    sds.add(round(float(row[f"{n}_noise_sd"]), 6))
                                _tally(errs["mpdp"], hits["mpdp"], (label, n), est, float(row[f"{n}_low"]), float(row[f"{n}_high"]), truth[(label, n)])
                    cells = []
                    for key, t in truth.items():
                        m, o = (statistics.fmean(errs[arm][key]) if errs[arm].get(key) else math.nan for arm in ("mpdp", "opendp"))
                        cells.append({"group": key[0], "aggregate": key[1], "truth": t, "mpdp_mae": m, "opendp_mae": o, "ratio": m / o if o else math.nan,
                                      "mpdp_coverage": hits["mpdp"].get(key, 0) / runs, "opendp_coverage": hits["opendp"].get(key, 0) / runs})
                    per_agg = {}
                    for n in names:
                        m = [e for (gk, a), v in errs["mpdp"].items() if a == n for e in v]
                        o = [e for (gk, a), v in errs["opendp"].items() if a == n for e in v]
                        per_agg[n] = {"mpdp_mae": statistics.fmean(m), "opendp_mae": statistics.fmean(o), "ratio": statistics.fmean(m) / statistics.fmean(o)}
                    q = {"sql": sql, "dimension": plan.dimension, "sensitivity": plan.sensitivity, "budget_split": plan.split(), "opendp_scale": s,
                         "mpdp_noise_sd_stated": sorted(sds)[:4], "wall_seconds": {"mean": statistics.fmean(walls), "min": min(walls), "max": max(walls), "all": walls},
                         "aggregates": per_agg, "cells": cells}
                    out["queries"].append(q)
                    print(f"{statistics.fmean(walls):6.2f} s/query  {sql}", flush=True)
        finally:
            fed.stop()
    return out


def _tally(errs: dict, hits: dict, key, est: float, low: float, high: float, t: float) -> None:
    if not math.isnan(est) and not math.isnan(t):
        errs.setdefault(key, []).append(abs(est - t))
    hits[key] = hits.get(key, 0) + int(low <= t <= high)


def markdown(res: dict) -> str:
    lines = ["| query | group | aggregate | truth | MAE mpdp (live) | MAE OpenDP (central) | ratio |", "|---|---|---|---|---|---|---|"]
    for i, q in enumerate(res["queries"], 1):
        for c in q["cells"]:
            lines.append(f"| {i} | {c['group']} | {c['aggregate']} | {c['truth']:.4g} | {c['mpdp_mae']:.4g} | {c['opendp_mae']:.4g} | {c['ratio']:.2f} |")
        for n, a in q["aggregates"].items():
            lines.append(f"| {i} | all cells | **{n}** | | {a['mpdp_mae']:.4g} | {a['opendp_mae']:.4g} | **{a['ratio']:.2f}** |")
    lines.append("")
    lines.append("| query | wall s per query: mean (min–max) |")
    lines.append("|---|---|")
    for i, q in enumerate(res["queries"], 1):
        w = q["wall_seconds"]
        lines.append(f"| {i} | {w['mean']:.2f} ({w['min']:.2f}–{w['max']:.2f}) |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--delta", type=float, default=1e-6)
    ap.add_argument("--json", default=None)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    res = run(a.runs, a.epsilon, a.delta)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2) + "\n")
    print(markdown(res) if a.markdown else json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
