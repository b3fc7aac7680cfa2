"""scikit-learn estimator for (DP) large-margin Gaussian classifiers (Pathak & Raj 2010, with our corrected mechanism).

Modes (the default is ``corrected``: DP unless the non-private baseline is asked for by name):

``nonprivate``  Sha & Saul's large-margin Gaussian classifier with the Huber loss: the SDP
                min L_H + λ·Σ tr(Ψ_c) + (Δ/2)·Σ‖Φ_c‖² s.t. Φ_c ⪰ 0 (``psd="constrain"``, default),
                or the unconstrained ridge problem (``psd="none"``, needs Δ > 0).
``corrected``   ε-DP objective perturbation (ours, after CMS11): per-class symmetric noise, ridge Δ from ε,
                no PSD constraint, minimiser to ‖∇J_p‖_F ≤ tol plus output noise for that tolerance
                (ε_s); optional PSD post-processing.
                Sensitivity 2G = 2R²√(C(C−1)) of the noise b (Frobenius norm over all blocks =
                ℓ2 in isometric coordinates); guarantee ε-DP (substitution adjacency) with
                ε = ε_b + (C−1)·log(1 + 2cR⁴/(nΔ)) + ε_s, recorded in ``accounting_``/``guarantee_``.
``paper``       The paper's mechanism as reconstructed (its Sec. 4: shared b, Δ = 0, PSD-constrained
                SDP). **Not proven private**; raises :class:`UnboundedObjectiveError` when J_p has no
                minimiser, which happens for about half of all draws even at large ε (docs/experiments/lmgc.md, "What the paper got wrong", 4).

Rows are clipped to ‖x‖ ≤ ``data_norm`` = r in ``fit`` *and* in ``predict`` (the same feature map),
so ‖x̃‖ ≤ R = √(r² + 1).

The noise b is never stored on the fitted model: together with θ* it would reveal the
non-private statistic Σ_i∇ℓ_i(θ*) (stationarity: b = −n·∇(J_p without the b term)(θ*)). For the same reason a ``corrected``
fit exposes no solver diagnostics (objective value, gradient norm, iteration count): only θ*,
``classes_`` and the public accounting.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from mpdp.dp.mechanisms import Guarantee
from mpdp.lmgc.objective import Problem
from mpdp.lmgc.params import augment, common_psd_shift, psd_project, quadratic_scores
from mpdp.lmgc.privacy import SOLVER_TOL, CorrectedCalibration, PaperCalibration, PrivacyError
from mpdp.lmgc.solver import Solution, solve_psd, solve_unconstrained
from mpdp.math.drbg import Drbg

MODES = ("nonprivate", "corrected", "paper")
_PSD_CHOICES = {
    "nonprivate": ("constrain", "none"),
    "corrected": ("none", "shift", "project"),
    "paper": ("constrain",),
}
_PSD_DEFAULT = {"nonprivate": "constrain", "corrected": "shift", "paper": "constrain"}
_TOL_DEFAULT = {"nonprivate": 1e-4, "corrected": SOLVER_TOL, "paper": 1e-4}


def clip_rows(X: np.ndarray, bound: float) -> np.ndarray:
    """Scale every row with ‖x‖ > bound onto the sphere of radius ``bound`` (a per-record map)."""
    X = np.asarray(X, dtype=np.float64)
    norms = np.linalg.norm(X, axis=1)
    return X * np.minimum(1.0, bound / np.maximum(norms, 1e-300))[:, None]


class LargeMarginGaussianClassifier(ClassifierMixin, BaseEstimator):
    """Multiclass Gaussian classifier trained with a Huber large-margin loss; optionally ε-DP.

    Parameters
    ----------
    mode : "corrected" (default, ε-DP) | "nonprivate" (the non-private baseline, only when asked for by name) | "paper"
    epsilon : total privacy budget ε (required for the DP modes).
    lam : λ, weight of the trace regulariser Σ_c tr(Ψ_c) (eq. (5)). Without PSD constraints it only
        moves the class-mean direction, which the decision rule ignores.
    huber_h : h of the Huber loss (eq. (6)); curvature c = 1/(2h).
    ridge : Δ. ``nonprivate``: the ridge weight (may be 0 with ``psd="constrain"``).
        ``corrected``: a floor, Δ = max(ridge, Δ(jacobian_share·ε)); the accounting uses the Δ used.
        ``paper``: ignored (the paper has no ridge).
    data_norm : r, public bound on ‖x‖; rows are clipped to it. R = √(r² + 1) bounds ‖x̃‖.
    jacobian_share : fraction of ε given to the Jacobian term in ``corrected`` mode.
    psd : "auto" or one of: nonprivate {"constrain", "none"}; corrected {"none", "shift", "project"}
        (post-processing; "shift" adds the same s·I to every block, which leaves predictions unchanged);
        paper {"constrain"}.
    tol : optimality tolerance. ``corrected``: the absolute ‖∇J_p‖_F the solver reaches, which the output noise
        covers (None: :data:`mpdp.lmgc.privacy.SOLVER_TOL`, 1e-8); otherwise relative to max(1, ‖∇J_p(0)‖_F) (None: 1e-4).
    max_iter : iteration cap of the solver.
    warm_start : start the solver from the previous fit's θ (same shape only), in ``nonprivate``
        and ``paper`` modes. Ignored in ``corrected`` mode, which always starts from 0: the
        minimiser is unique, but the solver's (tiny) residual error should not depend on a start
        point computed from the private data.
    rng : :class:`~mpdp.math.drbg.Drbg` for the noise; None means a fresh ``Drbg.from_os()`` per fit.
        Every fit advances the generator, so repeated fits draw independent noise. ``clone`` shares
        the generator object (it is never copied: a copy would replay the same noise).
    """

    def __init__(self, mode: str = "corrected", epsilon: float | None = None, lam: float = 1e-3,
                 huber_h: float = 0.5, ridge: float = 1e-3, data_norm: float = 1.0, jacobian_share: float = 0.5,
                 psd: str = "auto", tol: float | None = None, max_iter: int = 5000, warm_start: bool = False,
                 rng: Drbg | None = None) -> None:
        self.mode = mode
        self.epsilon = epsilon
        self.lam = lam
        self.huber_h = huber_h
        self.ridge = ridge
        self.data_norm = data_norm
        self.jacobian_share = jacobian_share
        self.psd = psd
        self.tol = tol
        self.max_iter = max_iter
        self.warm_start = warm_start
        self.rng = rng

    # sklearn's default clone deep-copies parameters; a copied Drbg would replay the same noise.
    def __sklearn_clone__(self) -> "LargeMarginGaussianClassifier":
        params = self.get_params(deep=False)
        rng = params.pop("rng")
        return type(self)(rng=rng, **{k: clone(v, safe=False) for k, v in params.items()})

    # -- helpers -------------------------------------------------------------------------------
    @property
    def R(self) -> float:
        """Public bound on ‖x̃‖ = ‖(x, 1)‖."""
        return math.sqrt(self.data_norm**2 + 1.0)

    def _resolved_psd(self) -> str:
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; use one of {MODES}")
        psd = _PSD_DEFAULT[self.mode] if self.psd == "auto" else self.psd
        if psd not in _PSD_CHOICES[self.mode]:
            raise ValueError(f"psd={self.psd!r} is not allowed in mode {self.mode!r}; use one of {_PSD_CHOICES[self.mode]}")
        return psd

    def _features(self, X: np.ndarray) -> np.ndarray:
        """x̃ = (clip(x), 1) for already validated rows."""
        return augment(clip_rows(X, self.data_norm))

    # -- sklearn API -----------------------------------------------------------------------------
    def fit(self, X: Any, y: Any) -> "LargeMarginGaussianClassifier":
        psd = self._resolved_psd()
        if not (self.data_norm > 0 and math.isfinite(self.data_norm)):
            raise ValueError(f"data_norm must be positive, got {self.data_norm}")
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        Xt = self._features(X)
        classes, yi = np.unique(y, return_inverse=True)
        if len(classes) < 2:
            raise ValueError(f"Classifier can't train when only one class is present (got {classes!r})")
        n, D = Xt.shape
        C = len(classes)
        tol = _TOL_DEFAULT[self.mode] if self.tol is None else self.tol
        theta0 = getattr(self, "theta_", None) if self.warm_start and self.mode != "corrected" else None
        self._theta0 = theta0 if theta0 is not None and theta0.shape == (C, D, D) else None
        self.classes_ = classes
        self.accounting_: dict | None = None
        self.guarantee_: Guarantee | None = None

        if self.mode == "nonprivate":
            problem = Problem(Xt, yi, C, self.huber_h, self.lam, self.ridge)
            sol = self._solve(problem, psd == "constrain", tol)
            theta = sol.theta
        elif self.mode == "corrected":
            theta, sol = self._fit_corrected(Xt, yi, C, psd, tol)
        else:
            theta, sol = self._fit_paper(Xt, yi, C, tol)
        self.theta_ = theta
        if self.mode == "corrected":
            # Objective value, gradient norm, absolute tolerance and iteration count depend on the data
            # beyond θ*, and are not covered by the DP guarantee: release none of them.
            self.solution_ = {"method": sol.method, "tolerance": tol, "tolerance_met": True}
        else:
            self.solution_ = {"objective": sol.objective, "optimality": sol.optimality, "tolerance": sol.tolerance,
                              "iterations": sol.iterations, "method": sol.method}
            self.n_iter_ = sol.iterations
        return self

    def _solve(self, problem: Problem, constrained: bool, tol: float, *, relative: bool = True) -> Solution:
        if constrained:
            return solve_psd(problem, tol=tol, max_iter=self.max_iter, theta0=self._theta0)
        return solve_unconstrained(problem, tol=tol, max_iter=self.max_iter, theta0=self._theta0, relative=relative)

    def _require_epsilon(self) -> float:
        if self.epsilon is None or not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise ValueError(f"mode {self.mode!r} needs a finite epsilon > 0, got {self.epsilon}")
        return float(self.epsilon)

    def _rng(self) -> Drbg:
        return self.rng if self.rng is not None else Drbg.from_os()

    def _fit_corrected(self, Xt: np.ndarray, yi: np.ndarray, C: int, psd: str, tol: float) -> tuple[np.ndarray, Solution]:
        """Corrected mechanism: ε-DP, noise sensitivity 2G in Frobenius norm (see :class:`CorrectedCalibration`).

        Fails loudly instead of releasing: :class:`PrivacyError` if the accounting does not add up
        or a row exceeds R, :class:`ConvergenceError` if ‖∇J_p‖_F ≤ tol is not reached. The computed minimiser
        (within tol/Δ of the exact one) is released with the output noise of that tolerance (ε_s).
        """
        n, D = Xt.shape
        if float(np.max(np.linalg.norm(Xt, axis=1))) > self.R * (1 + 1e-12):
            raise PrivacyError("a row exceeds the public norm bound R after clipping")  # cannot happen; guards the proof
        cal = CorrectedCalibration.create(self._require_epsilon(), n, C, D - 1, self.huber_h, self.R,
                                          jacobian_share=self.jacobian_share, ridge_floor=self.ridge, solver_tol=tol)
        rng = self._rng()
        b = cal.sample(rng)
        problem = Problem(Xt, yi, C, self.huber_h, self.lam, cal.ridge, b)
        sol = self._solve(problem, False, tol, relative=False)  # ‖∇J_p‖_F ≤ tol, or it raises
        theta = sol.theta + cal.sample_output(rng)  # covers ‖θ̂ − θ*‖_F ≤ tol/Δ
        if psd == "shift":
            theta = common_psd_shift(theta)
        elif psd == "project":
            theta = psd_project(theta)
        self.accounting_ = {**cal.as_dict(), "seeded_rng": bool(rng.seeded), "postprocess": psd}
        self.guarantee_ = cal.guarantee()
        return theta, sol

    def _fit_paper(self, Xt: np.ndarray, yi: np.ndarray, C: int, tol: float) -> tuple[np.ndarray, Solution]:
        """The paper's mechanism: shared b, no ridge, PSD-constrained SDP. NOT proven private."""
        n, D = Xt.shape
        cal = PaperCalibration(self._require_epsilon(), D - 1, C)
        rng = self._rng()
        b = cal.sample(rng)
        problem = Problem(Xt, yi, C, self.huber_h, self.lam, 0.0, b)
        sol = self._solve(problem, True, tol)  # raises UnboundedObjectiveError if no minimiser
        self.accounting_ = {**cal.as_dict(), "seeded_rng": bool(rng.seeded)}
        self.guarantee_ = cal.guarantee()
        return sol.theta, sol

    def class_scores(self, X: Any) -> np.ndarray:
        """x̃ᵀΦ_cx̃ for every class, shape (n, C) (the bracket of rule (1))."""
        check_is_fitted(self, "theta_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return quadratic_scores(self.theta_, self._features(X))

    def decision_function(self, X: Any) -> np.ndarray:
        """sklearn convention: −x̃ᵀΦ_cx̃ per class (n, C), larger is better; for two classes the
        1-D score of ``classes_[1]``, x̃ᵀ(Φ_0 − Φ_1)x̃ (positive means class 1)."""
        q = self.class_scores(X)
        if q.shape[1] == 2:
            return q[:, 0] - q[:, 1]
        return -q

    def predict(self, X: Any) -> np.ndarray:
        """Rule (3): the class with the smallest x̃ᵀΦ_cx̃."""
        scores = self.class_scores(X)
        return self.classes_[np.argmin(scores, axis=1)]
