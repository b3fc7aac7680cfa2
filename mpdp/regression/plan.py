"""The curator's side of Algorithm 2: the public plan, the step between the two rounds, and the finish
(Heikkilä et al. 2017, Algorithm 2, steps 2–4, and the posterior). Pure functions of public values and DP releases: no private data, no I/O.

Federation flow (the lead wires it over the DCA services; each party is one DCA client):

1. curator: ``plan = RegressionPlan(bounds, epsilon, delta, mode, grid_seed=…)``; the std job is
   ``plan.std_round().dca_params(job_id, clients=P, nodes, records_per_client=max n_p)``.
2. party p: ``party_statistics(X_p, y_p, "std", plan.bounds)`` → submit as its DCA client vector; record
   ``ledger_entry(plan.std_round(), job_id, seeded=False)`` in its ledger.
3. curator, on the std release: ``step = plan.main_round(release.values, n_total)`` — decodes σ̂, runs the
   grid search (public), sets B = min(p·σ̂, c) and returns ``step.spec`` (announce ``step.thresholds``).
4. party p: ``party_statistics(X_p, y_p, "main", step.spec.bounds)`` → submit; record the main-round entry.
5. curator: ``plan.finish(release.values)`` → :class:`~mpdp.regression.posterior.Posterior`.

N = n_total (the number of records) is public (as in the paper); the DCA noise is calibrated for P clients
(σ_std²/(P − T − 1) each), which is the same per-record guarantee since one record changes one party's sum by
at most Δ₂.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mpdp import limits
from mpdp.regression.config import UCI_GRID_REPEATS
from mpdp.regression.grid import Multipliers, choose_multipliers
from mpdp.regression.posterior import Posterior, posterior
from mpdp.regression.privacy import Budget, budget_split
from mpdp.regression.statistics import (
    Floats,
    RoundSpec,
    StdEstimate,
    SuffStats,
    main_round_spec,
    std_estimate,
    std_round_spec,
    suff_stats,
    thresholds,
)


@dataclass(frozen=True)
class MainRoundStep:
    """What the curator computes from the std release: σ̂, (p_x, p_y), B and the main round's spec."""

    std: StdEstimate
    multipliers: Multipliers | tuple[float, float]
    thresholds: np.ndarray
    spec: RoundSpec


@dataclass(frozen=True)
class RegressionPlan:
    """Public parameters of one fit: bounds c (d + 1 values: features, then target), (ε, δ), mode, grid settings."""

    bounds: tuple[float, ...]
    epsilon: float
    delta: float
    mode: str = "corrected"
    grid_seed: int = 1
    grid_repeats: tuple[int, int] = UCI_GRID_REPEATS

    def __post_init__(self) -> None:
        object.__setattr__(self, "bounds", tuple(float(b) for b in self.bounds))
        limits.check_regression_plan(self.bounds, self.epsilon, self.delta)  # ranges: docs/protocols/limits.md
        std_round_spec(self.bounds, *self.budget.std, self.mode)  # validates bounds, budget and mode

    @property
    def d(self) -> int:
        return len(self.bounds) - 1

    @property
    def budget(self) -> Budget:
        return budget_split(self.epsilon, self.delta)

    def std_round(self) -> RoundSpec:
        """Round 1 (Algorithm 2 step 2): squares of the data clipped to c, budget 0.3·(ε, δ)."""
        return std_round_spec(self.bounds, *self.budget.std, self.mode)

    def main_round(self, std_values: Floats, n_total: int, *, multipliers: Multipliers | tuple[float, float] | None = None) -> MainRoundStep:
        """Between the rounds (Algorithm 2 step 3): decode σ̂ from the std release, choose (p_x, p_y) on auxiliary data
        (unless given), B = min(p·σ̂, c), and the main round's spec with budget 0.7·(ε, δ)."""
        est = std_estimate(std_values, n_total)
        if est.variance.size != self.d + 1:
            raise ValueError(f"the std release must hold d + 1 = {self.d + 1} values, got {est.variance.size}")
        if multipliers is None:
            multipliers = self.multipliers(n_total)
        p_x, p_y = (multipliers.p_x, multipliers.p_y) if isinstance(multipliers, Multipliers) else multipliers
        B = thresholds(est.std, self.bounds, p_x, p_y)
        return MainRoundStep(est, multipliers, B, main_round_spec(B, *self.budget.main, self.mode))

    def multipliers(self, n_total: int, workers: int | None = 1) -> Multipliers:
        """The grid search's (p_x, p_y) for N = ``n_total`` (Algorithm 2 step 3): a function of public values only, so
        a driver may run it before the std release arrives (it does not read it) and reuse it for the same plan and N.
        ``workers``: its threads (:func:`~mpdp.regression.grid.choose_multipliers`; the result does not depend on them)."""
        return choose_multipliers(n_total, self.d, self.epsilon, self.delta, self.mode, self.grid_seed, self.grid_repeats, workers)

    def finish(self, main_values: Floats) -> Posterior:
        """After the main release (Algorithm 2 step 4, then the posterior): rebuild (A, b), PD fix, posterior."""
        return posterior(suff_stats(main_values, self.d))

    def stats(self, main_values: Floats) -> SuffStats:
        return suff_stats(main_values, self.d)
