"""Noise calibration, samplers and accounting for DP large-margin Gaussian classifiers.

Two mechanisms (Pathak & Raj 2010, Sec. 4, and our corrected variant):

``corrected`` (provable, ours: CMS11 objective perturbation adapted to C symmetric blocks)
    Sensitivity: the per-sample gradient ∇ℓ(θ; z) has ‖·‖_F ≤ G = R²·√(C(C−1)) for ‖x̃‖ ≤ R, so for
    adjacent datasets (substitution) giving the same θ*, ‖b − b′‖_F ≤ 2G (the paper's 2 is too small).
    Norm: Frobenius over all C symmetric blocks = ℓ2 in isometric coordinates (p = C·(d+1)(d+2)/2).
    Noise: density ∝ exp(−(ε_b/(2G))·‖b‖_F) on the symmetric space, i.e. spherical Laplace with
    β = 2G/ε_b in isometric coordinates (‖v‖ ~ Gamma(p, 2G/ε_b), uniform direction).
    Ridge: Δ with (C−1)·log(1 + 2cR⁴/(nΔ)) = ε_J, c = 1/(2h) (Jacobian term: AM–GM on a rank ≤ C−1 Hessian).
    Solver (ours): the proof is for the exact minimiser θ* of the strongly convex J_p (then b ↔ θ* is a
    bijection); the solver returns θ̂ with ‖∇J_p(θ̂)‖_F ≤ tol, so ‖θ̂ − θ*‖_F ≤ tol/Δ (J_p is
    Δ-strongly convex). The release is θ̂ + η_s, η_s spherical Laplace (isometric coordinates) with
    β_s = (2·tol/Δ)/ε_s (:func:`mpdp.dp.mechanisms.solver_slack`): for every output t,
    p(t | D) = E_b[f_s(t − θ̂)] ≤ e^{(tol/Δ)/β_s}·E_b[f_s(t − θ*)], the density of θ* + η_s, which is
    (ε_b + ε_J)-DP (post-processing), and back again on D′: e^{ε_b + ε_J + ε_s} in all.
    Guarantee: ε-DP with ε = ε_b + ε_J + ε_s.

``paper`` (the paper's Sec. 4 as reconstructed; NOT proven private)
    One (d+1)×(d+1) matrix b shared by all classes, density ∝ exp(−(ε/2)·‖b‖_F) over general
    matrices (‖b‖_F ~ Gamma((d+1)², 2/ε), uniform direction). The paper claims ε + k with an
    illegible k; the claim fails (docs/experiments/lmgc.md, "What the paper got wrong"): a shared b over-determines the stationarity
    conditions, the sensitivity 2 is too small by √(C(C−1))·R², J_p can be unbounded below, and
    the PSD constraints break the bijection.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mpdp.dp.mechanisms import Guarantee, solver_slack, spherical_laplace
from mpdp.lmgc import huber
from mpdp.lmgc.objective import gradient_bound
from mpdp.lmgc.params import sym_dim, vec_to_theta
from mpdp.math.drbg import Drbg

SOLVER_TOL = 1e-8  # the absolute ‖∇J_p‖_F the corrected solver reaches; public, it sizes the output noise η_s
SOLVER_SHARE = 0.01  # ε_s = SOLVER_SHARE·ε pays for η_s
FLOAT_SLACK = 2.0**-40  # β_s is rounded up by (1 + 2^-40): the floats computing it err by a few ulps at most


class PrivacyError(RuntimeError):
    """The release would not meet the stated guarantee; nothing is released."""


def ridge_for_jacobian_budget(eps_j: float, n: int, n_classes: int, h: float, R: float) -> float:
    """Δ with (C−1)·log(1 + 2cR⁴/(nΔ)) = ε_J, i.e. Δ = 2cR⁴/(n·(e^{ε_J/(C−1)} − 1))."""
    if not (eps_j > 0 and n >= 1 and n_classes >= 2):
        raise ValueError(f"need ε_J > 0, n >= 1, C >= 2; got {eps_j}, {n}, {n_classes}")
    denom = math.expm1(min(eps_j / (n_classes - 1), 700.0))
    return 2.0 * huber.curvature(h) * R**4 / (n * denom)


def jacobian_epsilon(ridge: float, n: int, n_classes: int, h: float, R: float) -> float:
    """ε_J = (C−1)·log(1 + 2cR⁴/(nΔ)): log of the bound on the Jacobian-determinant ratio."""
    if ridge <= 0:
        return math.inf
    return (n_classes - 1) * math.log1p(2.0 * huber.curvature(h) * R**4 / (n * ridge))


@dataclass(frozen=True)
class CorrectedCalibration:
    """Everything the corrected mechanism needs, with its accounting."""

    epsilon: float  # total budget ε
    n: int
    n_classes: int
    dim_x: int  # d (without the appended 1)
    h: float
    R: float  # public bound on ‖x̃‖
    ridge: float  # Δ actually used
    eps_jacobian: float  # (C−1)·log(1 + 2cR⁴/(nΔ))
    eps_noise: float  # ε_b = ε − ε_J − ε_s
    solver_tol: float = 0.0  # absolute ‖∇J_p‖_F the solver reaches (0: the exact minimiser is assumed, no η_s)
    eps_solver: float = 0.0  # ε_s, paid by the output noise η_s that covers ‖θ̂ − θ*‖_F ≤ tol/Δ

    @classmethod
    def create(cls, epsilon: float, n: int, n_classes: int, dim_x: int, h: float, R: float, *,
               jacobian_share: float = 0.5, ridge_floor: float = 0.0, solver_tol: float = SOLVER_TOL,
               solver_share: float = SOLVER_SHARE) -> "CorrectedCalibration":
        """Split ε: Δ = max(ridge_floor, Δ(jacobian_share·ε)); ε_J from that Δ; ε_s = solver_share·ε (when the
        solver stops at ‖∇J_p‖_F ≤ solver_tol > 0); ε_b = ε − ε_J − ε_s > 0."""
        if not (math.isfinite(epsilon) and epsilon > 0):
            raise ValueError(f"epsilon must be finite and positive, got {epsilon}")
        if not 0 < jacobian_share < 1:
            raise ValueError(f"jacobian_share must be in (0, 1), got {jacobian_share}")
        if R < 1:
            raise ValueError(f"R bounds ‖(x, 1)‖ so it must be >= 1, got {R}")
        if not (math.isfinite(solver_tol) and solver_tol >= 0 and 0 < solver_share < 1 - jacobian_share):
            raise ValueError(f"need solver_tol >= 0 and 0 < solver_share < 1 − jacobian_share, got {solver_tol}, {solver_share}")
        ridge = max(ridge_floor, ridge_for_jacobian_budget(jacobian_share * epsilon, n, n_classes, h, R))
        eps_j = jacobian_epsilon(ridge, n, n_classes, h, R)
        eps_s = solver_share * epsilon if solver_tol > 0 else 0.0
        cal = cls(epsilon, n, n_classes, dim_x, h, R, ridge, eps_j, epsilon - eps_j - eps_s, solver_tol, eps_s)
        cal.check()
        return cal

    @property
    def D(self) -> int:
        return self.dim_x + 1

    @property
    def dim(self) -> int:
        """p = C·(d+1)(d+2)/2."""
        return self.n_classes * sym_dim(self.D)

    @property
    def gradient_bound(self) -> float:
        """G = R²·√(C(C−1))."""
        return gradient_bound(self.R, self.n_classes)

    @property
    def sensitivity(self) -> float:
        """‖b − b′‖_F ≤ 2G for adjacent datasets that give the same θ*."""
        return 2.0 * self.gradient_bound

    @property
    def noise_scale(self) -> float:
        """β = 2G/ε_b: density ∝ exp(−‖v‖/β) = exp(−(ε_b/(2G))·‖b‖_F)."""
        return self.sensitivity / self.eps_noise

    @property
    def solver_noise_scale(self) -> float:
        """β_s = (2·tol/Δ)/ε_s of the output noise η_s (:func:`mpdp.dp.mechanisms.solver_slack`); 0 without a tolerance."""
        if self.solver_tol == 0:
            return 0.0
        return solver_slack(self.solver_tol, self.ridge) / self.eps_solver * (1.0 + FLOAT_SLACK)

    def check(self) -> None:
        """Raise :class:`PrivacyError` unless ε_b > 0, ε_b + ε_J ≤ ε and β ≥ 2G/ε_b (to rounding)."""
        if not (self.ridge > 0 and math.isfinite(self.ridge)):
            raise PrivacyError(f"ridge Δ must be positive and finite, got {self.ridge}")
        if not self.eps_noise > 0:
            raise PrivacyError(f"Jacobian term ε_J = {self.eps_jacobian:.4g} uses the whole budget ε = {self.epsilon}; "
                               "use a larger ridge Δ or a larger ε")
        if self.solver_tol < 0 or (self.solver_tol > 0) != (self.eps_solver > 0):
            raise PrivacyError("a solver tolerance needs its share ε_s of the budget (and ε_s a tolerance)")
        recomputed = jacobian_epsilon(self.ridge, self.n, self.n_classes, self.h, self.R)
        if self.eps_noise + recomputed + self.eps_solver > self.epsilon * (1 + 1e-12):
            raise PrivacyError(f"accounting ε_b + ε_J + ε_s = {self.eps_noise + recomputed + self.eps_solver} exceeds ε = {self.epsilon}")

    def sample(self, rng: Drbg) -> np.ndarray:
        """b = (b_1..b_C), symmetric blocks, density ∝ exp(−(ε_b/(2G))‖b‖_F).

        Sensitivity: ‖b − b′‖_F ≤ 2G = 2R²√(C(C−1)) between adjacent datasets reaching the same θ*.
        Norm: Frobenius over all C symmetric blocks (ℓ2 in isometric coordinates).
        Guarantee: with the ridge Δ of this calibration and the exact minimiser of J_p, the released
        θ* is ε-DP with ε = ε_b + ε_J (checked by :meth:`check` before sampling).
        Sampled as spherical Laplace in isometric coordinates v (p = C·D_s) with β = 2G/ε_b, mapped
        back with b_kk = v_kk and b_kl = b_lk = v_kl/√2. Draws from ``rng`` directly (advancing it),
        so successive calls give independent noise.
        """
        self.check()
        v = spherical_laplace(rng, self.dim, self.noise_scale)
        if not np.all(np.isfinite(v)):
            raise PrivacyError("non-finite noise sample")
        return vec_to_theta(v, self.n_classes, self.D)

    def sample_output(self, rng: Drbg) -> np.ndarray:
        """η_s = (η_1..η_C), symmetric blocks, density ∝ exp(−‖η‖_F/β_s), β_s = (2·tol/Δ)/ε_s: the output noise
        that makes the computed θ̂ (‖θ̂ − θ*‖_F ≤ tol/Δ) as private as θ* plus ε_s (module doc). Zero without a tolerance."""
        self.check()
        if self.solver_tol == 0:
            return np.zeros((self.n_classes, self.D, self.D))
        v = spherical_laplace(rng, self.dim, self.solver_noise_scale)
        if not np.all(np.isfinite(v)):
            raise PrivacyError("non-finite noise sample")
        return vec_to_theta(v, self.n_classes, self.D)

    def guarantee(self) -> Guarantee:
        return Guarantee(
            mechanism="LMGC objective perturbation, corrected (ours, after CMS11): per-class symmetric noise + ridge",
            epsilon=self.epsilon,
            delta=0.0,
            sensitivity=self.sensitivity,
            norm="Frobenius over all C symmetric blocks (l2 in isometric coordinates)",
            # No value that depends on n (the ridge Δ, the split ε_b + ε_J when the ridge floor binds): the statement
            # travels with the release, and those would tell the dataset size exactly; as_dict() keeps them for the ledger.
            statement=(f"epsilon-DP (substitution adjacency, ‖(x,1)‖ ≤ R={self.R:g}) with epsilon = eps_b + eps_J + eps_s ≤ {self.epsilon:g}; "
                       f"noise density ∝ exp(-(eps_b/(2G))‖b‖_F), G = R²√(C(C−1)) = {self.gradient_bound:.6g}; "
                       f"the minimiser of the strongly convex J_p is computed to ‖∇J_p‖_F ≤ tol = {self.solver_tol:g} and released with "
                       f"output noise ∝ exp(-(eps_s/(2·tol/Δ))‖η‖_F), eps_s = {self.eps_solver:g}; "
                       "the ridge Δ and eps_b, eps_J depend on the dataset size and stay with the party"),
        )

    def as_dict(self) -> dict:
        return {
            "mode": "corrected",
            "proven": True,
            "epsilon": self.epsilon,
            "eps_noise": self.eps_noise,
            "eps_jacobian": self.eps_jacobian,
            "eps_solver": self.eps_solver,
            "solver_tol": self.solver_tol,
            "solver_noise_scale": self.solver_noise_scale,
            "ridge": self.ridge,
            "sensitivity": self.sensitivity,
            "noise_scale": self.noise_scale,
            "dimension": self.dim,
            "R": self.R,
            "huber_h": self.h,
            "n": self.n,
            "n_classes": self.n_classes,
            "guarantee": self.guarantee().as_dict(),
        }


@dataclass(frozen=True)
class PaperCalibration:
    """The paper's perturbation (its eq. (7)): shared general b with density ∝ exp(−(ε/2)‖b‖_F). NOT proven private."""

    epsilon: float
    dim_x: int
    n_classes: int

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise ValueError(f"epsilon must be finite and positive, got {self.epsilon}")

    @property
    def D(self) -> int:
        return self.dim_x + 1

    @property
    def sensitivity(self) -> float:
        """The paper's Lemma 1 bound ‖b − b′‖_F ≤ 2 (one class block, ‖x̃‖ ≤ 1); too small by √(C(C−1))·R²."""
        return 2.0

    @property
    def noise_scale(self) -> float:
        """β = 2/ε: ‖b‖_F ~ Gamma((d+1)², 2/ε) (the paper's eq. (7))."""
        return 2.0 / self.epsilon

    def sample(self, rng: Drbg) -> np.ndarray:
        """One general (d+1)×(d+1) matrix b, replicated to every class (the paper's shared b).

        Sensitivity (paper's Lemma 1): 2, Frobenius norm of one block, assuming ‖x̃‖ ≤ 1.
        Guarantee: NONE proven. The paper claims (ε + k)-DP; docs/experiments/lmgc.md, "What the paper got wrong" shows why that fails (the true
        gradient difference reaches 2R²√(C(C−1)), J_p may have no minimiser, a shared b only moves
        the class mean). Density ∝ exp(−(ε/2)‖b‖_F): ‖b‖_F ~ Gamma((d+1)², 2/ε), uniform direction.
        """
        v = spherical_laplace(rng, self.D * self.D, self.noise_scale)
        if not np.all(np.isfinite(v)):
            raise PrivacyError("non-finite noise sample")
        return np.broadcast_to(v.reshape(self.D, self.D), (self.n_classes, self.D, self.D)).copy()

    def guarantee(self) -> Guarantee:
        return Guarantee(
            mechanism="LMGC objective perturbation as in Pathak & Raj 2010 (Sec. 4) — NOT PROVEN PRIVATE",
            epsilon=self.epsilon,
            delta=0.0,
            sensitivity=self.sensitivity,
            norm="Frobenius of one (d+1)x(d+1) block",
            statement=("NO valid DP guarantee. The paper claims (epsilon + k)-DP with an illegible constant k; "
                       "the proof fails (docs/experiments/lmgc.md, 'What the paper got wrong'): a shared b over-determines the stationarity conditions (a), "
                       "the sensitivity 2 ignores the √(C(C−1))·R² factor (b), J_p is not strongly convex and can be "
                       "unbounded below (d), and PSD constraints break the b ↔ Φ* bijection (e)."),
        )

    def as_dict(self) -> dict:
        return {
            "mode": "paper",
            "proven": False,
            "epsilon": self.epsilon,
            "claimed_epsilon": "epsilon + k (k illegible in the source)",
            "sensitivity": self.sensitivity,
            "noise_scale": self.noise_scale,
            "dimension": self.D * self.D,
            "guarantee": self.guarantee().as_dict(),
        }
