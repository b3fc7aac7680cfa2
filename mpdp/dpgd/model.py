"""The learning problem, network-free: L2-regularised logistic regression (binary, labels ±1) and multinomial
(softmax) regression (labels 0..K−1), no intercept, on rows with ‖x‖ ≤ 1.

Objective over all parties' rows (N in total):  F(W) = (1/N)·Σ_i ℓ(Wᵀx_i, y_i) + (λ/2)·‖W‖²_F, W of shape (d, m)
with m = 1 (binary) or m = K (softmax).

What a party computes from its own rows, every per-row term bounded so that one row moves the party's vector by at
most its stated ℓ2 norm:

* :func:`gradient_sum` — Σ_i clip_C(∇ℓ_i(W)), each row's gradient g_i = x_i ⊗ (p_i − e_{y_i}) scaled onto the
  ball of radius C when longer (‖g_i‖ = ‖x_i‖·‖p_i − e_{y_i}‖ ≤ 1 for binary, ≤ √2 for softmax);
* :func:`second_moment` — the upper triangle of Σ_i x_i x_iᵀ with off-diagonal entries scaled by √2, so that the
  vector's ℓ2 norm is ‖x_i x_iᵀ‖_F = ‖x_i‖² ≤ 1 per row.

The curator uses the second moment in Böhning's bound on the Hessian: ∇²F(W) ⪯ A ⊗ (XᵀX/N) + λI with
A = 1/4 (binary) or A = ½(I − 11ᵀ/K) (softmax), whatever W is (Böhning 1992).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import expit, softmax

from mpdp.learn.logreg import clip_rows

BINARY, SOFTMAX = "binary", "softmax"
TASKS = (BINARY, SOFTMAX)


@dataclass(frozen=True)
class Task:
    """Binary logistic regression (classes = 2, labels ±1) or softmax over ``classes`` labels 0..K−1."""

    kind: str
    classes: int = 2

    def __post_init__(self) -> None:
        if self.kind not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {self.kind!r}")
        if self.kind == BINARY and self.classes != 2:
            raise ValueError("a binary task has 2 classes")
        if self.kind == SOFTMAX and not 2 <= self.classes <= 1000:
            raise ValueError(f"softmax needs 2..1000 classes, got {self.classes}")

    @property
    def width(self) -> int:
        """m: columns of W."""
        return 1 if self.kind == BINARY else self.classes

    def bohning(self) -> np.ndarray:
        """A with ∇²ℓ ⪯ A ⊗ xxᵀ for every W (m × m)."""
        if self.kind == BINARY:
            return np.array([[0.25]])
        K = self.classes
        return 0.5 * (np.eye(K) - np.ones((K, K)) / K)

    def check_labels(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y)
        if self.kind == BINARY:
            if not np.all(np.isin(y, (-1.0, 1.0))):
                raise ValueError("binary labels must be -1 or +1")
            return y.astype(np.float64)
        if not (np.all(y == np.round(y)) and np.all((y >= 0) & (y < self.classes))):
            raise ValueError(f"softmax labels must be integers in 0..{self.classes - 1}")
        return y.astype(np.int64)

    def residuals(self, W: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """r_i = p_i − e_{y_i} (n × m); binary: σ(wᵀx) − [y = +1]."""
        S = X @ W
        if self.kind == BINARY:
            return expit(S) - (y[:, None] > 0)
        R = softmax(S, axis=1)
        R[np.arange(len(y)), y] -= 1.0
        return R

    def predict(self, W: np.ndarray, X: np.ndarray) -> np.ndarray:
        S = np.asarray(X, dtype=np.float64) @ W
        if self.kind == BINARY:
            return np.where(S[:, 0] >= 0, 1.0, -1.0)
        return np.argmax(S, axis=1)

    def error(self, W: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
        return float(np.mean(self.predict(W, X) != y))


def prepare(X: np.ndarray) -> np.ndarray:
    """Rows scaled onto the unit ball (‖x‖ ≤ 1): every party does this before computing anything."""
    return clip_rows(np.asarray(X, dtype=np.float64), 1.0)


def party_rows(task: Task, X: np.ndarray, y: np.ndarray, values: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A party's rows as it uses them: on the unit ball (:func:`prepare`), labels as ``task`` wants them:
    binary → ±1 (the larger of two label values is +1), softmax → integers 0..K−1 (checked). ValueError otherwise.

    ``values``: the distinct labels of the whole dataset (np.unique), when ``X, y`` is one batch of it; default: y's own."""
    y = np.asarray(y, dtype=np.float64)
    if task.kind == BINARY:
        vals = np.unique(y) if values is None else np.asarray(values, dtype=np.float64)
        if len(vals) > 2:
            raise ValueError(f"a binary task needs two label values, the data have {len(vals)}")
        if len(vals) == 2 or (len(vals) == 1 and vals[0] > 0):
            y = np.where(y == vals[-1], 1.0, -1.0)
        elif len(vals) == 1:
            y = -np.ones_like(y)
    return prepare(X), task.check_labels(y)


def gradient_sum(task: Task, W: np.ndarray, X: np.ndarray, y: np.ndarray, clip: float) -> np.ndarray:
    """Σ_i clip_C(x_i ⊗ r_i), flattened (d·m,), rows of X already on the unit ball."""
    R = task.residuals(W, X, y)
    norms = np.linalg.norm(X, axis=1) * np.linalg.norm(R, axis=1)
    scale = np.minimum(1.0, clip / np.maximum(norms, 1e-300))
    return (X.T @ (R * scale[:, None])).ravel()


def second_moment(X: np.ndarray) -> np.ndarray:
    """Upper triangle (row-major, diagonal included) of XᵀX, off-diagonal entries times √2; (d(d+1)/2,)."""
    d = X.shape[1]
    S = X.T @ X
    iu = np.triu_indices(d)
    v = S[iu]
    v[iu[0] != iu[1]] *= math.sqrt(2.0)
    return v


def unpack_second_moment(v: np.ndarray, d: int) -> np.ndarray:
    """The symmetric d × d matrix of a (noisy) :func:`second_moment` vector."""
    iu = np.triu_indices(d)
    v = np.asarray(v, dtype=np.float64)
    if v.shape != (len(iu[0]),):
        raise ValueError(f"a second moment of d = {d} has {len(iu[0])} entries, got {v.shape}")
    vals = v.copy()
    vals[iu[0] != iu[1]] /= math.sqrt(2.0)
    S = np.zeros((d, d))
    S[iu] = vals
    return S + np.triu(S, 1).T


def objective(task: Task, W: np.ndarray, X: np.ndarray, y: np.ndarray, lam: float) -> float:
    S = X @ W
    if task.kind == BINARY:
        loss = np.logaddexp(0.0, -y * S[:, 0])
    else:
        loss = np.logaddexp.reduce(S, axis=1) - S[np.arange(len(y)), y]
    return float(np.mean(loss) + 0.5 * lam * np.sum(W * W))


def fit_nonprivate(task: Task, X: np.ndarray, y: np.ndarray, lam: float, *, iters: int = 200, tol: float = 1e-9) -> np.ndarray:
    """The exact minimiser by Böhning-preconditioned Newton-type steps (no noise): the reference model."""
    n, d = X.shape
    P = Preconditioner(task, X.T @ X / n, lam)
    W = np.zeros((d, task.width))
    for _ in range(iters):
        G = gradient_sum(task, W, X, y, math.inf).reshape(d, -1) / n + lam * W
        if np.linalg.norm(G) < tol:
            break
        W = W - P.solve(G)
    return W


class Preconditioner:
    """P = A ⊗ S + λI with S ⪰ 0 (eigenvalues of a noisy S clipped at 0); :meth:`solve` applies P⁻¹ to a d × m G."""

    def __init__(self, task: Task, S: np.ndarray, lam: float) -> None:
        if lam <= 0:
            raise ValueError(f"lambda must be positive, got {lam}")
        ev, self.V = np.linalg.eigh(0.5 * (S + S.T))
        self.ev = np.maximum(ev, 0.0)
        al, self.U = np.linalg.eigh(task.bohning())
        self.al = np.maximum(al, 0.0)
        self.den = np.outer(self.ev, self.al) + lam

    def solve(self, G: np.ndarray) -> np.ndarray:
        return self.V @ ((self.V.T @ G @ self.U) / self.den) @ self.U.T
