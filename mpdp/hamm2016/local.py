"""Local classifiers h_i of the parties (the paper's Sec. 3.1 and 6) and an exact batched L2-LR for many tiny parties.

The paper lets every party train "any" classifier; its experiments use L2-regularised logistic regression with
λ = 10⁻⁴ everywhere. Conventions match the global model: labels are class indices 0..C−1, the objective is
(1/n)·Σ loss + (λ/2)‖w‖² without intercept. scikit-learn's C parameter multiplies the *sum* of losses against
(1/2)‖w‖², so C = 1/(λn) gives the same minimiser.

* :data:`CLASSIFIERS` — factories ``(lam, n, classes) -> estimator``:
  ``"logreg"`` (:class:`ExactLogisticRegression`: L2-LR solved to ‖∇J‖ < 1e−9 by
  :func:`~mpdp.hamm2016.erm.fit_soft`; for two classes it is :func:`mpdp.learn.logreg.fit` with labels ±1, and
  it has the minimiser of sklearn's ``LogisticRegression(C=1/(λn), fit_intercept=False)``);
  ``"sklearn_logreg"`` (that sklearn model itself); ``"linear_svm"`` (LinearSVC, squared hinge, same C);
  ``"tree"`` (DecisionTreeClassifier); ``"naive_bayes"`` (GaussianNB).
* :func:`fit_local` — h_i from one party's rows; predictions are class indices. A party that holds a single class
  gets a constant predictor, except under ``"logreg"``, which solves the (well-defined, strongly convex) LR
  problem over all classes anyway, so that it stays the same model as :func:`batched_logreg` and every local
  model lives in the same space (needed by the ``avg`` baseline).
* :func:`batched_logreg` — the exact binary L2-LR of M parties with n rows each at once (KDD-99 experiment:
  M = 20,000, n = 22, d = 123), by the representer theorem w_i = X_iᵀa_i and Newton in a-space.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from scipy.special import expit, log_expit
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.linear_model import LogisticRegression
from sklearn.naive_bayes import GaussianNB
from sklearn.svm import LinearSVC
from sklearn.tree import DecisionTreeClassifier

from mpdp.hamm2016.erm import fit_soft, predict as linear_predict
from mpdp.hamm2016.labels import one_hot


def _check_lam(lam: float) -> float:
    if isinstance(lam, (bool, np.bool_)) or not (isinstance(lam, (int, float, np.integer, np.floating)) and math.isfinite(lam) and lam > 0):
        raise ValueError(f"lam must be finite and positive, got {lam!r}")
    return float(lam)


class ExactLogisticRegression(ClassifierMixin, BaseEstimator):
    """argmin (1/n)·Σ_j −log softmax(Wx_j)_{y_j} + (λ/2)‖W‖² over all ``classes`` classes, no intercept, solved to
    ‖∇J‖ < 1e−9 by :func:`~mpdp.hamm2016.erm.fit_soft`.

    Two classes: a vector w (d,) with the logistic loss log(1 + e^{−y·wᵀx}), y = ±1, predicting class 1 iff
    wᵀx > 0 (= :func:`mpdp.learn.logreg.fit`, "half"). More classes: W (C, d), multinomial. With every class
    present this is the minimiser of scikit-learn's ``LogisticRegression(C=1/(λn), fit_intercept=False)``.
    Classes absent from the party's rows are still modelled — their rows of W are pushed against the party's
    data, and without an intercept they can win on points far from it — and a single-class party gets its
    exact minimiser too. That keeps every party's model a point of the same space (R^d or R^{C×d}), which the
    ``avg`` baseline and :func:`batched_logreg` need.
    """

    def __init__(self, lam: float = 1e-4, classes: int = 2) -> None:
        self.lam = lam
        self.classes = classes

    def fit(self, X: np.ndarray, y: np.ndarray) -> "ExactLogisticRegression":
        X = np.asarray(X, dtype=np.float64)
        self.coef_ = fit_soft(X, one_hot(np.asarray(y), self.classes), _check_lam(self.lam))
        self.classes_ = np.arange(self.classes)
        return self

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        return X @ self.coef_ if self.coef_.ndim == 1 else X @ self.coef_.T

    def predict(self, X: np.ndarray) -> np.ndarray:
        return linear_predict(self.coef_, X)


def _logreg(lam: float, n: int, classes: int) -> ExactLogisticRegression:
    return ExactLogisticRegression(lam=_check_lam(lam), classes=classes)


def _sklearn_logreg(lam: float, n: int, classes: int) -> LogisticRegression:
    # C multiplies Σ loss against ½‖w‖²: C = 1/(λn) ⇔ (1/n)Σ loss + (λ/2)‖w‖²
    return LogisticRegression(C=1.0 / (_check_lam(lam) * n), fit_intercept=False, tol=1e-10, max_iter=10_000)


def _linear_svm(lam: float, n: int, classes: int) -> LinearSVC:
    # same regularisation convention; squared hinge in the primal (liblinear's trust-region Newton) converges reliably
    return LinearSVC(C=1.0 / (_check_lam(lam) * n), loss="squared_hinge", dual=False, fit_intercept=False, tol=1e-6, max_iter=10_000)


def _tree(lam: float, n: int, classes: int) -> DecisionTreeClassifier:
    return DecisionTreeClassifier(random_state=0)  # fixed tie-breaking among equally good splits (public, no DP role)


def _naive_bayes(lam: float, n: int, classes: int) -> GaussianNB:
    return GaussianNB()


Factory = Callable[[float, int, int], Any]
CLASSIFIERS: dict[str, Factory] = {
    "logreg": _logreg,
    "sklearn_logreg": _sklearn_logreg,
    "linear_svm": _linear_svm,
    "tree": _tree,
    "naive_bayes": _naive_bayes,
}


@dataclass
class LocalModel:
    """A fitted local classifier h_i: ``predict(X)`` returns class indices (int64)."""

    name: str
    estimator: Any | None  # None for a constant predictor
    constant: int | None = None

    def predict(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if self.estimator is None:
            return np.full(X.shape[0], self.constant, dtype=np.int64)
        return np.asarray(self.estimator.predict(X)).astype(np.int64)


def fit_local(name_or_estimator: str | Any, X: np.ndarray, y: np.ndarray, classes: int, lam: float) -> LocalModel:
    """Fit one party's classifier on its rows X (n, d) with class indices y ∈ {0..classes−1}.

    ``name_or_estimator``: a key of :data:`CLASSIFIERS` or an unfitted scikit-learn classifier (cloned first).
    A party holding one class only gets a constant predictor (scikit-learn estimators cannot fit one class),
    except under ``"logreg"`` / :class:`ExactLogisticRegression`, whose exact regularised minimiser over all
    ``classes`` exists anyway (strongly convex) and is what :func:`batched_logreg` computes too.
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y)
    if isinstance(classes, bool) or not isinstance(classes, (int, np.integer)) or classes < 2:
        raise ValueError(f"classes must be an integer >= 2, got {classes!r}")
    if X.ndim != 2 or X.shape[0] < 1 or y.shape != (X.shape[0],):
        raise ValueError(f"X must be (n, d) with n >= 1 and y (n,), got {X.shape} and {y.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError("X holds non-finite values")
    if y.dtype.kind not in "iu" and not (np.all(np.isfinite(y)) and np.all(y == np.round(y))):
        raise ValueError("y must hold integer class indices")
    y = y.astype(np.int64)
    if y.min() < 0 or y.max() >= classes:
        raise ValueError(f"class indices must lie in 0..{classes - 1}, got range [{y.min()}, {y.max()}]")
    if isinstance(name_or_estimator, str):
        if name_or_estimator not in CLASSIFIERS:
            raise ValueError(f"unknown local classifier {name_or_estimator!r}; choose one of {sorted(CLASSIFIERS)}")
        name = name_or_estimator
        est = CLASSIFIERS[name](lam, X.shape[0], int(classes))
    else:
        name = type(name_or_estimator).__name__
        est = clone(name_or_estimator)
        if isinstance(est, ExactLogisticRegression):
            est.set_params(classes=int(classes))
    present = np.unique(y)
    if len(present) == 1 and not isinstance(est, ExactLogisticRegression):
        return LocalModel(name, None, int(present[0]))
    est.fit(X, y)
    return LocalModel(name, est)


# ------------------------------------------------------------------------------------------- batched exact LR


def batched_logreg(X: np.ndarray, y: np.ndarray, lam: float, *, tol: float = 1e-10, max_iter: int = 200) -> np.ndarray:
    """W (M, d): for every party i, argmin_w (1/n)·Σ_j log(1 + exp(−y_ij·wᵀx_ij)) + (λ/2)‖w‖² (no intercept).

    X: (M, n, d), y: (M, n) in {−1, +1}. The same minimiser as :func:`mpdp.learn.logreg.fit` (X_i, y_i, λ, "half")
    for each party, to ‖∇J_i‖ < tol (RuntimeError otherwise).

    Method: the stationarity condition λw = (1/n)·Σ_j y_j σ(−m_j) x_j puts w in the row space, w = Xᵀa. With
    K = XXᵀ (n×n) and g̃ = −(1/n)·y⊙σ(−m) + λa, the w-gradient is Xᵀg̃, and the Newton step in w-space is XᵀΔa with
    (diag(s/n)·K + λI)·Δa = g̃, s = σ(m)(1 − σ(m)) (multiply out XᵀD X Xᵀ Δa/n + λXᵀΔa). The matrix has real
    eigenvalues ≥ λ (diag(s)K is similar to the PSD s^{1/2}Ks^{1/2}), so it is invertible even when K is
    singular (duplicate rows). Armijo backtracking per party; separable and single-class parties need no
    special case because λ keeps ‖w‖ ≤ max_j ‖x_j‖/λ. About 10 Newton steps on KDD-99 parties.
    """
    lam = _check_lam(lam)
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if X.ndim != 3 or y.shape != X.shape[:2] or X.shape[1] < 1:
        raise ValueError(f"X must be (M, n, d) and y (M, n), got {X.shape} and {y.shape}")
    if not np.all(np.isin(y, (-1.0, 1.0))):
        raise ValueError("labels must be -1 or +1")
    if not np.all(np.isfinite(X)):
        raise ValueError("X holds non-finite values")
    M, n, d = X.shape
    K = np.matmul(X, X.transpose(0, 2, 1))  # (M, n, n)
    a = np.zeros((M, n))
    m = np.zeros((M, n))  # margins y ⊙ Ka
    eye = np.eye(n)

    def values(a_: np.ndarray, y_: np.ndarray, m_: np.ndarray) -> np.ndarray:
        # (1/n)Σ log(1 + e^{−m}) + (λ/2)·aᵀKa, with aᵀKa = Σ_i a_i (Ka)_i = Σ_i a_i y_i m_i (y_i² = 1)
        return -log_expit(m_).mean(axis=1) + 0.5 * lam * np.sum(a_ * y_ * m_, axis=1)

    def w_gradients(a_: np.ndarray, y_: np.ndarray, m_: np.ndarray, X_: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        gt_ = -(y_ * expit(-m_)) / n + lam * a_  # g̃; the w-gradient is Xᵀg̃
        return gt_, np.linalg.norm(np.einsum("mnd,mn->md", X_, gt_), axis=1)

    f = values(a, y, m)
    gnorm = np.full(M, np.inf)
    active = np.arange(M)
    for _ in range(max_iter):
        gt, gnorm = w_gradients(a, y, m, X)  # all parties: cheaper than copying X[active]
        active = np.flatnonzero(gnorm >= tol)
        if len(active) == 0:
            break
        ya, ma, aa, gt, gn = y[active], m[active], a[active], gt[active], gnorm[active]
        Ka = K[active]
        sig = expit(-ma)
        s = sig * (1.0 - sig)
        A = (s[:, :, None] / n) * Ka + lam * eye
        step = np.linalg.solve(A, gt[:, :, None])[:, :, 0]
        slope = np.einsum("mi,mij,mj->m", gt, Ka, step)  # ∇Jᵀ(XᵀΔa) = g̃ᵀKΔa = g_wᵀH_w⁻¹g_w > 0
        t = np.ones(len(active))
        todo = np.arange(len(active))
        f_act = f[active]
        a_new, m_new, f_new = aa.copy(), ma.copy(), f_act.copy()
        for _ls in range(60):
            if len(todo) == 0:
                break
            cand = aa[todo] - t[todo, None] * step[todo]
            mc = ya[todo] * np.einsum("mij,mj->mi", Ka[todo], cand)
            fc = values(cand, ya[todo], mc)
            ok = fc <= f_act[todo] - 1e-4 * t[todo] * slope[todo]
            # near the optimum J stops resolving in floating point: accept a clearly smaller gradient instead
            flat = ~ok & (fc <= f_act[todo] + 1e-12 * np.maximum(1.0, np.abs(f_act[todo])))
            if np.any(flat):
                sub = todo[flat]
                _, gn_c = w_gradients(cand[flat], ya[sub], mc[flat], X[active[sub]])
                ok[np.flatnonzero(flat)[gn_c < 0.5 * gn[sub]]] = True
            done = todo[ok]
            a_new[done], m_new[done], f_new[done] = cand[ok], mc[ok], fc[ok]
            todo = todo[~ok]
            t[todo] *= 0.5
        if len(todo):
            raise RuntimeError(f"batched logistic regression: line search failed for {len(todo)} parties (e.g. party {active[todo[0]]})")
        a[active], m[active], f[active] = a_new, m_new, f_new
    else:
        _, gnorm = w_gradients(a, y, m, X)
        active = np.flatnonzero(gnorm >= tol)
    if len(active):
        worst = int(active[np.argmax(gnorm[active])])
        raise RuntimeError(f"batched logistic regression did not converge for {len(active)} parties: party {worst} has ‖∇J‖ = {gnorm[worst]:.3g}")
    return np.einsum("mnd,mn->md", X, a)
