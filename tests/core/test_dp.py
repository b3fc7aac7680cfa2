"""Noise samplers and calibrations: distributions, scale formulas, and DP likelihood-ratio sanity."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from mpdp.dp.mechanisms import analytic_gaussian_sigma, classic_gaussian_sigma, gaussian, gaussian_delta, laplace_coordinates, spherical_laplace
from mpdp.dp.pathak_noise import PathakCalibration
from mpdp.dp.pathak_paper import paper_mode_true_epsilon
from mpdp.math.drbg import Drbg


def test_coordinate_laplace_moments():
    beta = 0.7
    x = laplace_coordinates(Drbg.from_seed(1), 200_000, beta)
    assert abs(np.mean(np.abs(x)) - beta) < 4 * beta / math.sqrt(200_000)
    assert abs(np.var(x) - 2 * beta**2) < 0.03 * 2 * beta**2
    assert stats.kstest(x, stats.laplace(scale=beta).cdf).pvalue > 1e-3


def test_spherical_laplace_norm_is_gamma_and_direction_isotropic():
    d, beta = 5, 0.3
    r = Drbg.from_seed(2)
    xs = np.stack([spherical_laplace(r, d, beta) for _ in range(6000)])
    norms = np.linalg.norm(xs, axis=1)
    assert stats.kstest(norms, stats.gamma(a=d, scale=beta).cdf).pvalue > 1e-3
    assert abs(norms.mean() - d * beta) < 4 * math.sqrt(d) * beta / math.sqrt(6000)
    dirs = xs / norms[:, None]
    assert np.all(np.abs(dirs.mean(axis=0)) < 0.05)
    assert np.allclose(np.cov(dirs.T), np.eye(d) / d, atol=0.02)


def test_gaussian_sampler_and_calibrators():
    x = gaussian(Drbg.from_seed(3), 100_000, 2.0)
    assert abs(np.std(x) - 2.0) < 0.03
    assert classic_gaussian_sigma(1.0, 0.5, 1e-5) == pytest.approx(math.sqrt(2 * math.log(1.25 / 1e-5)) / 0.5)
    for eps in (0.1, 0.5, 0.9, 1.0, 5.0, 31.6):
        s = analytic_gaussian_sigma(1.0, eps, 1e-5)
        assert gaussian_delta(s, 1.0, eps) <= 1e-5
        assert gaussian_delta(s * 0.99, 1.0, eps) > 1e-5  # smallest such σ
        if eps < 1:
            assert s <= classic_gaussian_sigma(1.0, eps, 1e-5)


def test_pathak_scales_and_guarantees():
    c = PathakCalibration("corrected", 0.5, 0.01, 5)
    assert c.scale(1000) == pytest.approx(2 / (5 * 1000 * 0.01 * 0.5))
    assert c.convention == "half" and c.guarantee(123).epsilon == 0.5
    p = PathakCalibration("paper", 0.5, 0.01, 5)
    assert p.scale(1000) == pytest.approx(2 / (1000 * 0.5 * 0.01))
    assert p.convention == "full"
    assert p.guarantee(123).epsilon == pytest.approx(math.sqrt(123) * 0.5 / 10)
    assert paper_mode_true_epsilon(1.0, 123, 1) == pytest.approx(math.sqrt(123) / 2)
    with pytest.raises(ValueError):
        PathakCalibration("corrected", -1, 0.1, 3)


def _spherical_log_ratio(y, mu, mu2, beta):
    return (np.linalg.norm(y - mu2) - np.linalg.norm(y - mu)) / beta


def test_corrected_mode_privacy_loss_bounded_on_worst_case_pairs():
    """Spherical noise: log p(y|D)/p(y|D′) ≤ ‖μ−μ′‖₂/β ≤ ε when ‖μ−μ′‖₂ is the sensitivity."""
    eps, lam, K, n, d = 0.8, 0.1, 4, 50, 6
    cal = PathakCalibration("corrected", eps, lam, K)
    beta = cal.scale(n)
    sens = 2 / (K * n * lam)
    rng = Drbg.from_seed(4)
    for direction in (np.eye(d)[0], np.ones(d) / math.sqrt(d)):
        mu, mu2 = np.zeros(d), sens * direction
        ys = np.stack([spherical_laplace(rng, d, beta) for _ in range(2000)])
        ratios = [_spherical_log_ratio(y, mu, mu2, beta) for y in ys]
        assert max(ratios) <= eps + 1e-9


def test_paper_mode_diagonal_pair_reaches_sqrt_d_over_2k():
    """Coordinate Laplace calibrated with an ℓ2 bound: a diagonal change costs ≈ √d/(2K)·ε (λ‖w‖² objective)."""
    eps, lam, K, n, d = 1.0, 0.1, 2, 100, 64
    cal = PathakCalibration("paper", eps, lam, K)
    beta = cal.scale(n)
    sens_l2 = 1 / (K * n * lam)  # average of K minimisers of the λ‖w‖² objective
    delta = sens_l2 * np.ones(d) / math.sqrt(d)
    worst = np.sum(np.abs(delta)) / beta  # ‖μ−μ′‖₁/β, reached when y lies outside the box
    assert worst == pytest.approx(math.sqrt(d) * eps / (2 * K))
    assert worst > eps  # the flaw: nominal ε is exceeded


def test_histogram_privacy_loss_in_one_dimension():
    eps, beta = 1.0, 1.0
    r = Drbg.from_seed(5)
    a = laplace_coordinates(r, 100_000, beta)
    b = laplace_coordinates(r, 100_000, beta) + eps * beta  # adjacent output, ‖Δ‖₁ = εβ
    bins = np.linspace(-3, 4, 15)
    ha, _ = np.histogram(a, bins)
    hb, _ = np.histogram(b, bins)
    ok = (ha > 500) & (hb > 500)
    assert np.max(np.abs(np.log(ha[ok] / hb[ok]))) <= eps + 0.1
