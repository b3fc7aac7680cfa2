"""Multinomial logistic regression baselines for the LMGC evaluation.

Model: W ∈ R^{C×D} on x̃ = (x, 1) (no separate intercept, so the bias is regularised too and the
objective is strongly convex), trained by scikit-learn's L-BFGS on

    J(W) = (1/n)·Σ_i −log softmax(W x̃_i)_{y_i} + (Λ/2)·‖W‖_F²       (sklearn C = 1/(nΛ)).

DP variant — output perturbation (CM08 / CMS11 Cor. 8 adapted to softmax):
    Sensitivity: ∇_W ℓ(W; x̃, y) = (p − e_y)·x̃ᵀ has ‖·‖_F = ‖p − e_y‖·‖x̃‖ ≤ √2·R, since
    ‖p − e_y‖² = (1 − p_y)² + Σ_{c≠y} p_c² ≤ 2(1 − p_y)² ≤ 2. J is Λ-strongly convex, so under
    substitution ‖W* − W*′‖_F ≤ 2√2·R/(nΛ). The optimiser is only approximate: we *check* that
    ‖∇J(Ŵ)‖_F ≤ g_tol (else raise), which gives ‖Ŵ − W*‖_F ≤ g_tol/Λ, so the released Ŵ has
    Δ₂ = 2√2·R/(nΛ) + 2·g_tol/Λ.
    Norm: Frobenius (ℓ2 of vec W).
    Noise: spherical Laplace on R^{C·D} with β = Δ₂/ε (mpdp.dp.mechanisms.spherical_laplace).
    Guarantee: ε-DP.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import softmax
from sklearn.linear_model import LogisticRegression

from mpdp.dp.mechanisms import Guarantee, solver_slack, spherical_laplace
from mpdp.lmgc.privacy import PrivacyError
from mpdp.math.drbg import Drbg


def softmax_objective_grad(W: np.ndarray, Xt: np.ndarray, yi: np.ndarray, reg: float) -> np.ndarray:
    """∇J(W) = (1/n)·Σ_i (p_i − e_{y_i}) x̃_iᵀ + Λ·W."""
    P = softmax(Xt @ W.T, axis=1)
    P[np.arange(len(yi)), yi] -= 1.0
    return P.T @ Xt / len(yi) + reg * W


@dataclass(frozen=True)
class MultinomialLR:
    """Fitted (optionally noisy) weights W (C, D) over x̃ = (x, 1); ``classes`` maps rows to labels."""

    W: np.ndarray
    classes: np.ndarray
    gradient_norm: float
    guarantee: Guarantee | None = None

    def predict(self, Xt: np.ndarray) -> np.ndarray:
        return self.classes[np.argmax(Xt @ self.W.T, axis=1)]


def fit_multinomial_lr(Xt: np.ndarray, y: np.ndarray, reg: float, *, gtol: float = 1e-6) -> MultinomialLR:
    """argmin J(W) with scikit-learn (lbfgs, multinomial); raises if ‖∇J‖_F > gtol."""
    if reg <= 0:
        raise ValueError(f"Λ must be positive, got {reg}")
    classes, yi = np.unique(y, return_inverse=True)
    if len(classes) < 3:
        raise ValueError("the softmax parameterisation here needs C >= 3 (sklearn uses one vector for C = 2)")
    n = Xt.shape[0]
    clf = LogisticRegression(C=1.0 / (n * reg), fit_intercept=False, tol=1e-12, max_iter=20000)
    clf.fit(Xt, yi)
    W = np.asarray(clf.coef_, dtype=np.float64)
    g = float(np.linalg.norm(softmax_objective_grad(W, Xt, yi, reg)))
    if not g <= gtol:
        raise PrivacyError(f"multinomial LR stopped at ‖∇J‖_F = {g:.3g} > {gtol:g}; the sensitivity bound needs it")
    return MultinomialLR(W, classes, g)


def output_perturbation_sensitivity(n: int, reg: float, R: float, gtol: float) -> float:
    """Δ₂ = 2√2·R/(nΛ) + 2·g_tol/Λ (Frobenius), see the module docstring (:func:`mpdp.dp.mechanisms.solver_slack`)."""
    return 2.0 * math.sqrt(2.0) * R / (n * reg) + solver_slack(gtol, reg)


def dp_multinomial_lr(Xt: np.ndarray, y: np.ndarray, reg: float, epsilon: float, R: float, rng: Drbg, *,
                      gtol: float = 1e-6, base: MultinomialLR | None = None) -> MultinomialLR:
    """ε-DP multinomial LR by output perturbation: Ŵ + η, η spherical Laplace with β = Δ₂/ε.

    Rows of Xt must satisfy ‖x̃‖ ≤ R (checked). ``base`` may pass an already fitted non-private
    model on the same (Xt, y, reg, gtol) to avoid refitting.
    """
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be finite and positive, got {epsilon}")
    if float(np.max(np.linalg.norm(Xt, axis=1))) > R * (1 + 1e-12):
        raise PrivacyError(f"rows must satisfy ‖x̃‖ ≤ R = {R}; clip them first")
    model = base if base is not None else fit_multinomial_lr(Xt, y, reg, gtol=gtol)
    if model.gradient_norm > gtol:
        raise PrivacyError("base model is not within the gradient tolerance the sensitivity assumes")
    n = Xt.shape[0]
    sens = output_perturbation_sensitivity(n, reg, R, gtol)
    beta = sens / epsilon
    eta = spherical_laplace(rng, model.W.size, beta)
    if not np.all(np.isfinite(eta)):
        raise PrivacyError("non-finite noise sample")
    guarantee = Guarantee(
        mechanism="multinomial LR output perturbation (spherical Laplace)",
        epsilon=epsilon,
        delta=0.0,
        sensitivity=sens,
        norm="Frobenius (l2 of vec W)",
        statement=(f"epsilon-DP (substitution, ‖(x,1)‖ ≤ R={R:g}): Δ₂ = 2√2R/(nΛ) + 2g_tol/Λ = {sens:.6g} "
                   f"with n={n}, Λ={reg:g}, g_tol={gtol:g}; noise density ∝ exp(−‖η‖/β), β = Δ₂/ε"),
    )
    return MultinomialLR(model.W + eta.reshape(model.W.shape), model.classes, model.gradient_norm, guarantee)
