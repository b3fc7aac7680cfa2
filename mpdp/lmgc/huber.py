"""Huber-smoothed hinge H_h (Pathak & Raj 2010, eq. (6); Chapelle 2007, as in CMS11).

Applied to t = 1 + x̃ᵀ(Φ_y − Φ_c)x̃:

    H_h(t) = 0               if t ≤ −h
             (t + h)²/(4h)   if |t| < h
             t               if t ≥ h

Properties used by the privacy analysis: H′ ∈ [0, 1], H″ ≤ c = 1/(2h), and
0 ≤ H_h(t) − [t]_+ ≤ h/4.
"""

from __future__ import annotations

import numpy as np


def _check(h: float) -> None:
    if not (np.isfinite(h) and h > 0):
        raise ValueError(f"Huber width h must be finite and positive, got {h}")


def curvature(h: float) -> float:
    """c = 1/(2h), the bound on H″."""
    _check(h)
    return 1.0 / (2.0 * h)


def value(t: np.ndarray, h: float) -> np.ndarray:
    """H_h(t), eq. (6)."""
    _check(h)
    t = np.asarray(t, dtype=np.float64)
    mid = (t + h) ** 2 / (4.0 * h)
    return np.where(t >= h, t, np.where(t <= -h, 0.0, mid))


def derivative(t: np.ndarray, h: float) -> np.ndarray:
    """H′_h(t) ∈ [0, 1]: 0, (t + h)/(2h), 1 on the three pieces."""
    _check(h)
    t = np.asarray(t, dtype=np.float64)
    return np.clip((t + h) / (2.0 * h), 0.0, 1.0)


def second_derivative(t: np.ndarray, h: float) -> np.ndarray:
    """H″_h(t): 1/(2h) on |t| < h, 0 elsewhere (undefined on the null set t = ±h; 0 is used)."""
    _check(h)
    t = np.asarray(t, dtype=np.float64)
    return np.where(np.abs(t) < h, 1.0 / (2.0 * h), 0.0)
