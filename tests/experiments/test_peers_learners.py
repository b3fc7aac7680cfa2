"""The pure parts of benchmarks/peers/learners.py (no data set, no network, no peer virtualenv):

* Flower's noise multiplier: T rounds at record-level sensitivity 2C compose to exactly the target (ε, δ);
* the trusted-curator DP-GD adds noise (two draws differ) and with negligible noise is the plan's curator on the
  exact sums;
* the summary: mean ± sem per cell, failures counted apart, the federation / curator ratio.
"""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from mpdp.dpgd import accounting
from mpdp.dpgd.model import Task, prepare
from mpdp.dpgd.plan import DpgdCurator, DpgdPlan, party_vector
from mpdp.math.drbg import Drbg

PEERS = Path(__file__).resolve().parents[2] / "benchmarks" / "peers"


@pytest.fixture(scope="module")
def learners():
    sys.path.insert(0, str(PEERS))
    try:
        yield importlib.import_module("learners")
    finally:
        sys.path.remove(str(PEERS))


@pytest.mark.parametrize("eps, delta, rounds", [(0.1, 1e-5, 5), (1.0, 1e-5, 5), (2.0, 1e-6, 1), (0.5, 1e-5, 20)])
def test_flower_noise_multiplier_composes_to_the_target(learners, eps, delta, rounds):
    z = learners.flower_noise_multiplier(eps, delta, rounds)
    mu = accounting.compose([2.0 / z] * rounds)  # each round: sensitivity 2C, noise z·C
    assert accounting.gdp_epsilon(mu, delta) == pytest.approx(eps, rel=1e-6)
    assert learners.flower_noise_multiplier(eps, delta, 4 * rounds) == pytest.approx(2 * z)


def _parts(n: int = 600, d: int = 4) -> list[tuple[np.ndarray, np.ndarray]]:
    g = np.random.default_rng(5)  # public simulation data
    X = prepare(g.normal(size=(n, d)))
    y = np.where(X @ np.array([2.0, -1.0, 0.5, 0.0]) + 0.1 * g.normal(size=n) > 0, 1.0, -1.0)
    return [(X[i], y[i]) for i in np.array_split(np.arange(n), 5)]


def test_trusted_curator_adds_the_plans_noise(learners):
    parts = _parts()
    n = sum(len(y) for _, y in parts)
    noisy = DpgdPlan(Task("binary"), 4, 0.5, 1e-5, rounds=2, total_records=n)
    a, b = (learners.curator_fit(noisy, parts, Drbg.from_seed(s)) for s in (b"a", b"b"))
    assert not np.allclose(a, b)
    quiet = DpgdPlan(Task("binary"), 4, 1e4, 1e-5, rounds=2, total_records=n)
    cur = DpgdCurator(quiet)
    while not cur.done:
        cur.take(np.sum([party_vector(quiet, cur.round, cur.iterate(), X, y) for X, y in parts], axis=0))
    np.testing.assert_allclose(learners.curator_fit(quiet, parts, Drbg.from_seed(b"c")), cur.model(), atol=1e-2)


def test_summary_and_price_of_distrust(learners):
    jobs = [{"system": "federation", "epsilon": 1.0, "test_error": e, "seconds": 2.0} for e in (0.16, 0.18)]
    jobs += [{"system": "curator", "epsilon": 1.0, "test_error": 0.15, "seconds": 1.0}, {"system": "curator", "epsilon": 1.0, "error": "x"}]
    res = {"systems": ["federation", "curator"], "epsilons": [1.0, 2.0], "jobs": jobs}
    rows = {r["system"]: r for r in learners.cell_rows(res)}
    assert rows["federation"]["error_mean"] == pytest.approx(0.17) and rows["federation"]["error_sem"] == pytest.approx(0.01)
    assert rows["curator"]["runs"] == 1 and rows["curator"]["failures"] == 1
    (p,) = learners.price_of_distrust(res)
    assert p["ratio"] == pytest.approx(0.17 / 0.15) and p["difference_sem"] == pytest.approx(math.hypot(0.01, 0.0))
    md = learners.markdown(res)
    assert "17.00 ± 1.00 (2)" in md and "| 1 | 17.00 | 15.00 | +2.00 ± 1.00 | 1.133× |" in md
