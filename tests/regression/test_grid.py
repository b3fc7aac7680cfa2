"""The auxiliary-data grid search (Algorithm 2, step 3, as in the authors' code)."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest

from mpdp.dca import mechanism
from mpdp.regression import grid as g
from mpdp.regression.config import GRID

SMALL = (3, 3)


def test_signature_takes_no_private_data():
    params = list(inspect.signature(g.choose_multipliers).parameters)
    assert params == ["n", "d", "epsilon", "delta", "mode", "seed", "repeats", "workers"]  # workers: threads, not data


def test_plan_calls_it_with_public_scalars_only(monkeypatch):
    from mpdp.regression import plan as plan_mod

    seen = []

    def spy(*args, **kwargs):
        seen.append((args, kwargs))
        return g.Multipliers(0.5, 0.5, np.zeros((20, 20)), *args[:6], args[6])

    monkeypatch.setattr(plan_mod, "choose_multipliers", spy)
    p = plan_mod.RegressionPlan([7.5] * 4, 1.0, 1e-4, "corrected", grid_seed=3, grid_repeats=SMALL)
    step = p.main_round([400.0, 300.0, 200.0, 900.0], 100)
    assert seen == [((100, 3, 1.0, 1e-4, "corrected", 3, SMALL, 1), {})]
    assert step.thresholds.tolist() == pytest.approx([0.5 * 2.0, 0.5 * math.sqrt(3), 0.5 * math.sqrt(2), 0.5 * 3.0])


@pytest.mark.parametrize("mode", ["corrected", "paper"])
def test_on_grid_and_deterministic(mode):
    a = g.choose_multipliers(300, 3, 1.0, 1e-4, mode, 7, SMALL)
    b = g.choose_multipliers(300, 3, 1.0, 1e-4, mode, 7, SMALL)
    assert a.p_x in GRID and a.p_y in GRID
    assert (a.p_x, a.p_y) == (b.p_x, b.p_y) and np.array_equal(a.scores, b.scores)
    assert a.scores.shape == (20, 20) and np.all(a.scores < 0)
    assert a.scores[GRID.index(a.p_x), GRID.index(a.p_y)] == a.scores.max()
    c = g.choose_multipliers(300, 3, 1.0, 1e-4, mode, 8, SMALL)
    assert not np.array_equal(a.scores, c.scores)  # the seed matters


@pytest.mark.parametrize("mode,huge", [("corrected", 300.0), ("paper", 1e5)])
def test_large_multipliers_at_huge_epsilon_small_at_tiny(mode, huge):
    """Huge ε: hardly any noise, so clip little. (paper mode scales its noise by Δ₂⁴, as the authors' code does, so it needs a far
    larger ε before large thresholds stop costing; the analytic calibrator overflows beyond ε ≈ 10³.)"""
    big = g.choose_multipliers(500, 3, huge, 1e-4, mode, 1, SMALL)
    tiny = g.choose_multipliers(500, 3, 0.05, 1e-4, mode, 1, SMALL)
    assert big.p_x >= 1.0 and big.p_y >= 1.0
    assert tiny.p_x <= 0.3 and tiny.p_y <= 0.5
    assert tiny.p_x < big.p_x and tiny.p_y < big.p_y


def test_noise_units_per_mode():
    n, eps, delta = 1000, 2.0, 1e-4
    # paper: the code's sqrt(n/(n−1)·2 ln(1.25/δ))/ε with the full (ε, δ), to be multiplied by Δ₂⁴
    assert g.noise_unit(n, eps, delta, "paper") == pytest.approx(math.sqrt(n / (n - 1) * 2 * math.log(1.25 / delta)) / eps, rel=1e-15)
    # corrected: the main round's total DCA noise per unit of Δ₂: sqrt(N/(N−1))·σ_std(1, 0.7ε, 0.7δ)
    want = math.sqrt(n / (n - 1)) * mechanism.sigma_std("corrected", 1.0, 0.7 * eps, 0.7 * delta)
    assert g.noise_unit(n, eps, delta, "corrected") == pytest.approx(want, rel=1e-12)


def test_synthetic_data_as_the_authors_generate_it():
    x, y = g.synthetic_data(np.random.default_rng(0), 200, 4)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=1e-12)
    assert abs(y.mean()) < 1e-12


def test_rejects_bad_input():
    with pytest.raises(ValueError):
        g.choose_multipliers(1, 3, 1.0, 1e-4, "corrected", 0, SMALL)
    with pytest.raises(ValueError):
        g.choose_multipliers(100, 3, 1.0, 1e-4, "other", 0, SMALL)
    with pytest.raises(ValueError):
        g.choose_multipliers(100, 3, 1.0, 1e-4, "paper", 0, (0, 3))


@pytest.mark.parametrize("mode", ["corrected", "paper"])
def test_the_score_table_is_the_same_on_any_number_of_threads(mode):
    """The p_x rows run on worker threads after each set's draws: the table depends on the seed only."""
    unit = g.noise_unit(300, 1.0, 1e-4, mode)
    one = g._scores(300, 4, unit, mode, np.random.default_rng(5), 2, 3, workers=1)
    for workers in (2, 3, 20):
        assert np.array_equal(g._scores(300, 4, unit, mode, np.random.default_rng(5), 2, 3, workers=workers), one), workers
