"""Pathak 2010, gaussian-distributed noise (docs/protocols/pathak2010.md, "Distributed Gaussian noise").

The transcript test: over seeded in-memory jobs, any t parties pool the z_i their machines drew and subtract
their part from the released model; what is left has variance σ²(n₍₁₎) per coordinate (χ² test, fixed seeds,
two-sided at α = 0.001), while t + 1 parties would leave measurably less. Plus the noise's distribution (KS),
the protocol's equality with the plaintext mechanism, the fixed-point bounds, and the refusals.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from mpdp.dp import pathak_noise
from mpdp.dp.mechanisms import gaussian_delta
from mpdp.dp.pathak_noise import PathakCalibration
from mpdp.math.drbg import Drbg
from mpdp.messages import common_pb2, pathak2010_pb2 as pb
from mpdp.pathak2010 import driver, mechanism, tester
from tests.pathak_helpers import run_test_job, small_curator_secrets
from mpdp.pathak2010.params import InvalidJob, PathakParams
from mpdp.protocol import Peer, ProtocolError

ALPHA = 1e-3
NAMES = ["p1", "p2", "p3", "p4"]
SIZES = [90, 30, 120, 60]  # n₍₁₎ = 30 (p2); a wrongly selected σ would be 2–4 times too large
D = 40
RUNS = 8


def _data(seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = {}
    for name, n in zip(NAMES, SIZES):
        X = rng.normal(size=(n, D))
        y = np.where(X[:, 0] + 0.5 * rng.normal(size=n) > 0, 1.0, -1.0)
        out[name] = (X, y)
    return out


@pytest.fixture(scope="module")
def secrets():
    return small_curator_secrets(1024, 1024)


@pytest.fixture(scope="module")
def runs(secrets):
    """RUNS seeded jobs (ε = 1, λ = 0.5, t = default K − 2 = 2): (result, released ŵ_s)."""
    out = []
    for k in range(RUNS):
        spec = driver.make_spec(NAMES, 1.0, 0.5, mode="gaussian-distributed", seed=f"dist-{k}".encode())
        r = run_test_job(_data(k), spec, secrets, job_id=f"job-{k}")
        assert r.error is None and r.model is not None, r.error
        out.append((r, tester.rebuild(r.model)))
    return out


def _residual(r, w: np.ndarray, pooled: tuple[str, ...]) -> np.ndarray:
    """What is left of the noise once the parties in ``pooled`` subtract their own σ·z_i, in units of σ(n₍₁₎)."""
    cal = r.curator.params.calibration
    average = np.mean([r.parties[n].w for n in NAMES], axis=0)
    sigma = cal.sigma(min(SIZES), D)
    known = sum((r.parties[n].noise for n in pooled), np.zeros(D))
    return (w - average) / sigma - known


def _variance_p(x: np.ndarray, var: float) -> tuple[float, float]:
    """(p of 'variance below var', p of 'variance above var') for a zero-mean normal sample (χ² with len(x) df)."""
    q = float(np.sum(x**2) / var)
    return float(stats.chi2.cdf(q, len(x))), float(stats.chi2.sf(q, len(x)))


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_any_t_parties_leave_variance_sigma_squared(runs):
    K, t = len(NAMES), runs[0][0].curator.params.calibration.colluders
    assert t == K - 2
    for coalition in itertools.combinations(NAMES, t):
        left = np.concatenate([_residual(r, w, coalition) for r, w in runs])
        low, high = _variance_p(left, 1.0)  # every coordinate: N(0, σ²·(K−t)/(K−t))
        assert low > ALPHA and high > ALPHA, (coalition, np.var(left))


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_t_plus_one_parties_would_be_detected(runs):
    """The test above has power: with one more party pooled, the variance left is σ²·(K−t−1)/(K−t) = σ²/2."""
    left = np.concatenate([_residual(r, w, ("p1", "p2", "p3")) for r, w in runs])
    low, _ = _variance_p(left, 1.0)
    assert low < ALPHA
    assert min(_variance_p(left, 0.5)) > ALPHA


def test_no_pooling_total_noise_is_gaussian_with_k_over_k_minus_t(runs):
    """Per coordinate the released noise is σ(n₍₁₎)·Σ_i z_i ~ N(0, σ²·K/(K−t)): KS and variance, fixed seeds."""
    K, t = len(NAMES), 2
    total = np.concatenate([_residual(r, w, ()) for r, w in runs]) / math.sqrt(K / (K - t))
    assert stats.kstest(total, "norm").pvalue > ALPHA
    assert min(_variance_p(total, 1.0)) > ALPHA


def test_released_model_equals_the_plaintext_mechanism(runs):
    for k, (r, w) in enumerate(runs):
        cal = r.curator.params.calibration
        root = Drbg.from_seed(f"dist-{k}".encode())
        draw = mechanism.draw_aggregate([r.parties[n].w for n in NAMES], [r.parties[n].n for n in NAMES], cal,
                                        [mechanism.party_rng(root, n) for n in NAMES])
        assert draw.smallest == 1
        for n, z in zip(NAMES, draw.shares):
            assert np.array_equal(z, r.parties[n].noise)
        # model rounding (K/2 units), stochastic rounding (1 unit) and the z̄ rounding, over K, in units 2^-f
        assert np.max(np.abs(w - draw.weights)) <= (len(NAMES) / 2 + 1.01) / len(NAMES) * 2.0**-r.curator.params.frac_bits


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_mechanism_noise_distribution_and_scale():
    """The plaintext fast path: 4000 draws × d = 5, per-coordinate KS against N(0, σ²·K/(K−t))."""
    cal = PathakCalibration("gaussian-distributed", 0.5, 1.0, 5, 1e-6, 3)
    models, sizes = [np.zeros(5)] * 5, [400, 300, 100, 250, 900]
    root = Drbg.from_seed(b"mechanism-ks")
    draws = np.stack([
        mechanism.draw_aggregate(models, sizes, cal, [root.child(f"{k}/{j}") for j in range(5)]).noise for k in range(4000)
    ])
    sigma = cal.sigma(100, 5)
    for c in range(5):
        assert stats.kstest(draws[:, c] / (sigma * math.sqrt(5 / 2)), "norm").pvalue > ALPHA


def test_calibration_is_the_analytic_gaussian_for_the_corrected_sensitivity():
    eps, delta, K, lam, n, d = 1.0, 1e-6, 5, 1.0, 4884, 123
    cal = PathakCalibration("gaussian-distributed", eps, lam, K, delta, 3)
    sigma = cal.sigma(n, d)
    sens = (2.0 / (n * lam) + 2.0 * pathak_noise.SOLVER_TOL / lam + math.sqrt(d) * 2.0**-32) / K  # ℓ2 of the average of computed models, plus their rounding
    assert gaussian_delta(sigma, sens, eps) <= delta * (1 - 2.0**-10)  # the Gaussian part of δ
    assert sigma <= cal.sigma_one * sens * (1 + 1e-9)  # and not much more (rounded up by < 2^-32 units)
    assert cal.fixed_point_delta(pathak_noise.MAX_DIMENSION) <= delta * 2.0**-10  # the fixed-point part
    g = cal.guarantee(d)
    assert (g.epsilon, g.delta, g.norm) == (eps, delta, "l2")
    assert "any 3 colluding parties" in g.statement and "knows the noise it contributed" not in g.statement


def test_noise_units_round_up_and_overflow_fails_loudly():
    cal = PathakCalibration("gaussian-distributed", 2.0, 0.5, 4, 1e-6, 2)
    for n in (1, 7, 30, 10**6, 2**31):
        s = cal.sigma_one * (2.0**33 / (n * 0.5) + math.sqrt(D))
        assert cal.noise_units(n, D) >= s * 2.0**pathak_noise.SIGMA_FRAC_BITS
    tiny = PathakCalibration("gaussian-distributed", 1e-9, 0.5, 4, 1e-12, 2)  # K·σ ≈ 5e11 > 2^26
    with pytest.raises(pathak_noise.NoiseOverflow):
        tiny.noise_units(30, D)


def test_overflowing_noise_fails_the_job_without_a_release(secrets):
    spec = driver.make_spec(NAMES, 1e-9, 0.5, mode="gaussian-distributed", seed=b"overflow", delta=1e-12)
    r = run_test_job(_data(0), spec, secrets)
    assert r.model is None and r.error is not None and r.error.problem == common_pb2.INSUFFICIENT_NOISE
    assert all(m.failed for m in r.parties.values()) and r.curator.failed
    assert all(e.get("status") != "released" and len(entries) <= 1 for entries in r.ledger.values() for e in entries)  # no party released (a spend at ProtocolStart stays, unreleased)


def test_who_sees_what(runs):
    """Charlie never receives a noise-scale share, the scale or the chain; P1 gets one share per party, everyone the scale."""
    r, _ = runs[0]
    curator_kinds = {type(m).__name__ for _, m in r.curator.transcript}
    assert not curator_kinds & {"NoiseScaleShare", "NoiseScale", "NoiseChain"}
    p1 = [(s.name, type(m).__name__) for s, m in r.parties["p1"].transcript]
    assert sorted(n for n, k in p1 if k == "NoiseScaleShare") == NAMES[1:]
    for n in NAMES[1:]:
        taken = [(s.name, type(m).__name__) for s, m in r.parties[n].transcript]
        assert ("p1", "NoiseScale") in taken and all(k != "NoiseScaleShare" for _, k in taken)
    assert r.model.noise == pb.DISTRIBUTED_GAUSSIAN and r.model.colluders == 2
    assert r.model.guarantee.delta == 1e-6 and "no party knows it" in r.model.trust_model
    for entries in r.ledger.values():
        assert entries[-1]["delta"] == 1e-6 and entries[-1]["epsilon"] == 1.0 and entries[-1]["mode"] == "gaussian-distributed"


def _spec(**kw) -> pb.PathakJobSpec:
    spec = driver.make_spec(NAMES, 1.0, 0.5, mode="gaussian-distributed")
    for k, v in kw.items():
        setattr(spec, k, v)
    return spec


def test_spec_resolution_and_refusals():
    assert PathakParams.from_spec("j", _spec()).calibration.colluders == 2  # default K − 2
    assert PathakParams.from_spec("j", _spec(colluders=0)).calibration.colluders == 0
    assert PathakParams.from_spec("j", _spec(colluders=3)).calibration.colluders == 3
    assert PathakParams.from_spec("j", _spec(delta=1e-9)).calibration.delta == 1e-9
    default = driver.make_spec(NAMES, 1.0, 0.5)
    default.noise = pb.PATHAK_NOISE_DEFAULT
    assert PathakParams.from_spec("j", default).calibration.mode == "gaussian-distributed"
    default.mode = common_pb2.PAPER
    assert PathakParams.from_spec("j", default).calibration.mode == "paper"
    two = driver.make_spec(NAMES[:2], 1.0, 0.5, mode="gaussian-distributed")
    assert PathakParams.from_spec("j", two).calibration.colluders == 1  # one curious party, never 0 by default
    with pytest.raises(InvalidJob, match="at most K − 1"):
        PathakParams.from_spec("j", _spec(colluders=4))
    with pytest.raises(InvalidJob, match="needs mode CORRECTED"):
        PathakParams.from_spec("j", _spec(mode=common_pb2.PAPER))
    smallest = driver.make_spec(NAMES, 1.0, 0.5)
    smallest.delta = 1e-6
    with pytest.raises(InvalidJob, match="DISTRIBUTED_GAUSSIAN noise only"):
        PathakParams.from_spec("j", smallest)


def _tampered(secrets, tamper) -> driver.JobResult:
    spec = driver.make_spec(NAMES, 1.0, 0.5, mode="gaussian-distributed", seed=b"tamper")
    return run_test_job(_data(0), spec, secrets, tamper=tamper)


def _failed_closed(r: driver.JobResult, problem: int) -> None:
    assert r.model is None and r.error is not None and r.error.problem == problem, r.error
    assert r.curator.failed and all(e.get("status") != "released" and len(entries) <= 1 for entries in r.ledger.values() for e in entries)


def test_noise_scale_share_to_another_party_fails_the_job(secrets):
    """P1 relays the scale; a NoiseScaleShare reaching any other party (here in place of the scale) is WRONG_ROLE."""
    def swap(sender, to, msg):
        if isinstance(msg, pb.NoiseScale) and to.name == "p3":
            return pb.NoiseScaleShare(job_id=msg.job_id, ciphertext=msg.ciphertext)
        return msg

    _failed_closed(_tampered(secrets, swap), common_pb2.WRONG_ROLE)


def test_noise_scale_from_a_party_other_than_p1_fails_the_job(secrets):
    """Only P1 (sender kind "leader") may send the scale: one from P2, arriving while P3 awaits it, is WRONG_ROLE."""
    seen: list[int] = []

    def inject(result: driver.JobResult) -> None:
        p3 = result.parties.get("p3")
        if p3 is not None and p3.state == "AWAIT_NOISE_SCALE" and not seen:
            try:
                p3.receive(Peer("party", "p2"), pb.NoiseScale(job_id=p3.job_id, ciphertext=b"\x01"))
            except ProtocolError as e:
                seen.append(e.problem)

    spec = driver.make_spec(NAMES, 1.0, 0.5, mode="gaussian-distributed", seed=b"tamper")
    r = run_test_job(_data(0), spec, secrets, before_each=inject)
    assert seen == [common_pb2.WRONG_ROLE]
    assert r.model is None and r.parties["p3"].failed and all(e.get("status") != "released" and len(entries) <= 1 for entries in r.ledger.values() for e in entries)


@pytest.mark.parametrize("kind", [pb.NoiseScaleShare, pb.NoiseScale])
def test_garbage_noise_scale_ciphertexts_are_malformed(secrets, kind):
    def garble(sender, to, msg):
        return kind(job_id=msg.job_id, ciphertext=b"\x00") if isinstance(msg, kind) else msg

    _failed_closed(_tampered(secrets, garble), common_pb2.MALFORMED)


def test_noise_scale_messages_in_a_smallest_party_job_are_refused(secrets):
    """A smallest-party job has no scale step: a NoiseScaleShare reaching P1 there fails the job (WRONG_ROLE)."""
    spec = driver.make_spec(NAMES, 1.0, 0.5, mode="corrected", seed=b"tamper")

    def inject(sender, to, msg):
        if isinstance(msg, pb.SelectionVector) and to.name == "p1":
            return pb.NoiseScaleShare(job_id=msg.job_id, ciphertext=b"\x01")
        return msg

    r = run_test_job(_data(0), spec, secrets, tamper=inject)
    _failed_closed(r, common_pb2.WRONG_ROLE)


@pytest.mark.parametrize("K", [1, 2])
def test_one_and_two_parties_release_what_the_mechanism_draws(secrets, K):
    names = NAMES[:K]
    data = {n: _data(3)[n] for n in names}
    spec = driver.make_spec(names, 1.0, 0.5, mode="gaussian-distributed", seed=f"small-{K}".encode())
    r = run_test_job(data, spec, secrets)
    assert r.error is None and r.model is not None
    assert r.model.colluders == K - 1  # K = 1: nobody to collude with; K = 2: the other party
    root = Drbg.from_seed(f"small-{K}".encode())
    cal = r.curator.params.calibration
    draw = mechanism.draw_aggregate([r.parties[n].w for n in names], [r.parties[n].n for n in names], cal,
                                    [mechanism.party_rng(root, n) for n in names])
    assert np.max(np.abs(tester.rebuild(r.model) - draw.weights)) <= (K / 2 + 1.01) / K * 2.0**-r.curator.params.frac_bits


def test_a_curator_key_too_small_for_the_noise_plaintext_is_refused():
    """σ̄·Σz̄ + s needs e + κ + 3 bits; a test-mode ζ below that would wrap, so every party refuses the job."""
    small = small_curator_secrets(256, 1024)
    spec = driver.make_spec(NAMES, 10.0, 0.5, mode="gaussian-distributed", seed=b"small-zeta")  # fz = 118
    assert PathakParams.from_spec("job-1", spec).min_paillier_bits() > 256
    r = run_test_job(_data(0), spec, small)
    assert r.model is None and r.error is not None and r.error.problem == common_pb2.INVALID_JOB and "too small" in r.error.detail
