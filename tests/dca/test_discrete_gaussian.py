"""The `discrete-gaussian` DCA noise mode: the exact sampler (CKS20), the accounting (KLS21 Prop. 14 + CKS20's
conversion), conditional rounding, the wrap-around window, and a whole in-memory job.

Statistical tests use fixed seeds and a fixed significance (α = 10⁻³), so they are reproducible; each has a
companion showing the same test rejects a wrong distribution (the test can fail).
"""

from __future__ import annotations

import ast
import inspect
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import optimize, special, stats

from mpdp.dca import discrete
from mpdp.dca.aggregator import check_window
from mpdp.dca.driver import run_job
from mpdp.dca.errors import InsufficientNoise, InvalidJob
from mpdp.dca.params import DcaParams
from mpdp.dp import discrete_gaussian as dg
from mpdp.dp.mechanisms import gaussian_delta
from mpdp.math.drbg import Drbg
from mpdp.messages import dca_pb2 as pb
from mpdp.protocol import Problem, ProtocolError
from tests.dca.helpers import data, make_params

SIGNIFICANCE = 1e-3


def chi2_pvalue(samples: list[int], prob) -> float:
    """χ² goodness of fit of integer samples against the PMF ``prob``; bins with expected count < 5 are merged
    into the two tails."""
    n = len(samples)
    values, counts = np.unique(np.asarray(samples), return_counts=True)
    observed = dict(zip(values.tolist(), counts.tolist()))
    lo = hi = 0
    while n * prob(lo - 1) >= 5:
        lo -= 1
    while n * prob(hi + 1) >= 5:
        hi += 1
    inside = list(range(lo, hi + 1))
    p_in = [prob(x) for x in inside]
    p_left = sum(prob(x) for x in range(lo - 2000, lo))
    p_right = 1.0 - sum(p_in) - p_left
    exp = np.array([p_left] + p_in + [p_right]) * n
    obs = np.array([sum(c for v, c in observed.items() if v < lo)] + [observed.get(x, 0) for x in inside] + [sum(c for v, c in observed.items() if v > hi)])
    if exp[0] < 1e-9:  # an empty tail bin carries nothing
        exp, obs = exp[1:], obs[1:]
    if exp[-1] < 1e-9:
        exp, obs = exp[:-1], obs[:-1]
    stat = float(np.sum((obs - exp) ** 2 / exp))
    return float(stats.chi2.sf(stat, len(exp) - 1))


# -- the sampler -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sigma2", [Fraction(1, 2), Fraction(7, 3), 4, Fraction(1000, 7)], ids=str)
@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_discrete_gaussian_matches_its_pmf(sigma2):
    xs = dg.DiscreteGaussian(sigma2, Drbg.from_seed(f"dg/{sigma2}")).samples(20_000)
    assert chi2_pvalue(xs, lambda x: dg.pmf(sigma2, x)) > SIGNIFICANCE


def test_the_chi2_test_rejects_a_wrong_sigma():
    xs = dg.DiscreteGaussian(Fraction(7, 3), Drbg.from_seed("dg/wrong")).samples(20_000)
    assert chi2_pvalue(xs, lambda x: dg.pmf(Fraction(8, 3), x)) < SIGNIFICANCE


def test_discrete_laplace_matches_its_pmf():
    t = 3
    bits = dg.BitSource(Drbg.from_seed("dlap"))
    xs = [dg.discrete_laplace(bits, t) for _ in range(20_000)]
    q = math.exp(-1 / t)
    assert chi2_pvalue(xs, lambda x: (1 - q) / (1 + q) * q ** abs(x)) > SIGNIFICANCE


@pytest.mark.parametrize("num, den", [(0, 1), (1, 3), (1, 1), (3, 2), (17, 5)])
def test_bernoulli_exp_is_exp_minus_gamma(num, den):
    bits = dg.BitSource(Drbg.from_seed(f"bexp/{num}/{den}"))
    n = 40_000
    k = sum(dg.bernoulli_exp(bits, num, den) for _ in range(n))
    p = math.exp(-num / den)
    assert stats.binomtest(k, n, p).pvalue > SIGNIFICANCE


def test_uniform_below_is_uniform():
    bits = dg.BitSource(Drbg.from_seed("below"))
    xs = [bits.below(7) for _ in range(14_000)]
    assert min(xs) == 0 and max(xs) == 6
    assert stats.chisquare(np.bincount(xs, minlength=7)).pvalue > SIGNIFICANCE


def test_sigma2_must_be_an_exact_rational():
    with pytest.raises(TypeError):
        dg.DiscreteGaussian(2.5, Drbg.from_seed(1))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        dg.DiscreteGaussian(Fraction(0), Drbg.from_seed(1))


def test_no_floating_point_in_the_sampling_path():
    """Every function a draw goes through: no float literal, no float(), no math.exp/log/sqrt, no numpy."""
    funcs = [dg.BitSource._word, dg.BitSource.below, dg.BitSource.bit, dg._bernoulli, dg.bernoulli_exp, dg.discrete_laplace, dg.DiscreteGaussian.__init__, dg.DiscreteGaussian.sample]
    for f in funcs:
        tree = ast.parse(inspect.getsource(f).lstrip() if not inspect.getsource(f).startswith(" ") else "if 1:\n" + inspect.getsource(f))
        for node in ast.walk(tree):
            assert not (isinstance(node, ast.Constant) and isinstance(node.value, float)), f"{f.__qualname__}: float literal"
            assert not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "float"), f"{f.__qualname__}: float()"
            assert not (isinstance(node, ast.Attribute) and node.attr in ("exp", "log", "sqrt", "log1p", "uniform", "normal")), f"{f.__qualname__}: {node.attr}"
            assert not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)), f"{f.__qualname__}: true division"


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_sum_of_client_noise_has_n_times_the_variance():
    """Var Σ_{i≤n} X_i = n·Var N_Z(0, σ²) (independent draws; Var N_Z < σ² for small σ, CKS20)."""
    sigma2, n, draws = Fraction(9, 4), 8, 4000
    rng = Drbg.from_seed("sum-variance")
    sums = np.array([dg.DiscreteGaussian(sigma2, rng.child(f"c{i}")).samples(draws) for i in range(n)]).sum(axis=0)
    want = n * dg.variance(sigma2)
    # σ² − Var N_Z ≈ 4π²σ⁴·e^(−2π²σ²) ≈ 1e-18 here, below a double's resolution at 2.25: Python ≥ 3.12's
    # compensated sum() returns σ² exactly (3.11's plain sum happened to round below it)
    assert dg.variance(sigma2) <= float(sigma2)
    # (draws − 1)·s²/var ~ χ²(draws − 1) for a near-normal sum
    stat = (draws - 1) * float(np.var(sums, ddof=1)) / want
    assert stats.chi2.ppf(SIGNIFICANCE / 2, draws - 1) < stat < stats.chi2.ppf(1 - SIGNIFICANCE / 2, draws - 1)
    assert abs(float(np.mean(sums))) < 4 * math.sqrt(want / draws)


# -- accounting ------------------------------------------------------------------------------------------------
def _exact_renyi(sigma2: float, n: int, delta: int, alpha: float, width: int = 80) -> float:
    """D_α(Z ‖ Z + Δ) for Z the sum of n N_Z(0, σ²), by convolving the PMF (independent of the bound's proof)."""
    xs = np.arange(-width, width + 1)
    p = np.exp(-(xs**2) / (2 * sigma2))
    p /= p.sum()
    z = p
    for _ in range(n - 1):
        z = np.convolve(z, p)
    q = np.roll(z, delta)  # P[Z + Δ = x] = P[Z = x − Δ]; the support is wide enough that nothing wraps
    keep = (z > 0) & (q > 0)  # terms beyond double range are dropped: the result can only be (negligibly) low
    terms = alpha * np.log(z[keep]) + (1 - alpha) * np.log(q[keep])
    return float(special.logsumexp(terms)) / (alpha - 1)


@pytest.mark.parametrize("sigma2, n, delta", [(0.36, 2, 1), (0.36, 3, 1), (0.5, 4, 2), (1.0, 2, 1), (0.3, 5, 1)])
def test_prop14_bound_holds_against_the_exact_divergence(sigma2, n, delta):
    t = discrete.tau(sigma2, n)
    for alpha in (1.5, 2.0, 5.0, 20.0):
        bound = float(discrete.rdp(alpha, float(delta), float(delta), t, 1, n, sigma2))
        exact = _exact_renyi(sigma2, n, delta, alpha)
        assert exact <= bound * (1 + 1e-9)


def test_tau_is_needed_for_small_sigma():
    """Without τ the continuous-Gaussian formula α‖Δ‖²/(2nσ²) under-states the divergence of a sum of coarse discrete
    Gaussians: the sum is *not* N_Z(0, nσ²) (the reason KLS21 carry τ)."""
    sigma2, n, alpha = 0.3, 5, 2.0
    assert _exact_renyi(sigma2, n, 1, alpha) > alpha / (2 * n * sigma2)
    assert discrete.tau(sigma2, n) > 0


def test_tau_formula():
    s2, n = 0.5, 4
    assert discrete.tau(s2, n) == pytest.approx(10 * sum(math.exp(-2 * math.pi**2 * s2 * k / (k + 1)) for k in range(1, n)), rel=1e-12)
    assert discrete.tau(s2, 1) == 0.0
    assert discrete.tau(1e6, 10**5) == 0.0  # large σ (every real job at f ≥ 8): the sum is as good as N_Z(0, nσ²)


def test_conversion_is_the_cks20_formula_and_beats_bun_steinke():
    """Pure ρ-zCDP (τ = 0): ε = min_α αρ + (ln(1/δ) − ln α)/(α − 1) + ln(1 − 1/α) (CKS20 Prop. 12/Cor. 13), recomputed by a
    continuous minimisation; ≤ Bun–Steinke's ρ + 2√(ρ ln(1/δ)); ≥ the exact ε of the Gaussian mechanism (Balle–Wang)."""
    for rho, delta in ((0.5, 1e-5), (0.05, 1e-6), (2.0, 1e-5)):
        sigma = 1 / math.sqrt(2 * rho)  # Δ = 1: ρ = Δ²/(2σ²)
        curve = discrete.rdp(discrete._ALPHAS, 1.0, 1.0, 0.0, 1, 1, sigma * sigma)
        eps, _ = discrete.epsilon_from_rdp(curve, discrete._ALPHAS, delta)

        def cks(a: float, rho: float = rho, delta: float = delta) -> float:
            return a * rho + (math.log(1 / delta) - math.log(a)) / (a - 1) + math.log(1 - 1 / a)

        ref = optimize.minimize_scalar(cks, bounds=(1.0001, 1e5), method="bounded")
        assert eps == pytest.approx(ref.fun, rel=2e-3)
        assert eps < rho + 2 * math.sqrt(rho * math.log(1 / delta))
        assert gaussian_delta(sigma, 1.0, eps) <= delta  # the conversion is an upper bound on the true ε
        assert discrete.delta_from_rdp(curve, discrete._ALPHAS, eps) == pytest.approx(delta, rel=0.05)


def test_calibration_is_tight_and_counts_only_the_honest_clients():
    kw = {"epsilon": 1.0, "delta": 1e-5, "sensitivity": 2.0, "frac_bits": 16, "d": 10, "clip_max": 1.0}
    acc = discrete.calibrate(clients=20, max_missing=3, **kw)
    assert acc.honest == 16 and acc.delta <= 1e-5 and acc.sigma2.denominator <= 256
    less = discrete.account(acc.sigma2 * Fraction(98, 100), clients=20, max_missing=3, sensitivity=2.0, frac_bits=16, d=10, clip_max=1.0, epsilon=1.0)
    assert less.delta > 1e-5  # 2 % less variance breaks the target: the calibration is not loose
    same_n = discrete.calibrate(clients=17, max_missing=0, **kw)  # n = N − T − 1 = 16 again
    assert same_n.sigma2 == acc.sigma2
    # ρ = Δ̃²/(2nσ²) when τ = 0, with Δ̃ = Δ₂·2^f + 2R
    l2 = 2.0 * 2**16 + 2 * math.sqrt(discrete.rounding_bound_sq(10))
    assert acc.rho == pytest.approx(l2**2 / (2 * 16 * float(acc.sigma2)), rel=1e-6)


def test_discrete_costs_little_noise_over_the_analytic_gaussian():
    g = make_params(dimension=100)
    d = make_params(dimension=100, noise="discrete-gaussian")
    assert 1.0 < d.sigma_client / g.sigma_client < 1.15


# -- rounding --------------------------------------------------------------------------------------------------
@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_conditional_rounding_stays_on_the_grid_within_its_bound_and_is_unbiased():
    d = 64
    y = Drbg.from_seed("y").uniform((1, d)) * 40 - 20
    rng = Drbg.from_seed("round")
    draws = np.array([discrete.conditional_round(y, rng.child(str(i)))[0] for i in range(3000)])
    assert np.all((draws == np.floor(y)) | (draws == np.ceil(y)))
    err = draws - y
    assert np.all(np.sum(err * err, axis=1) <= discrete.rounding_bound_sq(d))
    se = np.sqrt(0.25 / len(draws))
    assert np.all(np.abs(draws.mean(axis=0) - y[0]) < 5 * se)


# -- wrap-around never silent ----------------------------------------------------------------------------------
def test_a_job_whose_sum_could_wrap_is_refused_at_creation():
    with pytest.raises(InvalidJob, match="headroom"):
        make_params(noise="discrete-gaussian", frac_bits=48, clip_bounds=(1e4,), clients=4, max_missing=0)
    make_params(frac_bits=48, clip_bounds=(1.0,), clients=4, max_missing=0, noise="discrete-gaussian")  # fits


def test_a_sum_outside_its_window_is_refused():
    prm = make_params(noise="discrete-gaussian")
    b = prm.discrete.window
    check_window(prm, np.array([b, -b, 0, 1], dtype=np.int64).view(np.uint64))  # the edge is fine
    for bad in (b + 1, -b - 1, 2**63 - 1, -(2**63)):
        with pytest.raises(ProtocolError, match="window") as e:
            check_window(prm, np.array([0, bad, 0, 0], dtype=np.int64).view(np.uint64))
        assert e.value.problem == Problem.JOB_FAILED


def test_a_forced_wrap_fails_the_job_loudly():
    """A node's partial sum pushed by 2^63 (what a wrap looks like after the modular sum): nothing is released."""
    prm = make_params(noise="discrete-gaussian")

    def tamper(sender, recipient, msg):
        if isinstance(msg, pb.PartialSum) and sender.name == prm.nodes[0]:
            v = np.frombuffer(msg.partial_sum, dtype="<u8").copy()
            v[0] += np.uint64(1 << 63)
            out = pb.PartialSum()
            out.CopyFrom(msg)
            out.partial_sum = v.astype("<u8").tobytes()
            return out
        return msg

    run = run_job(prm, data(20, 4), Drbg.from_seed("wrap"), tamper=tamper)
    assert run.release is None and run.error is not None and "window" in str(run.error)


def test_a_client_refuses_a_value_past_the_int64_headroom(monkeypatch):
    monkeypatch.setattr(discrete, "CLIENT_BOUND", 1 << 20)  # forces the (probability ~0) refusal
    with pytest.raises(discrete.EncodeRefused):
        discrete.client_integers(np.zeros((1, 8)), 32, Fraction(1 << 50), Drbg.from_seed("refuse"))


# -- a whole job -----------------------------------------------------------------------------------------------
def test_in_memory_job_releases_with_rho_and_epsilon_delta():
    prm = make_params(noise="discrete-gaussian", dimension=2000, clients=6, max_missing=1, epsilon=2.0, delta=1e-6, sensitivity=2.0)
    Z = data(6, 2000)
    run = run_job(prm, Z, Drbg.from_seed("job"), keep_noise=True)
    r = run.release
    assert run.error is None and r is not None
    assert r.noise == pb.DISCRETE_GAUSSIAN and r.rho == pytest.approx(prm.discrete.rho) and r.rho > 0
    assert r.guarantee.epsilon == 2.0 and 0 < r.guarantee.delta <= 1e-6
    assert "zCDP" in r.guarantee.statement and "Kairouz" in r.guarantee.statement
    assert r.sigma2_units == f"{prm.discrete.sigma2.numerator}/{prm.discrete.sigma2.denominator}"
    # every client's noise is an integer number of units; the released error is the integer noise sum (plus rounding)
    units = run.noise * 2.0**prm.frac_bits
    assert np.array_equal(units, np.rint(units))
    err = (np.asarray(r.values) - Z.sum(axis=0)) * 2.0**prm.frac_bits
    var = 6 * float(prm.discrete.sigma2)
    stat = (len(err) - 1) * float(np.var(err, ddof=1)) / var
    assert stats.chi2.ppf(SIGNIFICANCE / 2, len(err) - 1) < stat < stats.chi2.ppf(1 - SIGNIFICANCE / 2, len(err) - 1)
    entry = next(iter(run.ledger.values()))[0]
    assert entry["epsilon"] == 2.0 and entry["delta"] == r.guarantee.delta and entry["noise"] == "discrete-gaussian" and entry["rho"] == r.rho


def test_dropouts_up_to_t_release_and_more_are_refused():
    prm = make_params(noise="discrete-gaussian", clients=8, max_missing=2)
    Z = data(8, 4)
    assert run_job(prm, Z, Drbg.from_seed("drop"), drop=[0, 5]).release is not None
    run = run_job(prm, Z, Drbg.from_seed("drop"), drop=[0, 5, 6])
    assert run.release is None and isinstance(run.error, InsufficientNoise)


def test_spec_round_trip_and_refusals():
    prm = make_params(noise="discrete-gaussian")
    spec = prm.to_spec()
    assert spec.noise == pb.DISCRETE_GAUSSIAN
    again = DcaParams.from_spec("job-1", spec)
    assert again.noise == "discrete-gaussian" and again.discrete == prm.discrete
    with pytest.raises(InvalidJob, match="CORRECTED"):
        make_params(noise="discrete-gaussian", mode="paper")
    with pytest.raises(InvalidJob, match="noise"):
        make_params(noise="laplace")
    spec.noise = 7
    with pytest.raises(InvalidJob, match="noise"):
        DcaParams.from_spec("job-1", spec)
    assert make_params().to_spec().noise == pb.GAUSSIAN and make_params().rho == 0.0  # the default is unchanged
