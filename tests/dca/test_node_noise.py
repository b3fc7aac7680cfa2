"""The compute nodes' noise of a validated DCA job (docs/protocols/dca.md, "Validated mode"): each node's draws are
N_Z(0, σ²) (χ² against the exact PMF), a whole job's release over zero data is the sum of the M nodes' draws
(variance M·Var N_Z(0, σ²), from unseeded nodes: os.urandom), and a node that cannot add the noise its account
counts sends nothing.

Statistical tests use a fixed significance (α = 10⁻³; the job-level one draws from os.urandom, so it fails with
probability ≤ 2·10⁻³ on a correct implementation); each has a companion showing the same test rejects a wrong
distribution (the test can fail).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from mpdp.dca import discrete
from mpdp.dca.compute_node import ComputeNodeMachine, noise_rng
from mpdp.dca.driver import run_job
from mpdp.dca.params import DcaParams
from mpdp.dp import discrete_gaussian as dg
from mpdp.math.drbg import Drbg
from mpdp.protocol import LocalProtocolError, Problem
from tests.dca.test_discrete_gaussian import SIGNIFICANCE, chi2_pvalue

NODES = ("n0", "n1", "n2")


def _params(*, seed: bytes = b"", d: int = 4, colluders: int | None = None) -> DcaParams:
    return DcaParams(job_id="node-noise", dimension=d, clients=6, max_missing=1, epsilon=1.0, delta=1e-5, sensitivity=1.0, nodes=NODES,
                     frac_bits=8, validate="range", noise="discrete-gaussian", simulation_seed=seed, colluders=colluders)


def test_a_nodes_draws_match_the_discrete_gaussian_pmf():
    sigma2 = Fraction(1000, 7)
    xs = discrete.node_noise(20_000, sigma2, Drbg.from_os()).tolist()
    assert chi2_pvalue(xs, lambda x: dg.pmf(sigma2, x)) > SIGNIFICANCE
    assert chi2_pvalue(xs, lambda x: dg.pmf(sigma2 * 2, x)) < SIGNIFICANCE  # the same test rejects twice the variance


def _variance_ok(values: np.ndarray, want: float) -> bool:
    """(n − 1)·s²/var ~ χ²(n − 1) for a near-normal sample: two-sided at SIGNIFICANCE."""
    n = values.size
    stat = (n - 1) * float(np.var(values, ddof=1)) / want
    return bool(stats.chi2.ppf(SIGNIFICANCE / 2, n - 1) < stat < stats.chi2.ppf(1 - SIGNIFICANCE / 2, n - 1))


def test_a_release_over_zero_data_is_the_sum_of_the_m_nodes_noise():
    """Unseeded nodes (os.urandom), d = 1000 coordinates, six clients sending zeros (ỹ = 0 exactly): every released
    coordinate is Σ_k η_kj with variance M·Var N_Z(0, σ²) — not one node's, not the clients' (they add none)."""
    prm = _params(d=1000)
    assert prm.sigma_client == 0 and prm.discrete.by_nodes
    run = run_job(prm, np.zeros((prm.clients, prm.dimension)), Drbg.from_os(), client_mode="machines", record=False)
    assert run.error is None and run.release is not None
    units = np.frombuffer(run.release.encoded_sum, dtype="<i8").astype(np.float64)
    one = dg.variance(prm.discrete.sigma2)
    assert _variance_ok(units, len(NODES) * one)
    assert not _variance_ok(units, one)  # one node's noise alone would be rejected
    assert abs(float(units.mean())) < 4 * math.sqrt(len(NODES) * one / units.size)
    assert math.isclose(run.release.noise_variance, len(NODES) * float(prm.discrete.sigma2) / 4.0**prm.frac_bits)


def test_seeded_nodes_draw_their_recomputable_noise_and_unseeded_ones_do_not_repeat():
    seeded = _params(seed=b"node-noise")
    node = ComputeNodeMachine(seeded, "n1")
    again = discrete.node_noise(seeded.dimension, seeded.discrete.sigma2, noise_rng(seeded, "n1"))
    assert np.array_equal(node.draw_noise(), again)
    assert not np.array_equal(again, discrete.node_noise(seeded.dimension, seeded.discrete.sigma2, noise_rng(seeded, "n2")))
    live = ComputeNodeMachine(_params(d=64), "n0")
    assert not np.array_equal(live.draw_noise(), live.draw_noise())  # os.urandom: equal with probability ≈ 0


def test_a_node_that_cannot_add_its_noise_sends_nothing(monkeypatch):
    """σ below 1/2 unit is refused by the sampler; a node whose draw is refused fails the job (INTERNAL) and no
    partial sum, hence no release, exists."""
    with pytest.raises(discrete.NodeNoiseRefused):
        discrete.node_noise(4, Fraction(1, 5), Drbg.from_os())  # outside KLS21 Prop. 14's range

    def refuse(d, sigma2, rng):
        raise discrete.NodeNoiseRefused("a noise draw reached 2^62 units")

    monkeypatch.setattr(discrete, "node_noise", refuse)
    with pytest.raises(LocalProtocolError) as e:
        ComputeNodeMachine(_params(), "n0").draw_noise()
    assert e.value.problem == Problem.INTERNAL
    prm = _params(seed=b"refused")
    run = run_job(prm, np.zeros((prm.clients, prm.dimension)), Drbg.from_seed("refused"), record=False)
    assert run.release is None and run.error is not None


def test_the_operators_spec_sets_colluders_and_leaves_it_unset_by_default():
    """`mpdp dca create --colluders` / ``job_spec(colluders=…)``: c travels in the spec; unset, every role reads M − 1."""
    from mpdp_services.dca_client.client import job_spec

    base = dict(dimension=4, clients=6, max_missing=1, epsilon=1.0, delta=1e-5, sensitivity=1.0, nodes=list(NODES))
    default = DcaParams.from_spec("j", job_spec(**base))
    assert not job_spec(**base).HasField("colluders") and default.colluders == 2 and default.discrete.honest == 1
    trusting = DcaParams.from_spec("j", job_spec(**base, colluders=0))
    assert trusting.colluders == 0 and trusting.discrete.honest == 3
    assert trusting.sigma_node < default.sigma_node and trusting.sigma_std == pytest.approx(default.sigma_std, rel=1e-3)
