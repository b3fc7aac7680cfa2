"""The released integer of the smallest-party modes (corrected, paper) is private in every digit.

Dave adds the K+1 published shares into R ∈ Z^d, the fixed point (scale 2^f) of K·ŵ_s, and divides by K. R is what
is published, so R itself, not only the real vector R/(K·2^f), must be ε-DP (docs/protocols/pathak2010.md, "The
released integer"). Invariants checked here, with Q = Σ_j round(ŵ_j·2^f) the noiseless sum:

- R − Q is the selected party's noise on K·ŵ_s rounded to the nearest unit: |R − Q − K·2^f·η_{j*}| ≤ 1/2 in every
  coordinate, so no digit of R is a function of Q alone;
- over many runs on two neighbouring datasets (one row replaced) whose Q differ mod K, the residues R mod K and the
  three low bits R mod 8 have the same distribution on both (χ² two-sample) and are uniform (χ² goodness of fit);
- the noise's scale on R covers R's sensitivity, the models' rounding included: ε·K·2^f·β ≥ 2^(f+1)/(n₍₁₎·λ) + √d
  (corrected, ℓ2) and ε_true·K·2^f·β ≥ √d·2^f/(n₍₁₎·λ) + d (paper, ℓ1, ε_true the guarantee it reports).

A release that carries K times an integer noise (R ≡ Q mod K) fails both: its residue mod K tells the neighbours apart.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from mpdp.dp.pathak_noise import PathakCalibration
from mpdp.math import sharing
from mpdp.pathak2010.driver import make_spec
from mpdp.pathak2010.params import MODEL_BOUND
from tests.pathak_helpers import party_data, run_test_job, small_curator_secrets

D = 2
RUNS = 80  # per dataset: ≥ 10 expected per cell of the mod-8 histogram
P_MIN = 1e-4  # per comparison; the seeds are fixed, so the outcome is too
EPSILON, LAM = 1.0, 0.1


@pytest.fixture(scope="module")
def secrets():
    return small_curator_secrets(512, 512)


def _neighbours(K: int) -> tuple[dict, dict]:
    """D and D′: the same parties, one row of p2 replaced (record substitution, all n_j unchanged)."""
    data = party_data([20, 26, 31, 24][:K], D, seed=11)
    X, y = data["p2"]
    X2, y2 = X.copy(), y.copy()
    X2[0], y2[0] = np.array([0.9, -0.4]), -y[0]
    other = dict(data)
    other["p2"] = (X2, y2)
    return data, other


def _released(r) -> list[int]:
    """R: the sum of the published shares, as signed integers (what Dave divides by K·2^f)."""
    m = r.model
    q = 1 << m.ring_bits
    total = sharing.combine([sharing.unpack_ring(s, m.ring_bits, m.dimension) for s in m.shares], q)
    return [x - q if x >= q // 2 else x for x in total]


def _noiseless(r) -> list[int]:
    """Q = Σ_j round(ŵ_j·2^f), from the parties' own models (test-only view)."""
    ring = r.curator.params.ring
    return [sum(col) for col in zip(*(ring.to_int(m.w, MODEL_BOUND) for m in r.parties.values()))]


def _run(data: dict, mode: str, secrets, seed: str):
    r = run_test_job(data, make_spec(list(data), EPSILON, LAM, mode, seed.encode()), secrets, party_key_bits=512)
    assert r.error is None and r.model is not None, r.error
    return r


@pytest.mark.parametrize("mode,K", [("corrected", 3), ("paper", 4)])
def test_released_noise_has_full_resolution(secrets, mode: str, K: int) -> None:
    """R − Q = round(K·2^f·η_{j*}): the noise enters the released integer at one unit, not in steps of K."""
    data, _ = _neighbours(K)
    for i in range(5):
        r = _run(data, mode, secrets, f"digits-{mode}-{i}")
        smallest = min(r.parties.values(), key=lambda m: m.n)
        assert smallest.noise is not None
        scale = K * 2 ** r.curator.params.frac_bits
        for got, q, eta in zip(_released(r), _noiseless(r), smallest.noise):
            assert abs(got - q - Fraction(float(eta)) * scale) <= Fraction(1, 2), (mode, i)


def _residues(released: list[list[int]], c: int, m: int) -> np.ndarray:
    return np.bincount([R[c] % m for R in released], minlength=m)


@pytest.mark.parametrize("mode,K", [("corrected", 3), ("paper", 4)])
@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_low_digits_do_not_tell_neighbours_apart(secrets, mode: str, K: int) -> None:
    """Residues of R mod K and mod 8 over many runs: uniform, and the same on D and D′ although Q ≢ Q′ (mod K)."""
    data, other = _neighbours(K)
    runs = {name: [_run(ds, mode, secrets, f"residue-{mode}-{name}-{i}") for i in range(RUNS)] for name, ds in (("D", data), ("D'", other))}
    q, q2 = _noiseless(runs["D"][0]), _noiseless(runs["D'"][0])
    assert any(a % K != b % K for a, b in zip(q, q2)), "the neighbours must differ mod K for the test to mean anything"
    released = {name: [_released(r) for r in rs] for name, rs in runs.items()}
    for m in (K, 8):
        for c in range(D):
            h, h2 = _residues(released["D"], c, m), _residues(released["D'"], c, m)
            table = np.stack([h, h2])[:, (h + h2) > 0]
            if table.shape[1] > 1:  # one column: every run of both gave the same residue (caught below)
                assert stats.chi2_contingency(table).pvalue > P_MIN, (mode, m, c, table.tolist())
            for counts in (h, h2):
                assert stats.chisquare(counts).pvalue > P_MIN, (mode, m, c, counts.tolist())


@pytest.mark.parametrize("K,n,lam,eps,d", [(3, 50, 0.1, 1.0, 4), (5, 6512, 1e-3, 0.4, 123), (2, 2**31, 4.0, 0.5, 123)])
def test_noise_scale_covers_the_released_integer(K: int, n: int, lam: float, eps: float, d: int) -> None:
    """R = Q + round(K·2^f·η) is a post-processing of Q + K·2^f·η (Q is an integer vector), so R is as private as the
    Laplace mechanism on Q, whose sensitivity includes one unit per coordinate for the rounding of the changed model."""
    f = 32
    unit = K * 2.0**f  # η on ŵ_s is K·2^f·η on R
    c = PathakCalibration("corrected", eps, lam, K)
    assert c.scale(n) == pytest.approx(c.model_sensitivity(n) / (K * eps))  # the stated β: Δ(n)/(K·ε), the solver's slack included
    assert c.released_scale(n, d) == pytest.approx(c.scale(n) + math.sqrt(d) * 2.0**-f / (K * eps))
    l2 = 2.0**f * c.model_sensitivity(n) + math.sqrt(d)  # 2^f·(2/(nλ) + 2·tol/λ), plus the rounding
    assert eps * unit * c.released_scale(n, d) >= l2 * (1 - 1e-12)
    p = PathakCalibration("paper", eps, lam, K)
    assert p.released_scale(n, d) == pytest.approx(p.scale(n) + 2 * math.sqrt(d) * 2.0**-f / eps)
    l1 = math.sqrt(d) * 2.0**f * p.model_sensitivity(n) + d  # λ‖w‖²: ℓ2-sensitivity 1/(nλ) + tol/λ, times √d, plus the rounding
    assert p.guarantee(d).epsilon * unit * p.released_scale(n, d) >= l1 * (1 - 1e-12)
    if n * lam > 2**f:  # a huge n·λ: without the rounding term the release would lose far more than ε
        assert eps * unit * c.scale(n) < l2 / 2
    with pytest.raises(ValueError):
        PathakCalibration("gaussian-distributed", eps, lam, K, 1e-6, max(K - 2, 1) if K > 1 else 0).rounding_scale(d)
