"""The Φ_c parameterisation of a Gaussian class ellipsoid (Pathak & Raj 2010, eqs. (1)–(3)).

Class c is (μ_c, Ψ_c, θ_c): centroid, inverse covariance Ψ_c ⪰ 0 and offset θ_c ≥ 0. Eq. (2)
collects them in the symmetric (d+1)×(d+1) matrix

    Φ_c = [[Ψ_c, −Ψ_cμ_c], [−μ_cᵀΨ_c, μ_cᵀΨ_cμ_c + θ_c]],

so that with x̃ = (x, 1), x̃ᵀΦ_cx̃ = (x − μ_c)ᵀΨ_c(x − μ_c) + θ_c and decision rule (1) becomes (3):
ŷ(x) = argmin_c x̃ᵀΦ_cx̃.

A model θ = (Φ_1..Φ_C) is stored as an array of shape (C, D, D), D = d+1, every block symmetric.
Optimisers and noise samplers work in *isometric coordinates*: for a symmetric S,
iso(S) lists the diagonal entries as they are and the upper off-diagonal entries times √2, so that
‖iso(S)‖₂ = ‖S‖_F and ⟨iso(S), iso(T)⟩ = ⟨S, T⟩_F. The Frobenius gradient of a function of a
symmetric matrix, mapped with iso, is its gradient in these coordinates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SQRT2 = float(np.sqrt(2.0))


def augment(X: np.ndarray) -> np.ndarray:
    """x̃ = (x, 1) for every row of X (eq. (3))."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (n, d), got shape {X.shape}")
    return np.hstack([X, np.ones((X.shape[0], 1))])


def sym_dim(D: int) -> int:
    """D_s = D(D+1)/2, the dimension of the space of symmetric D×D matrices."""
    return D * (D + 1) // 2


def _iso_weights(D: int) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    iu = np.triu_indices(D)
    w = np.where(iu[0] == iu[1], 1.0, SQRT2)
    return iu, w


def sym_to_iso(S: np.ndarray) -> np.ndarray:
    """iso(S) for a symmetric (..., D, D) array: shape (..., D_s); an isometry."""
    S = np.asarray(S, dtype=np.float64)
    D = S.shape[-1]
    iu, w = _iso_weights(D)
    return S[..., iu[0], iu[1]] * w


def iso_to_sym(v: np.ndarray, D: int) -> np.ndarray:
    """Inverse of :func:`sym_to_iso`: b_kk = v_kk and b_kl = b_lk = v_kl/√2."""
    v = np.asarray(v, dtype=np.float64)
    if v.shape[-1] != sym_dim(D):
        raise ValueError(f"iso vector must end in D_s={sym_dim(D)}, got shape {v.shape}")
    iu, w = _iso_weights(D)
    S = np.zeros(v.shape[:-1] + (D, D))
    vals = v / w
    S[..., iu[0], iu[1]] = vals
    S[..., iu[1], iu[0]] = vals
    return S


def theta_to_vec(theta: np.ndarray) -> np.ndarray:
    """Flatten a (C, D, D) symmetric model into its p = C·D_s isometric coordinates."""
    return sym_to_iso(theta).reshape(-1)


def vec_to_theta(v: np.ndarray, C: int, D: int) -> np.ndarray:
    """Inverse of :func:`theta_to_vec`."""
    return iso_to_sym(np.asarray(v).reshape(C, sym_dim(D)), D)


def trace_selector(D: int) -> np.ndarray:
    """I_Φ = diag(1, …, 1, 0) of size D = d+1 (eq. (5)): tr(I_Φ Φ I_Φ) = tr(Ψ)."""
    m = np.eye(D)
    m[-1, -1] = 0.0
    return m


def phi_from_gaussian(mu: np.ndarray, psi: np.ndarray, offset: float) -> np.ndarray:
    """Φ from (μ, Ψ, θ) by eq. (2)."""
    mu = np.asarray(mu, dtype=np.float64)
    psi = np.asarray(psi, dtype=np.float64)
    d = mu.shape[0]
    if psi.shape != (d, d):
        raise ValueError(f"Ψ must be ({d}, {d}), got {psi.shape}")
    pm = psi @ mu
    phi = np.empty((d + 1, d + 1))
    phi[:d, :d] = psi
    phi[:d, d] = -pm
    phi[d, :d] = -pm
    phi[d, d] = float(mu @ pm + offset)
    return phi


@dataclass(frozen=True)
class GaussianClass:
    """One class ellipsoid (μ, Ψ, θ) recovered from Φ (top-left block Ψ, then μ and θ)."""

    mu: np.ndarray
    psi: np.ndarray
    offset: float


def gaussian_from_phi(phi: np.ndarray) -> GaussianClass:
    """(μ, Ψ, θ) from Φ: Ψ is the top-left block, μ = −Ψ⁻¹·(top-right column), θ = Φ_DD − μᵀΨμ.

    Raises ``numpy.linalg.LinAlgError`` if Ψ is singular (then μ is not determined; prediction
    only needs Φ anyway).
    """
    phi = np.asarray(phi, dtype=np.float64)
    d = phi.shape[0] - 1
    psi = phi[:d, :d]
    mu = -np.linalg.solve(psi, phi[:d, d])
    return GaussianClass(mu=mu, psi=psi.copy(), offset=float(phi[d, d] - mu @ psi @ mu))


def quadratic_scores(theta: np.ndarray, Xt: np.ndarray) -> np.ndarray:
    """q[i, c] = x̃_iᵀ Φ_c x̃_i for augmented rows Xt (n, D) and θ (C, D, D); shape (n, C)."""
    C, D, _ = theta.shape
    Y = Xt @ theta.transpose(1, 0, 2).reshape(D, C * D)  # (n, C·D): rows x̃ᵀΦ_c
    return np.einsum("ncd,nd->nc", Y.reshape(-1, C, D), Xt)


def predict_phi(theta: np.ndarray, Xt: np.ndarray) -> np.ndarray:
    """Decision rule (3): ŷ = argmin_c x̃ᵀΦ_cx̃ (class indices 0..C−1)."""
    return np.argmin(quadratic_scores(theta, Xt), axis=1)


def predict_gaussian(classes: list[GaussianClass], X: np.ndarray) -> np.ndarray:
    """Decision rule (1): ŷ = argmin_c (x − μ_c)ᵀΨ_c(x − μ_c) + θ_c."""
    X = np.asarray(X, dtype=np.float64)
    scores = np.stack([np.einsum("nd,de,ne->n", X - g.mu, g.psi, X - g.mu) + g.offset for g in classes], axis=1)
    return np.argmin(scores, axis=1)


def psd_project(S: np.ndarray) -> np.ndarray:
    """Nearest PSD matrix in Frobenius norm (eigenvalue clipping), batched over leading axes."""
    w, V = np.linalg.eigh(S)
    return (V * np.maximum(w, 0.0)[..., None, :]) @ np.swapaxes(V, -1, -2)


def common_psd_shift(theta: np.ndarray) -> np.ndarray:
    """Add s·I to every Φ_c, with the least s ≥ 0 that makes all blocks PSD.

    Decision-preserving: x̃ᵀ(Φ_c + sI)x̃ = x̃ᵀΦ_cx̃ + s‖x̃‖², the same shift for every class, so
    rule (3) is unchanged. Post-processing, so it keeps any DP guarantee of θ.
    """
    lo = float(np.min(np.linalg.eigvalsh(theta)))
    return theta + max(0.0, -lo) * np.eye(theta.shape[-1])
