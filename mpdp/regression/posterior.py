"""Posterior and predictions of Bayesian linear regression from (noisy) sufficient statistics (Heikkilä et al. 2017, Sec. 3.2.1).

Model: β ~ N(0, λ0⁻¹·I), y | x ~ N(xᵀβ, λ⁻¹), λ = λ0 = 1 (the authors' code). Given A ≈ XᵀX and b ≈ Xᵀy:
Λ = λ0·I + λ·A, μ = Λ⁻¹·λ·b; prediction ŷ = x*ᵀμ with predictive variance 1/λ + x*ᵀΛ⁻¹x*.

A noisy A need not be positive definite; :func:`make_pd` replaces its eigenvalues by their absolute values
(the code's V·diag(|D|)·V⁻¹, here with the symmetric eigendecomposition). Everything here is
post-processing of DP releases and costs no privacy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mpdp.regression.config import LAMBDA, LAMBDA0
from mpdp.regression.statistics import SuffStats


def make_pd(A: np.ndarray) -> np.ndarray:
    """Symmetric PSD version of A: (A + Aᵀ)/2 with every eigenvalue replaced by its absolute value.

    A symmetric input with no negative eigenvalue is returned unchanged (bit for bit).
    """
    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 2 or A.shape[0] != A.shape[1] or not np.all(np.isfinite(A)):
        raise ValueError(f"A must be a finite square matrix, got shape {A.shape}")
    S = 0.5 * (A + A.T)
    w, Q = np.linalg.eigh(S)
    if np.all(w >= 0):
        return S
    out = (Q * np.abs(w)) @ Q.T
    return 0.5 * (out + out.T)


@dataclass(frozen=True)
class Prediction:
    mean: np.ndarray  # x*ᵀμ
    variance: np.ndarray  # 1/λ + x*ᵀΛ⁻¹x*


@dataclass(frozen=True)
class Posterior:
    """N(μ, Λ⁻¹) over β."""

    mean: np.ndarray
    precision: np.ndarray
    lam: float = LAMBDA

    @property
    def covariance(self) -> np.ndarray:
        return np.linalg.inv(self.precision)

    def predict(self, X: np.ndarray) -> Prediction:
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        if X.shape[1] != self.mean.size:
            raise ValueError(f"X must have d = {self.mean.size} columns, got {X.shape[1]}")
        sol = np.linalg.solve(self.precision, X.T)  # Λ⁻¹x* for every row
        return Prediction(X @ self.mean, 1.0 / self.lam + np.einsum("ij,ji->i", X, sol))

    def mae(self, X: np.ndarray, y: np.ndarray) -> float:
        """Mean absolute error of the point predictions (the paper's metric, Fig. 2)."""
        return float(np.mean(np.abs(np.asarray(y, dtype=np.float64) - np.asarray(X, dtype=np.float64) @ self.mean)))


def posterior(stats: SuffStats, *, lam: float = LAMBDA, lam0: float = LAMBDA0, pd_fix: bool = True) -> Posterior:
    """Λ = λ0·I + λ·A⁺ (A⁺ = :func:`make_pd` (A) unless ``pd_fix`` is off), μ = Λ⁻¹·λ·b."""
    if not (lam > 0 and lam0 > 0):
        raise ValueError(f"precisions must be positive, got λ={lam}, λ0={lam0}")
    A = make_pd(stats.A) if pd_fix else 0.5 * (stats.A + stats.A.T)
    prec = lam0 * np.eye(stats.d) + lam * A
    return Posterior(np.linalg.solve(prec, lam * stats.b), prec, lam)
