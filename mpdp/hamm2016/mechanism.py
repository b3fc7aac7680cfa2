"""Output perturbation of the ensemble-trained global classifier (Hamm, Cao & Belkin 2016, Thm 1, Thm 3, Sec. 4.5).

The curator turns the vote counts on the N public auxiliary points into labels, fits the exact minimiser w_s of
(1/N)·Σ_j l^α(w; x_j) + (λ/2)‖w‖² (:func:`~mpdp.hamm2016.erm.fit_soft`) and releases w_p = w_s + η with η drawn
from density ∝ exp(−(ε/Δ₂)‖η‖) (spherical Laplace, CMS11 output perturbation).

Privacy unit: one whole party (all of its data; its classifier h_i and hence all of its N votes may change
arbitrarily). With ``protect_aux`` additionally one auxiliary feature vector x_j may change (the paper's Sec. 4.5).
All bounds need ‖x_j‖ ≤ 1 (checked by :func:`release_global`) and the exact minimiser.

ℓ2-sensitivities Δ₂ (CMS11 Cor. 8: ‖w_s − w_s′‖ ≤ (1/λ)·sup_w ‖∇g(w)‖, g = difference of the two empirical risks;
Frobenius norm for W ∈ R^{C×d}, i.e. ℓ2 on R^{C·d}):

=========  =====================  ==========================================================================
method     Δ₂                     why
=========  =====================  ==========================================================================
vote, C=2  2/λ                    Thm 1: one voter can flip every label; per term ‖x‖(|l′(m)| + |l′(−m)|) ≤ 2
soft, C=2  2/(Mλ)                 Thm 3: |Δα_j| ≤ 1/M, per term ≤ 2/M
vote, C>2  √2/λ                   ours: a label moves a → b, per-term gradient change (e_b − e_a)xᵀ, ‖·‖_F ≤ √2
soft, C>2  √2/(Mλ)                ours: Δα_j = (e_b − e_a)/M, per term −Δα_j x_jᵀ (the softmax part cancels)
=========  =====================  ==========================================================================

``protect_aux`` (one x_j may change as well). The changed point's term is bounded by the sum of two per-sample
gradient norms; the others keep their party-change bound:

* binary (the paper's Sec. 4.5): per-sample gradient (σ(m) − α)x has norm ≤ 1, so the changed term is ≤ 2.
  Vote: every term was already ≤ 2, Δ₂ = 2/λ unchanged. Soft: Δ₂ = (1/(Nλ))·(2 + (N−1)·2/M)
  = 2/(Mλ) · (N + M − 1)/N.
* multiclass (ours, derived like the multiclass sensitivities above): per-sample gradient (p − α)xᵀ has ‖p − α‖₂ ≤ √2 (two points of the
  simplex), so the changed term is ≤ 2√2. Soft: Δ₂ = (1/(Nλ))·(2√2 + (N−1)·√2/M) = √2/(Mλ) · (N + 2M − 1)/N.
  Vote: Δ₂ = (1/(Nλ))·(2√2 + (N−1)·√2) = √2/λ · (N + 1)/N.

Remark (ours): for the logistic loss l′(m) + l′(−m) = −1 exactly, so the binary constants 2/λ and 2/(Mλ) are
conservative by a factor 2 (the true suprema are 1/λ and 1/(Mλ)). We keep the paper's constants, which are valid
for any loss with |l′| ≤ 1 and are what the paper's experiments used.

Solver slack (ours): fit_soft stops at ‖∇J‖ < tol, and J is λ-strongly convex, so the computed ŵ_s lies within
tol/λ of the true minimiser. Two neighbouring computed outputs are therefore within Δ₂ + 2·tol/λ; the noise
scale uses that (:attr:`EnsembleParams.noise_scale`), which adds a relative 1e−9·M at most.

The ``avg`` baseline (PRR10 parameter averaging; its noise is our reading) is :func:`avg_release`; ``avg-tight`` is the
same average with the objective-value norm bound (:func:`objective_norm_bound`, ours):

    J_i(w) = (1/n)·Σ_j l(w; x_j, y_j) + (λ/2)‖w‖², l ≥ 0 the (multinomial) log-loss, J_i(0) = ln C
    ⇒ (λ/2)‖w_i*‖² ≤ J_i(w_i*) ≤ J_i(0) = ln C ⇒ ‖w_i*‖ ≤ √(2 ln C/λ)  (‖·‖_F for W; no bound on ‖x‖ needed),

so replacing one party moves the average of M local minimisers by at most 2·√(2 ln C/λ)/M (binary: 2·√(2 ln 2/λ)/M)
— for λ = 10⁻⁴ that is 117.7·2/M instead of 2/(Mλ) = 10⁴·2/M. A solver that starts at w = 0 and only decreases
J (Newton with Armijo backtracking, as :func:`~mpdp.hamm2016.local.batched_logreg` and
:func:`~mpdp.hamm2016.erm.fit_soft` do) ends with J(ŵ) ≤ J(0) too, so the bound holds for the computed models;
the release projects onto the ball anyway, which makes Δ₂ valid for any inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mpdp.dp.mechanisms import Guarantee, solver_slack, spherical_laplace
from mpdp.hamm2016.erm import DEFAULT_TOL, fit_soft
from mpdp.hamm2016.labels import _check_counts, majority_labels, one_hot, soft_labels
from mpdp.math.drbg import Drbg

METHODS = ("soft", "vote")
SOLVER_TOL = DEFAULT_TOL  # ‖∇J‖ bound the release's fit reaches (enters the noise scale as 2·tol/λ)
NORM_TOL = 1e-9  # auxiliary rows may exceed ‖x‖ = 1 by this rounding margin only
NOT_PRIVATE = "none: not private (1/ε = 0 baseline)"


def _is_int(v: object) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_real(v: object) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


@dataclass(frozen=True)
class EnsembleParams:
    """Public parameters of one HCB16 release; validated on construction (ValueError names the field).

    method: "vote" (Alg. 1, majority labels) or "soft" (Alg. 2, α = vote fractions).
    lam: λ of the (λ/2)‖w‖² regulariser (> 0). epsilon: ε > 0, or math.inf for the non-private baseline.
    classes: C ≥ 2. n_aux: N ≥ 1 auxiliary points. parties: M ≥ 1 voters whose votes are counted.
    protect_aux: also protect one auxiliary sample (the paper's Sec. 4.5).
    """

    method: str
    lam: float
    epsilon: float
    classes: int
    n_aux: int
    parties: int
    protect_aux: bool = False

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if not (_is_real(self.lam) and math.isfinite(self.lam) and self.lam > 0):
            raise ValueError(f"lam must be finite and positive, got {self.lam!r}")
        if not (_is_real(self.epsilon) and self.epsilon > 0):  # NaN fails too
            raise ValueError(f"epsilon must be positive (math.inf = no noise), got {self.epsilon!r}")
        if not (_is_int(self.classes) and self.classes >= 2):
            raise ValueError(f"classes must be an integer >= 2, got {self.classes!r}")
        if not (_is_int(self.n_aux) and self.n_aux >= 1):
            raise ValueError(f"n_aux must be an integer >= 1, got {self.n_aux!r}")
        if not (_is_int(self.parties) and self.parties >= 1):
            raise ValueError(f"parties must be an integer >= 1, got {self.parties!r}")
        if not isinstance(self.protect_aux, (bool, np.bool_)):
            raise ValueError(f"protect_aux must be a bool, got {self.protect_aux!r}")

    @property
    def private(self) -> bool:
        return math.isfinite(self.epsilon)

    @property
    def aux_factor(self) -> float:
        """Growth of Δ₂ when one auxiliary sample is protected too (1 without protect_aux; see module doc)."""
        if not self.protect_aux:
            return 1.0
        N, M = self.n_aux, self.parties
        if self.classes == 2:
            return 1.0 if self.method == "vote" else (N + M - 1) / N
        return (N + 1) / N if self.method == "vote" else (N + 2 * M - 1) / N

    @property
    def sensitivity(self) -> float:
        """Δ₂ of the exact minimiser (ℓ2; Frobenius for W): vote 2/λ, soft 2/(Mλ), multiclass √2/λ and
        √2/(Mλ), times :attr:`aux_factor`."""
        base = 2.0 if self.classes == 2 else math.sqrt(2.0)
        if self.method == "soft":
            base /= self.parties
        return base / self.lam * self.aux_factor

    @property
    def solver_slack(self) -> float:
        """2·tol/λ: how far apart two computed minimisers may be beyond Δ₂ (fit_soft stops at ‖∇J‖ < tol;
        :func:`mpdp.dp.mechanisms.solver_slack`)."""
        return solver_slack(SOLVER_TOL, self.lam)

    @property
    def noise_scale(self) -> float:
        """β = (Δ₂ + 2·tol/λ)/ε of the density ∝ exp(−‖η‖/β); 0 when ε = ∞."""
        if not self.private:
            return 0.0
        return (self.sensitivity + self.solver_slack) / self.epsilon

    @property
    def norm(self) -> str:
        return "l2" if self.classes == 2 else "Frobenius of W (l2 on R^{C·d})"

    @property
    def guarantee(self) -> Guarantee:
        alg = "Alg. 1 (majority vote, Thm 1)" if self.method == "vote" else "Alg. 2 (soft labels, Thm 3)"
        kind = "binary" if self.classes == 2 else f"{self.classes}-class (multiclass extension, ours)"
        mechanism = f"HCB16 {alg}, {kind}: exact L2-LR on N={self.n_aux} auxiliary points + spherical Laplace output noise"
        unit = "one whole party (all its data; its classifier and all its votes may change)"
        if self.protect_aux:
            unit += f" and one auxiliary sample x_j (HCB16 Sec. 4.5, factor {self.aux_factor:.6g})"
        if not self.private:
            return Guarantee(
                mechanism=mechanism + " — NO NOISE",
                epsilon=math.inf,
                delta=1.0,
                sensitivity=self.sensitivity,
                norm=self.norm,
                statement=f"{NOT_PRIVATE}: w_s is released without noise; M = {self.parties} voters",
            )
        return Guarantee(
            mechanism=mechanism,
            epsilon=float(self.epsilon),
            delta=0.0,
            sensitivity=self.sensitivity,
            norm=self.norm,
            statement=(
                f"epsilon-DP with epsilon = {self.epsilon:g} (delta = 0); privacy unit: {unit}; M = {self.parties} voters. "
                f"Noise density ∝ exp(-‖η‖/β), β = (Δ₂ + 2·tol/λ)/ε = {self.noise_scale:.6g}, Δ₂ = {self.sensitivity:.6g}; "
                f"requires ‖x_j‖ ≤ 1 for every auxiliary row (checked) and the exact minimiser (Newton to ‖∇J‖ < {SOLVER_TOL:g})"
            ),
        )


def _check_shape(w: np.ndarray, classes: int) -> np.ndarray:
    w = np.asarray(w, dtype=np.float64)
    if classes == 2 and w.ndim != 1:
        raise ValueError(f"a binary model is a vector w (d,), got shape {w.shape}")
    if classes > 2 and (w.ndim != 2 or w.shape[0] != classes):
        raise ValueError(f"a {classes}-class model is a matrix W ({classes}, d), got shape {w.shape}")
    if not np.all(np.isfinite(w)):
        raise ValueError("model weights hold non-finite values")
    return w


def output_perturbation(w: np.ndarray, params: EnsembleParams, rng: Drbg) -> np.ndarray:
    """w + η with η spherical Laplace in R^{d} (binary) or R^{C·d} (multiclass), density ∝ exp(−‖η‖/β).

    Sensitivity: params.sensitivity (Δ₂ of the exact minimiser, see module doc) plus the solver slack 2·tol/λ.
    Norm: ℓ2 (Frobenius for W). Guarantee: params.guarantee — ε-DP, privacy unit one whole party (and one
    auxiliary sample with protect_aux), when w is the fit_soft minimiser on auxiliary rows with ‖x‖ ≤ 1.
    ε = math.inf returns a copy of w (no noise, not private).
    """
    w = _check_shape(w, params.classes)
    if not params.private:
        return w.copy()
    beta = params.noise_scale
    if not (math.isfinite(beta) and beta >= params.sensitivity / params.epsilon):
        raise ValueError(f"noise scale {beta!r} is below Δ₂/ε = {params.sensitivity / params.epsilon!r}; refusing to release")
    eta = spherical_laplace(rng, w.size, beta)
    if not np.all(np.isfinite(eta)):
        raise RuntimeError("non-finite noise sample; nothing released")
    return w + eta.reshape(w.shape)


@dataclass
class GlobalRelease:
    """What the curator publishes: w_p (d,) or W_p (C, d), its guarantee, the public parameters, ‖η‖."""

    weights: np.ndarray
    guarantee: Guarantee
    params: EnsembleParams
    noise_norm: float

    @property
    def sensitivity(self) -> float:
        return self.params.sensitivity


def check_aux_rows(X_aux: np.ndarray) -> np.ndarray:
    """The auxiliary features as the sensitivity needs them: finite (N, d) with ‖x_j‖ ≤ 1 (+1e−9 rounding)."""
    X = np.asarray(X_aux, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(f"auxiliary data must be a non-empty (N, d) matrix, got shape {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError("auxiliary data hold non-finite values")
    norms = np.linalg.norm(X, axis=1)
    if np.any(norms > 1.0 + NORM_TOL):
        j = int(np.argmax(norms))
        raise ValueError(f"auxiliary row {j} has ‖x‖ = {norms[j]:.6g} > 1; the sensitivity bound needs ‖x‖ ≤ 1 (clip or rescale rows)")
    return X


def release_global(X_aux: np.ndarray, counts: np.ndarray, params: EnsembleParams, rng: Drbg) -> GlobalRelease:
    """Alg. 1 (vote) or Alg. 2 (soft) from the vote counts: labels → exact w_s → w_p = w_s + η.

    X_aux: (N, d) public auxiliary features, every ‖x_j‖ ≤ 1 (refused otherwise). counts: (N, C) with rows
    summing to M (:func:`~mpdp.hamm2016.labels.vote_counts`). Sensitivity, norm and guarantee: those of
    ``params`` (module doc): ε-DP, privacy unit = one whole party (+ one auxiliary sample with protect_aux).
    """
    X = check_aux_rows(X_aux)
    if X.shape[0] != params.n_aux:
        raise ValueError(f"auxiliary data have {X.shape[0]} rows, params.n_aux = {params.n_aux}")
    c = np.asarray(counts)
    if c.shape != (params.n_aux, params.classes):
        raise ValueError(f"counts must have shape (n_aux, classes) = ({params.n_aux}, {params.classes}), got {c.shape}")
    c = _check_counts(c, params.parties)
    if params.method == "vote":
        alpha = one_hot(majority_labels(c, params.parties), params.classes)
    else:
        alpha = soft_labels(c, params.parties)
    w_s = fit_soft(X, alpha, params.lam, tol=SOLVER_TOL)
    w_p = output_perturbation(w_s, params, rng)
    return GlobalRelease(weights=w_p, guarantee=params.guarantee, params=params, noise_norm=float(np.linalg.norm(w_p - w_s)))


# ------------------------------------------------------------------------------------------- avg baseline


@dataclass
class AvgRelease:
    """The ``avg`` baseline's output: (1/M)·Σ_i w_i + η, with the same fields a :class:`GlobalRelease` has."""

    weights: np.ndarray
    guarantee: Guarantee
    noise_norm: float
    sensitivity: float
    parties: int
    lam: float
    epsilon: float
    clipped: int  # local models projected onto the norm ball (0 for exact minimisers)


def local_norm_bound(lam: float, classes: int = 2) -> float:
    """‖w_i‖ ≤ 1/λ (binary) or ‖W_i‖_F ≤ √2/λ (multiclass) for the exact minimiser of a (λ/2)‖w‖²-regularised
    LR with ‖x‖ ≤ 1: stationarity gives λw = −(1/n)Σ (gradient of the loss), each term of norm ≤ 1 (≤ √2)."""
    return (1.0 if classes == 2 else math.sqrt(2.0)) / lam


def objective_norm_bound(lam: float, classes: int = 2) -> float:
    """‖w_i‖ ≤ √(2 ln C/λ) (‖W_i‖_F multiclass) for any w with J_i(w) ≤ J_i(0) = ln C, J_i the (1/n)-mean
    log-loss + (λ/2)‖w‖² objective of :mod:`~mpdp.hamm2016.local` (module doc); independent of ‖x‖."""
    return math.sqrt(2.0 * math.log(classes) / lam)


def avg_radius(lam: float, classes: int, tight: bool) -> float:
    """R of the projection in :func:`avg_release`: the gradient bound, or with ``tight`` the smaller of it and
    the objective bound (both hold for the exact minimiser with ‖x‖ ≤ 1)."""
    R = local_norm_bound(lam, classes)
    return min(R, objective_norm_bound(lam, classes)) if tight else R


def avg_release(W_local: np.ndarray, lam: float, epsilon: float, rng: Drbg, *, tight: bool = False) -> AvgRelease:
    """PRR10-style parameter averaging (its noise is our reading of the paper): (1/M)·Σ_i w_i + η.

    W_local: (M, d) binary local models or (M, C, d) multiclass ones, each the (λ/2)-regularised LR minimiser of
    one party. Each is first projected onto the ball of radius R (:func:`avg_radius`) — a no-op for exact
    minimisers — so that for *any* inputs replacing one party moves the average by at most 2R/M.
    ``avg``: R = 1/λ (√2/λ multiclass), Δ₂ = 2/(Mλ) (2√2/(Mλ)). ``avg-tight`` (tight=True): R = √(2 ln C/λ)
    when smaller (module doc), Δ₂ = 2·√(2 ln C/λ)/M. Norm: ℓ2 / Frobenius.
    Guarantee: ε-DP, privacy unit one whole party; ε = math.inf: no noise, not private.
    """
    W = np.asarray(W_local, dtype=np.float64)
    if W.ndim not in (2, 3) or W.shape[0] < 1:
        raise ValueError(f"W_local must be (M, d) or (M, C, d), got shape {W.shape}")
    if not np.all(np.isfinite(W)):
        raise ValueError("local models hold non-finite values")
    if not (_is_real(lam) and math.isfinite(lam) and lam > 0):
        raise ValueError(f"lam must be finite and positive, got {lam!r}")
    if not (_is_real(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be positive (math.inf = no noise), got {epsilon!r}")
    M = W.shape[0]
    classes = 2 if W.ndim == 2 else W.shape[1]
    R = avg_radius(lam, classes, tight)
    norms = np.linalg.norm(W.reshape(M, -1), axis=1)
    over = norms > R
    W = W * np.minimum(1.0, R / np.maximum(norms, 1e-300)).reshape((M,) + (1,) * (W.ndim - 1))
    mean = W.mean(axis=0)
    sens = 2.0 * R / M
    norm = "l2" if classes == 2 else "Frobenius of W (l2 on R^{C·d})"
    name, why = ("avg-tight", "objective bound √(2 ln C/λ)") if tight else ("avg", "gradient bound")
    mech = f"{name} baseline (PRR10 parameter averaging of M={M} local L2-LR models) + spherical Laplace output noise"
    if not math.isfinite(epsilon):
        g = Guarantee(mech + " — NO NOISE", math.inf, 1.0, sens, norm, f"{NOT_PRIVATE}: the average is released without noise")
        return AvgRelease(mean, g, 0.0, sens, M, float(lam), math.inf, int(over.sum()))
    eta = spherical_laplace(rng, mean.size, sens / epsilon).reshape(mean.shape)
    if not np.all(np.isfinite(eta)):
        raise RuntimeError("non-finite noise sample; nothing released")
    g = Guarantee(
        mech,
        float(epsilon),
        0.0,
        sens,
        norm,
        (f"epsilon-DP with epsilon = {epsilon:g} (delta = 0); privacy unit: one whole party; each local model is projected "
         f"onto ‖w‖ ≤ {R:.6g} (its exact-minimiser {why}), so Δ₂ = 2R/M = {sens:.6g}; noise density ∝ exp(-ε‖η‖/Δ₂)"),
    )
    return AvgRelease(mean + eta, g, float(np.linalg.norm(eta)), sens, M, float(lam), float(epsilon), int(over.sum()))
