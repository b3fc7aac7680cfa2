"""Distributed DP Bayesian linear regression with projection — Algorithm 2 of Heikkilä et al. (NIPS 2017) on DCA
(the paper's Sec. 3.2.1, with the constants of the authors' code, DPBayes/dca-nips2017).

Guarantee (``corrected`` mode, the default): the two releases — the std round's Σ(x², y²) and the main round's
unique entries of XᵀX and Xᵀy — are (0.3ε, 0.3δ)- and (0.7ε, 0.7δ)-DP for replace-one adjacency of records
(N fixed), so the posterior is (ε, δ)-DP by basic composition, under DCA's trust model: at most T clients collude
or drop, at least one compute node is honest. Every record is clipped to the public bounds c first, so the
guarantee holds even when the bounds are wrong. The projection multipliers come from synthetic data and cost
nothing. Leaks: N, d, the bounds, (ε, δ), the chosen multipliers and thresholds B (post-processing of a DP
release). ``paper`` mode reproduces the authors' code, including its sensitivity slips (std round, grid search, unclipped
baselines) and the classic Gaussian constant at ε ≥ 1 (proved only for ε < 1); :func:`mpdp.regression.privacy.round_guarantee` states what such a
release really gives, and ledger entries charge that.

Modules:

* :mod:`~mpdp.regression.config` — the constants of the authors' code (split, priors, floor, grid, UCI and GDSC setups);
* :mod:`~mpdp.regression.statistics` — clipping, per-record and per-party vectors, sensitivities, round specs,
  release decoding;
* :mod:`~mpdp.regression.grid` — the auxiliary-data grid search (public, private-data-free);
* :mod:`~mpdp.regression.posterior` — PD fix, posterior, predictions with predictive variance;
* :mod:`~mpdp.regression.privacy` — budget split, real guarantees, ledger entries;
* :mod:`~mpdp.regression.plan` — the curator's steps (plan → std round → thresholds → main round → posterior);
* :mod:`~mpdp.regression.algorithm` — the whole fit in memory with every round through the real DCA core;
* :mod:`~mpdp.regression.baselines` — NP, proj NP, TA, proj TA, input perturbation.

Federation interface (a party is one DCA client; one vector per party per round)::

    plan = RegressionPlan(bounds, epsilon, delta, mode)                          # curator, public
    std_job = plan.std_round().dca_params(job_id, clients=P, nodes=..., records_per_client=max_rows, validate=True)
    z_p = party_statistics(X_p, y_p, "std", plan.bounds)                          # party p → DCA client vector
    step = plan.main_round(std_release.values, n_total)                           # curator: σ̂, grid, B, spec
    main_job = step.spec.dca_params(job_id2, clients=P, nodes=..., records_per_client=max_rows, validate=True)
    z_p = party_statistics(X_p, y_p, "main", step.spec.bounds)                    # party p → DCA client vector
    post = plan.finish(main_release.values)                                       # curator: posterior
    ledger.record(ledger_entry(spec, job_id, seeded=False))                       # every party, each round

The per-record sensitivity is unchanged when a party sums its records; only the DCA clip box scales with the
party's row count (``records_per_client``). ``validate=True`` (the federation's default, ``RegressionRole``) proves
each party's vector within that box per coordinate, with the discrete Gaussian; the ledger entry is then the DCA
job's own (``DcaParams.ledger_entry``), as the party's contribution step charges it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# eager: the function `posterior` shares its name with its module, and a lazy name would lose to the submodule
from mpdp.regression.posterior import Posterior, Prediction, make_pd, posterior

if TYPE_CHECKING:
    from mpdp.regression.algorithm import DcaRound, DdpFit, fit_ddp, run_dca_round
    from mpdp.regression.grid import Multipliers, choose_multipliers
    from mpdp.regression.plan import MainRoundStep, RegressionPlan
    from mpdp.regression.privacy import Budget, budget_split, epsilon_for, ledger_entry, round_guarantee
    from mpdp.regression.statistics import (
        RoundSpec,
        StdEstimate,
        SuffStats,
        main_round_spec,
        main_sensitivity,
        party_statistics,
        record_statistics,
        std_estimate,
        std_round_spec,
        std_sensitivity,
        suff_stats,
        thresholds,
    )

# The names below load with their module on first use: reading a released posterior or checking a plan does not load
# the in-memory DCA driver (and the field arithmetic it compiles).
_HOMES = {
    "Budget": "privacy", "DcaRound": "algorithm", "DdpFit": "algorithm", "MainRoundStep": "plan", "Multipliers": "grid",
    "RegressionPlan": "plan", "RoundSpec": "statistics", "StdEstimate": "statistics", "SuffStats": "statistics", "budget_split": "privacy",
    "choose_multipliers": "grid", "epsilon_for": "privacy", "fit_ddp": "algorithm", "ledger_entry": "privacy", "main_round_spec": "statistics",
    "main_sensitivity": "statistics", "party_statistics": "statistics", "record_statistics": "statistics", "round_guarantee": "privacy",
    "run_dca_round": "algorithm", "std_estimate": "statistics", "std_round_spec": "statistics", "std_sensitivity": "statistics",
    "suff_stats": "statistics", "thresholds": "statistics"
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'mpdp.regression' has no attribute {name!r}")
    return getattr(importlib.import_module(f"mpdp.regression.{home}"), name)


__all__ = [
    "Budget",
    "DcaRound",
    "DdpFit",
    "MainRoundStep",
    "Multipliers",
    "Posterior",
    "Prediction",
    "RegressionPlan",
    "RoundSpec",
    "StdEstimate",
    "SuffStats",
    "budget_split",
    "choose_multipliers",
    "epsilon_for",
    "fit_ddp",
    "ledger_entry",
    "main_round_spec",
    "main_sensitivity",
    "make_pd",
    "party_statistics",
    "posterior",
    "record_statistics",
    "round_guarantee",
    "run_dca_round",
    "std_estimate",
    "std_round_spec",
    "std_sensitivity",
    "suff_stats",
    "thresholds",
]
