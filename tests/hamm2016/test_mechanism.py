"""HCB16 output perturbation: sensitivities (Thm 1, Thm 3, Sec. 4.5, multiclass), noise law, ε = ∞, input checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from mpdp.hamm2016.erm import fit_soft
from mpdp.hamm2016.labels import majority_labels, one_hot, party_votes, soft_labels, vote_counts
from mpdp.hamm2016.mechanism import EnsembleParams, avg_release, output_perturbation, release_global
from mpdp.learn import logreg
from mpdp.math.drbg import Drbg


def _aux(n, d, seed, radius=1.0):
    rng = np.random.default_rng(seed)  # public simulation data
    X = rng.normal(size=(n, d))  # public simulation data
    return X / np.linalg.norm(X, axis=1)[:, None] * radius * rng.random((n, 1)) ** 0.2  # public simulation data


def _counts(preds, classes):
    M, N = preds.shape
    return vote_counts(sum(party_votes(p, classes) for p in preds), N, classes, M)


def _w_s(X, preds, classes, method, lam):
    M = preds.shape[0]
    c = _counts(preds, classes)
    alpha = one_hot(majority_labels(c, M), classes) if method == "vote" else soft_labels(c, M)
    return fit_soft(X, alpha, lam)


# ------------------------------------------------------------------------------------------- parameters


@pytest.mark.parametrize(
    "change, field",
    [
        ({"method": "avg"}, "method"),
        ({"lam": 0.0}, "lam"),
        ({"lam": math.inf}, "lam"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"epsilon": math.nan}, "epsilon"),
        ({"classes": 1}, "classes"),
        ({"classes": 2.0}, "classes"),
        ({"n_aux": 0}, "n_aux"),
        ({"parties": 0}, "parties"),
        ({"protect_aux": "yes"}, "protect_aux"),
    ],
)
def test_params_validation_names_the_field(change, field):
    kw = dict(method="soft", lam=1e-4, epsilon=1.0, classes=2, n_aux=100, parties=10)
    kw.update(change)
    with pytest.raises(ValueError, match=field):
        EnsembleParams(**kw)


def test_sensitivities_and_aux_factor():
    lam, N, M = 1e-4, 1000, 50
    P = lambda **k: EnsembleParams(**{**dict(method="soft", lam=lam, epsilon=1.0, classes=2, n_aux=N, parties=M), **k})  # noqa: E731
    assert P(method="vote").sensitivity == pytest.approx(2 / lam)  # Thm 1
    assert P().sensitivity == pytest.approx(2 / (M * lam))  # Thm 3
    assert P(classes=6).sensitivity == pytest.approx(math.sqrt(2) / (M * lam))  # multiclass (ours)
    assert P(classes=6, method="vote").sensitivity == pytest.approx(math.sqrt(2) / lam)
    # HCB16 Sec. 4.5: the (N + M − 1)/N factor only with protect_aux, and only for Alg. 2
    assert P(protect_aux=True).sensitivity == pytest.approx(2 / (M * lam) * (N + M - 1) / N)
    assert P(method="vote", protect_aux=True).sensitivity == pytest.approx(2 / lam)
    assert P(classes=6, protect_aux=True).sensitivity == pytest.approx(math.sqrt(2) / (M * lam) * (N + 2 * M - 1) / N)
    assert P(classes=6, method="vote", protect_aux=True).sensitivity == pytest.approx(math.sqrt(2) / lam * (N + 1) / N)
    assert P().aux_factor == 1.0 and P(method="vote").aux_factor == 1.0
    # the noise scale never falls below Δ₂/ε; the solver slack 2·tol/λ is negligible
    for p in (P(), P(method="vote"), P(classes=3), P(epsilon=0.1, protect_aux=True)):
        assert p.sensitivity / p.epsilon <= p.noise_scale <= p.sensitivity / p.epsilon * (1 + 1e-4)
    g = P().guarantee
    assert g.epsilon == 1.0 and g.delta == 0.0 and g.norm == "l2" and "one whole party" in g.statement
    assert "one auxiliary sample" in P(protect_aux=True).guarantee.statement
    assert "Frobenius" in P(classes=3).guarantee.norm


# ------------------------------------------------------------------------------------------- sensitivity, empirically


@pytest.mark.parametrize("M", [3, 10, 51, 200])
def test_flipping_one_party_moves_w_s_within_the_bounds(M):
    """Replace h_i by −h_i (flip all of party i's votes): ‖Δw_s‖ ≤ 2/(Mλ) (soft), ≤ 2/λ (vote)."""
    N, d, lam = 150, 4, 0.05
    X = _aux(N, d, M)
    rng = np.random.default_rng(100 + M)  # public simulation data
    truth = (X @ rng.normal(size=d) > 0).astype(int)  # public simulation data
    preds = np.where(rng.random((M, N)) < 0.75, truth, 1 - truth)  # public simulation data: noisy local classifiers
    flipped = preds.copy()
    flipped[0] = 1 - flipped[0]
    for method, bound in (("soft", 2 / (M * lam)), ("vote", 2 / lam)):
        delta = np.linalg.norm(_w_s(X, preds, 2, method, lam) - _w_s(X, flipped, 2, method, lam))
        assert delta <= bound * (1 + 1e-9), (method, delta, bound)
        assert delta <= bound / 2 * (1 + 1e-9)  # logistic loss: l′(m) + l′(−m) = −1, so even half the bound holds
    assert EnsembleParams("soft", lam, 1.0, 2, N, M).sensitivity == pytest.approx(2 / (M * lam))


def test_soft_bound_is_nearly_attained_when_all_points_align():
    """All x_j = u, one party flips every vote: Δα_j = 1/M everywhere, and for large λ (linear regime) the
    change is (1/M)/(λ + 1/4) → 1/(Mλ), i.e. about half of the paper's 2/(Mλ)."""
    M, N, d, lam = 11, 60, 3, 10.0
    X = np.tile(np.array([1.0, 0.0, 0.0]), (N, 1))
    preds = np.zeros((M, N), dtype=int)
    preds[:6] = 1
    flipped = preds.copy()
    flipped[0] = 0
    delta = np.linalg.norm(_w_s(X, preds, 2, "soft", lam) - _w_s(X, flipped, 2, "soft", lam))
    assert 0.95 * (1 / (M * lam)) * lam / (lam + 0.25) < delta <= 2 / (M * lam)


def test_all_ties_case_of_alg1_moves_w_s_by_order_2_over_lambda():
    """Thm 1's worst case: M − 1 voters tie on every x_j and the last voter decides all labels.

    Flipping the last voter turns every label +1 into −1, so w_s′ = −w_s and ‖Δw_s‖ = 2‖w_s‖. With every x_j close
    to one unit vector u, w_s ≈ t·u with λt = σ(−t); for λ = 10, 2t = 0.0976 ≈ 0.98/λ = 0.49·(2/λ). Half of 2/λ is
    the most the logistic loss allows (l′(m) + l′(−m) = −1; the paper's 2 is for a general |l′| ≤ 1), so this
    case attains the sensitivity up to that factor — M times more than Alg. 2 moves on the same data."""
    M, N, d, lam = 11, 80, 5, 10.0
    u = np.eye(d)[0]
    X = u + 0.02 * np.random.default_rng(3).normal(size=(N, d))  # public simulation data
    X /= np.linalg.norm(X, axis=1)[:, None]
    preds = np.zeros((M, N), dtype=int)
    preds[: (M - 1) // 2] = 1  # (M−1)/2 voters say +1, (M−1)/2 say −1 on every point
    preds[M - 1] = 1  # the last voter breaks every tie
    flipped = preds.copy()
    flipped[M - 1] = 0
    assert majority_labels(_counts(preds, 2), M).tolist() == [1] * N
    assert majority_labels(_counts(flipped, 2), M).tolist() == [0] * N
    w, w2 = _w_s(X, preds, 2, "vote", lam), _w_s(X, flipped, 2, "vote", lam)
    assert np.allclose(w2, -w, atol=1e-12)
    delta = np.linalg.norm(w - w2)
    assert 0.47 * (2 / lam) < delta <= 2 / lam
    soft = np.linalg.norm(_w_s(X, preds, 2, "soft", lam) - _w_s(X, flipped, 2, "soft", lam))
    assert delta > 0.8 * M * soft
    # at the paper's λ = 1e-4 the flip is still the largest possible change of labels: every label changes
    w_small = _w_s(X, preds, 2, "vote", 1e-4)
    assert np.linalg.norm(2 * w_small) > 5.0 and np.allclose(w_small, logreg.fit(X, np.ones(N), 1e-4, "half"), rtol=1e-8)


@pytest.mark.parametrize("M", [4, 25])
def test_multiclass_sensitivity_holds_empirically(M):
    """Move one party's votes to other classes: ‖ΔW_s‖_F ≤ √2/(Mλ) (soft) and ≤ √2/λ (vote)."""
    N, d, C, lam = 120, 4, 4, 0.05
    X = _aux(N, d, 7 + M)
    rng = np.random.default_rng(M)  # public simulation data
    truth = np.argmax(X @ rng.normal(size=(C, d)).T, axis=1)  # public simulation data
    preds = np.where(rng.random((M, N)) < 0.6, truth, rng.integers(0, C, size=(M, N)))  # public simulation data
    changed = preds.copy()
    changed[0] = (preds[0] + 1 + rng.integers(0, C - 1, size=N)) % C  # public simulation data: every vote moves
    for method in ("soft", "vote"):
        p = EnsembleParams(method, lam, 1.0, C, N, M)
        delta = np.linalg.norm(_w_s(X, preds, C, method, lam) - _w_s(X, changed, C, method, lam))
        assert delta <= p.sensitivity * (1 + 1e-9), (method, delta, p.sensitivity)
    # the soft bound is nearly tight when all points align and the moved votes all go a → b
    Xa = np.tile(np.eye(d)[0], (N, 1))
    base = np.zeros((M, N), dtype=int)
    moved = base.copy()
    moved[0] = 1
    lam_big = 20.0
    delta = np.linalg.norm(_w_s(Xa, base, C, "soft", lam_big) - _w_s(Xa, moved, C, "soft", lam_big))
    assert 0.95 * math.sqrt(2) / (M * lam_big) < delta <= math.sqrt(2) / (M * lam_big)


def test_protect_aux_bound_holds_when_one_aux_point_and_one_party_change():
    N, M, d, lam = 40, 5, 3, 0.1
    X = _aux(N, d, 21)
    rng = np.random.default_rng(22)  # public simulation data
    preds = rng.integers(0, 2, size=(M, N))  # public simulation data
    p = EnsembleParams("soft", lam, 1.0, 2, N, M, protect_aux=True)
    for trial in range(20):
        X2, preds2 = X.copy(), preds.copy()
        j = trial % N
        X2[j] = -X[j] if trial % 2 else np.eye(d)[trial % d]
        preds2[trial % M] = 1 - preds2[trial % M]
        assert np.linalg.norm(_w_s(X, preds, 2, "soft", lam) - _w_s(X2, preds2, 2, "soft", lam)) <= p.sensitivity


def test_protect_aux_factor_is_needed_when_N_is_small_against_M():
    """N = 4 aligned points, M = 100 unanimous voters: moving x_0 from u to −u changes w_s by ≈ (1/N)/(λ + 1/4),
    far beyond the party-only Δ₂ = 2/(Mλ), yet within Δ₂·(N + M − 1)/N."""
    N, M, d, lam = 4, 100, 2, 5.0
    X = np.tile(np.array([1.0, 0.0]), (N, 1))
    preds = np.ones((M, N), dtype=int)
    X2 = X.copy()
    X2[0] = -X2[0]
    delta = np.linalg.norm(_w_s(X, preds, 2, "soft", lam) - _w_s(X2, preds, 2, "soft", lam))
    assert delta > 5 * EnsembleParams("soft", lam, 1.0, 2, N, M).sensitivity
    assert delta <= EnsembleParams("soft", lam, 1.0, 2, N, M, protect_aux=True).sensitivity


# ------------------------------------------------------------------------------------------- noise


def _noise_draws(params, shape, draws, seed):
    rng = Drbg.from_seed(seed)
    w = np.zeros(shape)
    return np.stack([output_perturbation(w, params, rng).ravel() for _ in range(draws)])


def _check_spherical(eta, scale):
    dim = eta.shape[1]
    norms = np.linalg.norm(eta, axis=1)
    assert stats.kstest(norms, stats.gamma(a=dim, scale=scale).cdf).pvalue > 1e-3
    assert stats.kstest(norms, stats.gamma(a=dim, scale=1.1 * scale).cdf).pvalue < 1e-3  # the test has power
    dirs = eta / norms[:, None]
    assert np.all(np.abs(dirs.mean(axis=0)) < 5 / math.sqrt(dim * len(eta)))
    # a coordinate u_1 of a uniform direction on S^{D−1} has (u_1 + 1)/2 ~ Beta((D−1)/2, (D−1)/2)
    beta = stats.beta((dim - 1) / 2, (dim - 1) / 2)
    assert stats.kstest((dirs[:, 0] + 1) / 2, beta.cdf).pvalue > 1e-3
    assert stats.kstest((dirs[:, -1] + 1) / 2, beta.cdf).pvalue > 1e-3


@pytest.mark.parametrize(
    "method, classes, shape",
    [("soft", 2, (6,)), ("vote", 2, (6,)), ("soft", 3, (3, 4))],
)
def test_noise_norm_is_gamma_and_direction_isotropic(method, classes, shape):
    lam, eps, M, N = 0.01, 0.5, 40, 500
    p = EnsembleParams(method, lam, eps, classes, N, M)
    expected = {("soft", 2): 2 / (M * lam * eps), ("vote", 2): 2 / (lam * eps), ("soft", 3): math.sqrt(2) / (M * lam * eps)}[(method, classes)]
    eta = _noise_draws(p, shape, 2000, f"hamm-noise-{method}-{classes}")
    _check_spherical(eta, expected)  # Gamma(d, 2/(Mλε)) (Alg. 2), Gamma(d, 2/(λε)) (Alg. 1), Gamma(Cd, √2/(Mλε))


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_aux_factor_scales_the_noise_only_with_protect_aux():
    lam, eps, M, N, d = 0.01, 1.0, 30, 60, 5
    plain = EnsembleParams("soft", lam, eps, 2, N, M)
    prot = EnsembleParams("soft", lam, eps, 2, N, M, protect_aux=True)
    eta = _noise_draws(prot, (d,), 2000, "hamm-aux")
    _check_spherical(eta, 2 / (M * lam * eps) * (N + M - 1) / N)
    assert prot.noise_scale / plain.noise_scale == pytest.approx((N + M - 1) / N)
    plain_eta = _noise_draws(plain, (d,), 2000, "hamm-aux")
    assert stats.kstest(np.linalg.norm(plain_eta, axis=1), stats.gamma(a=d, scale=2 / (M * lam * eps)).cdf).pvalue > 1e-3


def test_output_perturbation_checks_shapes():
    with pytest.raises(ValueError, match="vector"):
        output_perturbation(np.zeros((2, 3)), EnsembleParams("soft", 1.0, 1.0, 2, 5, 5), Drbg.from_seed(1))
    with pytest.raises(ValueError, match="3-class"):
        output_perturbation(np.zeros(6), EnsembleParams("soft", 1.0, 1.0, 3, 5, 5), Drbg.from_seed(1))


# ------------------------------------------------------------------------------------------- release_global


def test_release_global_is_w_s_plus_noise_and_reproducible():
    N, d, M, lam = 200, 5, 9, 0.01
    X = _aux(N, d, 30)
    preds = np.random.default_rng(31).integers(0, 2, size=(M, N))  # public simulation data
    counts = _counts(preds, 2)
    for method in ("soft", "vote"):
        p = EnsembleParams(method, lam, 2.0, 2, N, M)
        rel = release_global(X, counts, p, Drbg.from_seed(b"rel"))
        w_s = _w_s(X, preds, 2, method, lam)
        assert rel.weights.shape == (d,)
        assert np.linalg.norm(rel.weights - w_s) == pytest.approx(rel.noise_norm, rel=1e-9)
        assert rel.noise_norm > 0
        assert rel.guarantee == p.guarantee and rel.params == p and rel.sensitivity == p.sensitivity
        again = release_global(X, counts, p, Drbg.from_seed(b"rel"))
        assert np.array_equal(again.weights, rel.weights)
    # multiclass: W (C, d)
    preds3 = np.random.default_rng(32).integers(0, 3, size=(M, N))  # public simulation data
    rel3 = release_global(X, _counts(preds3, 3), EnsembleParams("soft", lam, 2.0, 3, N, M), Drbg.from_seed(b"rel3"))
    assert rel3.weights.shape == (3, d)


def test_infinite_epsilon_is_the_explicit_non_private_baseline():
    N, d, M, lam = 100, 4, 7, 0.01
    X = _aux(N, d, 40)
    preds = np.random.default_rng(41).integers(0, 2, size=(M, N))  # public simulation data
    for method in ("soft", "vote"):
        p = EnsembleParams(method, lam, math.inf, 2, N, M)
        rel = release_global(X, _counts(preds, 2), p, Drbg.from_seed(1))
        assert np.array_equal(rel.weights, _w_s(X, preds, 2, method, lam))  # no noise at all
        assert rel.noise_norm == 0.0 and p.noise_scale == 0.0
        assert rel.guarantee.epsilon == math.inf
        assert "not private (1/ε = 0 baseline)" in rel.guarantee.statement


def test_release_global_refuses_bad_rows_and_counts():
    N, d, M = 20, 3, 5
    X = _aux(N, d, 50)
    X[3] = np.array([1.0, 0.0, 0.0]) * (1 + 1e-12)  # rounding above 1 is tolerated
    counts = _counts(np.random.default_rng(51).integers(0, 2, size=(M, N)), 2)  # public simulation data
    p = EnsembleParams("soft", 0.1, 1.0, 2, N, M)
    release_global(X, counts, p, Drbg.from_seed(1))
    bad = X.copy()
    bad[7] = np.array([0.6, 0.6, 0.6])  # ‖x‖ ≈ 1.04
    with pytest.raises(ValueError, match="row 7"):
        release_global(bad, counts, p, Drbg.from_seed(1))
    with pytest.raises(ValueError, match="rows"):
        release_global(X[:-1], counts[:-1], p, Drbg.from_seed(1))
    with pytest.raises(ValueError, match="shape"):
        release_global(X, counts[:, :1], p, Drbg.from_seed(1))
    with pytest.raises(ValueError, match="shape"):
        release_global(X, np.zeros((N, 3), dtype=int), p, Drbg.from_seed(1))
    wrong_M = counts.copy()
    wrong_M[4, 0] += 1
    with pytest.raises(ValueError, match="expected M = 5"):
        release_global(X, wrong_M, p, Drbg.from_seed(1))
    nan = X.copy()
    nan[0, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        release_global(nan, counts, p, Drbg.from_seed(1))


# ------------------------------------------------------------------------------------------- avg baseline


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_avg_release_sensitivity_noise_and_projection():
    M, d, lam, eps = 50, 4, 0.1, 1.0
    W = np.random.default_rng(60).normal(size=(M, d))  # public simulation data (‖w_i‖ < 1/λ = 10)
    rng = Drbg.from_seed(b"avg")
    draws = np.stack([avg_release(W, lam, eps, rng).weights - W.mean(axis=0) for _ in range(2000)])
    _check_spherical(draws, 2 / (M * lam * eps))
    rel = avg_release(W, lam, eps, Drbg.from_seed(1))
    assert rel.sensitivity == pytest.approx(2 / (M * lam)) and rel.clipped == 0 and "one whole party" in rel.guarantee.statement
    inf = avg_release(W, lam, math.inf, Drbg.from_seed(1))
    assert np.array_equal(inf.weights, W.mean(axis=0)) and "not private" in inf.guarantee.statement
    big = W.copy()
    big[0] = 100.0  # not an exact minimiser: projected onto ‖w‖ ≤ 1/λ before averaging
    r = avg_release(big, lam, math.inf, Drbg.from_seed(1))
    assert r.clipped == 1
    assert np.allclose(r.weights * M - W[1:].sum(axis=0), np.full(d, 10 / math.sqrt(d)))
    # real local LR models satisfy ‖w_i‖ ≤ 1/λ, so the projection is a no-op for them
    rng_np = np.random.default_rng(61)  # public simulation data
    Xl = rng_np.normal(size=(8, 20, d))  # public simulation data
    Xl /= np.linalg.norm(Xl, axis=2, keepdims=True)
    Wl = np.stack([logreg.fit(Xl[i], np.ones(20), 1e-3, "half") for i in range(8)])
    assert np.all(np.linalg.norm(Wl, axis=1) <= 1 / 1e-3)
    assert avg_release(Wl, 1e-3, 1.0, Drbg.from_seed(2)).clipped == 0
    multi = avg_release(np.zeros((M, 3, d)), lam, 1.0, Drbg.from_seed(3))
    assert multi.weights.shape == (3, d) and multi.sensitivity == pytest.approx(2 * math.sqrt(2) / (M * lam))


# ------------------------------------------------------------------------------------------- avg-tight


@pytest.mark.parametrize("classes", [2, 3, 5])
def test_objective_norm_bound_holds_for_exact_minimisers_on_random_data(classes):
    """‖w*‖ ≤ √(2 ln C/λ) for the (1/n)-mean log-loss + (λ/2)‖w‖² minimiser, any data (even ‖x‖ ≫ 1); on separable
    data with small λ it is within a factor 4 (not vacuous)."""
    from mpdp.hamm2016.local import batched_logreg
    from mpdp.hamm2016.mechanism import objective_norm_bound

    gen = np.random.default_rng(70 + classes)  # public simulation data
    worst = 0.0
    for lam in (1e-4, 1e-2, 1.0):
        R = objective_norm_bound(lam, classes)
        assert R == pytest.approx(math.sqrt(2 * math.log(classes) / lam))
        for scale in (0.1, 1.0, 30.0):
            X = gen.normal(size=(12, 5)) * scale  # public simulation data
            y = gen.integers(0, classes, size=12)  # public simulation data
            w = fit_soft(X, one_hot(y, classes), lam)
            assert np.linalg.norm(w) <= R
            worst = max(worst, float(np.linalg.norm(w)) / R)
            if classes == 2 and scale <= 1:  # the batched solver the simulation uses (rows in the unit ball there)
                wb = batched_logreg(X[None], np.where(y == 1, 1.0, -1.0)[None], lam)[0]
                assert np.linalg.norm(wb) <= R and np.allclose(wb, w, atol=1e-6)
    assert worst > 0.2  # measured 0.277: within a factor 4 of the bound on this data


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_avg_tight_noise_scale_and_projection():
    from mpdp.hamm2016.mechanism import avg_radius, objective_norm_bound

    M, d, lam, eps = 40, 5, 1e-2, 0.5
    R = math.sqrt(2 * math.log(2) / lam)  # 11.77 < 1/λ = 100
    assert avg_radius(lam, 2, True) == pytest.approx(R) and avg_radius(lam, 2, False) == pytest.approx(1 / lam)
    assert avg_radius(5.0, 2, True) == pytest.approx(1 / 5.0)  # large λ: the gradient bound is the smaller one
    W = np.random.default_rng(71).normal(size=(M, d))  # public simulation data, ‖w_i‖ < R
    rng = Drbg.from_seed(b"avg-tight")
    draws = np.stack([avg_release(W, lam, eps, rng, tight=True).weights - W.mean(axis=0) for _ in range(2000)])
    _check_spherical(draws, 2 * R / (M * eps))  # Gamma(d, Δ₂/ε) norms, Δ₂ = 2·√(2 ln 2/λ)/M, uniform directions
    rel = avg_release(W, lam, eps, Drbg.from_seed(1), tight=True)
    assert rel.sensitivity == pytest.approx(2 * R / M) and rel.clipped == 0
    assert rel.guarantee.mechanism.startswith("avg-tight") and "√(2 ln C/λ)" in rel.guarantee.statement
    big = W.copy()
    big[0] = 50.0  # a model no exact minimiser can be: projected onto ‖w‖ ≤ R before averaging
    r = avg_release(big, lam, math.inf, Drbg.from_seed(1), tight=True)
    assert r.clipped == 1 and np.allclose(r.weights * M - W[1:].sum(axis=0), np.full(d, R / math.sqrt(d)))
    multi = avg_release(np.zeros((M, 3, d)), lam, 1.0, Drbg.from_seed(3), tight=True)
    assert multi.sensitivity == pytest.approx(2 * objective_norm_bound(lam, 3) / M)
