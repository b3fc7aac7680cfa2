"""Noise for the Pathak–Rane–Raj aggregate classifier, in both modes (spec pathak2010.md §1.3, §1.10).

``corrected`` (default, provable): spherical Laplace, density ∝ exp(−‖η‖/β), with
β_j = 2/(K·n_j·λ·ε) for the (λ/2)‖w‖² objective. A record change in party j moves ŵ_j by
at most 2/(n_j·λ) in ℓ2 (CM08 Cor. 2), hence the average (1/K)·Σŵ_k by at most
2/(K·n_j·λ) ≤ 2/(K·n₍₁₎·λ); keeping the smallest party's noise makes the release ε-DP.

``paper`` (as published; see :mod:`mpdp.dp.pathak_paper` for what it really guarantees):
coordinate-wise Laplace with β_j = 2/(n_j·ε·λ) and the paper's λ‖w‖² objective.

Each party draws η_j from its own stream ``rng.child("pathak2010/noise")`` so that the
plaintext mechanism (:mod:`mpdp.pathak2010.mechanism`) and the cryptographic protocol
draw the same noise for the same seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from mpdp.dp.mechanisms import Guarantee, laplace_coordinates, spherical_laplace
from mpdp.learn.logreg import Convention, l2_sensitivity
from mpdp.math.drbg import Drbg

Mode = Literal["corrected", "paper"]
MODES: tuple[str, ...] = ("corrected", "paper")
NOISE_STREAM = "pathak2010/noise"


@dataclass(frozen=True)
class PathakCalibration:
    """Everything a party needs to train and draw its noise in one mode."""

    mode: Mode
    epsilon: float
    lam: float
    parties: int

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; use one of {MODES}")
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise ValueError(f"epsilon must be positive, got {self.epsilon}")
        if not (math.isfinite(self.lam) and self.lam > 0):
            raise ValueError(f"lambda must be positive, got {self.lam}")
        if self.parties < 1:
            raise ValueError(f"need at least one party, got {self.parties}")

    @property
    def convention(self) -> Convention:
        """Regulariser convention: ours (λ/2)‖w‖², or the paper's λ‖w‖² in paper mode."""
        return "half" if self.mode == "corrected" else "full"

    def scale(self, n: int) -> float:
        """Noise scale β_j for a party holding n records."""
        if n < 1:
            raise ValueError(f"dataset size must be >= 1, got {n}")
        if self.mode == "corrected":
            return 2.0 / (self.parties * n * self.lam * self.epsilon)
        return 2.0 / (n * self.epsilon * self.lam)

    def draw(self, rng: Drbg, n: int, d: int) -> np.ndarray:
        """η_j for a party with n records, from the party's noise stream."""
        stream = rng.child(NOISE_STREAM)
        if self.mode == "corrected":
            return spherical_laplace(stream, d, self.scale(n))
        return laplace_coordinates(stream, d, self.scale(n))

    def guarantee(self, d: int) -> Guarantee:
        """The guarantee the aggregate release actually gives (decision 1)."""
        if self.mode == "corrected":
            return Guarantee(
                mechanism="spherical Laplace output perturbation of the average of K local minimisers",
                epsilon=self.epsilon,
                delta=0.0,
                sensitivity=2.0 / (self.parties * self.lam),  # times 1/n_(1)
                norm="l2",
                statement=(
                    f"{self.epsilon:g}-DP under record substitution (ℓ2-sensitivity 2/(K·n₍₁₎·λ) with K={self.parties}, "
                    f"λ={self.lam:g}, (λ/2)‖w‖² objective, rows clipped to ‖x‖ ≤ 1); "
                    "trust model: honest-but-curious parties, curator does not collude; "
                    "the smallest party knows the noise it contributed"
                ),
            )
        from mpdp.dp.pathak_paper import paper_mode_true_epsilon

        true_eps = paper_mode_true_epsilon(self.epsilon, d, self.parties)
        return Guarantee(
            mechanism="coordinate Laplace with the published scale 2/(n₍₁₎·ε·λ) (PRR10, not proven)",
            epsilon=true_eps,
            delta=0.0,
            sensitivity=1.0 / self.lam,  # ℓ2, times 1/n_j, λ‖w‖² objective
            norm="l1 (from the l2 bound times sqrt(d))",
            statement=(
                f"paper mode: nominal ε={self.epsilon:g} but only {true_eps:.4g}-DP in the worst case "
                f"(coordinate Laplace calibrated with an ℓ2 bound, d={d}, K={self.parties}; pathak2010.md §1.10a)"
            ),
        )


def sensitivity_l2(n: int, lam: float, parties: int, convention: Convention) -> float:
    """ℓ2-sensitivity of the average (1/K)Σŵ_k to one record of a party with n records."""
    return l2_sensitivity(n, lam, convention) / parties
