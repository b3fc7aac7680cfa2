"""The distributed Gaussian mechanism (Heikkilä et al. 2017, Theorem 1): noise
laws, the classic constant at ε ≥ 1, and a DP sanity check."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from mpdp.dca import mechanism
from mpdp.dca.driver import run_job
from mpdp.dp.mechanisms import classic_gaussian_sigma, gaussian_delta
from mpdp.math.drbg import Drbg

from tests.dca.helpers import data, make_params

Q = 1e-6  # two-sided quantile for the variance checks (deterministic seeds)


def variance_consistent(samples: np.ndarray, variance: float) -> bool:
    """n·S/σ² ~ χ²_n for zero-mean normal samples: is S inside the central 1 − 2Q interval?"""
    n = samples.size
    t = float(np.sum(samples**2)) / variance
    return stats.chi2.ppf(Q, n) <= t <= stats.chi2.ppf(1 - Q, n)


def test_classic_formula_exact():
    # σ = Δ₂·sqrt(2 ln(1.25/δ))/ε, by hand: ln(125000) = ln 1.25 + 5 ln 10 = 11.7360690, sqrt(2·that) = 4.8448053
    assert classic_gaussian_sigma(1.0, 0.5, 1e-5) == pytest.approx(9.6896105, rel=1e-7)
    for delta, eps, sens in [(1e-5, 0.5, 1.0), (1e-4, 0.9, 3.0), (1e-3, 0.1, 0.25)]:
        assert mechanism.sigma_std("paper", sens, eps, delta) == sens * math.sqrt(2 * math.log(1.25 / delta)) / eps


@pytest.mark.parametrize("eps", [0.05, 0.3, 0.9, 0.999])
@pytest.mark.parametrize("delta", [1e-3, 1e-5, 1e-8])
def test_analytic_calibrator(eps, delta):
    s = mechanism.sigma_std("corrected", 2.0, eps, delta)
    assert gaussian_delta(s, 2.0, eps) <= delta
    assert s <= classic_gaussian_sigma(2.0, eps, delta)  # ε < 1: never more noise than the classic bound
    assert gaussian_delta(s * (1 - 1e-6), 2.0, eps) > delta * (1 - 1e-3)  # and (nearly) the smallest such σ


@pytest.mark.parametrize("mode", ["corrected", "paper"])
@pytest.mark.parametrize("N,T", [(2, 0), (20, 3), (1000, 50)])
def test_per_client_sigma(mode, N, T):
    p = make_params(clients=N, max_missing=T, mode=mode)
    if mode == "paper":  # the classic formula, written out here (not the function under test)
        assert p.sigma_std == pytest.approx(2.0 * math.sqrt(2 * math.log(1.25 / 1e-5)) / 1.0, rel=1e-12)
    else:  # the analytic Gaussian: the σ whose exact δ(σ; Δ₂ = 2, ε = 1) is 10⁻⁵, by definition (Balle & Wang)
        assert gaussian_delta(p.sigma_std, 2.0, 1.0) <= 1e-5 < gaussian_delta(p.sigma_std * (1 - 1e-6), 2.0, 1.0)
        assert p.sigma_std < 2.0 * math.sqrt(2 * math.log(1.25 / 1e-5))
    assert p.sigma_client == pytest.approx(p.sigma_std / math.sqrt(N - T - 1), rel=1e-15)
    assert mechanism.worst_case_noise_variance(p.sigma_client, N, T) == pytest.approx(p.sigma_std**2, rel=1e-12)


def test_paper_mode_reports_the_delta_it_really_gives():
    """At ε ≥ 1 the classic constant (proved only for ε < 1) can fall short; the guarantee says by how much."""
    p = make_params(mode="paper", epsilon=20.0, delta=1e-5, sensitivity=1.0)
    exact = gaussian_delta(p.sigma_std, 1.0, 20.0)
    assert exact > 1e-5
    assert p.guarantee.delta == exact and "paper mode" in p.guarantee.statement
    c = make_params(mode="corrected", epsilon=20.0, delta=1e-5, sensitivity=1.0)
    assert c.guarantee.delta == 1e-5 and gaussian_delta(c.sigma_std, 1.0, 20.0) <= 1e-5
    for g in (p.guarantee, c.guarantee):
        assert g.norm == "l2" and g.sensitivity == 1.0 and "T = 3" in g.statement


def test_noise_comes_from_the_drbg():
    a = mechanism.client_noise(Drbg.from_seed("n"), (3, 5), 0.5)
    b = mechanism.client_noise(Drbg.from_seed("n"), (3, 5), 0.5)
    c = mechanism.client_noise(Drbg.from_seed("m"), (3, 5), 0.5)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    with pytest.raises(ValueError):
        mechanism.client_noise(Drbg.from_seed("n"), 3, 0.0)


@pytest.fixture(scope="module")
def zero_data_run():
    """N = 8 clients with z = 0, T = 2; each of d = 20000 coordinates is an independent run of the noise."""
    p = make_params(dimension=20000, clients=8, max_missing=2, epsilon=1.0, delta=1e-3, sensitivity=1.0)
    run = run_job(p, np.zeros((8, 20000)), Drbg.from_seed("zero-data"), keep_noise=True, record=False)
    assert run.error is None and run.release is not None
    return p, run


def test_per_client_noise_has_sigma_client(zero_data_run):
    p, run = zero_data_run
    assert variance_consistent(run.noise.ravel(), p.sigma_client**2)
    assert not variance_consistent(run.noise.ravel(), (1.1 * p.sigma_client) ** 2)


def test_aggregate_noise_variance(zero_data_run):
    """Over many runs the released noise has variance N·σ²_std/(N−T−1)."""
    p, run = zero_data_run
    released = np.array(run.release.values)
    assert variance_consistent(released, p.clients * p.sigma_std**2 / (p.clients - p.max_missing - 1))
    assert run.release.noise_variance == pytest.approx(p.clients * p.sigma_client**2)
    assert not variance_consistent(released, p.sigma_std**2)  # the test can tell N/(N−T−1) = 1.6 apart from 1


def test_removing_any_T_clients_leaves_sigma_std(zero_data_run):
    """After removing T colluders' noise the variance is ≥ σ²_std; removing the target's too leaves exactly σ²_std."""
    p, run = zero_data_run
    released = np.array(run.release.values)
    N, T = p.clients, p.max_missing
    pick = Drbg.from_seed("colluders")
    for _ in range(3):
        colluders = pick.permutation(N)[: T + 1]
        rest = released - run.noise[colluders[:T]].sum(axis=0)
        assert variance_consistent(rest, (N - T) * p.sigma_client**2)
        assert (N - T) * p.sigma_client**2 >= p.sigma_std**2
        honest_others = rest - run.noise[colluders[T]]
        assert variance_consistent(honest_others, p.sigma_std**2)
    # negative control: without the "−1" of Thm 1 the honest others would fall short of σ²_std
    assert not variance_consistent(honest_others * math.sqrt((N - T - 1) / (N - T)), p.sigma_std**2)


def _privacy_loss_delta(o_d: np.ndarray, o_dp: np.ndarray, mu: float, mu_p: float, s2: float, eps: float) -> tuple[float, float]:
    """δ̂ = P̂_D[L > ε] − e^ε·P̂_D'[L > ε] with L(o) = log N(o; μ, s²)/N(o; μ', s²), and its standard error."""

    def loss(o: np.ndarray) -> np.ndarray:
        return ((o - mu_p) ** 2 - (o - mu) ** 2) / (2 * s2)

    a = np.mean(loss(o_d) > eps)
    b = np.mean(loss(o_dp) > eps)
    se = math.sqrt(a * (1 - a) / o_d.size + math.exp(2 * eps) * b * (1 - b) / o_dp.size)
    return float(a - math.exp(eps) * b), se


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_dp_sanity_on_adjacent_datasets():
    """DP sanity: a 1-D sum of values in [−1, 1] through DCA, 10^5 runs on D and on D' (client 0: +1 → −1).

    Worst case of Thm 1: the T colluders' and the target's own noise are known and removed; the honest others'
    noise must still make the empirical δ at ε at most δ (plus sampling slack). Each coordinate of a d = 10^5 job
    is one run of the 1-D mechanism (Δ₂ = 2 is that 1-D query's sensitivity).
    """
    runs, N, T, eps, delta = 100_000, 6, 2, 1.0, 0.05
    p = make_params(dimension=runs, clients=N, max_missing=T, epsilon=eps, delta=delta, sensitivity=2.0)
    z = np.repeat(data(N, 1, seed=11), runs, axis=1)
    z[0] = 1.0
    z_adj = z.copy()
    z_adj[0] = -1.0
    out = []
    for zz, seed in ((z, "dp-D"), (z_adj, "dp-D'")):
        run = run_job(p, zz, Drbg.from_seed(seed), keep_noise=True, record=False, batch_size=N)
        assert run.error is None
        out.append(np.array(run.release.values) - run.noise[: T + 1].sum(axis=0))  # remove colluders' and target's noise
    mu, mu_p = float(z[:, 0].sum()), float(z_adj[:, 0].sum())
    s2 = (N - T - 1) * p.sigma_client**2
    d_hat, se = _privacy_loss_delta(out[0], out[1], mu, mu_p, s2, eps)
    assert d_hat <= delta + 4 * se
    assert d_hat >= delta - 4 * se  # the analytic calibration is tight
    # negative control: 30% less honest noise breaks the guarantee, and the test sees it
    under = [mu + 0.7 * (out[0] - mu), mu_p + 0.7 * (out[1] - mu_p)]
    d_under, se_u = _privacy_loss_delta(under[0], under[1], mu, mu_p, 0.49 * s2, eps)
    assert d_under > delta + 4 * se_u
