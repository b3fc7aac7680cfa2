"""Privacy accounting of a DP-GD job: R + 1 adaptively chosen Gaussian mechanisms composed in zCDP / GDP.

Round r releases a sum with ℓ2-sensitivity Δ_r plus Gaussian noise of standard deviation at least σ_r (the
DCA's σ_std: the honest others' noise alone, whatever ≤ T colluding or missing parties do). One such release is
ρ_r-zCDP with ρ_r = Δ_r²/(2σ_r²), and μ_r-GDP with μ_r = Δ_r/σ_r. Adaptive composition adds ρ (Bun & Steinke
2016, Lemma 2.3) — equivalently μ² (Dong, Roth & Su 2019, Cor. 3.3) — so the job is ρ-zCDP and μ-GDP with

    ρ = Σ_r Δ_r²/(2σ_r²),   μ = √(2ρ).

The conversion to (ε, δ) is the tight one for Gaussian mechanisms: a μ-GDP mechanism is (ε, δ(ε))-DP with
δ(ε) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2) (Dong, Roth & Su, Cor. 2.13; the same curve as Balle & Wang's exact
Gaussian δ with Δ/σ = μ), which is smaller for every δ than the generic ε = ρ + 2√(ρ ln(1/δ)).
"""

from __future__ import annotations

import math

from mpdp.dp.mechanisms import analytic_gaussian_sigma, gaussian_delta


def gdp_mu(epsilon: float, delta: float) -> float:
    """The largest μ whose μ-GDP curve is (ε, δ)-DP: 1/σ of the analytic Gaussian mechanism with Δ = 1."""
    return 1.0 / analytic_gaussian_sigma(1.0, epsilon, delta)


def gdp_delta(mu: float, epsilon: float) -> float:
    """δ(ε) of μ-GDP (exact)."""
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


def compose(mus: list[float]) -> float:
    """μ of the adaptive composition of μ_r-GDP mechanisms: √(Σ μ_r²)."""
    return math.sqrt(sum(m * m for m in mus))


def zcdp_rho(mu: float) -> float:
    """ρ of a μ-GDP Gaussian composition: μ²/2."""
    return 0.5 * mu * mu
