"""Statistical test of the per-round noise: release − Σ party vectors ~ N(0, |A|·σ_client²) per coordinate, with
|A|·σ_client² = K/(K − T − 1)·σ_std² and σ_std the plan's σ_r (the guarantee's premise)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from mpdp.dpgd import learner
from mpdp.dpgd.model import BINARY, Task, prepare
from mpdp.dpgd.plan import DpgdPlan, party_vector


@pytest.mark.parametrize("max_missing", [0, 1])
def test_each_round_carries_exactly_the_planned_gaussian_noise(max_missing):
    g = np.random.default_rng(11)
    d, K = 60, 4
    parts = []
    for _ in range(K):
        X = prepare(g.normal(size=(200, d)))
        parts.append((X, np.where(g.random(200) < 0.5, 1.0, -1.0)))
    plan = DpgdPlan(Task(BINARY), d, 0.4, 1e-6, rounds=3, total_records=800)
    fit = learner.fit(plan, parts, seed=b"noise-test", max_missing=max_missing)
    W = np.zeros((d, 1))
    pooled = []
    for r, (v, spec) in enumerate(zip(fit.releases, plan.specs)):
        exact = np.sum([party_vector(plan, r, W, X, y) for X, y in parts], axis=0)
        z = (v - exact) / (spec.sigma_std * np.sqrt(K / (K - max_missing - 1)))
        pooled.append(z)
        W = fit.iterates[r]
    z = np.concatenate(pooled)  # 1830 + 3·60 standardised draws
    assert abs(z.mean()) < 4 / np.sqrt(len(z))
    assert abs(z.var() - 1) < 4 * np.sqrt(2 / len(z))
    assert stats.kstest(z, "norm").pvalue > 1e-3
