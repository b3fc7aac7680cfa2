"""DP queries: mpdp's distributed release against a central Gaussian release by OpenDP at the same (ε, δ) and Δ₂.

    python benchmarks/query_vs_opendp.py [--draws 200] [--epsilon 1] [--delta 1e-6] [--colluders C] [--json benchmarks/results/query_vs_opendp.json] [--markdown]

UCI Adult (``../shared/data/adult/adult.data.gz``) split row by row over three parties as ``examples/adult/run.sh``
splits it, the schema ``examples/adult/schema.yaml``, the three worked queries of docs/protocols/query.md. For each
query, each party's vector is computed as the party service computes it (:mod:`mpdp.query.evaluate`), then per draw:

* **mpdp**: what the validated DCA releases, drawn with its own samplers — each party's conditional randomized
  rounding to 2^-f (:func:`mpdp.dca.discrete.rounded_integers`) and each of the M = 3 compute nodes' exact discrete
  Gaussian N_Z(0, σ²) (:func:`mpdp.dca.discrete.node_noise`), σ² from the job's calibration (c = M − 1 by default: the
  noise of one node alone must suffice, all 3 add theirs; docs/protocols/dca.md, "Who adds the noise");
* **OpenDP**: a trusted curator adding central Gaussian noise to the true vector, its scale found by OpenDP
  (``make_gaussian`` → zCDP → (ε, δ) with ``binary_search_param``) for the same Δ₂ and (ε, δ).

Both decode with :func:`mpdp.query.release.decode` (for OpenDP: V = its scale², no rounding). Per aggregate:
the noise sd per coordinate, the mean absolute error of the estimates over cells and draws, the intervals' coverage
of the truth (over the clamped rows) and their mean width; per cell, the mean absolute error of each arm and their
ratio; per query, the seconds a draw takes in each arm (noise and decoding, not the protocol). No processes, no network: the mechanisms only (the
protocol computes exactly the mpdp arm: tests/query and tests/integration check it end to end).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import time
from pathlib import Path

import numpy as np

from mpdp.dca.discrete import node_noise, rounded_integers
from mpdp.math.drbg import Drbg
from mpdp.query.evaluate import vector
from mpdp.query.plan import compile_query
from mpdp.query.release import dca_params, decode
from mpdp.schema import Schema

ROOT = Path(__file__).resolve().parents[1]
QUERIES = (
    "SELECT sex, income, COUNT(*) AS n, AVG(age) AS mean_age FROM adult GROUP BY sex, income",
    'SELECT race, MEDIAN("hours-per-week") AS median_hours, QUANTILE(age, 0.9) AS p90_age FROM adult WHERE age BETWEEN 25 AND 64 GROUP BY race',
    'SELECT COUNT(*) AS n, SUM("capital-gain") AS gains FROM adult GROUP BY BIN(age, 4)',
)


def parties(schema: Schema, data: Path) -> list[dict[str, np.ndarray]]:
    """adult.data's rows dealt to three parties in turn (run.sh's split), as text columns."""
    names = schema.columns or []
    rows: list[list[list[str]]] = [[], [], []]
    with gzip.open(data, "rt") as fh:
        for line in fh:
            if line.strip():
                cells = [c.strip() for c in line.rstrip("\n").split(",")]
                if len(cells) == len(names):
                    rows[sum(len(r) for r in rows) % 3].append(cells)
    return [{n: np.array([r[i] for r in part], dtype=object) for i, n in enumerate(names)} for part in rows]


def central_scale(sensitivity: float, epsilon: float, delta: float) -> float:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l2_distance(T=float)

    def meas(s: float):
        return dp.c.make_fix_delta(dp.c.make_zCDP_to_approxDP(space >> dp.m.then_gaussian(s)), delta)

    return float(dp.binary_search_param(meas, d_in=sensitivity, d_out=(epsilon, delta)))


def truth_table(plan, cols: list[dict[str, np.ndarray]], missing) -> list[float]:
    """Every cell's true value over the clamped rows (means and quantiles from the pooled rows)."""
    out = []
    pooled = {k: np.concatenate([c[k] for c in cols]) for k in cols[0]}
    from mpdp.query.evaluate import _Columns, _bin

    cells = _Columns(plan, pooled, len(next(iter(pooled.values()))), set(missing))
    keep = cells.valid & cells.holds(plan.where, plan)
    group = np.zeros(len(keep), dtype=np.int64)
    for g in plan.groups:
        idx = _bin(cells.num[g.column.name], g.column.lo, g.column.hi, g.bins) if g.bins else cells.code[g.column.name]
        group = group * g.size + idx
    for gi in range(plan.cells):
        sel = keep & (group == gi)
        for a in plan.aggregates:
            if a.kind == "count":
                out.append(float(sel.sum()))
                continue
            c = plan.columns[a.column]
            v = np.clip(cells.num[a.column][sel], c.lo, c.hi)
            if a.kind == "sum":
                out.append(float(v.sum()))
            elif a.kind == "avg":
                out.append(float(v.mean()) if v.size else math.nan)
            else:
                out.append(float(np.sort(v)[math.ceil(a.q * v.size) - 1]) if v.size else math.nan)
    return out


def run(draws: int, epsilon: float, delta: float, colluders: int | None = None) -> dict:
    schema = Schema.load(ROOT / "examples" / "adult" / "schema.yaml")
    cols = parties(schema, ROOT.parent / "shared" / "data" / "adult" / "adult.data.gz")
    out: dict = {"epsilon": epsilon, "delta": delta, "draws": draws, "colluders": colluders, "rows": [len(next(iter(c.values()))) for c in cols], "queries": []}
    rng = Drbg.from_os()
    g = np.random.default_rng()
    for sql in QUERIES:
        plan = compile_query(sql, schema, "adult")
        Z = np.stack([vector(plan, iter([(c, len(next(iter(c.values()))))]), 20_000, schema.missing_values) for c in cols])
        params = dca_params(plan, "dca-bench", ["p1", "p2", "p3"], ["n1", "n2", "n3"], epsilon=epsilon, delta=delta, records_per_party=20_000, colluders=colluders)
        assert params.discrete is not None
        ours_v = params.noise_variance(len(cols))
        s = central_scale(plan.sensitivity, epsilon, delta)
        truth = truth_table(plan, cols, schema.missing_values)
        scale = 2.0 ** params.frac_bits
        stats = {arm: {a.name: {"err": [], "hit": 0, "width": [], "n": 0} for a in plan.aggregates} for arm in ("mpdp", "opendp")}
        cell_err: dict[str, list[list[float]]] = {arm: [[] for _ in truth] for arm in ("mpdp", "opendp")}
        labels: list[tuple[str, str]] = []
        seconds = {"mpdp": 0.0, "opendp": 0.0}
        t0 = time.perf_counter()
        for i in range(draws):  # every party's rounding and every node's noise from its own stream, every draw afresh
            t1 = time.perf_counter()
            units = sum(rounded_integers(z, params.frac_bits, rng.child(f"{sql}/draw {i}/party {j}")) for j, z in enumerate(Z))
            units = units + sum(node_noise(plan.dimension, params.discrete.sigma2, rng.child(f"{sql}/draw {i}/node {k}")) for k in range(params.M))
            ours = decode(plan, np.asarray(units, dtype=np.float64).ravel() / scale, ours_v, len(cols), params.frac_bits)
            t2 = time.perf_counter()
            central = decode(plan, Z.sum(axis=0) + g.normal(0.0, s, size=plan.dimension), s * s, 0, params.frac_bits)
            t3 = time.perf_counter()
            seconds["mpdp"] += t2 - t1
            seconds["opendp"] += t3 - t2
            for arm, rows in (("mpdp", ours), ("opendp", central)):
                k = 0
                for groups, cells in rows:
                    for a, c in zip(plan.aggregates, cells):
                        t = truth[k]
                        if i == 0 and arm == "mpdp":
                            labels.append((" / ".join(groups) or "all", a.name))
                        st = stats[arm][a.name]
                        st["n"] += 1
                        if not math.isnan(c.estimate) and not math.isnan(t):
                            st["err"].append(abs(c.estimate - t))
                            cell_err[arm][k].append(abs(c.estimate - t))
                        st["hit"] += c.low <= t <= c.high
                        st["width"].append(c.high - c.low)
                        k += 1
        q = {"sql": sql, "dimension": plan.dimension, "sensitivity": plan.sensitivity, "budget_split": plan.split(),
             "noise_sd": {"mpdp": math.sqrt(ours_v), "opendp": s}, "seconds": time.perf_counter() - t0,
             "seconds_per_draw": {arm: v / draws for arm, v in seconds.items()}, "aggregates": {}, "cells": []}
        for k, (group, agg) in enumerate(labels):
            m, o = (float(np.mean(cell_err[arm][k])) if cell_err[arm][k] else math.nan for arm in ("mpdp", "opendp"))
            q["cells"].append({"group": group, "aggregate": agg, "truth": truth[k], "mpdp_mae": m, "opendp_mae": o, "ratio": m / o if o else math.nan})
        for a in plan.aggregates:
            q["aggregates"][a.name] = {arm: {"mean_abs_error": float(np.mean(stats[arm][a.name]["err"])), "coverage": stats[arm][a.name]["hit"] / stats[arm][a.name]["n"],
                                             "mean_width": float(np.mean(stats[arm][a.name]["width"]))} for arm in ("mpdp", "opendp")}
        out["queries"].append(q)
    return out


def markdown(res: dict) -> str:
    """Every cell's mean absolute error, mpdp beside OpenDP, and their ratio, as a Markdown table."""
    lines = ["| query | group | aggregate | truth | MAE mpdp | MAE OpenDP | ratio |", "|---|---|---|---|---|---|---|"]
    for i, q in enumerate(res["queries"], 1):
        for c in q["cells"]:
            lines.append(f"| {i} | {c['group']} | {c['aggregate']} | {c['truth']:.4g} | {c['mpdp_mae']:.4g} | {c['opendp_mae']:.4g} | {c['ratio']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--delta", type=float, default=1e-6)
    ap.add_argument("--colluders", type=int, default=None, help="the compute nodes' c (default M − 1 = 2, what parties accept)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--markdown", action="store_true", help="print the per-cell table instead of the JSON")
    a = ap.parse_args()
    res = run(a.draws, a.epsilon, a.delta, a.colluders)
    text = json.dumps(res, indent=2)
    if a.json:
        Path(a.json).write_text(text + "\n")
    print(markdown(res) if a.markdown else text)


if __name__ == "__main__":
    main()
