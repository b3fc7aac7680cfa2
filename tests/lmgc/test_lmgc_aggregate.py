"""Parameter averaging across parties: sensitivity and refusal (mpdp.lmgc.aggregate)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from mpdp.lmgc.aggregate import SensitivityError, aggregate_average, averaging_sensitivity
from mpdp.lmgc.objective import Problem, gradient_bound
from mpdp.lmgc.params import augment, theta_to_vec
from mpdp.lmgc.solver import solve_psd, solve_unconstrained
from mpdp.math.drbg import Drbg

from .helpers import three_gaussians

R2 = math.sqrt(2.0)


def test_sensitivity_formula_and_refusal_without_ridge() -> None:
    S = averaging_sensitivity([50, 80, 120], ridge=0.1, R=R2, n_classes=3, gradient_tol=1e-8)
    assert S == pytest.approx(2 * gradient_bound(R2, 3) / (3 * 50 * 0.1) + 2 * 1e-8 / (3 * 0.1), rel=1e-12)  # plus the solver slack
    with pytest.raises(SensitivityError, match="no finite sensitivity"):
        averaging_sensitivity([50, 80], ridge=0.0, R=R2, n_classes=3, gradient_tol=1e-8)


@pytest.mark.parametrize("constrained", [False, True])
def test_local_minimisers_move_less_than_the_bound(constrained: bool) -> None:
    X, y = three_gaussians(40, seed=3, spread=0.4)
    ridge, lam = 0.2, 0.01
    base = Problem(augment(X), y, 3, 0.5, lam, ridge)
    solve = (lambda p: solve_psd(p, tol=1e-9, max_iter=20000)) if constrained else (lambda p: solve_unconstrained(p, tol=1e-11))
    theta = solve(base).theta
    bound = 2 * gradient_bound(R2, 3) / (len(X) * ridge)
    gen = np.random.default_rng(0)
    worst = 0.0
    for x_new, y_new in [(np.array([1.0, 0.0]), 2), (np.array([-0.7, 0.7]), 0), (gen.uniform(-0.7, 0.7, 2), 1)]:
        Xp, yp = X.copy(), y.copy()
        Xp[0], yp[0] = x_new, y_new
        other = solve(Problem(augment(Xp), yp, 3, 0.5, lam, ridge)).theta
        worst = max(worst, float(np.linalg.norm(other - theta)))
    assert 0 < worst <= bound


def test_aggregate_release_noise_and_guarantee() -> None:
    gen = np.random.default_rng(4)
    thetas = []
    for _ in range(3):
        A = gen.normal(size=(3, 3, 3))
        thetas.append(A + A.transpose(0, 2, 1))
    rng = Drbg.from_seed("agg")
    sizes = [40, 60, 100]
    S = averaging_sensitivity(sizes, 0.5, R2, 3, gradient_tol=1e-9)
    noise_norms = []
    for _ in range(400):
        rel = aggregate_average(thetas, sizes, ridge=0.5, R=R2, epsilon=2.0, rng=rng, gradient_tol=1e-9)
        assert np.allclose(rel.theta, rel.theta.transpose(0, 2, 1))
        noise_norms.append(np.linalg.norm(theta_to_vec(rel.theta - np.mean(thetas, axis=0))))
    assert rel.guarantee.sensitivity == pytest.approx(S)
    assert rel.guarantee.epsilon == 2.0
    assert stats.kstest(noise_norms, stats.gamma(a=18, scale=S / 2.0).cdf).pvalue > 1e-3
    with pytest.raises(SensitivityError):
        aggregate_average(thetas, sizes, ridge=0.0, R=R2, epsilon=1.0, rng=rng, gradient_tol=1e-9)
