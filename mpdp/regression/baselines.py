"""The other lines of the paper's Figure 2 (labels as in the authors' code): NP, proj NP, TA, proj TA and input
perturbation. (DDP and proj DDP run through DCA: :mod:`mpdp.regression.algorithm`.)

| label | code key | here |
|---|---|---|
| NP | ``true`` | :func:`nonprivate` — exact XᵀX, Xᵀy of the raw data |
| proj NP | ``clipped`` | :func:`projected_nonprivate` at the proj-DDP thresholds (as the code does) |
| TA | ``noisy`` | :func:`trusted_aggregator` — one central N(0, σ_std²) draw per entry, full (ε, δ) |
| proj TA | ``cl_true_TA_DP`` | :func:`ta_std_estimate` then :func:`trusted_aggregator` at B = p·σ̂_TA |
| input perturbed | ``scaling`` | :func:`input_perturbation` — every record adds N(0, σ_std²): total N·σ_std² |

All noise comes from a :class:`~mpdp.math.drbg.Drbg`. The TA is a trusted curator that sees raw records: its
guarantee is the central Gaussian mechanism's; DCA's goal is to match it without the trust (the paper's Sec. 5).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from mpdp.dp.mechanisms import gaussian
from mpdp.math.drbg import Drbg
from mpdp.regression.config import PAPER_SENSITIVITY_BOUND, VARIANCE_FLOOR
from mpdp.regression.statistics import (
    Floats,
    RoundSpec,
    StdEstimate,
    SuffStats,
    clip_records,
    party_statistics,
    std_estimate,
    std_round_spec,
    suff_stats,
)


def nonprivate(X: np.ndarray, y: np.ndarray) -> SuffStats:
    """NP: the exact statistics of the unclipped data."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    return SuffStats(X.T @ X, X.T @ y)


def projected_nonprivate(X: np.ndarray, y: np.ndarray, thresholds: Floats) -> SuffStats:
    """proj NP: exact statistics of the data clipped to ``thresholds`` (the code uses the proj-DDP thresholds)."""
    Xc, yc = clip_records(X, y, thresholds)
    return SuffStats(Xc.T @ Xc, Xc.T @ yc)


def trusted_aggregator(spec: RoundSpec, X: np.ndarray, y: np.ndarray, rng: Drbg) -> SuffStats:
    """TA (main round): the curator sums the clipped records' vectors and adds N(0, σ_std²) once per entry."""
    if spec.round != "main":
        raise ValueError("trusted_aggregator releases the main round; use ta_std_estimate for the std round")
    z = party_statistics(X, y, "main", spec.bounds)
    return suff_stats(z + gaussian(rng, z.size, spec.sigma_std), spec.d)


def ta_std_estimate(
    X: np.ndarray,
    y: np.ndarray,
    bounds: Sequence[float],
    epsilon: float,
    delta: float,
    mode: str,
    rng: Drbg,
    *,
    paper_bound: float = PAPER_SENSITIVITY_BOUND,
) -> StdEstimate:
    """The trusted aggregator's std round with (ε₁, δ₁).

    ``corrected``: Σ clip(z)² / N plus N(0, σ_std²)/N with Δ₂ = sqrt(Σ c⁴), analytic σ — the DCA std round
    without the N/(N−1) factor. ``paper``: the code's ``get_TA_std_estimates``: np.var of the *unclipped* data
    plus N(0, σ²) with σ = sqrt(2 ln(1.25/δ₁))·sqrt((d+1)·5²)/(N·ε₁) (the code's c-vs-c² slip, with Δ from ±5, which the
    data can exceed). Both floor a variance ≤ 0 at 0.5.
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n, d = X.shape
    if mode == "corrected":
        spec = std_round_spec(bounds, epsilon, delta, mode)
        z = party_statistics(X, y, "std", bounds)
        return std_estimate(z + gaussian(rng, z.size, spec.sigma_std), n)
    if mode != "paper":
        raise ValueError(f"mode must be 'corrected' or 'paper', got {mode!r}")
    data = np.hstack([X, y[:, None]])
    sigma = math.sqrt(2.0 * math.log(1.25 / delta)) / n * math.sqrt((d + 1) * paper_bound**2) / epsilon
    raw = np.var(data, axis=0) + gaussian(rng, d + 1, sigma)
    bad = raw <= 0
    return StdEstimate(np.where(bad, VARIANCE_FLOOR, raw), raw, bad)


def input_perturbation(spec: RoundSpec, X: np.ndarray, y: np.ndarray, rng: Drbg) -> SuffStats:
    """Input perturbation: each record adds its own N(0, σ_std²) to its vector (total variance N·σ_std²)."""
    if spec.round != "main":
        raise ValueError("input_perturbation releases the main round")
    Z = spec.statistics(X, y)
    noisy = Z + gaussian(rng, Z.shape, spec.sigma_std)
    return suff_stats(noisy.sum(axis=0), spec.d)
