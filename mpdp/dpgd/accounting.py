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

import numpy as np

from mpdp.dca import discrete
from mpdp.dp.mechanisms import analytic_gaussian_sigma
from mpdp.dp.mechanisms import gdp_delta as gdp_delta, gdp_epsilon as gdp_epsilon  # the μ-GDP curve, re-exported for the plan


def gdp_mu(epsilon: float, delta: float) -> float:
    """The largest μ whose μ-GDP curve is (ε, δ)-DP: 1/σ of the analytic Gaussian mechanism with Δ = 1."""
    return 1.0 / analytic_gaussian_sigma(1.0, epsilon, delta)


def compose(mus: list[float]) -> float:
    """μ of the adaptive composition of μ_r-GDP mechanisms: √(Σ μ_r²)."""
    return math.sqrt(sum(m * m for m in mus))


def zcdp_rho(mu: float) -> float:
    """ρ of a μ-GDP Gaussian composition: μ²/2."""
    return 0.5 * mu * mu


# -- validated rounds: the distributed discrete Gaussian, composed in zCDP --------------------------------------
# A validated round's noise is the DCA's distributed discrete Gaussian (mpdp.dca.discrete): the sum of n = N − T − 1
# honest parties' N_Z(0, σ²) is not a Gaussian, so the GDP curve above does not apply. Kairouz, Liu & Steinke 2021
# (Prop. 14) bound each round by ρ_r-zCDP; zCDP composes adaptively by adding ρ (Bun & Steinke 2016, Lemma 2.3), and
# a ρ-zCDP mechanism is (α, αρ)-RDP, converted to (ε, δ) by Canonne, Kamath & Steinke 2020 (Prop. 12). Each round
# also differs from the accounted one with probability ≤ TV_ROUND (a noise-caused refusal, mpdp.dca.discrete's
# p_fail), which costs (1 + e^ε)·Σ tv in δ.
TV_ROUND = 2.0**-80  # the largest p_fail a validated round may have (a real one is ≈ (N + 2)·2^-96, so N < 2^16 parties)
_ALPHAS = np.concatenate([1.0 + np.logspace(-4, 0, 400), np.logspace(0.302, 6, 1600)])


def zcdp_delta(rho: float, epsilon: float, tv: float = 0.0) -> float:
    """δ of a ρ-zCDP mechanism at ε (CKS20 Prop. 12 minimised over α), plus (1 + e^ε)·tv."""
    return min(1.0, discrete.delta_from_rdp(_ALPHAS * rho, _ALPHAS, epsilon) + (1.0 + math.exp(min(epsilon, 700.0))) * tv)


def zcdp_epsilon(rho: float, delta: float) -> float:
    """The smallest ε (CKS20 Prop. 12 over α) a ρ-zCDP mechanism is (ε, δ)-DP at."""
    return discrete.epsilon_from_rdp(_ALPHAS * rho, _ALPHAS, delta)[0]


def zcdp_budget(epsilon: float, delta: float, tv: float) -> float:
    """The largest ρ (bisection, checked) whose ρ-zCDP release, off by tv in total variation, is (ε, δ)-DP."""
    if zcdp_delta(1e-12, epsilon, tv) > delta:
        if (1.0 + math.exp(min(epsilon, 700.0))) * tv > delta:  # the refusal term alone: ε ≥ ln(δ / tv − 1)
            raise ValueError(f"no ρ gives ({epsilon}, {delta})-DP: a validated round may be refused with probability up to {tv:.3g}, which "
                             f"costs (1 + e^ε)·{tv:.3g} > δ in δ; use ε < {math.log(delta / tv - 1.0):.1f} (or no validation)")
        raise ValueError(f"no ρ gives ({epsilon}, {delta})-DP")
    lo, hi = 1e-12, 1.0
    while zcdp_delta(hi, epsilon, tv) <= delta:
        lo, hi = hi, hi * 2.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if zcdp_delta(mid, epsilon, tv) <= delta else (lo, mid)
        if hi - lo <= 1e-12 * hi:
            break
    assert zcdp_delta(lo, epsilon, tv) <= delta
    return lo
