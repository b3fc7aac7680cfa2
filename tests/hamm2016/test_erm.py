"""Weighted ERM of HCB16 (eq. (12)/(17), multiclass ours; votes and α, weighted ERM, Lemma 2)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit, log_expit
from sklearn.linear_model import LogisticRegression

from mpdp.hamm2016.erm import fit_soft, gradient, loss_alpha, merge_duplicates, objective, predict
from mpdp.hamm2016.labels import one_hot
from mpdp.learn import logreg


def _data(n, d, seed, scale=1.0):
    rng = np.random.default_rng(seed)  # public simulation data
    X = rng.normal(size=(n, d))  # public simulation data
    return X / np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None] * scale


def _l(m):  # the logistic loss l(m) = log(1 + e^{−m})
    return -log_expit(m)


def test_l_alpha_reduces_to_hard_loss_and_is_symmetric_at_one_half():
    X = _data(40, 4, 0)
    w = np.array([0.5, -2.0, 1.0, 3.0])
    m = X @ w
    assert loss_alpha(w, X, np.ones(40)) == pytest.approx(np.mean(_l(m)), rel=1e-13)  # α = 1: l(wᵀx)
    assert loss_alpha(w, X, np.zeros(40)) == pytest.approx(np.mean(_l(-m)), rel=1e-13)  # α = 0: l(−wᵀx)
    half = np.full(40, 0.5)
    assert loss_alpha(w, X, half) == pytest.approx(loss_alpha(-w, X, half), rel=1e-13)
    assert loss_alpha(w, X, np.full(40, 0.3)) != pytest.approx(loss_alpha(-w, X, np.full(40, 0.3)), rel=1e-6)
    # (N, 2) and (N,) forms agree; per point, α·l(m) + (1 − α)·l(−m)
    a = np.random.default_rng(1).random(40)  # public simulation data
    assert loss_alpha(w, X, np.stack([1 - a, a], 1)) == pytest.approx(np.mean(a * _l(m) + (1 - a) * _l(-m)), rel=1e-13)
    # multiclass with one-hot α is the usual cross-entropy −log softmax_y
    W = np.random.default_rng(2).normal(size=(3, 4))  # public simulation data
    y = np.arange(40) % 3
    S = X @ W.T
    ce = np.mean(np.log(np.exp(S).sum(axis=1)) - S[np.arange(40), y])
    assert loss_alpha(W, X, one_hot(y, 3)) == pytest.approx(ce, rel=1e-12)


def test_alpha_is_validated():
    X = _data(3, 2, 0)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        fit_soft(X, np.array([0.2, 1.5, 0.0]), 0.1)
    with pytest.raises(ValueError, match="sum to 1"):
        fit_soft(X, np.array([[0.5, 0.6], [0.5, 0.5], [1.0, 0.0]]), 0.1)
    with pytest.raises(ValueError, match="lam"):
        fit_soft(X, np.array([0.2, 0.5, 0.0]), 0.0)


@pytest.mark.parametrize("classes", [2, 4])
def test_gradient_matches_finite_differences(classes):
    X = _data(30, 5, 3)
    rng = np.random.default_rng(4)  # public simulation data
    A = rng.dirichlet(np.ones(classes), size=30)  # public simulation data
    w = rng.normal(size=5) if classes == 2 else rng.normal(size=(classes, 5))  # public simulation data
    g = gradient(w, X, A, 0.3)
    num = np.zeros_like(w)
    for idx in np.ndindex(w.shape):
        e = np.zeros_like(w)
        e[idx] = 1e-6
        num[idx] = (objective(w + e, X, A, 0.3) - objective(w - e, X, A, 0.3)) / 2e-6
    assert np.allclose(g, num, atol=1e-7)


@pytest.mark.parametrize("lam", [1e-1, 1e-3])
def test_binary_weighted_erm_equals_sklearn_on_duplicated_weighted_points(lam):
    N, d = 300, 6
    X = _data(N, d, 5)
    alpha = np.random.default_rng(6).random(N)  # public simulation data
    w = fit_soft(X, alpha, lam)
    assert np.linalg.norm(gradient(w, X, alpha, lam)) < 1e-9
    # duplicate x_j as (x_j, +1) with weight α_j and (x_j, −1) with weight 1 − α_j; C = 1/(λN) for Σ-weights = N
    Xd = np.vstack([X, X])
    yd = np.r_[np.ones(N), -np.ones(N)]
    sw = np.r_[alpha, 1 - alpha]
    sk = LogisticRegression(C=1.0 / (lam * N), fit_intercept=False, tol=1e-12, max_iter=10_000).fit(Xd, yd, sample_weight=sw)
    assert np.allclose(w, sk.coef_.ravel(), rtol=1e-5, atol=1e-6 * np.linalg.norm(w))
    assert predict(w, X).tolist() == (X @ w > 0).astype(int).tolist()


def test_multiclass_weighted_erm_equals_multinomial_sklearn_on_C_copies():
    N, d, C, lam = 200, 5, 4, 1e-2
    X = _data(N, d, 7)
    A = np.random.default_rng(8).dirichlet(np.ones(C) * 0.7, size=N)  # public simulation data
    W = fit_soft(X, A, lam)
    assert W.shape == (C, d)
    assert np.linalg.norm(gradient(W, X, A, lam)) < 1e-9
    Xd = np.vstack([X] * C)
    yd = np.repeat(np.arange(C), N)
    sw = A.T.ravel()  # copy k of x_j carries weight α_jk
    sk = LogisticRegression(C=1.0 / (lam * N), fit_intercept=False, tol=1e-12, max_iter=10_000).fit(Xd, yd, sample_weight=sw)
    assert np.allclose(W, sk.coef_, rtol=1e-5, atol=1e-6 * np.linalg.norm(W))
    assert np.array_equal(predict(W, X), np.argmax(X @ W.T, axis=1))


def test_one_hot_alpha_is_plain_logistic_regression():
    X = _data(150, 4, 9)
    y = (X @ np.array([1.0, -1.0, 0.5, 0.0]) + 0.3 * np.random.default_rng(10).normal(size=150) > 0).astype(int)  # public simulation data
    w = fit_soft(X, one_hot(y, 2), 1e-3)
    assert np.allclose(w, logreg.fit(X, 2.0 * y - 1.0, 1e-3, "half"), rtol=1e-8, atol=1e-10)


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_converges_at_lambda_1e4_on_nearly_separable_data():
    """λ = 10⁻⁴ as in the paper: the margins get large, Newton with backtracking still reaches ‖∇J‖ < 1e-9."""
    rng = np.random.default_rng(11)  # public simulation data
    N, d = 3000, 40
    X = (rng.random((N, d)) < 0.15).astype(float)  # public simulation data (one-hot-like, many duplicate rows)
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    wt = rng.normal(size=d)  # public simulation data
    y = (X @ wt > 0).astype(int)
    y[:5] = 1 - y[:5]  # nearly separable: five flipped labels
    w = fit_soft(X, one_hot(y, 2), 1e-4)
    assert np.linalg.norm(gradient(w, X, one_hot(y, 2), 1e-4)) < 1e-9
    assert np.linalg.norm(w) > 10  # the regime where a careless solver stalls
    assert np.mean(predict(w, X) == y) > 0.95
    yc = np.argmax(X @ rng.normal(size=(5, d)).T, axis=1)  # public simulation data
    W = fit_soft(X[:1500], one_hot(yc[:1500], 5), 1e-4)
    assert np.linalg.norm(gradient(W, X[:1500], one_hot(yc[:1500], 5), 1e-4)) < 1e-9
    assert np.mean(predict(W, X[:1500]) == yc[:1500]) > 0.97


def test_merging_duplicate_rows_is_exact():
    base = _data(40, 3, 12)
    idx = np.random.default_rng(13).integers(0, 40, size=400)  # public simulation data
    X = base[idx]
    A = np.random.default_rng(14).dirichlet(np.ones(3), size=400)  # public simulation data
    Xu, Au, c = merge_duplicates(X, A)
    assert len(Xu) <= 40 and c.sum() == 400
    for alpha in (A[:, :2] / A[:, :2].sum(axis=1, keepdims=True), A):
        w1 = fit_soft(X, alpha, 1e-3, merge=True)
        w2 = fit_soft(X, alpha, 1e-3, merge=False)
        assert np.allclose(w1, w2, rtol=1e-9, atol=1e-11)


def test_non_convergence_raises():
    X = _data(200, 5, 15)
    y = (X[:, 0] > 0).astype(int)
    with pytest.raises(RuntimeError, match="did not converge"):
        fit_soft(X, one_hot(y, 2), 1e-4, max_iter=2)


def test_lemma2_soft_labels_converge_to_Q_and_weighted_erm_to_erm_on_Q():
    """Lemma 2: with M voters drawn from Q(·|x), α(x) → Q(1|x) and the weighted-ERM minimiser approaches the
    minimiser of the expected loss E_{v∼Q}[l(v·wᵀx)] (= ERM on labels drawn from Q, in the limit of many draws)."""
    N, d, lam = 400, 5, 1e-2
    X = _data(N, d, 16)
    Q1 = expit(3.0 * (X @ np.array([1.0, -0.5, 0.8, 0.0, 0.3])))  # synthetic Q(+1|x)
    w_Q = fit_soft(X, Q1, lam)  # argmin (1/N)Σ_j E_{v∼Q(·|x_j)} l(v·wᵀx_j) + (λ/2)‖w‖²
    rng = np.random.default_rng(17)  # public simulation data
    alpha_err, w_err, obj_err = [], [], []
    probe = np.array([0.4, 0.1, -0.3, 0.2, 0.5])
    for M in (1, 10, 100, 1000, 10000):
        votes = rng.random((M, N)) < Q1  # public simulation data: h_i(x_j) = +1 with probability Q(1|x_j)
        alpha = votes.mean(axis=0)
        alpha_err.append(np.mean(np.abs(alpha - Q1)))
        w_err.append(np.linalg.norm(fit_soft(X, alpha, lam) - w_Q))
        obj_err.append(abs(loss_alpha(probe, X, alpha) - loss_alpha(probe, X, Q1)))
    assert all(b < a for a, b in zip(alpha_err, alpha_err[1:])), alpha_err
    assert all(b < a for a, b in zip(w_err, w_err[1:])), w_err
    assert alpha_err[-1] < 0.01 and w_err[-1] < 0.05 * w_err[0]
    assert obj_err[-1] < 0.05 * obj_err[0]
    # M = 1 is ERM on one set of hard labels drawn from Q; it is the farthest from w_Q
    assert w_err[0] == max(w_err)
