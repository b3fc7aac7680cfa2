"""Evaluating a released classifier on the parties' own rows: a query plan whose vector is a confusion matrix and
per-class score histograms, released by the same validated DCA sum as any query (docs/protocols/query.md,
"Evaluating a released model").

The model is a released binary linear classifier ŵ (Pathak et al. 2010's averaged model, or a binary dp-gd model):
public once released, it travels in the job's :class:`~mpdp.messages.query_pb2.EvaluationSpec`. A row x is put on
the unit ball as the parties trained on it (x' = x·min(1, 1/‖x‖)), scored s = σ(ŵᵀx') and predicted positive when
ŵᵀx' > 0 (pathak2010, ties negative: PRR10 Sec. 3.3) or ≥ 0 (dpgd).

The party's vector (:func:`batch_vector`), classes in the label's order (0 = positive, 1 = negative):

* ``confusion`` (4 values): rows per (true class, predicted class): TP, FN, FP, TN;
* ``score`` (2·K values): rows per (true class, score bin), K equal-width bins of [0, 1] (the last one closed).

Every row adds 1 to exactly one coordinate of each part, so replacing one row moves at most two coordinates of each
part by 1: Δ_confusion = Δ_score = √2 and Δ₂ = 2 for the whole vector (adding or removing a row: √2 ≤ 2). The
privacy of the release holds whatever ŵ is (Δ₂ does not depend on it), so a party need only check the model is
well-formed: finite weights of its own feature count.

Decoding (:func:`decode`): the four confusion counts with the query's count interval; accuracy = D/(D + O) with
D = TP + TN and O = FN + FP, whose noises are independent (disjoint coordinates), each bounded at level α/2
(Bonferroni) and combined by interval arithmetic (accuracy increases with D and decreases with O); the AUC of the
binned score (ties within a bin count one half) from the two noisy histograms, negative bins taken as 0 — a point
estimate whose ``noise_sd`` is the delta method's and whose low/high is that normal approximation (stated as such,
not a guaranteed interval).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from mpdp.query.plan import Aggregate, Part, QueryPlan

if TYPE_CHECKING:
    from mpdp.messages.query_pb2 import EvaluationSpec
    from mpdp.query.cell import Cell

PROTOCOLS = ("pathak2010", "dpgd")
DEFAULT_SCORE_BINS = 20
MAX_SCORE_BINS = 100
MAX_WEIGHTS = 1 << 16  # features of an evaluated model
MAX_WEIGHT = 1e12  # |ŵ_i|: a released model's weight beyond this is refused as malformed
AGGREGATES = ("accuracy", "auc", "true_positive", "false_negative", "false_positive", "true_negative")
INTERVAL_METHOD = ("counts: the query's sub-Gaussian count interval; accuracy: D = TP + TN and O = FN + FP bounded at α/2 each (Bonferroni), "
                   "then interval arithmetic on D/(D + O); auc: point estimate of the binned score's AUC with a delta-method noise sd "
                   "(its low/high is ±1.96 sd, an approximation, not a guarantee)")


@dataclass(frozen=True)
class Evaluation:
    """The released model an evaluation plan scores with: its job, protocol (tie rule), weights and score bins."""

    model_job: str
    protocol: str
    weights: tuple[float, ...]
    bins: int

    @property
    def dimension(self) -> int:
        return len(self.weights)


def evaluation_of(spec: "EvaluationSpec") -> Evaluation:
    """The evaluation a spec asks for (ValueError when the model is not a well-formed released binary linear model)."""
    if spec.protocol not in PROTOCOLS:
        raise ValueError(f"an evaluation scores a {' or '.join(PROTOCOLS)} model, not {spec.protocol[:32]!r}")
    w = tuple(float(v) for v in spec.weights)
    if not 1 <= len(w) <= MAX_WEIGHTS:
        raise ValueError(f"the model must have 1..{MAX_WEIGHTS} weights, got {len(w)}")
    if not all(math.isfinite(v) and abs(v) <= MAX_WEIGHT for v in w):
        raise ValueError(f"the model's weights must be finite and at most {MAX_WEIGHT:g} in magnitude")
    K = spec.score_bins or DEFAULT_SCORE_BINS
    if not 2 <= K <= MAX_SCORE_BINS:
        raise ValueError(f"score_bins must be in 2..{MAX_SCORE_BINS}")
    if not spec.model_job:
        raise ValueError("the evaluation names no model job")
    return Evaluation(spec.model_job, spec.protocol, w, K)


def classifier_weights(model: Any) -> tuple[str, list[float]]:
    """The protocol and weights ŵ of a released binary linear classifier: a Pathak ``PublishedModel`` (ŵ = Σ shares / K,
    :func:`mpdp.pathak2010.tester.rebuild`) or a binary dp-gd ``LearnerModel``. ValueError for any other release.
    The operator (to submit an evaluation) and the curator (to admit it) read a model through this one function."""
    from mpdp.messages import learner_pb2, pathak2010_pb2

    if isinstance(model, pathak2010_pb2.PublishedModel):
        from mpdp.pathak2010 import tester

        return "pathak2010", [float(v) for v in tester.rebuild(model)]
    if isinstance(model, learner_pb2.LearnerModel) and model.WhichOneof("model") == "dpgd":
        from mpdp.dpgd.role import DpgdRun

        run = DpgdRun.of(model)
        if run.plan.task.kind != "binary":
            raise ValueError(f"job {model.job_id} released a {run.plan.task.kind} dp-gd model; an evaluation scores binary classifiers")
        return "dpgd", [float(v) for v in run.model[:, 0]]
    raise ValueError("an evaluation scores a released pathak2010 or binary dp-gd classifier")


def evaluation_plan(ev: Evaluation, dataset: str) -> QueryPlan:
    """The public plan: a confusion part (4) and a score part (2·K), each Δ₂ = √2 (module docstring)."""
    r2 = math.sqrt(2.0)
    parts = (Part("confusion", "", 0, 4, r2), Part("score", "", 4, 2 * ev.bins, r2))
    aggs = tuple(Aggregate("count" if n not in ("accuracy", "auc") else n, "", 0.0, n) for n in AGGREGATES)
    return QueryPlan(f"EVALUATE {ev.model_job} ON {dataset}", dataset, aggs, (), ("true",), {}, parts, evaluation=ev)


def batch_vector(ev: Evaluation, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """One batch's vector (encoded rows ``X``, labels ±1 ``y``): 4 confusion counts, then 2·K score-bin counts."""
    X = np.atleast_2d(np.asarray(X, dtype=np.float64))
    if X.shape[1] != ev.dimension:
        raise ValueError(f"the rows have {X.shape[1]} features, the model {ev.dimension}")
    norms = np.linalg.norm(X, axis=1)
    Xu = X * np.minimum(1.0, 1.0 / np.maximum(norms, 1e-300))[:, None]  # the unit ball, as the parties trained
    t = Xu @ np.asarray(ev.weights)
    pred_pos = t > 0 if ev.protocol == "pathak2010" else t >= 0
    true_cls = np.where(np.asarray(y) > 0, 0, 1)
    pred_cls = np.where(pred_pos, 0, 1)
    score = 0.5 * (1.0 + np.tanh(0.5 * t))  # σ(t) without overflow
    b = np.minimum(np.floor(score * ev.bins).astype(np.int64), ev.bins - 1)
    z = np.zeros(4 + 2 * ev.bins)
    z[:4] = np.bincount(true_cls * 2 + pred_cls, minlength=4)
    z[4:] = np.bincount(true_cls * ev.bins + b, minlength=2 * ev.bins)
    return z


def _kernel(ev: Evaluation, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, int]:
    return batch_vector(ev, X, y), len(y)


def dataset_vector(src, name: str, plan: QueryPlan, records_limit: int) -> np.ndarray:
    """The party's vector over its configured dataset's encoded batches (bounded memory; on Dask if it names a
    cluster); DoesNotFit when its feature count is not the model's or it holds more rows than ``records_limit``."""
    from mpdp.data.dataset import DoesNotFit, open_rows, require_rows
    from mpdp.data.engine import reducer

    ev = plan.evaluation
    assert ev is not None
    rows = open_rows(src, name=name).pm1()
    if rows.dimension != ev.dimension:
        raise DoesNotFit("the dataset's feature count is not the model's", f"{rows.dimension} features, the model {ev.dimension}")
    z, n = reducer(src, rows)(partial(_kernel, ev))
    require_rows(int(n), records_limit, "records_per_party")
    return np.asarray(z, dtype=np.float64)


def binned_auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """AUC of a binned score from the per-class bin counts: Σ_k P_k (Σ_{j<k} N_j + N_k/2) / (P·N) (NaN if a class is empty)."""
    P, N = float(pos.sum()), float(neg.sum())
    if P <= 0 or N <= 0:
        return math.nan
    below = np.concatenate([[0.0], np.cumsum(neg)[:-1]])
    return float(np.dot(pos, below + 0.5 * neg) / (P * N))


def _auc_sd(pos: np.ndarray, neg: np.ndarray, auc: float, V: float) -> float:
    """The delta method's sd of :func:`binned_auc` under independent noise of variance V per bin."""
    P, N = float(pos.sum()), float(neg.sum())
    below = np.concatenate([[0.0], np.cumsum(neg)[:-1]])
    above = np.concatenate([np.cumsum(pos[::-1])[::-1][1:], [0.0]])  # Σ_{k>j} P_k
    g_pos = (below + 0.5 * neg - auc * N) / (P * N)
    g_neg = (above + 0.5 * pos - auc * P) / (P * N)
    return math.sqrt(V * float(np.sum(g_pos ** 2) + np.sum(g_neg ** 2)))


def decode(plan: QueryPlan, y: np.ndarray, V: float, rnd: float, alpha: float) -> list[tuple[tuple[str, ...], list["Cell"]]]:
    """The one result row: accuracy, auc, then TP, FN, FP, TN (each a :class:`mpdp.query.release.Cell`)."""
    from mpdp.query.cell import Cell, z_subgaussian

    ev = plan.evaluation
    assert ev is not None
    sd = math.sqrt(max(V, 0.0))
    tp, fn, fp, tn = (float(v) for v in y[:4])
    cells = []
    for c in (tp, fn, fp, tn):
        h = z_subgaussian(alpha) * sd + rnd
        cells.append(Cell(c, c - h, c + h, sd))
    # accuracy: D and O each a sum of two coordinates (variance proxy 2V, rounding 2·rnd), at level α/2 each
    D, Off = tp + tn, fn + fp
    h2 = z_subgaussian(alpha / 2) * math.sqrt(2.0 * max(V, 0.0)) + 2 * rnd
    d_lo, d_hi, o_lo, o_hi = max(D - h2, 0.0), max(D + h2, 0.0), max(Off - h2, 0.0), max(Off + h2, 0.0)
    lo = d_lo / (d_lo + o_hi) if d_lo + o_hi > 0 else 0.0
    hi = d_hi / (d_hi + o_lo) if d_hi + o_lo > 0 else 1.0
    Dc, Oc = max(D, 0.0), max(Off, 0.0)
    acc = Dc / (Dc + Oc) if Dc + Oc > 0 else math.nan
    acc_sd = math.sqrt(2.0 * V * (Oc ** 2 + Dc ** 2)) / (Dc + Oc) ** 2 if Dc + Oc > 0 else math.nan  # delta method, for scale only
    K = ev.bins
    pos, neg = np.clip(y[4:4 + K], 0.0, None), np.clip(y[4 + K:4 + 2 * K], 0.0, None)
    auc = binned_auc(pos, neg)
    if math.isnan(auc):
        auc_cell = Cell(math.nan, 0.0, 1.0, math.nan)
    else:
        a_sd = _auc_sd(pos, neg, auc, V)
        auc_cell = Cell(auc, max(0.0, auc - 1.96 * a_sd), min(1.0, auc + 1.96 * a_sd), a_sd)
    return [((), [Cell(acc, lo, hi, acc_sd), auc_cell, *cells])]


def pooled(ev: Evaluation, batches: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """The exact (noise-free) vector over several parties' rows: what the DCA's sum estimates."""
    return np.sum([batch_vector(ev, X, y) for X, y in batches], axis=0)
