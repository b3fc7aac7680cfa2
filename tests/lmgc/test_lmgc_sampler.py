"""Noise samplers (the paper's and the corrected one): symmetry, Gamma norm, isotropy in isometric coordinates."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from mpdp.lmgc.params import sym_to_iso
from mpdp.lmgc.privacy import CorrectedCalibration, PaperCalibration
from mpdp.math.drbg import Drbg

N_DRAWS = 3000


@pytest.fixture(scope="module")
def calibration() -> CorrectedCalibration:
    return CorrectedCalibration.create(2.0, n=20, n_classes=3, dim_x=1, h=0.5, R=math.sqrt(2))


@pytest.fixture(scope="module")
def draws(calibration: CorrectedCalibration) -> np.ndarray:
    rng = Drbg.from_seed("lmgc-sampler-test")
    return np.stack([calibration.sample(rng) for _ in range(N_DRAWS)])


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_blocks_are_symmetric(draws: np.ndarray, calibration: CorrectedCalibration) -> None:
    assert draws.shape == (N_DRAWS, 3, 2, 2)
    assert np.array_equal(draws, np.swapaxes(draws, 2, 3))
    assert calibration.dim == 9


def test_frobenius_norm_is_gamma(draws: np.ndarray, calibration: CorrectedCalibration) -> None:
    norms = np.linalg.norm(draws.reshape(N_DRAWS, -1), axis=1)
    beta = calibration.noise_scale
    assert beta == pytest.approx(2 * calibration.gradient_bound / calibration.eps_noise)
    p = stats.kstest(norms, stats.gamma(a=calibration.dim, scale=beta).cdf).pvalue
    assert p > 1e-3
    # negative control: a 20% scale error is detected
    assert stats.kstest(norms, stats.gamma(a=calibration.dim, scale=0.8 * beta).cdf).pvalue < 1e-6
    # and sampling in *matrix* coordinates (norm over p' = C·D² entries) would be detected too
    assert stats.kstest(norms, stats.gamma(a=3 * 4, scale=beta).cdf).pvalue < 1e-6


def test_directions_isotropic_in_isometric_coordinates(draws: np.ndarray, calibration: CorrectedCalibration) -> None:
    v = sym_to_iso(draws).reshape(N_DRAWS, -1)
    u = v / np.linalg.norm(v, axis=1, keepdims=True)
    p = calibration.dim
    assert np.all(np.abs(u.mean(axis=0)) < 5 / math.sqrt(N_DRAWS * p))
    cov = u.T @ u / N_DRAWS
    assert np.max(np.abs(cov - np.eye(p) / p)) < 0.02
    # u_1² ~ Beta(1/2, (p−1)/2) for a uniform direction
    assert stats.kstest(u[:, 0] ** 2, stats.beta(0.5, (p - 1) / 2).cdf).pvalue > 1e-3
    # in matrix coordinates the off-diagonal entries have half the variance of the diagonal ones
    diag = draws[:, :, 0, 0].ravel()
    off = draws[:, :, 0, 1].ravel()
    assert np.var(off) / np.var(diag) == pytest.approx(0.5, rel=0.1)


def test_successive_draws_differ_and_seeds_reproduce(calibration: CorrectedCalibration) -> None:
    rng = Drbg.from_seed(7)
    a, b = calibration.sample(rng), calibration.sample(rng)
    assert not np.allclose(a, b)
    assert np.array_equal(calibration.sample(Drbg.from_seed(7)), a)


def test_paper_sampler_shares_one_general_matrix() -> None:
    cal = PaperCalibration(epsilon=1.0, dim_x=2, n_classes=4)
    rng = Drbg.from_seed("paper")
    draws = np.stack([cal.sample(rng) for _ in range(2000)])
    assert np.all(draws == draws[:, :1])  # the same b for every class (the paper's shared b)
    assert not np.allclose(draws[:, 0], np.swapaxes(draws[:, 0], 1, 2))  # general, not symmetric
    norms = np.linalg.norm(draws[:, 0].reshape(2000, -1), axis=1)
    assert stats.kstest(norms, stats.gamma(a=9, scale=2.0).cdf).pvalue > 1e-3
    assert cal.guarantee().statement.startswith("NO valid DP guarantee")
