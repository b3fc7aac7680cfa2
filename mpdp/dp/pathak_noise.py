"""Noise for the Pathak–Rane–Raj aggregate classifier, in its three modes (Pathak, Rane & Raj 2010,
Sec. 3.2, and our corrections).

``corrected`` (provable): spherical Laplace, density ∝ exp(−‖η‖/β), with
β_j = Δ(n_j)/(K·ε) for the (λ/2)‖w‖² objective. A record change in party j moves the exact minimiser
by at most 2/(n_j·λ) in ℓ2 (CM08 Cor. 2); the solver stops at ‖∇J‖ < tol, so the *computed* ŵ_j moves
by at most Δ(n_j) = 2/(n_j·λ) + 2·tol/λ (:func:`mpdp.dp.mechanisms.solver_slack`), hence the average
(1/K)·Σŵ_k by at most Δ(n_j)/K ≤ Δ(n₍₁₎)/K; keeping the smallest party's noise makes the release ε-DP.
What is released is the integer Σ_j round(ŵ_j·2^f) + round(K·2^f·η): the noise enters at full
resolution (every digit of the integer is noisy), and η is drawn at β_j plus
:meth:`PathakCalibration.rounding_scale`, which pays for the rounding of the models.

``paper`` (as published; see :mod:`mpdp.dp.pathak_paper` for what it really guarantees):
coordinate-wise Laplace with β_j = 2/(n_j·ε·λ) and the paper's λ‖w‖² objective, the ℓ2 sensitivity
1/(n_j·λ) of that objective widened by the solver slack like the others: β_j = 2·Δ(n_j)/ε (plus the
rounding term), released as the same full-resolution integer.

``gaussian-distributed`` (ours; docs/protocols/pathak2010.md "Distributed Gaussian noise"): every
party i draws z_i ~ N(0, I/(K−t)); the release carries σ(n₍₁₎)·Σ_i z_i, σ from the analytic Gaussian
mechanism (Balle & Wang 2018) for the ℓ2-sensitivity Δ(n₍₁₎)/K plus the fixed-point rounding of the
models. (ε, δ)-DP against the curator and any t colluding parties, none of whom knows the noise.

Each party draws η_j (or z_i) from its own stream ``rng.child("pathak2010/noise")`` so that the
plaintext mechanism (:mod:`mpdp.pathak2010.mechanism`) and the cryptographic protocol
draw the same noise for the same seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import numpy as np

from mpdp import limits
from mpdp.dp.mechanisms import Guarantee, analytic_gaussian_sigma, gaussian, laplace_coordinates, spherical_laplace
from mpdp.learn.logreg import DEFAULT_TOL, Convention, fitted_l2_sensitivity
from mpdp.math.drbg import Drbg

Mode = Literal["corrected", "paper", "gaussian-distributed"]
MODES: tuple[str, ...] = ("corrected", "paper", "gaussian-distributed")
GAUSSIAN = "gaussian-distributed"
NOISE_STREAM = "pathak2010/noise"
DEFAULT_DELTA = limits.DEFAULT_DELTA
# Fixed point of the distributed Gaussian (docs/protocols/pathak2010.md, "Fixed point"): in units 2^-f of K·ŵ_s,
# σ̄ = ⌈S·2^SIGMA_FRAC_BITS⌉ with S = K·σ·2^f < 2^(f + SCALE_BITS); z̄_i = round(z_i·2^fz), |z_i| < 2^Z_INT_BITS.
SIGMA_FRAC_BITS = 32
SCALE_BITS = 26
Z_INT_BITS = 6
MAX_Z_FRAC_BITS = 256
FIXED_POINT_DELTA_SHARE = 2.0**-10  # the part of δ spent on the fixed-point error, (1 + e^ε)·τ
FLOAT_SLACK = 2.0**-40  # σ̄ and β are rounded up by (1 + 2^-40): the floats computing them err by a few ulps (2^-52) at most
SOLVER_TOL = DEFAULT_TOL  # every party's local solver stops at ‖∇J‖ < SOLVER_TOL (mpdp.pathak2010.party.FIT_TOL)
MAX_DIMENSION = limits.MAX_PATHAK_DIMENSION  # fz is fixed by the spec alone, before d is known


class NoiseOverflow(ValueError):
    """A party's noise does not fit the fixed-point encoding: the job must not release."""


@dataclass(frozen=True)
class PathakCalibration:
    """Everything a party needs to train and draw its noise in one mode."""

    mode: Mode
    epsilon: float
    lam: float
    parties: int
    delta: float = 0.0  # gaussian-distributed only
    colluders: int = 0  # gaussian-distributed only: t
    frac_bits: int = 32  # f of the released fixed point (its rounding is part of every mode's calibration)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; use one of {MODES}")
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise ValueError(f"epsilon must be positive, got {self.epsilon}")
        if not (math.isfinite(self.lam) and self.lam > 0):
            raise ValueError(f"lambda must be positive, got {self.lam}")
        if self.parties < 1:
            raise ValueError(f"need at least one party, got {self.parties}")
        if self.mode == GAUSSIAN:
            if not 0 < self.delta < 1:
                raise ValueError(f"delta must be in (0, 1), got {self.delta}")
            if not 0 <= self.colluders <= max(self.parties - 1, 0):
                raise ValueError(f"colluders t must be in [0, K−1] = [0, {max(self.parties - 1, 0)}], got {self.colluders}")
            if self.z_frac_bits > MAX_Z_FRAC_BITS:
                top = largest_epsilon(self.delta, self.parties, self.frac_bits)
                raise ValueError(f"epsilon {self.epsilon:g} is too large for gaussian-distributed noise at delta {self.delta:g}: the largest allowed "
                                 f"is {top:.4g} (z would need over {MAX_Z_FRAC_BITS} fractional bits); lower epsilon, raise delta or use the corrected mode")
        elif self.delta != 0 or self.colluders != 0:
            raise ValueError(f"{self.mode} mode is pure ε-DP: delta and colluders must be 0")

    @property
    def distributed(self) -> bool:
        return self.mode == GAUSSIAN

    @property
    def convention(self) -> Convention:
        """Regulariser convention: ours (λ/2)‖w‖², or the paper's λ‖w‖² in paper mode."""
        return "full" if self.mode == "paper" else "half"

    # -- gaussian-distributed ------------------------------------------------------------
    @property
    def delta_gaussian(self) -> float:
        """δ of the ideal Gaussian mechanism; the rest of δ covers the fixed-point error."""
        return self.delta * (1.0 - FIXED_POINT_DELTA_SHARE)

    @cached_property
    def sigma_one(self) -> float:
        """σ of the analytic Gaussian mechanism for sensitivity 1 at (ε, δ_gaussian); σ scales linearly with Δ."""
        return analytic_gaussian_sigma(1.0, self.epsilon, self.delta_gaussian)

    @cached_property
    def z_frac_bits(self) -> int:
        """fz: the smallest number of fractional bits of z̄_i with (1 + e^ε)·τ ≤ δ·2^-10, where
        τ = d·K·S_max·2^-fz·(1 + 1/(√(2π)·σ₁)) bounds P[fixed-point release ≠ ideal release] (docs, "Fixed point")."""
        return _z_frac_bits(self.epsilon, self.delta, self.parties, self.frac_bits, self.sigma_one)

    def fixed_point_delta(self, d: int) -> float:
        """(1 + e^ε)·τ for dimension d: the δ the fixed-point error costs (≤ δ·2^-10 by the choice of fz)."""
        tau = d * self.parties * 2.0 ** (self.frac_bits + SCALE_BITS - self.z_frac_bits) * (1.0 + 1.0 / (math.sqrt(2.0 * math.pi) * self.sigma_one))
        return (1.0 + math.exp(min(self.epsilon, 700.0))) * tau

    def model_sensitivity(self, n: int) -> float:
        """Δ(n): how far one record moves the local model a party with n records *computes*, in ℓ2.
        The exact minimiser moves by 2/(n·c) (CM08 Cor. 2; c = λ, paper mode 2λ), the solver's output by
        2·SOLVER_TOL/c more (:func:`mpdp.dp.mechanisms.solver_slack`): Δ(n) = 2/(n·c) + 2·tol/c."""
        if n < 1:
            raise ValueError(f"dataset size must be >= 1, got {n}")
        return fitted_l2_sensitivity(n, self.lam, self.convention, SOLVER_TOL)

    def noise_units(self, n: int, d: int) -> int:
        """σ̄_j = ⌈S_j·2^SIGMA_FRAC_BITS⌉ for a party with n records: S_j = σ₁·(2^f·Δ(n) + √d) is the std, in
        units 2^-f of K·ŵ_s, of the Gaussian mechanism on Σ_j round(ŵ_j·2^f) (ℓ2-sensitivity 2^f·Δ(n) + √d,
        Δ(n) = 2/(n·λ) + 2·tol/λ: :meth:`model_sensitivity`).
        Rounded up (never under-noised); NoiseOverflow when S_j ≥ 2^(f + SCALE_BITS)."""
        s = self.sigma_one * (2.0**self.frac_bits * self.model_sensitivity(n) + math.sqrt(d))
        if not (math.isfinite(s) and s < 2.0 ** (self.frac_bits + SCALE_BITS)):
            raise NoiseOverflow(f"the noise std K·σ(n) is not below 2^{SCALE_BITS}; the job cannot release")  # σ(n) would tell n
        return math.ceil(s * (1.0 + FLOAT_SLACK) * 2.0**SIGMA_FRAC_BITS)

    def sigma(self, n: int, d: int) -> float:
        """σ(n), the per-coordinate std of the noise on ŵ_s (as released, after rounding σ̄ up)."""
        return self.noise_units(n, d) / (self.parties * 2.0 ** (self.frac_bits + SIGMA_FRAC_BITS))

    def draw_share(self, rng: Drbg, d: int) -> np.ndarray:
        """z_i ~ N(0, I_d/(K−t)), party i's noise factor, from its noise stream."""
        if not self.distributed:
            raise ValueError(f"{self.mode} mode has no noise shares")
        return gaussian(rng.child(NOISE_STREAM), d, 1.0 / math.sqrt(self.parties - self.colluders))

    # -- smallest-party modes ------------------------------------------------------------
    def scale(self, n: int) -> float:
        """Noise scale β_j for a party holding n records (smallest-party modes), rounded up by (1 + 2^-40):
        corrected Δ(n)/(K·ε), paper 2·Δ(n)/ε (the published 2/(n·ε·λ) with the solver slack; :meth:`model_sensitivity`)."""
        if n < 1:
            raise ValueError(f"dataset size must be >= 1, got {n}")
        if self.distributed:
            raise ValueError("gaussian-distributed mode has no per-party scale β; use sigma(n, d)")
        if self.mode == "corrected":
            return self.model_sensitivity(n) / (self.parties * self.epsilon) * (1.0 + FLOAT_SLACK)
        return 2.0 * self.model_sensitivity(n) / self.epsilon * (1.0 + FLOAT_SLACK)

    def rounding_scale(self, d: int) -> float:
        """The part of the released β that pays for the fixed point (smallest-party modes): the release is the integer
        R = Σ_j round(ŵ_j·2^f) + round(K·2^f·η), and rounding one party's model moves R by up to one unit more per
        coordinate than ŵ_j·2^f moves (ℓ2: √d, ℓ1: d). corrected: √d·2^-f/(K·ε), so that K·2^f·β·ε covers the
        ℓ2-sensitivity 2^(f+1)/(n₍₁₎·λ) + √d of R; paper: 2·√d·2^-f/ε, so that the reported √d·ε/(2K) covers the
        ℓ1-sensitivity √d·2^f/(n₍₁₎·λ) + d (docs/protocols/pathak2010.md, "The released integer")."""
        if self.distributed:
            raise ValueError("gaussian-distributed mode has no per-party scale β; its σ already covers the rounding")
        if d < 1:
            raise ValueError(f"dimension must be >= 1, got {d}")
        unit = math.sqrt(d) * 2.0**-self.frac_bits
        return unit / (self.parties * self.epsilon) if self.mode == "corrected" else 2.0 * unit / self.epsilon

    def released_scale(self, n: int, d: int) -> float:
        """β of the noise η_j actually drawn: :meth:`scale` plus :meth:`rounding_scale` (smallest-party modes)."""
        return self.scale(n) + self.rounding_scale(d)

    def draw(self, rng: Drbg, n: int, d: int) -> np.ndarray:
        """η_j for a party with n records, from the party's noise stream (smallest-party modes), at :meth:`released_scale`."""
        stream = rng.child(NOISE_STREAM)
        if self.mode == "corrected":
            return spherical_laplace(stream, d, self.released_scale(n, d))
        return laplace_coordinates(stream, d, self.released_scale(n, d))

    def guarantee(self, d: int) -> Guarantee:
        """The guarantee the aggregate release actually gives."""
        if self.distributed:
            t = self.colluders
            return Guarantee(
                mechanism="distributed Gaussian output perturbation of the average of K local minimisers (σ(n₍₁₎)·Σ_i z_i, analytic calibration)",
                epsilon=self.epsilon,
                delta=self.delta,
                sensitivity=2.0 / (self.parties * self.lam),  # times 1/n_(1), plus the solver slack 2·tol/(K·λ) and the rounding term √d·2^-f/K
                norm="l2",
                statement=(
                    f"({self.epsilon:g}, {self.delta:g})-DP under record substitution against the curator and any {t} colluding "
                    f"part{'y' if t == 1 else 'ies'} (Gaussian mechanism, ℓ2-sensitivity 2/(K·n₍₁₎·λ) + 2·tol/(K·λ) + √d·2^-{self.frac_bits}/K with "
                    f"K={self.parties}, λ={self.lam:g}, tol={SOLVER_TOL:g} the local solver's gradient bound, (λ/2)‖w‖² objective, "
                    f"rows clipped to ‖x‖ ≤ 1; fixed-point error inside δ); "
                    f"trust model: honest-but-curious parties and curator, the curator colludes with no party; "
                    f"noise Σ_i σ(n₍₁₎)·z_i, z_i ~ N(0, I/(K−t)) drawn by every party: no coalition of up to t={t} parties knows it"
                ),
            )
        if self.mode == "corrected":
            return Guarantee(
                mechanism="spherical Laplace output perturbation of the average of K local minimisers",
                epsilon=self.epsilon,
                delta=0.0,
                sensitivity=2.0 / (self.parties * self.lam),  # times 1/n_(1), plus the solver slack 2·tol/(K·λ)
                norm="l2",
                statement=(
                    f"{self.epsilon:g}-DP under record substitution, for the released fixed-point integer as for ŵ_s "
                    f"(spherical Laplace, ℓ2-sensitivity 2/(K·n₍₁₎·λ) + 2·tol/(K·λ) + √d·2^-{self.frac_bits}/K with K={self.parties}, "
                    f"λ={self.lam:g}, tol={SOLVER_TOL:g} the local solver's gradient bound, (λ/2)‖w‖² objective, rows clipped to ‖x‖ ≤ 1; "
                    "the last term is the models' rounding); "
                    "trust model: honest-but-curious parties, curator does not collude; "
                    "the smallest party knows the noise it contributed"
                ),
            )
        from mpdp.dp.pathak_paper import paper_mode_true_epsilon

        true_eps = paper_mode_true_epsilon(self.epsilon, d, self.parties)
        return Guarantee(
            mechanism="coordinate Laplace with the published scale 2/(n₍₁₎·ε·λ), widened by the solver slack (PRR10, not proven)",
            epsilon=true_eps,
            delta=0.0,
            sensitivity=1.0 / self.lam,  # ℓ2, times 1/n_j, λ‖w‖² objective; plus the solver slack tol/λ
            norm="l1 (from the l2 bound times sqrt(d))",
            statement=(
                f"paper mode: nominal ε={self.epsilon:g} but only {true_eps:.4g}-DP in the worst case "
                f"(coordinate Laplace calibrated with an ℓ2 bound, d={d}, K={self.parties}; docs/experiments/pathak2010.md), for the released "
                f"fixed-point integer as for ŵ_s (the scale also carries 2·√d·2^-{self.frac_bits}/ε for the models' rounding)"
            ),
        )


def largest_epsilon(delta: float, parties: int, frac_bits: int = 32) -> float:
    """The largest ε whose gaussian-distributed calibration fits the fixed point (fz ≤ MAX_Z_FRAC_BITS) at this δ and
    K: fz grows with ε (the (1 + e^ε) factor and 1/σ₁), so bisection finds it (to 4 significant digits)."""

    def fits(eps: float) -> bool:
        sigma_one = analytic_gaussian_sigma(1.0, eps, delta * (1.0 - FIXED_POINT_DELTA_SHARE))
        return _z_frac_bits(eps, delta, parties, frac_bits, sigma_one) <= MAX_Z_FRAC_BITS

    lo, hi = 0.0, 1.0
    while fits(hi):
        lo, hi = hi, 2.0 * hi
        if hi > 1e6:
            return math.inf
    while hi - lo > 1e-4 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def _z_frac_bits(epsilon: float, delta: float, parties: int, frac_bits: int, sigma_one: float) -> int:
    """fz of :attr:`PathakCalibration.z_frac_bits` from its inputs (σ₁ = the analytic Gaussian σ for Δ = 1)."""
    log2_one_plus_exp = (epsilon + math.log1p(math.exp(-epsilon))) / math.log(2.0)
    log2_tau_factor = (
        math.log2(MAX_DIMENSION) + math.log2(parties) + frac_bits + SCALE_BITS + math.log2(1.0 + 1.0 / (math.sqrt(2.0 * math.pi) * sigma_one))
    )
    return math.ceil(log2_tau_factor + log2_one_plus_exp - math.log2(delta * FIXED_POINT_DELTA_SHARE))
