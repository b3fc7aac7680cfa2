"""Constants of Algorithm 2 and of the authors' experiments, exactly as the authors' code has them (DPBayes/dca-nips2017).

Everything here is *public configuration*: none of it depends on private data. The UCI settings drive
``mpdp experiment heikkila2017``; the GDSC settings are recorded for completeness (we hold no GDSC data),
with the δ discrepancy of the authors' launcher (``10e-4`` = 10⁻³ in the code, 10⁻⁴ in Fig. 3) kept as an
explicit choice (:attr:`GdscConfig.delta_source`), never silently resolved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

# -- Algorithm 2 (Heikkilä et al. 2017, Sec. 3.2.1; constants of DPBayes/dca-nips2017) -------------
STD_SHARE = 0.3
"""``privacy_for_marg_var``: the std round gets (0.3ε, 0.3δ), the main round (0.7ε, 0.7δ)."""
MAIN_SHARE = 1.0 - STD_SHARE
LAMBDA = 1.0
"""Noise precision λ of the likelihood y | x ~ N(xᵀβ, λ⁻¹) (code: fixed)."""
LAMBDA0 = 1.0
"""Prior precision λ0 of β ~ N(0, λ0⁻¹·I) (code: fixed)."""
VARIANCE_FLOOR = 0.5
"""``small_const_for_std``: a noisy marginal variance ≤ 0 is replaced by 0.5 (a variance, so σ̂ = √0.5)."""
RANDOM_SEED = 1
"""``random_seed`` of the UCI script (numpy global seed there; our splits use it as the default seed)."""
GRID: tuple[float, ...] = tuple(float(v) for v in np.round(np.arange(1, 21) * 0.1, 1))
"""Threshold multipliers p ∈ {0.1, 0.2, …, 2.0} for p_x and p_y alike (the code's ``np.arange(0.1, 2.1, 0.1)``)."""

# -- UCI (Fig. 2) -----------------------------------------------------------------------------------
UCI_EPSILONS: tuple[float, ...] = tuple(float(v) for v in np.power(10.0, (0.0, 0.25, 0.5, 0.75, 1.0, 1.5)))
"""ε = 10^{0, 0.25, 0.5, 0.75, 1, 1.5} ≈ {1, 1.78, 3.16, 5.62, 10, 31.62}."""
UCI_EPSILON_LABELS: tuple[str, ...] = ("1", "1.78", "3.16", "5.62", "10", "31.62")
UCI_DELTA = 1e-4
UCI_REPEATS = 25
"""Random train/test splits, fixed across ε."""
UCI_GRID_REPEATS: tuple[int, int] = (20, 20)
"""(R_data, R_noise) of the auxiliary-data grid search (``opt_clip_repeats = 20``)."""
SCALE_TO_RANGE = 5.0
"""Each column is centred and scaled to a range of length 2·5 = 10."""
ASSUMED_BOUND = 7.5
"""``assumed_data_range = [7.5, 7.5]``: the public bounds c_j for every feature and for the target."""
PAPER_SENSITIVITY_BOUND = SCALE_TO_RANGE
"""The code's unclipped baselines (TA, DDP, input perturbation) take Δ from ±5, not from c = 7.5."""


@dataclass(frozen=True)
class UciDataset:
    """One UCI data set of Fig. 2: name, file, sizes and dimension."""

    name: str
    folder: str
    file: str
    n_train: int
    n_test: int
    d: int


UCI_DATASETS: dict[str, UciDataset] = {
    "red": UciDataset("red wine", "wine_quality", "winequality-red.csv", 1000, 500, 11),
    "white": UciDataset("white wine", "wine_quality", "winequality-white.csv", 3000, 1000, 11),
    "abalone": UciDataset("abalone", "abalone", "abalone.data", 3000, 1000, 8),
}
ABALONE_SEX_CODE = {"M": 0.0, "F": 1.0, "I": 1.0}
"""The code's coding: M = 0, F and I = 1."""

# -- GDSC (Fig. 3; recorded, not run: no GDSC data is held) -----------------------------------------
GDSC_GRID_REPEATS: tuple[int, int] = (10, 10)
GDSC_GRID_N = 400
"""The GDSC grid search runs with n = 400 and the main-round share (0.7ε, 0.7δ)."""


@dataclass(frozen=True)
class GdscConfig:
    """The GDSC setup of the authors' code. ``delta_source`` chooses between the code's δ (``10e-4`` = 10⁻³) and the
    figure's δ (10⁻⁴); there is no default, so every use states its choice."""

    delta_source: Literal["code", "figure"]
    d: int = 10
    n_train: int = 840
    n_test: int = 100
    epsilons: tuple[float, ...] = (1.0, 3.0, 5.0, 7.5, 10.0)
    x_bound: float = 1.0
    y_bound: float = 7.5
    drugs: int = 264
    cv_folds: int = 25
    grid_repeats: tuple[int, int] = GDSC_GRID_REPEATS
    grid_n: int = GDSC_GRID_N

    def __post_init__(self) -> None:
        if self.delta_source not in ("code", "figure"):
            raise ValueError(f"delta_source must be 'code' (10e-4 = 1e-3) or 'figure' (1e-4), got {self.delta_source!r}")

    @property
    def delta(self) -> float:
        return 10e-4 if self.delta_source == "code" else 1e-4
