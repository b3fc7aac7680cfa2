"""A released model's evaluation as a query plan: the party's vector (confusion counts, score bins, each row once),
its sensitivity, and decoding (accuracy interval coverage and the AUC's noise scale over repeated noise)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mpdp.messages import query_pb2
from mpdp.query import release, role
from mpdp.query.evaluation import Evaluation, batch_vector, binned_auc, evaluation_of, evaluation_plan


def _data(n: int = 400, d: int = 5, seed: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = rng.normal(size=d)
    X = rng.normal(size=(n, d)) * 0.6
    y = np.where(X @ w + rng.normal(scale=0.8, size=n) > 0, 1.0, -1.0)
    return X, y, w


def _ev(w: np.ndarray, protocol: str = "pathak2010", bins: int = 10) -> Evaluation:
    return Evaluation("pk-job", protocol, tuple(float(v) for v in w), bins)


def test_confusion_counts_and_score_bins_match_a_direct_count():
    X, y, w = _data()
    ev = _ev(w)
    z = batch_vector(ev, X, y)
    Xu = X * np.minimum(1.0, 1.0 / np.linalg.norm(X, axis=1))[:, None]
    t = Xu @ w
    pred = t > 0
    pos = y > 0
    assert z[:4].tolist() == [np.sum(pos & pred), np.sum(pos & ~pred), np.sum(~pos & pred), np.sum(~pos & ~pred)]
    s = 1 / (1 + np.exp(-t))
    b = np.minimum((s * 10).astype(int), 9)
    assert z[4:14].tolist() == np.bincount(b[pos], minlength=10).tolist()
    assert z[14:24].tolist() == np.bincount(b[~pos], minlength=10).tolist()


def test_every_row_counts_once_in_each_part():
    X, y, w = _data(n=257)
    z = batch_vector(_ev(w, bins=7), X, y)
    assert z[:4].sum() == 257 and z[4:].sum() == 257
    assert np.all(z >= 0) and np.all(z == np.round(z))


def test_extreme_scores_fall_in_the_end_bins_and_the_tie_rule_is_the_protocols():
    w = np.array([1e6, 0.0])
    X = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]])  # scores σ(1e6) = 1 (last bin, closed), 0, and a tie t = 0
    y = np.array([1.0, -1.0, 1.0])
    zp = batch_vector(_ev(w, "pathak2010", bins=4), X, y)
    zd = batch_vector(_ev(w, "dpgd", bins=4), X, y)
    assert zp[:4].tolist() == [1, 1, 0, 1]  # the tie predicts negative (PRR10: +1 only when wᵀx > 0)
    assert zd[:4].tolist() == [2, 0, 0, 1]  # dp-gd: +1 when wᵀx ≥ 0
    assert zp[4:8].tolist() == [0, 0, 1, 1] and zp[8:12].tolist() == [1, 0, 0, 0]  # σ(0) = 0.5 opens bin 2 of 4


def test_replacing_one_row_moves_the_vector_by_at_most_the_plans_sensitivity():
    X, y, w = _data(n=60, seed=3)
    ev = _ev(w)
    plan = evaluation_plan(ev, "bc")
    assert plan.sensitivity == pytest.approx(2.0) and plan.dimension == 4 + 2 * ev.bins
    rng = np.random.default_rng(4)
    base = batch_vector(ev, X, y)
    worst = 0.0
    for _ in range(200):
        i = int(rng.integers(len(y)))
        X2, y2 = X.copy(), y.copy()
        X2[i] = rng.normal(size=X.shape[1]) * 3
        y2[i] = -y2[i] if rng.random() < 0.5 else y2[i]
        worst = max(worst, float(np.linalg.norm(batch_vector(ev, X2, y2) - base)))
    assert 0 < worst <= plan.sensitivity + 1e-12


def test_noise_free_decode_is_the_exact_accuracy_and_the_binned_auc():
    sk = pytest.importorskip("sklearn.metrics")
    X, y, w = _data(n=500, seed=5)
    ev = _ev(w, bins=20)
    plan = evaluation_plan(ev, "bc")
    (key, cells), = release.decode(plan, batch_vector(ev, X, y), 0.0, 0, 16)
    acc, auc = cells[0], cells[1]
    Xu = X * np.minimum(1.0, 1.0 / np.linalg.norm(X, axis=1))[:, None]
    t = Xu @ w
    assert acc.estimate == pytest.approx(np.mean(np.where(t > 0, 1.0, -1.0) == y))
    assert acc.low == pytest.approx(acc.estimate) and acc.high == pytest.approx(acc.estimate)
    b = np.minimum(np.floor(1 / (1 + np.exp(-t)) * 20), 19)
    assert auc.estimate == pytest.approx(sk.roc_auc_score(y, b))


def test_accuracy_interval_covers_over_repeated_noise_and_auc_sd_is_the_observed_spread():
    """400 noisy releases at a noise variance where intervals are informative: the accuracy interval holds the true
    accuracy in at least 95 % of them, and the AUC's stated sd is not below the estimates' spread
    (measured: spread/sd ≈ 0.69 here)."""
    X, y, w = _data(n=600, seed=7)
    ev = _ev(w, bins=10)
    plan = evaluation_plan(ev, "bc")
    z = batch_vector(ev, X, y)
    true_acc = (z[0] + z[3]) / z[:4].sum()
    true_auc = binned_auc(z[4:14], z[14:24])
    V = 25.0
    rng = np.random.default_rng(11)
    covered, widths, aucs, sds = 0, [], [], []
    for _ in range(400):
        noisy = z + rng.normal(scale=math.sqrt(V), size=z.size)
        (_, cells), = release.decode(plan, noisy, V, 3, 16)
        a = cells[0]
        covered += a.low <= true_acc <= a.high
        widths.append(a.high - a.low)
        aucs.append(cells[1].estimate)
        sds.append(cells[1].noise_sd)
    assert covered / 400 >= 0.95
    assert np.median(widths) < 0.15  # informative, not [0, 1]
    assert abs(np.mean(aucs) - true_auc) < np.mean(sds)  # clipping negative bins to 0 biases it by less than one sd
    # the delta method ignores that empty bins' noise is clipped at 0, which shrinks the spread: its sd is an upper scale
    assert 0.6 < np.std(aucs) / np.mean(sds) <= 1.1


def test_an_evaluation_spec_is_a_query_plan_variant_and_malformed_models_are_refused():
    spec = query_pb2.QueryJobSpec(sql="EVALUATE pk-1", epsilon=1.0, delta=1e-6,
                                  evaluation=query_pb2.EvaluationSpec(model_job="pk-1", protocol="dpgd", weights=[0.5, -1.0], score_bins=8))
    plan = role.plan_of(spec, "bc", "")
    assert plan.evaluation is not None and plan.dimension == 4 + 16 and [a.name for a in plan.aggregates][:2] == ["accuracy", "auc"]
    for bad in ({"weights": [float("nan")]}, {"weights": []}, {"protocol": "lmgc"}, {"score_bins": 1}, {"model_job": ""}):
        s = query_pb2.EvaluationSpec(model_job="pk-1", protocol="dpgd", weights=[0.5], score_bins=8)
        for k, v in bad.items():
            if k == "weights":
                del s.weights[:]
                s.weights.extend(v)  # type: ignore[arg-type]
            else:
                setattr(s, k, v)
        with pytest.raises(ValueError):
            evaluation_of(s)
