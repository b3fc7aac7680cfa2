"""Local classifiers of HCB16 parties (the paper's Sec. 3.1 and 6) and the exact batched L2-LR."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.tree import DecisionTreeClassifier

from mpdp.hamm2016.erm import fit_soft, gradient
from mpdp.hamm2016.labels import one_hot
from mpdp.hamm2016.local import CLASSIFIERS, ExactLogisticRegression, batched_logreg, fit_local
from mpdp.learn import logreg


def _parties(M, n, d, seed):
    """KDD-like tiny parties: sparse 0/1 rows (duplicates common), scaled into the unit ball, noisy linear labels."""
    rng = np.random.default_rng(seed)  # public simulation data
    X = (rng.random((M, n, d)) < 0.1).astype(float)  # public simulation data
    X[:, 1::4] = X[:, ::4][:, : X[:, 1::4].shape[1]]  # duplicate rows inside every party
    X /= np.maximum(1.0, np.linalg.norm(X, axis=2))[:, :, None]
    wt = rng.normal(size=d)  # public simulation data
    y = np.where(X @ wt + 0.3 * rng.normal(size=(M, n)) > 0, 1.0, -1.0)  # public simulation data
    return X, y, wt


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_batched_logreg_equals_per_party_newton():
    M, n, d, lam = 300, 22, 123, 1e-4
    X, y, wt = _parties(M, n, d, 0)
    y[0] = 1.0  # a party holding one class only
    y[1] = -1.0
    y[2] = np.where(X[2] @ wt > 0, 1.0, -1.0)  # a separable party: ‖w‖ grows, bounded by λ
    X[3, :5] = 0.0  # all-zero rows
    W = batched_logreg(X, y, lam)
    assert W.shape == (M, d)
    for i in (0, 1, 2, 3, 4, 150, M - 1):
        w = logreg.fit(X[i], y[i], lam, "half")
        assert np.linalg.norm(W[i] - w) <= 1e-6 * np.linalg.norm(w), i
    # every party is at its stationary point and inside the ball ‖w‖ ≤ 1/λ
    for i in range(0, M, 37):
        assert np.linalg.norm(logreg.gradient(W[i], X[i], y[i], lam)) < 1e-9
    assert np.all(np.linalg.norm(W, axis=1) <= 1 / lam)
    assert np.linalg.norm(W[2]) > 10


def test_batched_logreg_with_more_rows_than_features_and_large_lambda():
    X, y, _ = _parties(20, 30, 8, 1)
    for lam in (1e-3, 1.0):
        W = batched_logreg(X, y, lam)
        for i in (0, 7, 19):
            w = logreg.fit(X[i], y[i], lam, "half")
            assert np.allclose(W[i], w, rtol=1e-7, atol=1e-12)


def test_batched_logreg_input_checks():
    X, y, _ = _parties(3, 5, 4, 2)
    with pytest.raises(ValueError, match="-1 or \\+1"):
        batched_logreg(X, (y > 0).astype(float), 1e-4)
    with pytest.raises(ValueError, match="shape|must be"):
        batched_logreg(X[0], y[0], 1e-4)
    with pytest.raises(ValueError, match="lam"):
        batched_logreg(X, y, 0.0)
    with pytest.raises(RuntimeError, match="did not converge"):
        batched_logreg(X, y, 1e-4, max_iter=1)


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_fit_local_logreg_is_the_batched_model_and_sklearns_minimiser():
    M, n, d, lam = 6, 22, 20, 1e-2
    X, y, _ = _parties(M, n, d, 3)
    y[0] = 1.0  # a single-class party: still the exact LR minimiser, as in batched_logreg
    W = batched_logreg(X, y, lam)
    for i in range(M):
        yi = (y[i] > 0).astype(int)
        h = fit_local("logreg", X[i], yi, 2, lam)
        assert np.allclose(h.estimator.coef_, W[i], rtol=1e-7, atol=1e-12)
        assert np.array_equal(h.predict(X[i]), (X[i] @ W[i] > 0).astype(int))
        if i == 0:
            nonzero = np.linalg.norm(X[i], axis=1) > 0  # x = 0 has wᵀx = 0: class 0 by the tie rule
            assert np.all(h.predict(X[i])[nonzero] == 1)
            continue
        sk = fit_local("sklearn_logreg", X[i], yi, 2, lam)  # LogisticRegression(C = 1/(λn), no intercept)
        assert sk.estimator.C == pytest.approx(1 / (lam * n))
        assert np.allclose(sk.estimator.coef_.ravel(), W[i], rtol=1e-4, atol=1e-6 * np.linalg.norm(W[i]))
    assert fit_local("sklearn_logreg", X[0], np.ones(n, dtype=int), 2, lam).estimator is None  # sklearn: constant


def test_fit_local_multiclass_logreg_matches_multinomial_sklearn():
    rng = np.random.default_rng(4)  # public simulation data
    n, d, C, lam = 60, 5, 4, 1e-2
    X = rng.normal(size=(n, d))  # public simulation data
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    y = np.argmax(X @ rng.normal(size=(C, d)).T + 0.5 * rng.normal(size=(n, C)), axis=1)  # public simulation data
    h = fit_local("logreg", X, y, C, lam)
    sk = LogisticRegression(C=1 / (lam * n), fit_intercept=False, tol=1e-12, max_iter=10_000).fit(X, y)
    assert np.allclose(h.estimator.coef_, sk.coef_, rtol=1e-5, atol=1e-6 * np.linalg.norm(sk.coef_))
    assert np.array_equal(h.predict(X), sk.predict(X))
    # classes missing from the party are still modelled: W keeps C rows (so models can be averaged), and the
    # absent classes' rows point away from the party's data
    sub = y < 2
    two = fit_local("logreg", X[sub], y[sub], C, lam)
    W = two.estimator.coef_
    assert W.shape == (C, d)
    assert np.allclose(W, fit_soft(X[sub], one_hot(y[sub], C), lam))
    assert np.linalg.norm(gradient(W, X[sub], one_hot(y[sub], C), lam)) < 1e-9
    # stationarity for an absent class k: λW_k = −(1/n)·Σ_j p_jk x_j, a negative combination of the party's rows
    S = X[sub] @ W.T
    P = np.exp(S - S.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    for k in (2, 3):
        assert np.allclose(lam * W[k], -(P[:, k] @ X[sub]) / sub.sum(), atol=1e-10)
    assert np.mean(np.isin(two.predict(X[sub]), (0, 1))) > 0.9


@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
def test_every_local_classifier_predicts_class_indices_and_learns(name):
    rng = np.random.default_rng(5)  # public simulation data
    n, d, C = 300, 6, 3
    centers = 0.5 * np.eye(d)[:C]
    y = rng.integers(0, C, size=n)  # public simulation data
    X = centers[y] + 0.12 * rng.normal(size=(n, d))  # public simulation data
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    h = fit_local(name, X[:200], y[:200], C, 1e-3)
    p = h.predict(X[200:])
    assert p.dtype == np.int64 and set(p.tolist()) <= set(range(C))
    assert np.mean(p == y[200:]) > 0.8
    # a party holding one class only: a constant predictor (logreg: the exact LR, predicting that class here)
    one = fit_local(name, X[y == 2][:10], y[y == 2][:10], C, 1e-3)
    if name == "logreg":
        assert one.estimator is not None and np.mean(one.predict(X[y == 2]) == 2) > 0.9
    else:
        assert one.estimator is None and one.predict(X).tolist() == [2] * n


def test_fit_local_accepts_an_estimator_and_validates_inputs():
    rng = np.random.default_rng(6)  # public simulation data
    X = rng.normal(size=(40, 3)) / 3  # public simulation data
    y = (X[:, 0] > 0).astype(int)
    h = fit_local(DecisionTreeClassifier(max_depth=2, random_state=0), X, y, 2, 1e-4)
    assert h.name == "DecisionTreeClassifier" and np.mean(h.predict(X) == y) > 0.9
    e = fit_local(ExactLogisticRegression(lam=1e-2), X, y, 2, 1e-4)
    assert np.allclose(e.estimator.coef_, logreg.fit(X, 2.0 * y - 1, 1e-2, "half"))  # the estimator's own λ
    with pytest.raises(ValueError, match="unknown local classifier"):
        fit_local("forest", X, y, 2, 1e-4)
    with pytest.raises(ValueError, match="0..1"):
        fit_local("logreg", X, y + 1, 2, 1e-4)
    with pytest.raises(ValueError, match="classes"):
        fit_local("logreg", X, y, 1, 1e-4)
    with pytest.raises(ValueError, match="lam"):
        fit_local("logreg", X, y, 2, 0.0)
