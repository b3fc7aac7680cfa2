"""GNMax on the vote counts: noise law, RDP accounting against an independent closed form, labels, post-processing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, stats

from mpdp.dp.mechanisms import gaussian_delta
from mpdp.hamm2016 import pate
from mpdp.hamm2016.erm import fit_soft
from mpdp.hamm2016.labels import one_hot
from mpdp.math.drbg import Drbg


def test_label_noise_is_gaussian_with_the_calibrated_sigma():
    acc = pate.calibrate(1.0, queries=400, classes=2, parties=100)
    votes = np.full(20000, 37.0)
    noise = pate.noisy_votes(votes, acc.sigma, Drbg.from_seed(b"gnmax")) - votes
    assert stats.kstest(noise, stats.norm(scale=acc.sigma).cdf).pvalue > 1e-3
    assert stats.kstest(noise, stats.norm(scale=1.05 * acc.sigma).cdf).pvalue < 1e-3  # the test has power
    # the same seed gives the same noise (it comes from the DRBG passed in); σ = 0 gives exact counts
    again = pate.noisy_votes(votes, acc.sigma, Drbg.from_seed(b"gnmax")) - votes
    assert np.array_equal(noise, again) and np.array_equal(pate.noisy_votes(votes, 0.0, Drbg.from_seed(1)), votes)


@pytest.mark.parametrize("classes, queries, epsilon, delta", [(2, 1000, 0.1, 1e-6), (2, 100, 10.0, 1e-6), (5, 3000, 1.0, 1e-5)])
def test_accounting_matches_an_independent_closed_form(classes, queries, epsilon, delta):
    acc = pate.calibrate(epsilon, queries=queries, classes=classes, parties=50, delta=delta)
    assert acc.epsilon <= epsilon and acc.delta == delta
    d2 = 1.0 if classes == 2 else 2.0  # Δ² per query
    rho = queries * d2 / (2 * acc.sigma**2)
    assert acc.rho == pytest.approx(rho, rel=1e-12)

    def cks(a: float) -> float:  # CKS20 Prop. 12 for the Gaussian curve ε(α) = αρ, minimised continuously
        return a * rho + (math.log(1 / delta) - math.log(a)) / (a - 1) + math.log1p(-1 / a)

    best = optimize.minimize_scalar(cks, bounds=(1 + 1e-9, 1e8), method="bounded", options={"xatol": 1e-10})
    assert acc.epsilon == pytest.approx(best.fun, rel=1e-4)  # grid search over α ≈ the continuous optimum
    assert acc.epsilon <= rho + 2 * math.sqrt(rho * math.log(1 / delta))  # tighter than Bun–Steinke
    # the Q queries are one Gaussian mechanism with Δ₂ = √(Q·Δ²): Balle–Wang's exact δ at this ε is ≤ δ
    assert gaussian_delta(acc.sigma, math.sqrt(queries * d2), acc.epsilon) <= delta
    # σ is the smallest: 0.1 % less noise exceeds the target ε
    assert pate.account(acc.sigma * 0.999, queries=queries, classes=classes, parties=50, delta=delta).epsilon > epsilon
    g = acc.guarantee
    assert g.epsilon == acc.epsilon and g.delta == delta and "one whole party" in g.statement
    assert g.sensitivity == pytest.approx(math.sqrt(queries * d2))


def test_noisy_argmax_tie_rules():
    assert pate.noisy_argmax(np.array([2.0, 1.9, 2.1]), 4).tolist() == [1, 0, 1]  # binary: ñ1 ≥ M/2 → class 1
    assert pate.noisy_argmax(np.array([[1.0, 3.0, 3.0], [5.0, 0.0, -1.0]]), 5).tolist() == [1, 0]


def test_query_rows_hold_exactly_q_distinct_rows_and_follow_the_aux_distribution():
    inverse = np.repeat(np.arange(50), np.arange(1, 51))  # distinct row k occurs k + 1 times
    rows = pate.query_rows(inverse, 10, np.random.default_rng(3))  # public simulation choice
    assert np.unique(inverse[rows]).size == 10 and np.unique(rows).size == rows.size
    assert np.unique(inverse[rows[:-1]]).size == 9  # the shortest such prefix: its last row brings the 10th
    assert pate.query_rows(inverse, 80, np.random.default_rng(3)).size == inverse.size


def test_release_is_post_processing_of_the_noisy_labels():
    """The student is a deterministic function of the noisy labels: no further randomness, no further spend."""
    gen = np.random.default_rng(5)  # public simulation data
    N, d, M = 300, 4, 41
    X = gen.normal(size=(N, d)) / 3
    n1 = gen.integers(0, M + 1, size=N)
    counts = np.stack([M - n1, n1], axis=1)
    inverse = np.arange(N)
    rows = pate.query_rows(inverse, 120, np.random.default_rng(6))
    rel = pate.release_pate(X, rows, inverse, counts, lam=1e-2, epsilon=1.0, parties=M, rng=Drbg.from_seed(b"s"))
    assert rel.account is not None and rel.guarantee.epsilon <= 1.0 and rel.account.queries == 120
    # same labels → same model, whatever else: the fit reads only (x_j, label_j)
    w = fit_soft(X[rows], one_hot(rel.labels[np.argsort(np.argsort(rows))], 2), 1e-2)
    assert np.allclose(w, rel.weights, atol=1e-8)
    # the labels are exactly argmax of counts + the DRBG's N(0, σ²) (the release adds nothing else)
    noisy = pate.noisy_votes(n1[np.sort(rows)].astype(float), rel.account.sigma, Drbg.from_seed(b"s"))
    assert np.array_equal(rel.labels, pate.noisy_argmax(noisy, M))
    fits: dict = {}
    again = [pate.release_pate(X, rows, inverse, counts, lam=1e-2, epsilon=1.0, parties=M, rng=Drbg.from_seed(b"s"), fits=fits)
             for _ in range(2)]
    assert len(fits) == 1 and all(np.array_equal(a.weights, rel.weights) for a in again)  # memoised fit: same model
    exact = pate.release_pate(X, rows, inverse, counts, lam=1e-2, epsilon=math.inf, parties=M, rng=Drbg.from_seed(1))
    assert exact.account is None and "not private" in exact.guarantee.statement
    assert np.array_equal(exact.labels, (n1[np.sort(rows)] >= M / 2).astype(int))


def test_calibrate_refuses_bad_inputs():
    with pytest.raises(ValueError, match="epsilon"):
        pate.calibrate(0.0, queries=10, classes=2, parties=3)
    with pytest.raises(ValueError, match="delta"):
        pate.calibrate(1.0, queries=10, classes=2, parties=3, delta=0.0)
    with pytest.raises(ValueError, match="queries"):
        pate.calibrate(1.0, queries=0, classes=2, parties=3)
