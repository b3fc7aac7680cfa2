"""The central reference: objective perturbation (Chaudhuri, Monteleoni & Sarwate, JMLR 2011, Algorithm 2) for
L2-regularised logistic regression, one trusted curator holding all N rows.

With rows ‖x‖ ≤ 1, loss ℓ with |ℓ''| ≤ c = 1/4, regulariser (Λ/2)‖w‖², replace-one adjacency (N public):

    ε' = ε − log(1 + 2c/(NΛ) + c²/(N²Λ²));  if ε' > 0: Δ = 0,  else Δ = c/(N(e^{ε/4} − 1)) − Λ/2, ε' = ε/2;
    b with density ∝ exp(−ε'‖b‖/2)  (‖b‖ ~ Gamma(d, 2/ε'), direction uniform);
    w = argmin (1/N)Σ ℓ(y_i wᵀx_i) + (Λ/2)‖w‖² + (1/N) bᵀw + (Δ/2)‖w‖².

ε-DP (pure, δ = 0). This is what diffprivlib's ``LogisticRegression`` implements (its ``Vector`` mechanism); the
experiment cross-checks the two in diffprivlib's own virtualenv when it can be installed.
For K > 2 classes the reference is one-vs-rest with ε/K per class (basic composition), as diffprivlib does.
"""

from __future__ import annotations

import math

import numpy as np

from mpdp.dp.mechanisms import spherical_laplace
from mpdp.math.drbg import Drbg
from scipy.optimize import minimize
from scipy.special import expit

SMOOTHNESS = 0.25  # c: |ℓ''| of the logistic loss


def calibration(epsilon: float, n: int, lam: float) -> tuple[float, float]:
    """(ε', Δ) of Algorithm 2."""
    if not (epsilon > 0 and n > 0 and lam > 0):
        raise ValueError("need ε > 0, n > 0, λ > 0")
    c = SMOOTHNESS
    eps_p = epsilon - math.log(1.0 + 2.0 * c / (n * lam) + c * c / (n * n * lam * lam))
    if eps_p > 0:
        return eps_p, 0.0
    return epsilon / 2.0, c / (n * math.expm1(epsilon / 4.0)) - lam / 2.0


def fit_binary(X: np.ndarray, y: np.ndarray, epsilon: float, lam: float, rng: Drbg) -> np.ndarray:
    """Objective-perturbed w for labels ±1 (rows must be on the unit ball)."""
    n, d = X.shape
    eps_p, extra = calibration(epsilon, n, lam)
    b = spherical_laplace(rng, d, 2.0 / eps_p)  # density ∝ exp(−ε′‖b‖/2) (Chaudhuri et al. 2011, Alg. 2)
    reg = lam + extra

    def f(w):
        m = y * (X @ w)
        loss = np.mean(np.logaddexp(0.0, -m)) + 0.5 * reg * (w @ w) + (b @ w) / n
        grad = -(X.T @ (y * expit(-m))) / n + reg * w + b / n
        return loss, grad

    res = minimize(f, np.zeros(d), jac=True, method="L-BFGS-B", options={"maxiter": 2000, "gtol": 1e-9})
    return res.x


def fit(X: np.ndarray, y: np.ndarray, epsilon: float, lam: float, rng: Drbg, classes: int = 2) -> np.ndarray:
    """Binary (labels ±1): a (d, 1) W. K classes (labels 0..K−1): one-vs-rest, ε/K each, a (d, K) W."""
    if classes == 2 and np.all(np.isin(y, (-1.0, 1.0))):
        return fit_binary(X, y, epsilon, lam, rng)[:, None]
    cols = [fit_binary(X, np.where(y == k, 1.0, -1.0), epsilon / classes, lam, rng) for k in range(classes)]
    return np.stack(cols, axis=1)
