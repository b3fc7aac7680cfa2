"""Noise samplers and calibrations.

Hazmat. Every sampler draws from a :class:`~mpdp.math.drbg.Drbg` (CSPRNG keystream);
none touches numpy's global RNG. Misuse that breaks privacy: calibrating coordinate
Laplace with an ℓ2 sensitivity (the PRR10 flaw, docs/experiments/pathak2010.md "ℓ1/ℓ2"), or using the
classic Gaussian constant for ε ≥ 1 and calling it (ε, δ)-DP.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mpdp.learn.convex import solver_slack as solver_slack  # the solver's term of every argmin sensitivity, re-exported
from mpdp.math.drbg import Drbg


@dataclass(frozen=True)
class Guarantee:
    """What a release really guarantees, stated in every run's output."""

    mechanism: str
    epsilon: float
    delta: float
    sensitivity: float
    norm: str
    statement: str

    def as_dict(self) -> dict:
        return {
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "sensitivity": self.sensitivity,
            "norm": self.norm,
            "statement": self.statement,
        }


def laplace_coordinates(rng: Drbg, d: int, beta: float) -> np.ndarray:
    """Coordinate-wise Laplace, each η_i i.i.d. with density (1/2β)·exp(−|η_i|/β).

    Sensitivity norm: ℓ1. Guarantee: ε-DP for a query with ℓ1-sensitivity Δ₁ when β = Δ₁/ε.
    Moments: E|η_i| = β, Var η_i = 2β². Sampled by inversion of keystream uniforms.
    """
    _check_scale(beta)
    u = rng.uniform(d) - 0.5
    return -beta * np.sign(u) * np.log1p(-2.0 * np.abs(u))


def spherical_laplace(rng: Drbg, d: int, beta: float) -> np.ndarray:
    """Spherical ("Gamma-norm") Laplace on R^d: density ∝ exp(−‖η‖₂/β).

    Sensitivity norm: ℓ2. Guarantee: ε-DP for a query with ℓ2-sensitivity Δ₂ when β = Δ₂/ε
    (Chaudhuri–Monteleoni 2008 output perturbation). Sampled as r·g/‖g‖ with
    r ~ Gamma(d, β) (sum of d exponentials) and g ~ N(0, I_d). E‖η‖ = dβ, Var‖η‖ = dβ².
    """
    _check_scale(beta)
    r = rng.gamma_int_shape(d, beta, 1)[0]
    g = rng.normal(d)
    return r * g / np.linalg.norm(g)


def gaussian(rng: Drbg, size: int | tuple[int, ...], sigma: float | np.ndarray) -> np.ndarray:
    """i.i.d. N(0, σ²) per coordinate.

    Sensitivity norm: ℓ2. Guarantee: (ε, δ)-DP when σ comes from :func:`analytic_gaussian_sigma`
    (any ε > 0) or from :func:`classic_gaussian_sigma` (proved only for ε < 1).
    """
    s = np.asarray(sigma, dtype=np.float64)
    if np.any(~np.isfinite(s)) or np.any(s < 0):
        raise ValueError(f"sigma must be finite and >= 0, got {sigma}")
    return rng.normal(size) * s


def classic_gaussian_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    """Dwork–Roth Thm 3.22: σ = Δ₂·sqrt(2 ln(1.25/δ))/ε (proved for 0 < ε < 1 only)."""
    _check_privacy(epsilon, delta)
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def gaussian_delta(sigma: float, sensitivity: float, epsilon: float) -> float:
    """Exact δ of the Gaussian mechanism (Balle & Wang 2018, Thm 8):
    δ(σ) = Φ(Δ/(2σ) − εσ/Δ) − e^ε·Φ(−Δ/(2σ) − εσ/Δ)."""
    from scipy.special import log_ndtr, ndtr  # here, not at the top: a command that calibrates nothing never loads SciPy

    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    # e^ε·Φ(−a−b) in log space: e^ε overflows for ε > ~709 while Φ(−a−b) underflows
    second = math.exp(epsilon + float(log_ndtr(-a - b)))
    return float(ndtr(a - b) - second)


def analytic_gaussian_sigma(sensitivity: float, epsilon: float, delta: float, *, tol: float = 1e-12) -> float:
    """Smallest σ with δ(σ) ≤ δ for the Gaussian mechanism (Balle & Wang 2018), by bisection.

    Valid for every ε > 0; the returned σ satisfies gaussian_delta(σ) ≤ δ exactly (checked).
    """
    _check_privacy(epsilon, delta)
    if sensitivity <= 0:
        raise ValueError(f"sensitivity must be positive, got {sensitivity}")
    lo, hi = 1e-12 * sensitivity, sensitivity
    while gaussian_delta(hi, sensitivity, epsilon) > delta:
        hi *= 2.0
    while (hi - lo) > tol * hi:
        mid = 0.5 * (lo + hi)
        if gaussian_delta(mid, sensitivity, epsilon) > delta:
            lo = mid
        else:
            hi = mid
    assert gaussian_delta(hi, sensitivity, epsilon) <= delta
    return hi


def gdp_delta(mu: float, epsilon: float) -> float:
    """δ(ε) of μ-GDP (exact): Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2) (Dong, Roth & Su 2019, Cor. 2.13), Balle & Wang's
    exact Gaussian curve with Δ/σ = μ."""
    if not (math.isfinite(mu) and mu > 0):
        raise ValueError(f"mu must be finite and positive, got {mu}")
    return max(0.0, gaussian_delta(1.0 / mu, 1.0, epsilon))


def gdp_epsilon(mu: float, delta: float, *, tol: float = 1e-13) -> float:
    """The smallest ε with δ(ε) ≤ δ for μ-GDP (bisection; the returned ε satisfies it, checked)."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if gdp_delta(mu, 0.0) <= delta:
        return 0.0
    lo, hi = 0.0, max(1.0, mu * mu)
    while gdp_delta(mu, hi) > delta:
        hi *= 2.0
    while hi - lo > tol * max(1.0, hi):
        mid = 0.5 * (lo + hi)
        if gdp_delta(mu, mid) > delta:
            lo = mid
        else:
            hi = mid
    assert gdp_delta(mu, hi) <= delta
    return hi


def _check_scale(beta: float) -> None:
    if not (math.isfinite(beta) and beta > 0):
        raise ValueError(f"noise scale must be finite and positive, got {beta}")


def _check_privacy(epsilon: float, delta: float) -> None:
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be finite and positive, got {epsilon}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
