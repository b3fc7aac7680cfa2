"""L2-regularised logistic regression, trained to the exact minimiser (the DP analysis
assumes it).

J(w) = (1/n)·Σ log(1 + exp(−y_i·wᵀx_i)) + (c/2)·‖w‖², no intercept, labels ±1, where
c = λ in our convention ("half": (λ/2)‖w‖², CM08) and c = 2λ in the paper's ("full": λ‖w‖²).
The DP analysis assumes the exact argmin, so :func:`fit` runs Newton's method until
‖∇J‖ < tol (default 1e−10) and raises if it cannot get there.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Literal

import numpy as np
from scipy.special import expit, log_expit

from mpdp.learn.convex import solver_slack

Convention = Literal["half", "full"]
DEFAULT_TOL = 1e-10  # ‖∇J‖ bound :func:`fit` reaches; a sensitivity of its output adds mpdp.learn.convex.solver_slack(tol, c)


def reg_coefficient(lam: float, convention: Convention) -> float:
    """c in (c/2)‖w‖²: λ for the (λ/2)‖w‖² convention, 2λ for the paper's λ‖w‖²."""
    if lam <= 0:
        raise ValueError(f"lambda must be positive, got {lam}")
    if convention == "half":
        return lam
    if convention == "full":
        return 2.0 * lam
    raise ValueError(f"unknown regulariser convention {convention!r}; use 'half' or 'full'")


def l2_sensitivity(n: int, lam: float, convention: Convention) -> float:
    """ℓ2-sensitivity of the exact argmin under substitution, ‖x‖ ≤ 1: 2/(n·c) (CM08 Cor. 2)."""
    return 2.0 / (n * reg_coefficient(lam, convention))


def fitted_l2_sensitivity(n: int, lam: float, convention: Convention, tol: float = DEFAULT_TOL) -> float:
    """ℓ2-sensitivity of what :func:`fit` returns (stopped at ‖∇J‖ < tol; J is c-strongly convex):
    2/(n·c) + 2·tol/c (:func:`mpdp.learn.convex.solver_slack`)."""
    return l2_sensitivity(n, lam, convention) + solver_slack(tol, reg_coefficient(lam, convention))


def clip_rows(X: np.ndarray, bound: float = 1.0) -> np.ndarray:
    """Scale every row with ‖x‖ > bound onto the sphere of radius ``bound``."""
    X = np.asarray(X, dtype=np.float64)
    norms = np.linalg.norm(X, axis=1)
    factor = np.minimum(1.0, bound / np.maximum(norms, 1e-300))
    return X * factor[:, None]


def objective(w: np.ndarray, X: np.ndarray, y: np.ndarray, c: float) -> float:
    m = y * (X @ w)
    return float(-np.mean(log_expit(m)) + 0.5 * c * (w @ w))


def gradient(w: np.ndarray, X: np.ndarray, y: np.ndarray, c: float) -> np.ndarray:
    m = y * (X @ w)
    return -(X.T @ (y * expit(-m))) / len(y) + c * w


def fit(X: np.ndarray, y: np.ndarray, lam: float, convention: Convention = "half", *, tol: float = DEFAULT_TOL, max_iter: int = 100) -> np.ndarray:
    """argmin J(w) by damped Newton; raises RuntimeError if ‖∇J‖ ≥ tol after max_iter steps."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if X.ndim != 2 or y.shape != (X.shape[0],):
        raise ValueError(f"X must be (n, d) and y (n,), got {X.shape} and {y.shape}")
    if not np.all(np.isin(y, (-1.0, 1.0))):
        raise ValueError("labels must be -1 or +1")
    n, d = X.shape
    c = reg_coefficient(lam, convention)
    w = np.zeros(d)
    f = objective(w, X, y, c)
    for _ in range(max_iter):
        g = gradient(w, X, y, c)
        if np.linalg.norm(g) < tol:
            return w
        p = expit(y * (X @ w))
        s = p * (1.0 - p)
        H = (X.T * s) @ X / n + c * np.eye(d)
        step = np.linalg.solve(H, g)
        t = 1.0
        while True:  # Armijo backtracking keeps Newton globally convergent
            w_new = w - t * step
            f_new = objective(w_new, X, y, c)
            # near the optimum f stops resolving in floating point; a smaller gradient is then progress
            if f_new <= f - 1e-4 * t * (g @ step) or t < 1e-10 or np.linalg.norm(gradient(w_new, X, y, c)) < 0.5 * np.linalg.norm(g):
                break
            t *= 0.5
        w, f = w_new, f_new
    g = gradient(w, X, y, c)
    if np.linalg.norm(g) < tol:
        return w
    raise RuntimeError(f"logistic regression did not converge: ‖∇J‖ = {np.linalg.norm(g):.3g} after {max_iter} Newton steps")


def newton_terms(w: np.ndarray, clip: float | None, X: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, int]:
    """One batch's sums at w: Σ −log σ(m_i), Σ σ(−m_i)·y_i·x_i, Σ s_i·x_i x_iᵀ (s_i = σ(m_i)(1 − σ(m_i))) and its row count,
    with m_i = y_i·wᵀx_i; rows first clipped to ``clip`` when given. What :func:`fit_batches` adds up over a dataset."""
    X = clip_rows(X, clip) if clip is not None else np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    m = y * (X @ w)
    p = expit(m)
    return float(-np.sum(log_expit(m))), X.T @ (y * expit(-m)), (X.T * (p * (1.0 - p))) @ X, len(y)


Reduce = Callable[[Callable[[np.ndarray, np.ndarray], tuple]], list]  # a kernel's per-batch results summed over a dataset


def fit_batches(reduce: Reduce, d: int, lam: float, convention: Convention = "half", *, clip: float | None = None,
                tol: float = DEFAULT_TOL, max_iter: int = 100) -> tuple[np.ndarray, int]:
    """:func:`fit` over a dataset read in batches (bounded memory), and its row count: the same damped Newton steps
    with the same stopping rule ‖∇J‖ < tol and the same RuntimeError, where J, ∇J and the Hessian at each
    iterate are sums of :func:`newton_terms` over the batches (one pass over the rows per evaluation).
    ``reduce(kernel)`` sums ``kernel(X, y)`` over every batch (in this process, or as tasks on a cluster).

    The result is the exact minimiser in the sense the sensitivity needs (‖∇J(ŵ)‖ < tol); it differs from
    :func:`fit` on the same rows only by the order of floating-point additions, hence by at most 2·tol/c in ℓ2
    (both are within tol/c of w*: J is c-strongly convex)."""
    c = reg_coefficient(lam, convention)

    def evaluate(w: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, int]:
        loss, gsum, hsum, n = reduce(partial(newton_terms, w, clip))
        n = int(n)
        if n < 1:
            raise ValueError("logistic regression needs at least one row")
        return float(loss) / n + 0.5 * c * (w @ w), -np.asarray(gsum) / n + c * w, np.asarray(hsum) / n + c * np.eye(d), n

    w = np.zeros(d)
    f, g, H, n = evaluate(w)
    for _ in range(max_iter):
        if np.linalg.norm(g) < tol:
            return w, n
        step = np.linalg.solve(H, g)
        t = 1.0
        while True:  # Armijo backtracking as in :func:`fit`; each trial's gradient and Hessian serve the next step
            w_new = w - t * step
            f_new, g_new, H_new, _ = evaluate(w_new)
            if f_new <= f - 1e-4 * t * (g @ step) or t < 1e-10 or np.linalg.norm(g_new) < 0.5 * np.linalg.norm(g):
                break
            t *= 0.5
        w, f, g, H = w_new, f_new, g_new, H_new
    if np.linalg.norm(g) < tol:
        return w, n
    raise RuntimeError(f"logistic regression did not converge: ‖∇J‖ = {np.linalg.norm(g):.3g} after {max_iter} Newton steps")


def predict(w: np.ndarray, X: np.ndarray) -> np.ndarray:
    """Labels ±1: +1 when 1/(1+exp(−wᵀx)) > 1/2, else −1 (PRR10 Sec. 3.3, ties to −1)."""
    return np.where(np.asarray(X) @ w > 0, 1.0, -1.0)


def error_rate(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(predict(w, X) != y))


def local_logreg(src: Any, name: str, lam: float, convention: str, *, clip: float, tol: float, max_iter: int) -> tuple[np.ndarray, int]:
    """Pathak's local model over a configured dataset's batches (:func:`fit_batches`, labels ±1), and n (``src``: a
    :class:`mpdp.data.dataset.DatasetSource`; :mod:`mpdp.data.engine` reduces them)."""
    from mpdp.data.dataset import open_rows
    from mpdp.data.engine import reducer

    rows = open_rows(src, name=name).pm1()
    return fit_batches(reducer(src, rows), rows.dimension, lam, convention, clip=clip, tol=tol, max_iter=max_iter)  # type: ignore[arg-type]
