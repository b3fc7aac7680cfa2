"""The in-memory driver at simulation scale: N = 10^4 clients × d = 100, vectorised (sizes of Table 1 in Heikkilä et al. 2017)."""

from __future__ import annotations

import time

import numpy as np

from mpdp.dca.driver import run_job
from mpdp.math.drbg import Drbg

from tests.dca.helpers import data, make_params


def test_ten_thousand_clients():
    N, d = 10_000, 100
    p = make_params(dimension=d, clients=N, max_missing=100, epsilon=1.0, delta=1e-5, sensitivity=2.0 * np.sqrt(d))
    Z = data(N, d, seed=3)
    lost = {(i, i % 3) for i in range(0, 50)}  # 50 clients each lost at one node
    t = time.perf_counter()
    run = run_job(p, Z, Drbg.from_seed("scale"), keep_noise=True, record=False, lost=lost, batch_size=1000)
    seconds = time.perf_counter() - t
    assert run.error is None
    include = list(range(50, N))
    assert run.release.clients_included == N - 50
    expected = (run.clipped[include] + run.noise[include]).sum(axis=0)
    assert np.max(np.abs(np.array(run.release.values) - expected)) <= N * 2.0**-32
    # held back: at most one batch in flight plus the clients lost elsewhere (R_k \ A), never O(N)
    assert all(n.peak_pending <= 1000 + 50 for n in run.nodes.values())
    assert seconds < 30.0, f"in-memory DCA for N=1e4, d=100 took {seconds:.1f} s (≈0.5 s expected)"


def test_seed_compressed_at_scale():
    N, d = 3000, 50
    p = make_params(dimension=d, clients=N, max_missing=10, seed_compressed=True)
    run = run_job(p, data(N, d, seed=4), Drbg.from_seed("scale-seeded"), keep_noise=True, record=False, drop=range(5), batch_size=500)
    assert run.error is None and run.release.clients_included == N - 5
    expected = (run.clipped[5:] + run.noise[5:]).sum(axis=0)
    assert np.max(np.abs(np.array(run.release.values) - expected)) <= N * 2.0**-32
