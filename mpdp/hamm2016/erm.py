"""Exact (weighted) ERM of the global classifier on the labelled auxiliary data (the paper's Algorithms 1 and 2;
multiclass ours).

Objective (spec eq. (17), no intercept, (λ/2)‖w‖² convention):

    J(w) = (1/N)·Σ_j l^α(w; x_j) + (λ/2)‖w‖².

* C = 2 (eq. (12), logistic l(m) = log(1 + e^{−m})): l^α(w; x) = α·l(wᵀx) + (1 − α)·l(−wᵀx), α = alpha[:, 1].
  This is cross-entropy with a soft target; α ∈ {0, 1} gives ordinary logistic regression with labels ±1.
* C > 2 (ours): W ∈ R^{C×d}, l^α(W; x) = −Σ_k α_k·log softmax(Wx)_k (soft-target multinomial LR).

Majority vote (Alg. 1) is the same problem with one-hot α. The output-perturbation guarantee (Thm 1 / Thm 3)
holds for the *exact* minimiser, so :func:`fit_soft` runs Newton's method with Armijo backtracking until
‖∇J‖ < tol and raises RuntimeError if it cannot get there. J is λ-strongly convex, so the minimiser is unique.

Speed: the loss depends on the data only through (x_j, α_j) and is linear in α, so identical rows are merged
exactly (weight = multiplicity, α = mean α of the copies) before Newton starts. The multiclass Hessian is built
from C(C−1)/2 weighted Gram matrices Xᵀdiag(s)X (the block rows of the data part sum to zero, which gives the
blocks of the last class for free); for N = 45,000, d = 123, C = 5 one Newton step costs about a second.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve
from scipy.special import expit, log_expit, log_softmax, softmax

DEFAULT_TOL = 1e-9
DEFAULT_MAX_ITER = 200


# ------------------------------------------------------------------------------------------- inputs


def _as_alpha(alpha: np.ndarray, n: int) -> np.ndarray:
    """(N, C) soft labels; a 1-d array is read as binary α_j = alpha[j] (class 1 = +1)."""
    a = np.asarray(alpha, dtype=np.float64)
    if a.ndim == 1:
        a = np.stack([1.0 - a, a], axis=1)
    if a.ndim != 2 or a.shape[0] != n or a.shape[1] < 2:
        raise ValueError(f"alpha must be (N, C) with N = {n} and C >= 2 (or (N,) for binary), got shape {np.shape(alpha)}")
    if not np.all(np.isfinite(a)):
        raise ValueError("alpha holds non-finite values")
    if np.any(a < -1e-12) or np.any(a > 1 + 1e-12):
        raise ValueError(f"alpha must lie in [0, 1], got range [{a.min():.6g}, {a.max():.6g}]")
    if np.any(np.abs(a.sum(axis=1) - 1.0) > 1e-9):
        j = int(np.argmax(np.abs(a.sum(axis=1) - 1.0)))
        raise ValueError(f"every row of alpha must sum to 1; row {j} sums to {a[j].sum():.12g}")
    return np.clip(a, 0.0, 1.0)


def _as_X(X: np.ndarray) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(f"X must be a non-empty (N, d) matrix, got shape {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError("X holds non-finite values")
    return X


def merge_duplicates(X: np.ndarray, alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X_u, α_u, c): the distinct rows, their mean soft label and multiplicity.

    Exact for J: Σ over the c copies of x of l^{α_i}(w; x) = c·l^{ᾱ}(w; x) because l^α is affine in α.
    """
    Xu, inv, cnt = np.unique(X, axis=0, return_inverse=True, return_counts=True)
    inv = np.asarray(inv).ravel()
    if len(Xu) == len(X):
        return X, alpha, np.ones(len(X))
    A = np.zeros((len(Xu), alpha.shape[1]))
    np.add.at(A, inv, alpha)
    return Xu, A / cnt[:, None], cnt.astype(np.float64)


# ------------------------------------------------------------------------------------------- loss


def _binary_terms(m: np.ndarray, a1: np.ndarray) -> np.ndarray:
    # α·log(1 + e^{−m}) + (1 − α)·log(1 + e^{m}) = −α·log σ(m) − (1 − α)·log σ(−m)
    return -(a1 * log_expit(m) + (1.0 - a1) * log_expit(-m))


def loss_alpha(w: np.ndarray, X: np.ndarray, alpha: np.ndarray) -> float:
    """(1/N)·Σ_j l^α(w; x_j) (eq. (12), no regulariser): binary w (d,), multiclass W (C, d)."""
    X = _as_X(X)
    a = _as_alpha(alpha, X.shape[0])
    w = np.asarray(w, dtype=np.float64)
    if a.shape[1] == 2 and w.ndim == 1:
        return float(np.mean(_binary_terms(X @ w, a[:, 1])))
    if w.ndim != 2 or w.shape != (a.shape[1], X.shape[1]):
        raise ValueError(f"W must be (C, d) = ({a.shape[1]}, {X.shape[1]}), got {w.shape}")
    return float(-np.mean(np.sum(a * log_softmax(X @ w.T, axis=1), axis=1)))


def objective(w: np.ndarray, X: np.ndarray, alpha: np.ndarray, lam: float) -> float:
    """J(w) = loss_alpha + (λ/2)‖w‖² (eq. (17); Frobenius norm for W)."""
    w = np.asarray(w, dtype=np.float64)
    return loss_alpha(w, X, alpha) + 0.5 * lam * float(np.sum(w * w))


def gradient(w: np.ndarray, X: np.ndarray, alpha: np.ndarray, lam: float) -> np.ndarray:
    """∇J: (1/N)·Xᵀ(σ(Xw) − α) + λw (binary) or (1/N)·(softmax(XWᵀ) − A)ᵀX + λW (multiclass)."""
    X = _as_X(X)
    a = _as_alpha(alpha, X.shape[0])
    w = np.asarray(w, dtype=np.float64)
    if a.shape[1] == 2 and w.ndim == 1:
        return X.T @ (expit(X @ w) - a[:, 1]) / len(X) + lam * w
    return (softmax(X @ w.T, axis=1) - a).T @ X / len(X) + lam * w


def predict(w: np.ndarray, X: np.ndarray) -> np.ndarray:
    """Class indices: binary 1 iff wᵀx > 0 (ties to class 0); multiclass argmax_k (Wx)_k, ties to the lowest k."""
    w = np.asarray(w, dtype=np.float64)
    X = np.asarray(X, dtype=np.float64)
    if w.ndim == 1:
        return (X @ w > 0).astype(np.int64)
    return np.argmax(X @ w.T, axis=1).astype(np.int64)


# ------------------------------------------------------------------------------------------- solver


def _solve_spd(H: np.ndarray, g: np.ndarray) -> np.ndarray:
    try:
        return cho_solve(cho_factor(H, check_finite=False), g, check_finite=False)
    except LinAlgError:  # H ⪰ λI in exact arithmetic; fall back if rounding broke positive-definiteness
        return np.linalg.solve(H, g)


class _Binary:
    """J restricted to merged rows: weights c_j/N, targets α_j."""

    def __init__(self, X: np.ndarray, a1: np.ndarray, c: np.ndarray, n_total: float, lam: float) -> None:
        self.X, self.a1, self.wt, self.lam = X, a1, c / n_total, lam
        self.shape = (X.shape[1],)

    def value(self, w: np.ndarray) -> float:
        return float(self.wt @ _binary_terms(self.X @ w, self.a1) + 0.5 * self.lam * (w @ w))

    def grad_hess(self, w: np.ndarray, hessian: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        p = expit(self.X @ w)
        g = self.X.T @ (self.wt * (p - self.a1)) + self.lam * w
        if not hessian:
            return g, None
        s = self.wt * p * (1.0 - p)
        H = (self.X * s[:, None]).T @ self.X
        H[np.diag_indices_from(H)] += self.lam
        return g, H


class _Multi:
    """Soft-target multinomial LR on merged rows; parameters W (C, d), flattened row-major for Newton."""

    def __init__(self, X: np.ndarray, A: np.ndarray, c: np.ndarray, n_total: float, lam: float) -> None:
        self.X, self.A, self.wt, self.lam = X, A, c / n_total, lam
        self.C, self.d = A.shape[1], X.shape[1]
        self.shape = (self.C, self.d)

    def value(self, w: np.ndarray) -> float:
        W = w.reshape(self.shape)
        ls = log_softmax(self.X @ W.T, axis=1)
        return float(-(self.wt @ np.sum(self.A * ls, axis=1)) + 0.5 * self.lam * (w @ w))

    def grad_hess(self, w: np.ndarray, hessian: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        W = w.reshape(self.shape)
        P = softmax(self.X @ W.T, axis=1)
        G = ((P - self.A) * self.wt[:, None]).T @ self.X + self.lam * W
        if not hessian:
            return G.ravel(), None
        C, d, X = self.C, self.d, self.X
        # data part: block (k, l) = Σ_j c_j/N·(p_jk δ_kl − p_jk p_jl)·x_j x_jᵀ. Its block rows sum to zero
        # (Σ_l (p_k δ_kl − p_k p_l) = p_k(1 − Σ_l p_l) = 0), so blocks involving the last class follow.
        H = np.zeros((C * d, C * d))
        blk = lambda k, m: (slice(k * d, (k + 1) * d), slice(m * d, (m + 1) * d))  # noqa: E731
        for k in range(C - 1):
            for m in range(k, C - 1):
                s = self.wt * P[:, k] * ((1.0 if k == m else 0.0) - P[:, m])
                B = (X * s[:, None]).T @ X
                H[blk(k, m)] = B
                if m != k:
                    H[blk(m, k)] = B
        last = C - 1
        for k in range(C - 1):
            B = -np.asarray(sum(H[blk(k, m)] for m in range(C - 1)))  # asarray: for the type (sum may start at 0)
            H[blk(k, last)] = B
            H[blk(last, k)] = B.T
        H[blk(last, last)] = -sum(H[blk(k, last)] for k in range(C - 1))
        H[np.diag_indices_from(H)] += self.lam
        return G.ravel(), H


def _newton(prob, w0: np.ndarray, tol: float, max_iter: int) -> np.ndarray:
    """Damped Newton with Armijo backtracking; returns w with ‖∇J(w)‖ < tol or raises RuntimeError."""
    w = w0.ravel().copy()
    f = prob.value(w)
    gnorm = math.inf
    for _ in range(max_iter):
        g, H = prob.grad_hess(w)
        gnorm = float(np.linalg.norm(g))
        if gnorm < tol:
            return w.reshape(prob.shape)
        step = _solve_spd(H, g)
        slope = float(g @ step)  # > 0: the Newton direction −step descends
        t = 1.0
        while True:
            w_new = w - t * step
            f_new = prob.value(w_new)
            if f_new <= f - 1e-4 * t * slope:
                break
            # near the optimum J stops resolving in floating point; a clearly smaller gradient is progress then
            if f_new <= f + 1e-12 * max(1.0, abs(f)):
                g_new, _ = prob.grad_hess(w_new, hessian=False)
                if np.linalg.norm(g_new) < 0.5 * gnorm:
                    break
            t *= 0.5
            if t < 1e-12:
                raise RuntimeError(f"weighted ERM: line search failed at ‖∇J‖ = {gnorm:.3g}")
        w, f = w_new, f_new
    g, _ = prob.grad_hess(w, hessian=False)
    gnorm = float(np.linalg.norm(g))
    if gnorm < tol:
        return w.reshape(prob.shape)
    raise RuntimeError(f"weighted ERM did not converge: ‖∇J‖ = {gnorm:.3g} ≥ {tol:g} after {max_iter} Newton steps")


def fit_soft(X: np.ndarray, alpha: np.ndarray, lam: float, *, tol: float = DEFAULT_TOL, max_iter: int = DEFAULT_MAX_ITER,
             merge: bool = True) -> np.ndarray:
    """argmin_w (1/N)·Σ_j l^α(w; x_j) + (λ/2)‖w‖² (spec eq. (17)), converged to ‖∇J‖ < tol.

    alpha: (N, C) soft labels (rows in the simplex) or (N,) binary α_j. C = 2 returns w (d,) (logistic loss,
    α_j = alpha[j, 1]); C > 2 returns W (C, d) (softmax cross-entropy). One-hot alpha = ERM on hard labels
    (Alg. 1). Raises ValueError on bad inputs and RuntimeError if Newton does not converge.
    """
    if not (isinstance(lam, (int, float, np.floating)) and math.isfinite(lam) and lam > 0):
        raise ValueError(f"lam must be finite and positive, got {lam!r}")
    X = _as_X(X)
    a = _as_alpha(alpha, X.shape[0])
    n_total = float(X.shape[0])
    c = np.ones(X.shape[0])
    if merge:
        X, a, c = merge_duplicates(X, a)
    prob: _Binary | _Multi
    if a.shape[1] == 2:
        prob = _Binary(X, a[:, 1], c, n_total, float(lam))
    else:
        prob = _Multi(X, a, c, n_total, float(lam))
    return _newton(prob, np.zeros(prob.shape), tol, max_iter)
