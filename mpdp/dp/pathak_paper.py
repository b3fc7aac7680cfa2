"""Decrepit: the PRR10 noise calibration as published, and what it really guarantees.

The paper adds coordinate-wise Laplace with β = 2/(n₍₁₎·ε·λ) to the average of K local
minimisers of (1/n)Σ logloss + λ‖w‖². Coordinate Laplace needs an ℓ1 sensitivity, but the
bound used is CM08's ℓ2 bound (docs/experiments/pathak2010.md, "ℓ1/ℓ2"). With the λ‖w‖² objective the ℓ2
sensitivity of ŵ_j is 1/(n_j·λ), the ℓ1 sensitivity can reach √d times that, and the
average divides by K, so the worst-case privacy loss is
    √d·(1/(K·n_j·λ))·(n₍₁₎·ε·λ/2) ≤ √d·ε/(2K).
(Under the (λ/2)‖w‖² convention the same computation gives the spec's (√d/K)·ε.)
Use only to compare with published figures; never as a privacy guarantee of ε.
"""

from __future__ import annotations

import math


def paper_mode_true_epsilon(nominal_epsilon: float, d: int, parties: int) -> float:
    """Worst-case ε actually achieved by paper mode (λ‖w‖² objective, coordinate Laplace)."""
    if parties < 1 or d < 1:
        raise ValueError("need d >= 1 and at least one party")
    return math.sqrt(d) * nominal_epsilon / (2.0 * parties)
