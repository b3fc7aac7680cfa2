"""The in-process HCB16 simulation (mpdp/hamm2016/simulation.py): votes, splits, local models, indiv, noise source.

Synthetic public data (numpy generators) keep these tests fast; the KDD-99 runs are in test_experiment.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from mpdp.dp.mechanisms import spherical_laplace
from mpdp.hamm2016.erm import fit_soft, predict
from mpdp.hamm2016.labels import one_hot, party_votes, vote_counts
from mpdp.hamm2016.local import fit_local
from mpdp.hamm2016 import pate
from mpdp.hamm2016.mechanism import EnsembleParams, release_global
from mpdp.hamm2016.simulation import (
    MIXED_KINDS, SimulationConfig, TrialData, distinct_rows, ensemble_vote_sum, epsilon_of, fit_locals, linear_accuracies,
    model_accuracies, reduced_multinomial, run_trial, split_rows, trial_steps,
)
from mpdp.math.drbg import Drbg


def blobs(n: int, classes: int, d: int, seed: int, spread: float = 0.35) -> tuple[np.ndarray, np.ndarray]:
    """Public synthetic data: Gaussian classes, rows clipped into the unit ball, ~15 % duplicated rows."""
    gen = np.random.default_rng(seed)  # public simulation data
    centres = gen.normal(size=(classes, d))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True) * 2.0
    y = gen.integers(0, classes, size=n)
    X = centres[y] + spread * gen.normal(size=(n, d)) / math.sqrt(d)
    dup = gen.choice(n, size=n // 7, replace=False)
    X[dup], y[dup] = X[(dup + 1) % n], y[(dup + 1) % n]  # KDD-like exact duplicates
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    return X, y


def trial_data(M: int, n: int, classes: int, d: int = 6, N: int = 120, T: int = 400, seed: int = 0) -> TrialData:
    X, y = blobs(M * n + N + T, classes, d, seed)
    Xp, yp = X[: M * n].reshape(M, n, d), y[: M * n].reshape(M, n)
    return TrialData(X_aux=X[M * n: M * n + N], X_parties=Xp, y_parties=yp, X_test=X[M * n + N:], y_test=y[M * n + N:],
                     classes=classes, y_aux=y[M * n: M * n + N])


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_counts_are_the_sum_of_party_votes(classes: int) -> None:
    data = trial_data(M=40, n=7, classes=classes)
    lam = 1e-3
    ens = fit_locals(data.X_parties, data.y_parties, classes, lam, "logreg")
    got = ensemble_vote_sum(ens, data.X_aux)
    # independently: each party fits the core's exact L2-LR (fit_local) and contributes party_votes on all N rows
    want = np.zeros_like(got)
    for i in range(40):
        h = fit_local("logreg", data.X_parties[i], data.y_parties[i], classes, lam)
        want += party_votes(h.predict(data.X_aux), classes)
        np.testing.assert_allclose(ens.weights[i], h.estimator.coef_, rtol=1e-7, atol=1e-7)
    np.testing.assert_array_equal(got, want)
    counts = vote_counts(got, data.X_aux.shape[0], classes, 40)
    assert counts.shape == (120, classes) and np.all(counts.sum(axis=1) == 40)
    first, inverse = distinct_rows(data.X_aux)
    assert first.size < 120 and np.array_equal(data.X_aux[first][inverse], data.X_aux)  # duplicates were present


def test_mixed_local_types_vote_like_fit_local() -> None:
    data = trial_data(M=12, n=9, classes=2, seed=3)
    ens = fit_locals(data.X_parties, data.y_parties, 2, 1e-3, "mixed")
    assert ens.weights is None and ens.kinds == tuple(MIXED_KINDS[i % 4] for i in range(12))
    want = sum(party_votes(fit_local(ens.kinds[i], data.X_parties[i], data.y_parties[i], 2, 1e-3).predict(data.X_aux), 2)
               for i in range(12))
    np.testing.assert_array_equal(ensemble_vote_sum(ens, data.X_aux), want)
    with pytest.raises(ValueError, match="avg"):
        SimulationConfig(parties=12, local="mixed")  # avg needs local L2-LR weights


def test_reduced_multinomial_equals_full_exact_fit() -> None:
    X, y = blobs(5 * 6, 4, 10, seed=5)
    W = reduced_multinomial(X.reshape(5, 6, 10), y.reshape(5, 6), 4, 1e-3)
    for i in range(5):
        full = fit_soft(X[6 * i: 6 * i + 6], one_hot(y[6 * i: 6 * i + 6], 4), 1e-3)
        np.testing.assert_allclose(W[i], full, rtol=1e-8, atol=1e-8)


def test_split_reports_actual_numbers_and_is_nested() -> None:
    sp = split_rows(1000, parties=50, per_party=22, aux_fraction=0.1, gen=np.random.default_rng(4))
    # 100 aux rows, 900 left: 50 parties can only get 18 rows each (requested 22)
    assert sp.summary() == {"n_aux": 100, "parties": 50, "per_party": 18, "requested_per_party": 22, "private_rows": 900,
                            "unused_rows": 0}
    rows = np.concatenate([sp.aux, sp.parties.ravel()])
    assert np.unique(rows).size == rows.size == 1000  # disjoint, every row used once
    small = split_rows(1000, parties=20, per_party=22, aux_fraction=0.1, gen=np.random.default_rng(4))
    assert small.per_party == 22 and small.unused == 900 - 440
    assert np.array_equal(small.aux, sp.aux)
    # the same generator state nests: the smaller federation's rows are a prefix of the same pool
    pool_small = small.parties.ravel()
    big = split_rows(1000, parties=40, per_party=22, aux_fraction=0.1, gen=np.random.default_rng(4))
    assert np.array_equal(big.parties.ravel()[: pool_small.size], pool_small)
    capped = split_rows(1000, parties=20, per_party=22, aux_fraction=0.1, gen=np.random.default_rng(4), max_aux=30)
    assert capped.n_aux == 30 and capped.unused == small.unused
    with pytest.raises(ValueError, match="cannot give"):
        split_rows(100, parties=200, per_party=1, aux_fraction=0.1, gen=np.random.default_rng(0))


def test_linear_accuracies_use_the_erm_prediction_rule_and_weights() -> None:
    for classes in (2, 3):
        data = trial_data(M=6, n=10, classes=classes, seed=8)
        W = fit_locals(data.X_parties, data.y_parties, classes, 1e-3).weights
        accs = linear_accuracies(W, data.X_test, data.y_test)
        for i in range(6):
            assert accs[i] == np.mean(predict(W[i], data.X_test) == data.y_test)
        # distinct rows with multiplicities give the accuracy on all rows
        first, inverse = distinct_rows(data.X_test)
        mult = np.bincount(inverse).astype(float)
        np.testing.assert_allclose(linear_accuracies(W, data.X_test[first], data.y_test[first], mult), accs, rtol=0, atol=1e-15)


def _cfg(M: int, **kw) -> SimulationConfig:
    base = dict(parties=M, per_party=8, lam=1e-3, epsilons_inv=(0.0, 0.1, 10.0), noise_draws=4)
    base.update(kw)
    return SimulationConfig(**base)


def test_indiv_is_the_mean_local_accuracy_of_a_random_subset() -> None:
    data = trial_data(M=30, n=8, classes=2, seed=11)
    cfg_all = _cfg(30, methods=("indiv",), indiv_parties=1000)
    res = run_trial(data, cfg_all, Drbg.from_seed("indiv"), np.random.default_rng(0))
    accs = [np.mean(fit_local("logreg", data.X_parties[i], data.y_parties[i], 2, 1e-3).predict(data.X_test) == data.y_test)
            for i in range(30)]
    assert res.diagnostics["indiv_parties_scored"] == 30
    assert res.accuracies[("indiv", 0.0)] == pytest.approx([np.mean(accs)], abs=1e-12)
    assert res.accuracies[("indiv", 10.0)] == res.accuracies[("indiv", 0.0)]  # one non-private value per column
    sub = run_trial(data, _cfg(30, methods=("indiv",), indiv_parties=7), Drbg.from_seed("indiv"), np.random.default_rng(5))
    chosen = np.sort(np.random.default_rng(5).choice(30, size=7, replace=False))
    assert sub.diagnostics["indiv_parties_scored"] == 7
    assert sub.accuracies[("indiv", 0.0)] == pytest.approx([np.mean(np.asarray(accs)[chosen])], abs=1e-12)
    ens = fit_locals(data.X_parties, data.y_parties, 2, 1e-3)
    np.testing.assert_allclose(model_accuracies(ens, np.arange(30), data.X_test, data.y_test), accs, atol=1e-12)


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_noise_comes_from_the_drbg_passed_in() -> None:
    data = trial_data(M=25, n=8, classes=2, seed=13)
    cfg = _cfg(25)
    steps: list[str] = []
    a = run_trial(data, cfg, Drbg.from_seed("noise-a"), np.random.default_rng(0), steps.append)
    b = run_trial(data, cfg, Drbg.from_seed("noise-a"), np.random.default_rng(0))
    c = run_trial(data, cfg, Drbg.from_seed("noise-b"), np.random.default_rng(0))
    assert steps == ["locals", "votes", "batch", "soft", "avg", "avg-tight", "pate", "vote", "indiv"]
    assert len(steps) == trial_steps(cfg)
    assert a.accuracies == b.accuracies  # seeded Drbg: reproducible
    for m in ("soft", "avg", "avg-tight", "pate", "vote"):
        assert len(a.accuracies[(m, 0.0)]) == 1 and len(a.accuracies[(m, 10.0)]) == 4  # noise draws per trial
        assert a.accuracies[(m, 0.0)] == c.accuracies[(m, 0.0)]  # 1/ε = 0: no noise at all
        assert a.privacy[(m, 0.0)]["epsilon"] == math.inf and a.privacy[(m, 10.0)]["epsilon"] == pytest.approx(0.1)
    assert a.accuracies[("soft", 10.0)] != c.accuracies[("soft", 10.0)] or a.accuracies[("vote", 10.0)] != c.accuracies[("vote", 10.0)]
    # reconstruct draw k of soft at 1/ε = 10 from the documented stream: Drbg.child("soft").child("10.0/k")
    counts = vote_counts(ensemble_vote_sum(fit_locals(data.X_parties, data.y_parties, 2, 1e-3), data.X_aux), 120, 2, 25)
    params = EnsembleParams("soft", 1e-3, epsilon_of(10.0), 2, 120, 25)
    w_s = release_global(data.X_aux, counts, EnsembleParams("soft", 1e-3, math.inf, 2, 120, 25), Drbg.from_seed("x")).weights
    stream = Drbg.from_seed("noise-a").child("soft")
    want = [np.mean(predict(w_s + spherical_laplace(stream.child(f"{10.0!r}/{k}"), w_s.size, params.noise_scale), data.X_test)
                    == data.y_test) for k in range(4)]
    assert a.accuracies[("soft", 10.0)] == pytest.approx(want, abs=1e-12)
    assert a.privacy[("soft", 10.0)]["noise_scale"] == params.noise_scale == pytest.approx((2 / (25 * 1e-3) + 2e-9 / 1e-3) / 0.1)
    # avg-tight: Δ₂ = 2·√(2 ln 2/λ)/M; pate: σ calibrated for (0.1, 1e-6) over the queried distinct rows
    assert a.privacy[("avg-tight", 10.0)]["sensitivity"] == pytest.approx(2 * math.sqrt(2 * math.log(2) / 1e-3) / 25)
    q = a.diagnostics["pate_queries"]
    assert q == min(cfg.pate_queries, np.unique(data.X_aux, axis=0).shape[0])
    assert a.privacy[("pate", 10.0)]["sigma"] == pate.calibrate(0.1, queries=q, classes=2, parties=25).sigma
    assert a.privacy[("pate", 10.0)]["delta"] == 1e-6 and a.privacy[("pate", 0.0)]["delta"] == 1.0


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="methods"):
        SimulationConfig(parties=3, methods=("soft", "bogus"))
    with pytest.raises(ValueError, match="1/ε"):
        SimulationConfig(parties=3, epsilons_inv=(0.0, -1.0))
    with pytest.raises(ValueError, match="local"):
        SimulationConfig(parties=3, local="forest")
    assert epsilon_of(0.0) == math.inf and epsilon_of(4.0) == 0.25
    with pytest.raises(ValueError, match="parties"):
        run_trial(trial_data(M=5, n=8, classes=2), _cfg(6), Drbg.from_seed("v"), np.random.default_rng(0))
