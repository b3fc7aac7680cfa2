"""A DP query's DCA job and what its release decodes to: every cell's estimate, its 95 % interval and its noise scale.

The job (:func:`dca_params`): the parties' vectors (:mod:`mpdp.query.evaluate`) summed by the validated DCA with the
distributed discrete Gaussian; every party proves every coordinate of its vector within its public row bound n
(validate RANGE, clip bound n: a count, a bin count and a sum of values scaled into [−1, 1] all lie in [−n, n]).
Δ₂ is the plan's (:attr:`mpdp.query.plan.QueryPlan.sensitivity`).

Intervals (docs/protocols/query.md, "Intervals"). Each released coordinate is Y = S + E + R: the true sum S, the
noise E — a sum of independent discrete Gaussians N_Z(0, σ²), each σ-sub-Gaussian (Canonne, Kamath & Steinke
2020: its moment generating function is at most N(0, σ²)'s), so E is sub-Gaussian with variance proxy V = the release's ``noise_variance`` — and the rounding R, at most
one unit 2^-f per included client, |R| ≤ |A|·2^-f. Hence P(|E| ≥ t) ≤ 2·exp(−t²/(2V)) and

    S ∈ Y ± (√(2V·ln(2/α)) + |A|·2^-f)  with probability ≥ 1 − α   (α = 0.05: √(2 ln 40) ≈ 2.72 standard deviations).

* COUNT, SUM: that interval (a sum scaled by B back to its column's units).
* AVG = S/C: a Bonferroni split — S and C each at level α/2 — and interval arithmetic: when C's lower end is > 0,
  S/C lies between the extreme corner ratios; the result is intersected with the column's [lo, hi] (an average of
  clamped values lies there), and is [lo, hi] when C's interval reaches 0.
* QUANTILE q: the noisy histogram h over the public bins e_0 < … < e_K. With P_j the rows below e_j and N all rows,
  D_j = P_j − q·N = (1 − q)·P_j − q·(N − P_j) is a linear form in disjoint bins (variance proxy
  ((1 − q)²·j + q²·(K − j))·V); the quantile lies in [e_{j*−1}, e_{j*}] for j* the first j with D_j ≥ 0. Bounding
  all K − 1 inner D_j at once (Bonferroni, α/(K − 1) each) gives j* between the first j with D̂_j + t_j ≥ 0 and the
  first with D̂_j − t_j ≥ 0, so the interval is [e_{j_lo − 1}, e_{j_hi}]. The estimate interpolates linearly in the
  bin where the noisy cumulative histogram (negative bins taken as 0) crosses q.

Every interval covers the value over the **clamped** rows (values outside the public bounds count at the bound).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from mpdp.dca.errors import InvalidJob
from mpdp.dca.params import DcaParams
from mpdp.query.cell import Cell, z_subgaussian
from mpdp.query.plan import QUANTILE_BINS, Aggregate, QueryPlan, bin_edges

CONFIDENCE = 0.95
VALIDATION = "range"
FRAC_BITS = (16, 14, 12, 10, 8)  # the first whose circuit fits Field64 (a sum's rounding is at most 2^-f·B a party)
INTERVAL_METHOD = ("sub-Gaussian tail of the summed discrete Gaussian noise (√(2V ln(2/α))) plus the rounding bound; AVG: Bonferroni "
                   "α/2 each for sum and count, then interval arithmetic; QUANTILE: Bonferroni over the K − 1 inner bin edges")


def dca_params(plan: QueryPlan, job_id: str, parties: Sequence[str], nodes: Sequence[str], *, epsilon: float, delta: float,
               records_per_party: int, max_missing: int = 0, simulation_seed: bytes = b"", deadline_seconds: float = 600.0,
               purpose: str = "", colluders: int | None = None) -> DcaParams:
    """The query's validated DCA job; ValueError when no fractional precision fits the proof circuit. ``colluders``:
    the compute nodes' c (None: M − 1, what parties accept; other values are for measuring the mechanism only)."""
    last: Exception | None = None
    for f in FRAC_BITS:
        try:
            return DcaParams(job_id=job_id, dimension=plan.dimension, clients=len(parties), max_missing=max_missing, epsilon=epsilon, delta=delta,
                             sensitivity=plan.sensitivity, nodes=tuple(nodes), frac_bits=f, clip_bounds=(float(records_per_party),),
                             simulation_seed=simulation_seed, roster=tuple(parties), purpose=purpose or "dp query", deadline_seconds=deadline_seconds,
                             noise="discrete-gaussian", validate=VALIDATION, colluders=colluders)
        except InvalidJob as e:
            if not str(e).startswith(("validation", "a validated job", "headroom")):
                raise ValueError(str(e)) from None
            last = e
    raise ValueError(f"no validated DCA job fits the query: {last}")


def check_job(plan: QueryPlan, params: DcaParams, epsilon: float, delta: float) -> None:
    """A party's test that the announced DCA job is this query's (ValueError otherwise): its dimension, a Δ₂ at
    least the plan's (less would under-noise the release for the ε charged), the (ε, δ) asked, discrete noise."""
    if params.dimension != plan.dimension:
        raise ValueError(f"the DCA job sums {params.dimension} values; the query's vector has {plan.dimension}")
    if not params.sensitivity >= plan.sensitivity * (1.0 - 1e-9):
        raise ValueError(f"the DCA job's Δ₂ = {params.sensitivity:.6g} is below the query's Δ₂ = {plan.sensitivity:.6g}")
    if (params.epsilon, params.delta) != (epsilon, delta):
        raise ValueError("the DCA job's (ε, δ) are not the query's")
    if params.noise != "discrete-gaussian":
        raise ValueError("a query's DCA job takes the discrete Gaussian")


def _interval(y: float, var: float, rounding: float, alpha: float) -> tuple[float, float]:
    h = z_subgaussian(alpha) * math.sqrt(max(var, 0.0)) + rounding
    return y - h, y + h


def decode(plan: QueryPlan, values: Sequence[float], noise_variance: float, clients_included: int, frac_bits: int,
           alpha: float = 1.0 - CONFIDENCE) -> list[tuple[tuple[str, ...], list[Cell]]]:
    """The result table: per group (labels), one :class:`Cell` per aggregate in SELECT order."""
    y = np.asarray(values, dtype=np.float64)
    if y.size != plan.dimension:
        raise ValueError(f"the release holds {y.size} values; the query's vector has {plan.dimension}")
    V = float(noise_variance)
    rnd = clients_included * 2.0 ** -frac_bits  # |R| per coordinate
    if plan.evaluation is not None:
        from mpdp.query import evaluation

        return evaluation.decode(plan, y, V, rnd, alpha)
    sd = math.sqrt(max(V, 0.0))
    keys = plan.group_keys()
    rows = []
    for g, key in enumerate(keys):
        cells = [_cell(plan, a, y, g, V, sd, rnd, alpha) for a in plan.aggregates]
        rows.append((key, cells))
    return rows


def _cell(plan: QueryPlan, a: Aggregate, y: np.ndarray, g: int, V: float, sd: float, rnd: float, alpha: float) -> Cell:
    if a.kind == "count":
        c = float(y[plan.part("count").offset + g])
        lo, hi = _interval(c, V, rnd, alpha)
        return Cell(c, lo, hi, sd)
    if a.kind == "sum":
        B = plan.columns[a.column].scale
        s = float(y[plan.part("sum", a.column).offset + g])
        lo, hi = _interval(s, V, rnd, alpha)
        return Cell(s * B, lo * B, hi * B, sd * B)
    col = plan.columns[a.column]
    if a.kind == "avg":
        B = col.scale
        s = float(y[plan.part("sum", a.column).offset + g]) * B
        c = float(y[plan.part("count").offset + g])
        s_lo, s_hi = (v * B for v in _interval(s / B, V, rnd, alpha / 2))
        c_lo, c_hi = _interval(c, V, rnd, alpha / 2)
        if c_lo > 0:
            corners = [s_lo / c_lo, s_lo / c_hi, s_hi / c_lo, s_hi / c_hi]
            lo, hi = max(col.lo, min(corners)), min(col.hi, max(corners))
            if lo > hi:  # the two intervals missed each other's range: report the bounds (they hold the clamped mean)
                lo, hi = col.lo, col.hi
        else:
            lo, hi = col.lo, col.hi
        est = float(np.clip(s / c, col.lo, col.hi)) if c > 0 else math.nan
        delta_sd = math.sqrt(V * B * B + (est if c > 0 else 0.0) ** 2 * V) / c if c > 0 else math.nan  # delta method, for scale only
        return Cell(est, lo, hi, delta_sd)
    # quantile
    K = QUANTILE_BINS
    part = plan.part("hist", a.column)
    h = y[part.offset + g * K: part.offset + (g + 1) * K]
    edges = bin_edges(col.lo, col.hi, K)
    return _quantile(h, a.q, edges, V, rnd, alpha, sd)


def _quantile(h: np.ndarray, q: float, edges: list[float], V: float, rnd: float, alpha: float, sd: float) -> Cell:
    K = len(h)
    pos = np.clip(h, 0.0, None)
    total = float(pos.sum())
    if total <= 0:
        est = math.nan
    else:
        cum = np.cumsum(pos)
        target = q * total
        b = int(np.searchsorted(cum, target, side="left"))
        b = min(b, K - 1)
        before = float(cum[b - 1]) if b > 0 else 0.0
        frac = (target - before) / float(pos[b]) if pos[b] > 0 else 0.0
        est = edges[b] + min(max(frac, 0.0), 1.0) * (edges[b + 1] - edges[b])
    # D̂_j = (1 − q)·P̂_j − q·(N̂ − P̂_j), j = 1..K−1, bounded simultaneously
    P = np.concatenate([[0.0], np.cumsum(h)])  # P̂_0..P̂_K
    N = P[-1]
    z = z_subgaussian(alpha / max(K - 1, 1))
    j_lo, j_hi = K, K
    for j in range(K - 1, 0, -1):
        D = (1 - q) * P[j] - q * (N - P[j])
        var = ((1 - q) ** 2 * j + q * q * (K - j)) * V
        t = z * math.sqrt(max(var, 0.0)) + ((1 - q) * j + q * (K - j)) * rnd
        if D + t >= 0:
            j_lo = j
        if D - t >= 0:
            j_hi = j
    return Cell(est, edges[j_lo - 1], edges[j_hi], sd)


def table(plan: QueryPlan, rows: list[tuple[tuple[str, ...], list[Cell]]]) -> list[dict[str, Any]]:
    """The table as records: the group labels, then per aggregate its estimate, ``_low``, ``_high`` and ``_noise_sd``."""
    out = []
    for key, cells in rows:
        rec: dict[str, Any] = {g.label: k for g, k in zip(plan.groups, key)}
        for a, c in zip(plan.aggregates, cells):
            rec[a.name] = c.estimate
            rec[f"{a.name}_low"] = c.low
            rec[f"{a.name}_high"] = c.high
            rec[f"{a.name}_noise_sd"] = c.noise_sd
        out.append(rec)
    return out
