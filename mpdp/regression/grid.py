"""Projection multipliers (p_x, p_y) from a grid search on synthetic auxiliary data (Heikkilä et al. 2017,
Algorithm 2 step 3, as in the authors' code).

No private data enters: :func:`choose_multipliers` takes only N, d, ε, δ, the mode, a seed and the repeat
counts (a test checks the signature), so its output costs no privacy. Its randomness is a *public simulation*
(numpy's Generator under the seed): deterministic, and nothing it draws protects anyone.

For each of R_data synthetic sets — x ~ N(0, I_d), columns centred, rows scaled to unit ℓ2 norm; β ~ N(0, λ0⁻¹I);
y = xᵀβ + N(0, λ⁻¹), centred — and each of R_noise noise draws, every pair (p_x, p_y) of the grid 0.1..2.0
clips x at p_x·s_x and y at p_y·s_y (s = pooled sample std, ddof 1), perturbs the unique entries of XᵀX and Xᵀy
with the main round's total DCA noise, computes the posterior mean and scores −MAE on the same unclipped
synthetic data. The pair with the best average score wins (first in row-major order on ties).

Modes:

* ``paper`` reproduces the authors' UCI script: the noise is the unit noise times Δ₂⁴ (their
  ``U*(sensitivity**2)`` with ``sensitivity`` = Δ₂²: Δ₂⁴ where Δ₂ is due), calibrated classically with the *full* (ε, δ),
  std sqrt(N/(N−1)·2 ln(1.25/δ))/ε, and the posterior is solved without the PD fix.
* ``corrected`` simulates what Algorithm 2 really releases: noise std sqrt(N/(N−1))·σ_std(Δ₂, 0.7ε, 0.7δ)
  (analytic calibration, the main round's share) and the PD fix before the posterior.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from mpdp.dca import mechanism
from mpdp.regression.config import GRID, LAMBDA, LAMBDA0, MAIN_SHARE, UCI_GRID_REPEATS


@dataclass(frozen=True)
class Multipliers:
    """The chosen (p_x, p_y) and the average score table behind the choice (rows p_x, columns p_y)."""

    p_x: float
    p_y: float
    scores: np.ndarray  # (20, 20) mean −MAE
    n: int
    d: int
    epsilon: float
    delta: float
    mode: str
    seed: int
    repeats: tuple[int, int]

    def as_dict(self) -> dict:
        return {"p_x": self.p_x, "p_y": self.p_y, "n": self.n, "d": self.d, "epsilon": self.epsilon, "delta": self.delta,
                "mode": self.mode, "seed": self.seed, "repeats": list(self.repeats), "best_score": float(self.scores.max())}


def noise_unit(n: int, epsilon: float, delta: float, mode: str) -> float:
    """Std of the grid search's total noise per unit of (paper: Δ₂⁴; corrected: Δ₂)."""
    if mode == "paper":
        return math.sqrt(n / (n - 1) * 2.0 * math.log(1.25 / delta)) / epsilon
    return math.sqrt(n / (n - 1)) * mechanism.sigma_std("corrected", 1.0, MAIN_SHARE * epsilon, MAIN_SHARE * delta)


def choose_multipliers(
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    mode: str,
    seed: int,
    repeats: tuple[int, int] = UCI_GRID_REPEATS,
    workers: int | None = 1,
) -> Multipliers:
    """Grid-search (p_x, p_y) ∈ GRID² on synthetic data of the real size; deterministic under ``seed``.

    ``epsilon``, ``delta`` are the *total* budget of the fit; each mode takes its share as documented above.
    ``repeats`` = (R_data, R_noise): (20, 20) for UCI (the authors' code); tests use fewer.
    ``workers``: threads for the grid's p_x rows (None: every CPU this process may use, at most 8); the scores are
    the same for any number. One by default: the experiments parallelise over processes instead.
    """
    if n < 2 or d < 1:
        raise ValueError(f"need n ≥ 2 and d ≥ 1, got n={n}, d={d}")
    if not (math.isfinite(epsilon) and epsilon > 0 and 0 < delta < 1):
        raise ValueError(f"need ε > 0 and 0 < δ < 1, got ({epsilon}, {delta})")
    if mode not in mechanism.MODES:
        raise ValueError(f"mode must be one of {mechanism.MODES}, got {mode!r}")
    r_data, r_noise = (int(r) for r in repeats)
    if r_data < 1 or r_noise < 1:
        raise ValueError(f"repeats must be positive, got {repeats}")
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):  # tiny matrices: BLAS threads only contend
        # synthetic auxiliary data and its simulated noise: public, no private data, nothing released
        scores = _scores(n, d, noise_unit(n, epsilon, delta, mode), mode, np.random.default_rng(seed), r_data, r_noise, workers)  # public
    a, b = np.unravel_index(int(np.argmax(scores)), scores.shape)
    return Multipliers(GRID[a], GRID[b], scores, n, d, epsilon, delta, mode, seed, (r_data, r_noise))


def synthetic_data(rng: np.random.Generator, n: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """One auxiliary data set as the authors generate it (xnormalise / ynormalise)."""
    x = rng.normal(0.0, 1.0, (n, d))
    x -= x.mean(axis=0)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    beta = rng.normal(0.0, 1.0 / math.sqrt(LAMBDA0), d)
    y = rng.normal(x @ beta, 1.0 / math.sqrt(LAMBDA))
    return x, y - y.mean()


def _scores(n: int, d: int, unit: float, mode: str, rng: np.random.Generator, r_data: int, r_noise: int, workers: int | None = None) -> np.ndarray:
    """The mean −MAE of every (p_x, p_y). Per synthetic set, its draws are made first (in one order, so the result
    depends on the seed only); the p_x rows are then independent and run on ``workers`` threads (default: the CPUs
    this process may use, at most 8), each row's arithmetic the same as on one thread, so the table is identical
    for any number of workers. NumPy's LAPACK and matrix products release the GIL, so the threads run in parallel."""
    grid = np.asarray(GRID)
    g = grid.size
    j, k = np.triu_indices(d)
    m = j.size
    eye = np.eye(d)
    total = np.zeros((g, g))
    if workers is None:
        workers = min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))
    workers = max(1, min(int(workers), g))

    def row(a: int, x: np.ndarray, y: np.ndarray, cx: np.ndarray, cy: np.ndarray, U: np.ndarray, V: np.ndarray, Yc: np.ndarray) -> None:
        xc = np.clip(x, -cx[a], cx[a])
        G = xc.T @ xc
        H = (xc.T @ Yc).T  # (g, d)
        s2 = d * cx[a] ** 4 + 2 * d * (d - 1) * cx[a] ** 4 + 4 * d * cx[a] ** 2 * cy**2  # Δ₂² per p_y
        scale = unit * (s2**2 if mode == "paper" else np.sqrt(s2))  # (g,)
        A = G + scale[:, None, None, None] * U[None]  # (g, r_noise, d, d)
        bvec = H[:, None, :] + scale[:, None, None] * V[None]  # (g, r_noise, d)
        if mode == "paper":
            mu = np.linalg.solve(LAMBDA0 * eye + LAMBDA * A, LAMBDA * bvec[..., None])[..., 0]
        else:
            w, Q = np.linalg.eigh(A)
            qb = np.einsum("...ji,...j->...i", Q, LAMBDA * bvec)
            mu = np.einsum("...ij,...j->...i", Q, qb / (LAMBDA0 + LAMBDA * np.abs(w)))
        err = x @ mu.reshape(-1, d).T  # (n, g·r_noise) predictions, then |ŷ − y| in place (no temporaries)
        np.subtract(err, y[:, None], out=err)
        np.abs(err, out=err)
        total[a] -= err.sum(axis=0).reshape(g, r_noise).sum(axis=1) / n  # row a is only ever written by this call

    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="grid") if workers > 1 else None
    try:
        for _ in range(r_data):
            x, y = synthetic_data(rng, n, d)
            cx, cy = grid * np.std(x, ddof=1), grid * np.std(y, ddof=1)
            E = rng.normal(0.0, 1.0, (r_noise, m + d))
            U = np.zeros((r_noise, d, d))
            U[:, j, k] = E[:, :m]
            U[:, k, j] = E[:, :m]
            V = E[:, m:]
            Yc = np.clip(y[:, None], -cy, cy)  # (n, g): y clipped at every p_y
            args = (x, y, cx, cy, U, V, Yc)
            if pool is None:
                for a in range(g):
                    row(a, *args)
            else:
                for f in [pool.submit(row, a, *args) for a in range(g)]:
                    f.result()
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
    return total / (r_data * r_noise)
