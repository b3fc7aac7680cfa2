"""What a solver's stopping rule costs a sensitivity proven for exact minimisers (used by every release calibrated on
a computed minimiser: Pathak 2010, HCB16, the LMGC baselines and average, LMGC objective perturbation)."""

from __future__ import annotations

import math


def solver_slack(tol: float, strong_convexity: float) -> float:
    """2·tol/μ: what a sensitivity proven for *exact* minimisers must add for the minimisers a solver computes.

    Output perturbation of an argmin (CM08, CMS11) bounds ‖w*(D) − w*(D′)‖ for the exact minimisers. A solver that
    stops at ‖∇J(ŵ)‖ < tol on a μ-strongly convex J returns ŵ with ‖ŵ − w*‖ ≤ ‖∇J(ŵ)‖/μ < tol/μ (strong convexity:
    ‖∇J(ŵ)‖·‖ŵ − w*‖ ≥ ⟨∇J(ŵ) − ∇J(w*), ŵ − w*⟩ ≥ μ‖ŵ − w*‖²), so two neighbouring computed minimisers are within
    Δ + 2·tol/μ. Every release calibrated on a computed minimiser adds this term (Pathak 2010, HCB16, the LMGC
    baselines and average, LMGC objective perturbation); ``tol`` bounds μ·‖ŵ − w*‖ and is public.
    """
    if not (math.isfinite(tol) and tol >= 0):
        raise ValueError(f"tol must be finite and non-negative, got {tol}")
    if not (math.isfinite(strong_convexity) and strong_convexity > 0):
        raise ValueError(f"the strong-convexity modulus must be finite and positive, got {strong_convexity}")
    return 2.0 * tol / strong_convexity
