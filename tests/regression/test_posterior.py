"""Posterior, PD fix and predictions (Bayesian linear regression, λ = λ0 = 1)."""

from __future__ import annotations

import numpy as np
import pytest

from mpdp.regression import make_pd, party_statistics, posterior, suff_stats
from mpdp.regression.baselines import nonprivate


def test_zero_noise_posterior_is_the_ridge_solution():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 6))
    y = X @ rng.normal(size=6) + rng.normal(size=300)
    ridge = np.linalg.solve(X.T @ X + np.eye(6), X.T @ y)
    np.testing.assert_allclose(posterior(nonprivate(X, y)).mean, ridge, rtol=1e-10)
    # the same through the released-vector path, with bounds that never bind
    big = [1e3] * 7
    post = posterior(suff_stats(party_statistics(X, y, "main", big), 6))
    np.testing.assert_allclose(post.mean, ridge, rtol=1e-10)
    np.testing.assert_allclose(post.precision, X.T @ X + np.eye(6), rtol=1e-12)


def test_pd_fix_leaves_pd_input_unchanged():
    rng = np.random.default_rng(1)
    M = rng.normal(size=(5, 5))
    A = M @ M.T + 0.1 * np.eye(5)
    A = 0.5 * (A + A.T)
    assert np.array_equal(make_pd(A), A)


@pytest.mark.parametrize("seed", range(5))
def test_pd_fix_returns_symmetric_psd_with_absolute_eigenvalues(seed):
    rng = np.random.default_rng(seed)
    M = rng.normal(size=(7, 7)) * 10
    A = M + M.T
    w = np.linalg.eigvalsh(A)
    assert w.min() < 0
    F = make_pd(A)
    assert np.array_equal(F, F.T)
    np.testing.assert_allclose(np.sort(np.linalg.eigvalsh(F)), np.sort(np.abs(w)), rtol=1e-9, atol=1e-9)
    # a non-symmetric input (noise added to all d² entries) is symmetrised first
    F2 = make_pd(A + 1e-3 * rng.normal(size=(7, 7)))
    assert np.array_equal(F2, F2.T) and np.linalg.eigvalsh(F2).min() >= -1e-9


def test_predictive_variance_is_positive_and_matches_formula():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(40, 3))
    A = rng.normal(size=(3, 3)) * 50
    A = A + A.T  # very indefinite: the PD fix is what keeps Λ invertible
    from mpdp.regression.statistics import SuffStats

    post = posterior(SuffStats(A, rng.normal(size=3)))
    Xs = rng.normal(size=(25, 3)) * 5
    pred = post.predict(Xs)
    assert np.all(pred.variance > 0) and np.all(pred.variance >= 1.0)
    cov = np.linalg.inv(post.precision)
    np.testing.assert_allclose(pred.variance, 1.0 + np.einsum("ij,jk,ik->i", Xs, cov, Xs), rtol=1e-10)
    np.testing.assert_allclose(pred.mean, Xs @ post.mean)
    assert post.mae(Xs, pred.mean) == 0.0
