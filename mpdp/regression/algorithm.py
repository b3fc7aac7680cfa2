"""Algorithm 2 end to end in one process, every DP round through the real DCA core (Heikkilä et al. 2017, Sec. 3.2.1).

Each record is one DCA client (the paper's setting: N clients with one sample each). A round builds the job's
:class:`~mpdp.dca.params.DcaParams` from its :class:`~mpdp.regression.statistics.RoundSpec`, hands the
per-record vectors to the in-memory driver :func:`mpdp.dca.driver.run_job` (clients clip, add
N(0, σ_std²/(N−1)), encode, share in Z_2^64; three compute nodes sum; the aggregator checks agreement and
decodes), and decodes ``DpSum.values``. Nothing here re-implements the sum.

Steps of :func:`fit_ddp` with ``project=True`` (proj DDP):

1. pre-clip to the public bounds c (inside the statistics);
2. std round on the squares with (0.3ε, 0.3δ) → σ̂ (floor 0.5 on the variance);
3. (p_x, p_y) from :func:`mpdp.regression.grid.choose_multipliers` (public, no private data), B = min(p·σ̂, c);
4. main round on the unique entries of XᵀX and Xᵀy of the data clipped to B, with (0.7ε, 0.7δ);
5. posterior with the PD fix.

With ``project=False`` (DDP) there is one main round on the data clipped to c with the full (ε, δ).
The fit returns one ledger entry per round; the caller records them in the parties' privacy ledgers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from mpdp.dca.driver import run_job
from mpdp.dca.params import DcaParams
from mpdp.math.drbg import Drbg
from mpdp.messages import dca_pb2
from mpdp.regression.config import UCI_GRID_REPEATS
from mpdp.regression.grid import Multipliers
from mpdp.regression.plan import RegressionPlan
from mpdp.regression.posterior import Posterior, posterior
from mpdp.regression.privacy import ledger_entry
from mpdp.regression.statistics import RoundSpec, StdEstimate, SuffStats, main_round_spec, suff_stats

DEFAULT_NODES: tuple[str, ...] = ("node-1", "node-2", "node-3")


@dataclass(frozen=True)
class DcaRound:
    """One released round: the spec, the DCA job, the decoded sum and the release message."""

    spec: RoundSpec
    params: DcaParams
    values: np.ndarray
    release: dca_pb2.DpSum
    seconds: float


class DcaRoundFailed(RuntimeError):
    """The DCA job refused to release (e.g. too few clients); nothing was learnt."""


def run_dca_round(
    spec: RoundSpec,
    X: np.ndarray,
    y: np.ndarray,
    rng: Drbg,
    *,
    job_id: str,
    nodes: Sequence[str] = DEFAULT_NODES,
    label: str | None = None,
) -> DcaRound:
    """Run one round with every record as a DCA client through :func:`mpdp.dca.driver.run_job`.

    A seeded ``rng`` marks the job as a simulation (``simulation_seed``), as the DCA core requires.
    ``label`` (default: the job id) names the round's random streams, so seeded results stay reproducible.
    """
    t0 = time.perf_counter()
    Z = spec.statistics(X, y)
    label = label or job_id
    params = spec.dca_params(job_id, Z.shape[0], nodes, simulation_seed=(b"seeded:" + label.encode()) if rng.seeded else b"")
    run = run_job(params, Z, rng.child(f"dca/{label}"), record=False)
    if run.error is not None or run.release is None:
        raise DcaRoundFailed(f"DCA job {job_id} released nothing: {run.error}")
    values = np.asarray(run.release.values, dtype=np.float64)
    return DcaRound(spec, params, values, run.release, time.perf_counter() - t0)


@dataclass
class DdpFit:
    """The outcome of Algorithm 2 (or of its unprojected variant)."""

    posterior: Posterior
    stats: SuffStats
    rounds: list[DcaRound]
    ledger: list[dict]
    std: StdEstimate | None = None
    multipliers: Multipliers | None = None
    thresholds: np.ndarray | None = None
    seconds: dict[str, float] = field(default_factory=dict)


def fit_ddp(
    X: np.ndarray,
    y: np.ndarray,
    bounds: Sequence[float],
    epsilon: float,
    delta: float,
    *,
    mode: str,
    rng: Drbg,
    project: bool = True,
    multipliers: Multipliers | tuple[float, float] | None = None,
    grid_seed: int = 1,
    grid_repeats: tuple[int, int] = UCI_GRID_REPEATS,
    declared_bounds: Sequence[float] | None = None,
    nodes: Sequence[str] = DEFAULT_NODES,
    job_prefix: str = "blr",
) -> DdpFit:
    """Fit BLR on distributed records with DCA (proj DDP when ``project``, else DDP).

    ``bounds``: the public c_1..c_{d+1} (features, then target). ``multipliers``: skip the grid search (e.g. when
    the caller already ran it for this (N, d, ε, δ, mode)); otherwise it runs with ``grid_seed``.
    ``declared_bounds`` (paper mode, ``project=False`` only) reproduces the code's unclipped baselines (Δ₂ from ±5).
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n, d = X.shape
    seeded = rng.seeded
    if not project:
        spec = main_round_spec(bounds, epsilon, delta, mode, declared_bounds=declared_bounds, purpose="heikkila2017 main round (no projection)")
        job = f"{job_prefix}.main"  # job ids are ids (mpdp.limits); the streams keep their old names
        r = run_dca_round(spec, X, y, rng, job_id=job, nodes=nodes, label=f"{job_prefix}/main")
        stats = suff_stats(r.values, d)
        return DdpFit(posterior(stats), stats, [r], [ledger_entry(spec, job, seeded=seeded)], seconds={"dca": r.seconds})
    if declared_bounds is not None:
        raise ValueError("declared_bounds only applies to the unprojected fit (project=False)")
    plan = RegressionPlan(tuple(bounds), epsilon, delta, mode, grid_seed, grid_repeats)
    s_spec, s_job = plan.std_round(), f"{job_prefix}.std"
    r1 = run_dca_round(s_spec, X, y, rng, job_id=s_job, nodes=nodes, label=f"{job_prefix}/std")
    t = time.perf_counter()
    step = plan.main_round(r1.values, n, multipliers=multipliers)
    t_grid = time.perf_counter() - t
    m_job = f"{job_prefix}.main"
    r2 = run_dca_round(step.spec, X, y, rng, job_id=m_job, nodes=nodes, label=f"{job_prefix}/main")
    stats = plan.stats(r2.values)
    return DdpFit(
        posterior(stats),
        stats,
        [r1, r2],
        [ledger_entry(s_spec, s_job, seeded=seeded), ledger_entry(step.spec, m_job, seeded=seeded)],
        std=step.std,
        multipliers=step.multipliers if isinstance(step.multipliers, Multipliers) else None,
        thresholds=step.thresholds,
        seconds={"dca": r1.seconds + r2.seconds, "grid": t_grid},
    )
