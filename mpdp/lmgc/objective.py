"""The (perturbed) large-margin objective over symmetric blocks (Pathak & Raj 2010, eqs. (4)–(8),
and our corrected variant).

    J_p(θ) = L_H(θ) + λ·Σ_c tr(I_Φ Φ_c I_Φ) + (Δ/2)·Σ_c ‖Φ_c‖_F² + (1/n)·Σ_c ⟨b_c, Φ_c⟩_F

with L_H(θ) = (1/n)·Σ_i ℓ_i(θ), ℓ_i(θ) = Σ_{c≠y_i} H_h(1 + x̃_iᵀ(Φ_{y_i} − Φ_c)x̃_i) (eqs. (4)–(6)
with the hinge replaced by Huber; the ridge Δ is ours). Δ = 0 and b = 0 give the paper's J (5)/(6); a
shared b (every b_c equal) gives the paper's J_p (8).

Gradient of the un-normalised per-sample loss ℓ_i (used by Lemma 1 and by the noise's sensitivity 2G): the y-block
is Σ_{c≠y} H′(t_c)·x̃x̃ᵀ and each c-block is −H′(t_c)·x̃x̃ᵀ, so
‖∇ℓ_i‖_F² = ‖x̃‖⁴·[(Σ_c H′_c)² + Σ_c H′_c²] ≤ R⁴·C(C−1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mpdp.lmgc import huber
from mpdp.lmgc.params import quadratic_scores, sym_dim, sym_to_iso, trace_selector


def margins(theta: np.ndarray, Xt: np.ndarray, y: np.ndarray) -> np.ndarray:
    """t[i, c] = 1 + x̃_iᵀ(Φ_{y_i} − Φ_c)x̃_i; the entry c = y_i is set to −inf (no loss term)."""
    q = quadratic_scores(theta, Xt)
    rows = np.arange(len(y))
    t = 1.0 + q[rows, y][:, None] - q
    t[rows, y] = -np.inf
    return t


def _blocks_from_weights(W: np.ndarray, Xt: np.ndarray) -> np.ndarray:
    """Σ_i W[i, c]·x̃_i x̃_iᵀ for every class c; shape (C, D, D)."""
    active = np.any(W != 0.0, axis=1)  # rows with zero slope everywhere contribute nothing
    if not np.all(active):
        W, Xt = W[active], Xt[active]
    n, D = Xt.shape
    C = W.shape[1]
    Z = (W[:, :, None] * Xt[:, None, :]).reshape(n, C * D)
    return (Z.T @ Xt).reshape(C, D, D)


def _class_weights(P: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-sample block weights from per-(i, c) slopes P (P[i, y_i] = 0): −P off the label, Σ_c P on it."""
    W = -P
    W[np.arange(len(y)), y] = P.sum(axis=1)
    return W


@dataclass(frozen=True)
class Problem:
    """One instance of J_p. ``b`` is None (no perturbation) or a (C, D, D) array of blocks b_c.

    Xt holds augmented rows x̃ = (x, 1); y holds class indices 0..C−1.
    """

    Xt: np.ndarray
    y: np.ndarray
    n_classes: int
    h: float = 0.5
    lam: float = 0.0
    ridge: float = 0.0
    b: np.ndarray | None = None
    _sel: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        Xt = np.ascontiguousarray(self.Xt, dtype=np.float64)
        y = np.asarray(self.y)
        if Xt.ndim != 2 or y.shape != (Xt.shape[0],):
            raise ValueError(f"Xt must be (n, D) and y (n,), got {Xt.shape} and {y.shape}")
        if not np.issubdtype(y.dtype, np.integer) or y.min() < 0 or y.max() >= self.n_classes:
            raise ValueError(f"labels must be integers in [0, {self.n_classes})")
        if self.lam < 0 or self.ridge < 0:
            raise ValueError(f"λ and Δ must be >= 0, got λ={self.lam}, Δ={self.ridge}")
        huber.curvature(self.h)  # validates h
        if self.b is not None and np.shape(self.b) != self.shape:
            raise ValueError(f"b must have shape {self.shape}, got {np.shape(self.b)}")
        object.__setattr__(self, "Xt", Xt)
        object.__setattr__(self, "y", y.astype(np.intp))
        object.__setattr__(self, "_sel", trace_selector(Xt.shape[1]))

    # -- shapes ------------------------------------------------------------------
    @property
    def n(self) -> int:
        return self.Xt.shape[0]

    @property
    def D(self) -> int:
        return self.Xt.shape[1]

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.n_classes, self.Xt.shape[1], self.Xt.shape[1])

    @property
    def dim(self) -> int:
        """p = C·D_s, the dimension of the symmetric parameter space."""
        return self.n_classes * sym_dim(self.D)

    def with_b(self, b: np.ndarray | None) -> "Problem":
        return Problem(self.Xt, self.y, self.n_classes, self.h, self.lam, self.ridge, b)

    # -- pieces -------------------------------------------------------------------
    def loss_value_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """L_H(θ) and its (symmetric) Frobenius gradient."""
        t = margins(theta, self.Xt, self.y)
        val = float(huber.value(t, self.h).sum()) / self.n
        P = huber.derivative(t, self.h)
        return val, _blocks_from_weights(_class_weights(P, self.y), self.Xt) / self.n

    def regulariser_value_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """λ·Σ tr(I_Φ Φ_c I_Φ) + (Δ/2)·Σ‖Φ_c‖_F² and its gradient λ·I_Φ + Δ·Φ_c."""
        tr = float(np.trace(theta[:, :-1, :-1], axis1=1, axis2=2).sum())
        val = self.lam * tr + 0.5 * self.ridge * float(np.sum(theta * theta))
        return val, self.lam * self._sel[None] + self.ridge * theta

    def perturbation_value_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """(1/n)·Σ_c ⟨b_c, Φ_c⟩_F; only the symmetric part of b_c acts on symmetric Φ_c."""
        if self.b is None:
            return 0.0, np.zeros(self.shape)
        bs = 0.5 * (self.b + np.swapaxes(self.b, 1, 2))
        return float(np.sum(bs * theta)) / self.n, bs / self.n

    def value_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """J_p(θ) and its symmetric Frobenius gradient (C, D, D)."""
        f1, g1 = self.loss_value_grad(theta)
        f2, g2 = self.regulariser_value_grad(theta)
        f3, g3 = self.perturbation_value_grad(theta)
        return f1 + f2 + f3, g1 + g2 + g3

    def value(self, theta: np.ndarray) -> float:
        return self.value_grad(theta)[0]

    def hessp(self, theta: np.ndarray, V: np.ndarray) -> np.ndarray:
        """∇²J_p(θ)·V (a.e.): (1/n)Σ_i Σ_{c≠y} H″(t_ic)·⟨a_ic, V⟩·a_ic + Δ·V."""
        t = margins(theta, self.Xt, self.y)
        s = quadratic_scores(V, self.Xt)
        rows = np.arange(self.n)
        dt = s[rows, self.y][:, None] - s
        U = huber.second_derivative(t, self.h) * dt
        U[rows, self.y] = 0.0
        return _blocks_from_weights(_class_weights(U, self.y), self.Xt) / self.n + self.ridge * V

    # -- per-sample quantities (privacy analysis) ---------------------------------
    def sample_grad(self, theta: np.ndarray, xt: np.ndarray, label: int) -> np.ndarray:
        """∇ℓ(θ; z) of the un-normalised per-sample loss, shape (C, D, D)."""
        xt = np.asarray(xt, dtype=np.float64)[None, :]
        lab = np.array([label], dtype=np.intp)
        P = huber.derivative(margins(theta, xt, lab), self.h)
        return _blocks_from_weights(_class_weights(P, lab), xt)

    def sample_hessian_iso(self, theta: np.ndarray, xt: np.ndarray, label: int) -> np.ndarray:
        """∇²ℓ(θ; z) in isometric coordinates, (p, p): Σ_{c≠y} H″(t_c)·a_c a_cᵀ, rank ≤ C−1 (the Jacobian term)."""
        xt = np.asarray(xt, dtype=np.float64)
        t = margins(theta, xt[None, :], np.array([label], dtype=np.intp))[0]
        xx = sym_to_iso(np.outer(xt, xt))
        Ds = xx.shape[0]
        Hs = np.zeros((self.dim, self.dim))
        for c in range(self.n_classes):
            if c == label:
                continue
            a: np.ndarray = np.zeros((self.n_classes, Ds))
            a[label] = xx
            a[c] = -xx
            a = a.reshape(-1)
            Hs += float(huber.second_derivative(t[c], self.h)) * np.outer(a, a)
        return Hs

    def hessian_iso(self, theta: np.ndarray) -> np.ndarray:
        """n·∇²(J_p without b)(θ) = Σ_i ∇²ℓ_i + nΔ·I in isometric coordinates (small instances only)."""
        H = sum(self.sample_hessian_iso(theta, self.Xt[i], int(self.y[i])) for i in range(self.n))
        return H + self.n * self.ridge * np.eye(self.dim)


def gradient_bound(R: float, n_classes: int) -> float:
    """G = R²·√(C(C−1)): bound on ‖∇ℓ(θ; z)‖_F over all θ and ‖x̃‖ ≤ R (the paper's Lemma 1 bounds one block only)."""
    if R <= 0 or n_classes < 2:
        raise ValueError(f"need R > 0 and C >= 2, got R={R}, C={n_classes}")
    return R * R * float(np.sqrt(n_classes * (n_classes - 1)))
