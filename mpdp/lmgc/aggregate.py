"""Aggregating locally trained LMGC models by parameter averaging, with output perturbation.

For later federation use (PRR10-style aggregation applied to LMGC; not in the PR10 paper).

Sensitivity (derivation ours, standard CM08/CMS11 argument). Party j holds n_j records and
releases θ_j = exact argmin of the *unperturbed* objective

    F_j(θ) = (1/n_j)·Σ_i ℓ_i(θ) + λ·Σ_c tr(I_Φ Φ_c I_Φ) + (Δ/2)·Σ_c ‖Φ_c‖_F²   [+ indicator{Φ_c ⪰ 0}]

F_j is Δ-strongly convex (ridge) plus convex terms (Huber loss, linear trace, optional PSD cone).
Replacing one record changes F_j by (1/n_j)·(ℓ(z′) − ℓ(z)), which is (2G/n_j)-Lipschitz with
G = R²·√(C(C−1)) (:func:`mpdp.lmgc.objective.gradient_bound`). The minimiser of a Δ-strongly convex function moves by at
most Lip/Δ under an additive Lip-Lipschitz change, so ‖θ_j − θ_j′‖_F ≤ 2G/(n_j·Δ) and the average
(1/K)·Σ_j θ_j moves by at most

    S = 2G / (K · min_j n_j · Δ)      (Frobenius over all blocks = ℓ2 in isometric coordinates).

A solver returns θ̂_j with ‖∇F_j(θ̂_j)‖_F ≤ g_tol (PSD-constrained: any g_tol with Δ·‖θ̂_j − θ_j‖_F ≤ g_tol), so
‖θ̂_j − θ_j‖_F ≤ g_tol/Δ (Δ-strong convexity) and the computed models' average moves by at most
S + 2·g_tol/(K·Δ) (:func:`mpdp.dp.mechanisms.solver_slack`).

Adding spherical Laplace noise with β = (S + 2·g_tol/(K·Δ))/ε in isometric coordinates (density ∝ exp(−‖v‖/β))
makes the averaged model ε-DP (substitution adjacency, one record of one party). The bound holds with
or without PSD constraints, but **only with Δ > 0**: without a ridge, J is not strongly convex
(the Huber loss is flat below −h and linear above h, the trace term is linear), its minimiser can
be non-unique or non-existent (docs/experiments/lmgc.md, "What the paper got wrong", 4), and one record can move it arbitrarily far, so no finite
sensitivity exists and :func:`averaging_sensitivity` refuses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mpdp.dp.mechanisms import Guarantee, solver_slack, spherical_laplace
from mpdp.lmgc.objective import gradient_bound
from mpdp.lmgc.params import theta_to_vec, vec_to_theta
from mpdp.math.drbg import Drbg


class SensitivityError(ValueError):
    """No valid sensitivity bound holds for the requested aggregation."""


def averaging_sensitivity(sizes: list[int], ridge: float, R: float, n_classes: int, *, gradient_tol: float) -> float:
    """S = 2G/(K·min_j n_j·Δ) + 2·g_tol/(K·Δ), G = R²√(C(C−1)): Frobenius (isometric ℓ2) sensitivity of the average
    of local models computed to ‖∇F_j‖_F ≤ g_tol (``gradient_tol``; 0 only for exact minimisers)."""
    if not sizes or min(sizes) < 1:
        raise ValueError(f"need at least one party with at least one record, got sizes {sizes}")
    if not (ridge > 0 and math.isfinite(ridge)):
        raise SensitivityError(
            "refusing to aggregate: the local objectives have no ridge (Δ = 0). Without Δ > 0 the large-margin "
            "objective is not strongly convex (Huber is flat below −h and linear above h, the trace regulariser is "
            "linear), its minimiser need not be unique or even exist (docs/experiments/lmgc.md), and one changed record can "
            "move it arbitrarily far; no finite sensitivity of the averaged parameters exists. Train the parties "
            "with ridge Δ > 0."
        )
    K = len(sizes)
    return 2.0 * gradient_bound(R, n_classes) / (K * min(sizes) * ridge) + solver_slack(gradient_tol, ridge) / K


@dataclass(frozen=True)
class AggregateRelease:
    theta: np.ndarray  # noisy average, (C, D, D)
    guarantee: Guarantee


def aggregate_average(thetas: list[np.ndarray], sizes: list[int], *, ridge: float, R: float, epsilon: float,
                      rng: Drbg, gradient_tol: float) -> AggregateRelease:
    """ε-DP release of (1/K)·Σ_j θ_j + η, η spherical Laplace (isometric coordinates) with β = S/ε.

    Each θ_j must minimise the party's unperturbed objective with the same λ, h, ridge Δ and row bound R
    (‖(x, 1)‖ ≤ R) to ‖∇F_j‖_F ≤ ``gradient_tol`` (absolute; S allows for it); ``sizes`` are the public party sizes n_j.
    """
    if len(thetas) != len(sizes):
        raise ValueError(f"got {len(thetas)} models and {len(sizes)} sizes")
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be finite and positive, got {epsilon}")
    stack = np.stack([np.asarray(t, dtype=np.float64) for t in thetas])
    if stack.ndim != 4 or stack.shape[2] != stack.shape[3]:
        raise ValueError(f"models must be (C, D, D) arrays of one shape, got {stack.shape[1:]}")
    if not np.allclose(stack, np.swapaxes(stack, 2, 3)):
        raise ValueError("every block Φ_c must be symmetric")
    _, C, D, _ = stack.shape
    S = averaging_sensitivity(list(sizes), ridge, R, C, gradient_tol=gradient_tol)
    mean = stack.mean(axis=0)
    v = theta_to_vec(mean)
    eta = spherical_laplace(rng, v.size, S / epsilon)
    if not np.all(np.isfinite(eta)):
        raise ValueError("non-finite noise sample")
    guarantee = Guarantee(
        mechanism="spherical Laplace output perturbation of the average of K local LMGC minimisers",
        epsilon=epsilon,
        delta=0.0,
        sensitivity=S,
        norm="Frobenius over all C symmetric blocks (l2 in isometric coordinates)",
        statement=(f"epsilon-DP (substitution of one record of one party; ‖(x,1)‖ ≤ R={R:g}); sensitivity "
                   f"2R²√(C(C−1))/(K·min n_j·Δ) + 2·g_tol/(K·Δ) = {S:.6g} with Δ = {ridge:g}, K = {len(sizes)}, min n_j = {min(sizes)}, "
                   f"local models computed to ‖∇F_j‖_F ≤ g_tol = {gradient_tol:g}"),
    )
    return AggregateRelease(vec_to_theta(v + eta, C, D), guarantee)
