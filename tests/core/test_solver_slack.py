"""The solver's tolerance in every sensitivity that rests on a minimiser (mpdp.dp.mechanisms.solver_slack).

A solver stopping at ‖∇J‖ < tol on a μ-strongly convex J is within tol/μ of the exact minimiser, so two
neighbouring computed minimisers are within Δ + 2·tol/μ. The Pathak noise in every mode is calibrated to that,
and the privacy loss recomputed here in exact rational arithmetic from the noise scale the code draws with stays
at or below the stated ε — also at n₍₁₎ = 2³¹, where the term is a fifth of the sensitivity (1 + n·tol = 1.21 with
tol = 10⁻¹⁰) and the former calibration, which left it out, lost ε·1.21.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from mpdp.dp.mechanisms import gaussian_delta, solver_slack
from mpdp.dp.pathak_noise import SOLVER_TOL, PathakCalibration
from mpdp.hamm2016.mechanism import EnsembleParams, SOLVER_TOL as HCB_TOL
from mpdp.learn import logreg
from mpdp.lmgc.baselines import output_perturbation_sensitivity
from mpdp.pathak2010.party import FIT_TOL

EPS, LAM, K, D = 1.0, 1e-3, 5, 123
SIZES = [1, 1000, 10**8, 2**31]


def test_the_slack_is_two_tolerances_over_the_modulus():
    assert solver_slack(1e-10, 1e-3) == 2e-7
    assert solver_slack(0.0, 2.0) == 0.0
    for bad in ((-1e-9, 1.0), (1e-9, 0.0), (math.inf, 1.0), (1e-9, math.nan)):
        with pytest.raises(ValueError):
            solver_slack(*bad)


def test_every_minimiser_sensitivity_uses_it():
    assert FIT_TOL == SOLVER_TOL == logreg.DEFAULT_TOL  # the noise allows for the tolerance the parties fit to
    for conv, c in (("half", LAM), ("full", 2 * LAM)):
        assert logreg.fitted_l2_sensitivity(1000, LAM, conv) == logreg.l2_sensitivity(1000, LAM, conv) + solver_slack(SOLVER_TOL, c)
    p = EnsembleParams("soft", 0.01, 1.0, 2, 100, 7)
    assert p.noise_scale == (p.sensitivity + solver_slack(HCB_TOL, 0.01)) / 1.0
    assert output_perturbation_sensitivity(50, 0.1, 1.0, 1e-6) == 2 * math.sqrt(2) / (50 * 0.1) + solver_slack(1e-6, 0.1)


@pytest.mark.parametrize("tol", [1e-3, 1e-6])
def test_a_computed_minimiser_is_within_tol_over_c_of_the_exact_one(tol):
    g = np.random.default_rng(7)
    X = logreg.clip_rows(g.normal(size=(300, 5)) / 2)
    y = np.where(X @ np.arange(1.0, 6.0) + 0.5 * g.normal(size=300) > 0, 1.0, -1.0)
    for conv in ("half", "full"):
        c = logreg.reg_coefficient(0.05, conv)
        exact = logreg.fit(X, y, 0.05, conv, tol=1e-14)
        # a few Newton steps from w = 0: the first iterate whose gradient is below tol is what a solver stopping there returns
        w = np.zeros(5)
        while np.linalg.norm(logreg.gradient(w, X, y, c)) >= tol:
            p = 1 / (1 + np.exp(-y * (X @ w)))
            H = (X.T * (p * (1 - p))) @ X / len(y) + c * np.eye(5)
            w = w - 0.5 * np.linalg.solve(H, logreg.gradient(w, X, y, c))  # damped: stops short of the minimiser
        assert 0 < np.linalg.norm(w - exact) <= tol / c


def _corrected_loss(cal: PathakCalibration, n: int, beta: float) -> Fraction:
    """Spherical Laplace: the privacy loss is ‖μ − μ′‖₂/β, and ‖μ − μ′‖₂ ≤ (2/(n·λ) + 2·tol/λ)/K for computed models."""
    lam, tol = Fraction(cal.lam), Fraction(SOLVER_TOL)
    sensitivity = (Fraction(2) / (n * lam) + 2 * tol / lam) / cal.parties
    return sensitivity / Fraction(beta)


@pytest.mark.parametrize("n", SIZES)
def test_corrected_scale_keeps_the_stated_epsilon_exactly(n):
    cal = PathakCalibration("corrected", EPS, LAM, K)
    assert cal.guarantee(D).epsilon == EPS
    assert _corrected_loss(cal, n, cal.scale(n)) <= Fraction(EPS)  # exact rationals: no rounding allowance
    without_slack = 2.0 / (K * n * LAM * EPS)  # the former calibration, for the exact minimiser only
    if n >= 10**8:
        assert float(_corrected_loss(cal, n, without_slack)) > EPS * (1 + n * SOLVER_TOL) * (1 - 1e-9)  # 1.01 at 10⁸, 1.21 at 2³¹


@pytest.mark.parametrize("n", SIZES)
def test_paper_scale_keeps_its_reported_worst_case(n):
    """Paper mode reports √d·ε/(2K) (an ℓ2 bound used as ℓ1); the slack-widened scale keeps that report true."""
    cal = PathakCalibration("paper", EPS, LAM, K)
    lam, tol = Fraction(LAM), Fraction(SOLVER_TOL)
    l2 = (Fraction(1) / (n * lam) + tol / lam) / K  # λ‖w‖² objective: c = 2λ
    loss_squared = D * (l2 / Fraction(cal.scale(n))) ** 2  # (‖Δ‖₁/β)² ≤ d·(‖Δ‖₂/β)²
    assert loss_squared <= Fraction(D) * (Fraction(EPS) / (2 * K)) ** 2
    assert cal.guarantee(D).epsilon == pytest.approx(math.sqrt(D) * EPS / (2 * K))


@pytest.mark.parametrize("n", SIZES)
def test_distributed_gaussian_sigma_keeps_delta_with_the_slack(n):
    cal = PathakCalibration("gaussian-distributed", EPS, LAM, K, 1e-6, 3)
    sensitivity = (2.0 / (n * LAM) + 2.0 * SOLVER_TOL / LAM + math.sqrt(D) * 2.0**-cal.frac_bits) / K
    g = cal.guarantee(D)
    assert (g.epsilon, g.delta) == (EPS, 1e-6)
    assert gaussian_delta(cal.sigma(n, D), sensitivity, EPS) <= cal.delta_gaussian
    if n == 2**31:  # σ for the exact minimiser alone falls short of δ there
        old = cal.sigma_one * (2.0 / (K * n * LAM) + math.sqrt(D) * 2.0**-cal.frac_bits / K)
        assert gaussian_delta(old, sensitivity, EPS) > cal.delta_gaussian


def test_the_pathak_statements_name_the_tolerance():
    for mode, delta in (("corrected", 0.0), ("gaussian-distributed", 1e-6)):
        g = PathakCalibration(mode, EPS, LAM, K, delta, 3 if delta else 0).guarantee(D)
        assert "2·tol/(K·λ)" in g.statement and f"tol={SOLVER_TOL:g}" in g.statement
    assert PathakCalibration("corrected", EPS, LAM, K).model_sensitivity(1000) == 2 / (1000 * LAM) + solver_slack(SOLVER_TOL, LAM)
