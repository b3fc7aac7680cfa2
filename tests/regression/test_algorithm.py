"""Algorithm 2 through the real DCA core (Heikkilä et al. 2017, Sec. 3.2.1: sensitivity,
clipping, budget), and the
federation interface: parties as DCA clients submitting their summed statistics, the curator finishing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from mpdp.dca.driver import run_job
from mpdp.ledger import PrivacyLedger
from mpdp.math.drbg import Drbg
from mpdp.regression import (
    RegressionPlan,
    fit_ddp,
    party_statistics,
    posterior,
    record_statistics,
    run_dca_round,
    std_round_spec,
    suff_stats,
)
from mpdp.regression.baselines import projected_nonprivate

from tests.regression.helpers import linear_data

C = [7.5] * 6
NODES = ("n1", "n2", "n3")


@pytest.fixture(scope="module")
def data():
    return linear_data(0, n=1000, d=5)


@pytest.mark.parametrize("mode,sens", [("corrected", math.sqrt(6 * 7.5**4)), ("paper", math.sqrt(6 * 7.5**2))])
def test_std_round_through_dca_sums_squares(data, mode, sens):
    X, y, _, _ = data
    spec = std_round_spec(C, 0.3, 3e-5, mode)
    r = run_dca_round(spec, X, y, Drbg.from_seed("std"), job_id="std-1", nodes=NODES)
    assert r.params.sensitivity == pytest.approx(sens, rel=1e-15)
    assert r.params.dimension == 6 and r.params.clip_bounds == (7.5**2,) * 6
    assert r.release.clients_included == 1000 and r.release.seeded
    exact = record_statistics(X, y, "std", C).sum(axis=0)
    np.testing.assert_allclose(exact[:-1], (np.clip(X, -7.5, 7.5) ** 2).sum(axis=0))
    # release − Σ squares is the DCA noise: N(0, N·σ_client²) per coordinate (z-scores well inside ±6)
    z = (r.values - exact) / math.sqrt(1000 * r.params.sigma_client**2)
    assert np.all(np.abs(z) < 6) and np.any(z != 0)
    assert r.params.sigma_client == pytest.approx(r.params.sigma_std / math.sqrt(999))


def test_fit_is_reproducible_and_records_the_split(data):
    X, y, _, _ = data
    a = fit_ddp(X, y, C, 1.0, 1e-4, mode="corrected", rng=Drbg.from_seed(5), multipliers=(0.5, 0.6))
    b = fit_ddp(X, y, C, 1.0, 1e-4, mode="corrected", rng=Drbg.from_seed(5), multipliers=(0.5, 0.6))
    c = fit_ddp(X, y, C, 1.0, 1e-4, mode="corrected", rng=Drbg.from_seed(6), multipliers=(0.5, 0.6))
    assert np.array_equal(a.posterior.mean, b.posterior.mean) and not np.array_equal(a.posterior.mean, c.posterior.mean)
    assert [r.spec.round for r in a.rounds] == ["std", "main"]
    assert a.rounds[0].params.epsilon == 0.3 and a.rounds[1].params.epsilon == pytest.approx(0.7)
    # step 3: B = min(p·σ̂, c), and the main round's clip box is B
    np.testing.assert_allclose(a.thresholds, np.minimum(a.std.std * np.r_[[0.5] * 5, 0.6], 7.5))
    assert a.rounds[1].spec.bounds == tuple(a.thresholds)
    assert np.all(a.thresholds <= 7.5)
    led = PrivacyLedger(budget_epsilon=1.0, budget_delta=1e-4)
    for e in a.ledger:
        led.check(e["epsilon"], e["delta"])
        led.record(e)
    assert led.composition().basic_epsilon == pytest.approx(1.0) and led.spent_delta == pytest.approx(1e-4)
    assert led.spent_epsilon < 1.0  # the accountant composes the two Gaussian rounds more tightly than the split
    assert all(e["seeded"] for e in a.ledger)


def test_nearly_noiseless_fit_approaches_projected_ridge(data):
    X, y, Xt, yt = data
    fit = fit_ddp(X, y, C, 500.0, 1e-4, mode="corrected", rng=Drbg.from_seed(1), multipliers=(2.0, 2.0))
    ref = posterior(projected_nonprivate(X, y, fit.thresholds))
    np.testing.assert_allclose(fit.posterior.mean, ref.mean, atol=1e-2)
    assert fit.posterior.mae(Xt, yt) == pytest.approx(ref.mae(Xt, yt), rel=1e-2)


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_ddp_noise_variance_is_n_over_n_minus_1_times_sigma_std(data):
    """Over many runs, release − exact sum ~ N(0, N/(N−1)·σ_std²) (Thm 1 with T = 0), pooled over coordinates."""
    X, y, _, _ = data
    Xs, ys = X[:200], y[:200]
    spec = std_round_spec(C, 0.3, 3e-5, "corrected")
    exact = record_statistics(Xs, ys, "std", C).sum(axis=0)
    resid = np.concatenate([run_dca_round(spec, Xs, ys, Drbg.from_seed(f"v{k}"), job_id=f"v{k}", nodes=NODES).values - exact for k in range(40)])
    var = 200 / 199 * spec.sigma_std**2
    t = float(np.sum(resid**2)) / var
    assert stats.chi2.ppf(1e-6, resid.size) <= t <= stats.chi2.ppf(1 - 1e-6, resid.size)


def test_parties_as_dca_clients_then_curator_finishes(data):
    """The federation interface: P parties, each one DCA client submitting its summed statistics."""
    X, y, _, _ = data
    parts = np.array_split(np.arange(1000), 5)
    rows = max(len(p) for p in parts)
    plan = RegressionPlan(C, 2.0, 1e-4, "corrected", grid_seed=2, grid_repeats=(2, 2))
    rng = Drbg.from_seed("federation")

    def dca(spec, round_, bounds, job):
        Z = np.stack([party_statistics(X[p], y[p], round_, bounds) for p in parts])
        params = spec.dca_params(job, clients=len(parts), nodes=NODES, records_per_client=rows, simulation_seed=b"test")
        run = run_job(params, Z, rng.child(job), record=False)
        assert run.error is None
        return np.asarray(run.release.values), Z.sum(axis=0), params

    std_vals, std_exact, p1 = dca(plan.std_round(), "std", plan.bounds, "fed.std")
    assert p1.clients == 5 and p1.clip_bounds == tuple(np.array(plan.bounds) ** 2 * rows)
    assert np.all(np.abs(std_vals - std_exact) < 6 * math.sqrt(5) * p1.sigma_client)
    step = plan.main_round(std_vals, 1000)
    assert step.spec.epsilon == pytest.approx(1.4) and step.spec.bounds == tuple(step.thresholds)
    main_vals, main_exact, p2 = dca(step.spec, "main", step.spec.bounds, "fed.main")
    post = plan.finish(main_vals)
    # the curator's posterior is the posterior of the released sum; without noise it is the projected ridge
    np.testing.assert_allclose(post.mean, posterior(suff_stats(main_vals, 5)).mean)
    ref = posterior(projected_nonprivate(X, y, step.thresholds))
    np.testing.assert_allclose(posterior(suff_stats(main_exact, 5)).mean, ref.mean, rtol=1e-10)
