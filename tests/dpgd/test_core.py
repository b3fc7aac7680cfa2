"""DP-GD core: accounting, per-row bounds behind the sensitivities, the curator's steps, the learner."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mpdp.dpgd import accounting, learner
from mpdp.dpgd.model import BINARY, SOFTMAX, Task, fit_nonprivate, gradient_sum, objective, prepare, second_moment, unpack_second_moment
from mpdp.dpgd.plan import ADD_REMOVE, REPLACE, DpgdPlan, auto_rounds, party_vector
from mpdp.learn import logreg


def _data(n=600, d=6, K=None, seed=0):
    g = np.random.default_rng(seed)
    X = prepare(g.normal(size=(n, d)) * g.uniform(0.2, 2.0, size=(n, 1)))
    W = g.normal(size=(d, K or 1)) * 3
    if K is None:
        return X, np.where(X @ W[:, 0] + 0.3 * g.normal(size=n) > 0, 1.0, -1.0)
    return X, np.argmax(X @ W + 0.3 * g.normal(size=(n, K)), axis=1)


@pytest.mark.parametrize("eps,delta", [(0.05, 1e-6), (0.5, 1e-6), (1.0, 1e-5), (4.0, 1e-6)])
def test_gdp_conversion_round_trips_and_is_tighter_than_generic_zcdp(eps, delta):
    mu = accounting.gdp_mu(eps, delta)
    assert accounting.gdp_epsilon(mu, delta) == pytest.approx(eps, rel=1e-9)
    rho = accounting.zcdp_rho(mu)
    assert eps < rho + 2 * math.sqrt(rho * math.log(1 / delta))


@pytest.mark.parametrize("rounds", [0, 1, 4, 9])
@pytest.mark.parametrize("adjacency", [REPLACE, ADD_REMOVE])
def test_plan_guarantee_is_the_composition_of_the_dca_rounds(rounds, adjacency):
    plan = DpgdPlan(Task(BINARY), 10, 0.3, 1e-6, rounds=rounds, adjacency=adjacency, total_records=500 if adjacency == REPLACE else None)
    assert len(plan.specs) == rounds + 1
    mus = []
    for r in range(rounds + 1):
        params = plan.dca_params(r, f"j.r{r}", 5, ("a", "b"), records_per_client=100)
        assert params.sensitivity == plan.sensitivity(r) and params.dimension == plan.round_dimension(r)
        mus.append(params.sensitivity / params.sigma_std)
    eps = accounting.gdp_epsilon(accounting.compose(mus), 1e-6)
    assert eps == pytest.approx(plan.guarantee.epsilon, rel=1e-9)
    assert plan.guarantee.epsilon <= 0.3 and plan.guarantee.epsilon == pytest.approx(0.3, rel=1e-6)
    assert plan.ledger_entry("j")["epsilon"] == plan.guarantee.epsilon


def test_one_row_moves_a_party_vector_by_at_most_the_stated_sensitivity():
    g = np.random.default_rng(3)
    for task, K in ((Task(BINARY), None), (Task(SOFTMAX, 4), 4)):
        X, y = _data(50, 5, K, seed=4)
        for adj in (ADD_REMOVE, REPLACE):
            plan = DpgdPlan(task, 5, 1.0, 1e-6, rounds=2, clip=0.7, adjacency=adj, total_records=50 if adj == REPLACE else None)
            W = g.normal(size=(5, task.width)) * 5
            for r in range(3):
                base = party_vector(plan, r, W, X, y)
                for i in range(10):
                    if adj == ADD_REMOVE:
                        other = party_vector(plan, r, W, np.delete(X, i, 0), np.delete(y, i))
                    else:
                        X2, y2 = X.copy(), y.copy()
                        X2[i], y2[i] = X[(i + 7) % 50], y[(i + 7) % 50]
                        other = party_vector(plan, r, W, X2, y2)
                    assert np.linalg.norm(base - other) <= plan.sensitivity(r) + 1e-12


def test_second_moment_round_trips_and_has_row_norm_squared():
    X, _ = _data(20, 7)
    v = second_moment(X[:1])
    assert np.linalg.norm(v) == pytest.approx(np.linalg.norm(X[0]) ** 2)
    assert np.allclose(unpack_second_moment(second_moment(X), 7), X.T @ X)


@pytest.mark.parametrize("K", [None, 3])
def test_gradient_sum_is_the_gradient_of_the_summed_loss(K):
    X, y = _data(80, 4, K, seed=1)
    task = Task(BINARY) if K is None else Task(SOFTMAX, K)
    W = np.random.default_rng(2).normal(size=(4, task.width))
    G = gradient_sum(task, W, X, y, math.inf).reshape(W.shape)
    num = np.zeros_like(W)
    for idx in np.ndindex(W.shape):
        E = np.zeros_like(W)
        E[idx] = 1e-6
        num[idx] = (objective(task, W + E, X, y, 0) - objective(task, W - E, X, y, 0)) / 2e-6 * len(y)
    assert np.allclose(G, num, atol=1e-5)


def test_nonprivate_fit_is_the_exact_logistic_minimiser():
    X, y = _data()
    W = fit_nonprivate(Task(BINARY), X, y, 1e-2)
    assert np.allclose(W[:, 0], logreg.fit(X, y, 1e-2), atol=1e-7)


def test_learner_converges_to_the_nonprivate_model_at_large_epsilon():
    X, y = _data(3000, 6)
    parts = [(X[i::3], y[i::3]) for i in range(3)]
    task = Task(BINARY)
    W0 = fit_nonprivate(task, X, y, 1e-2)
    plan = DpgdPlan(task, 6, 1e4, 1e-6, lam=1e-2, rounds=6, clip=1.0, average_from=0.7, total_records=3000)
    fit = learner.fit(plan, parts, seed=b"conv")
    assert np.linalg.norm(fit.model - W0) < 0.02 * np.linalg.norm(W0)
    assert fit.ledger_entry["epsilon"] == plan.guarantee.epsilon and fit.ledger_entry["protocol"] == "dpgd"


def test_learner_tolerates_t_missing_parties_and_refuses_more():
    X, y = _data(900, 4, 3, seed=5)
    parts = [(X[i::4], y[i::4]) for i in range(4)]
    plan = DpgdPlan(Task(SOFTMAX, 3), 4, 2.0, 1e-6, rounds=2, total_records=900)
    fit = learner.fit(plan, parts, seed=b"drop", max_missing=1, drop={1: [2]})
    assert fit.model.shape == (4, 3) and len(fit.releases) == 3
    with pytest.raises(learner.RoundFailed):
        learner.fit(plan, parts, seed=b"drop", max_missing=1, drop={1: [1, 2]})


def test_auto_rounds_switches_on_public_n_epsilon():
    assert auto_rounds(0.2, 32561) == 4 and auto_rounds(0.5, 32561) == 0
