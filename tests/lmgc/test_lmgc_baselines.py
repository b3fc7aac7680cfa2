"""Multinomial LR baselines: exactness check and the output-perturbation sensitivity."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mpdp.lmgc.baselines import dp_multinomial_lr, fit_multinomial_lr, output_perturbation_sensitivity, softmax_objective_grad
from mpdp.lmgc.params import augment
from mpdp.lmgc.privacy import PrivacyError
from mpdp.math.drbg import Drbg

from .helpers import three_gaussians

R2 = math.sqrt(2.0)


def test_fit_reaches_stationarity_and_refuses_when_it_cannot() -> None:
    X, y = three_gaussians(120, seed=1, spread=0.3)
    A = augment(X)
    m = fit_multinomial_lr(A, y, 1e-2)
    assert np.linalg.norm(softmax_objective_grad(m.W, A, y, 1e-2)) <= 1e-6
    with pytest.raises(PrivacyError):
        fit_multinomial_lr(A, y, 1e-2, gtol=1e-300)


def test_argmin_moves_less_than_stated_sensitivity() -> None:
    X, y = three_gaussians(60, seed=2, spread=0.3)
    reg, gtol = 0.05, 1e-8
    W = fit_multinomial_lr(augment(X), y, reg, gtol=gtol).W
    worst = 0.0
    for x_new, y_new in [(np.array([1.0, 0.0]), 2), (np.array([0.0, -1.0]), 0), (np.array([-0.6, 0.8]), 0)]:
        Xp, yp = X.copy(), y.copy()
        Xp[0], yp[0] = x_new, y_new
        Wp = fit_multinomial_lr(augment(Xp), yp, reg, gtol=gtol).W
        worst = max(worst, float(np.linalg.norm(Wp - W)))
    S = output_perturbation_sensitivity(len(X), reg, R2, gtol)
    assert 0 < worst <= S
    assert worst > 0.05 * S  # the bound is not absurdly loose here


def test_dp_release_checks_norm_bound_and_states_guarantee() -> None:
    X, y = three_gaussians(90, seed=3)
    A = augment(X)
    out = dp_multinomial_lr(A, y, 1e-2, 5.0, R2, Drbg.from_seed(0))
    assert out.guarantee.sensitivity == pytest.approx(output_perturbation_sensitivity(90, 1e-2, R2, 1e-6))
    assert out.guarantee.norm.startswith("Frobenius")
    with pytest.raises(PrivacyError):
        dp_multinomial_lr(3.0 * A, y, 1e-2, 5.0, R2, Drbg.from_seed(0))
