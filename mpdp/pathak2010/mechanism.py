"""The aggregate classifier's output distribution drawn directly, in plaintext (PRR10 Sec. 3.2).

ŵ_s = (1/K)·Σ_j ŵ_j + η_{j*}, j* = argmin_j n_j (gaussian-distributed: + σ(n₍₁₎)·Σ_i z_i). This is what the three-stage protocol
computes; tests/core/test_pathak_equivalence.py proves that the cryptographic protocol
returns exactly this value (up to fixed-point rounding) for the same per-party generators,
after which experiments may use this fast path. The party generator convention is
:func:`party_rng`: the protocol's party machines draw their noise from the same streams.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mpdp.dp.pathak_noise import SOLVER_TOL, PathakCalibration
from mpdp.learn import logreg
from mpdp.math.drbg import Drbg


def party_rng(root: Drbg, party: str) -> Drbg:
    """The generator of party ``party`` derived from a job's root generator."""
    return root.child(f"party/{party}")


@dataclass(frozen=True)
class AggregateDraw:
    weights: np.ndarray  # ŵ_s
    average: np.ndarray  # (1/K)Σŵ_j, non-private
    smallest: int  # j* (index into the parties list)
    noise: np.ndarray  # η_{j*} (gaussian-distributed: σ(n₍₁₎)·Σ_i z_i)
    shares: tuple[np.ndarray, ...] = ()  # gaussian-distributed: every party's z_i


def local_model(X: np.ndarray, y: np.ndarray, calibration: PathakCalibration) -> np.ndarray:
    """ŵ_j: the party's objective in the mode's convention (rows must be clipped) minimised to ‖∇J‖ < SOLVER_TOL,
    the tolerance the noise's sensitivity allows for (PathakCalibration.model_sensitivity)."""
    return logreg.fit(X, y, calibration.lam, calibration.convention, tol=SOLVER_TOL)


def draw_aggregate(models: list[np.ndarray], sizes: list[int], calibration: PathakCalibration, rngs: list[Drbg]) -> AggregateDraw:
    """One draw of ŵ_s from local models, sizes and each party's generator."""
    if not (len(models) == len(sizes) == len(rngs) == calibration.parties):
        raise ValueError(f"need K={calibration.parties} models, sizes and generators, got {len(models)}, {len(sizes)}, {len(rngs)}")
    d = len(models[0])
    j_star = int(np.argmin(sizes))
    average = np.mean(np.stack(models), axis=0)
    if calibration.distributed:
        shares = tuple(calibration.draw_share(r, d) for r in rngs)
        noise = calibration.sigma(sizes[j_star], d) * np.sum(np.stack(shares), axis=0)
        return AggregateDraw(weights=average + noise, average=average, smallest=j_star, noise=noise, shares=shares)
    noise = calibration.draw(rngs[j_star], sizes[j_star], d)
    return AggregateDraw(weights=average + noise, average=average, smallest=j_star, noise=noise)
