"""Shared helpers for the DCA core tests. Every generator is seeded: runs are reproducible."""

from __future__ import annotations

import numpy as np

from mpdp.dca.params import DcaParams
from mpdp.math.drbg import Drbg

NODES = ("node-a", "node-b", "node-c")


def make_params(**overrides) -> DcaParams:
    kw = dict(
        job_id="job-1",
        dimension=4,
        clients=20,
        max_missing=3,
        epsilon=1.0,
        delta=1e-5,
        sensitivity=2.0,
        nodes=NODES,
        clip_bounds=(1.0,),
        simulation_seed=b"tests/dca",
    )
    kw.update(overrides)
    return DcaParams(**kw)


def data(n: int, d: int, seed: int = 7, scale: float = 1.0) -> np.ndarray:
    """Client vectors in [−scale, scale]^d from a seeded Drbg."""
    return (Drbg.from_seed(seed).uniform((n, d)) * 2.0 - 1.0) * scale
