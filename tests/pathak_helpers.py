"""Test-only helpers for the in-memory Pathak driver: small keys and seeded jobs need test mode."""

from __future__ import annotations

from typing import Any

import numpy as np

from mpdp.pathak2010 import driver
from mpdp.pathak2010.resources import CuratorSecrets


def small_curator_secrets(paillier_bits: int = 1024, dgk_bits: int = 1024) -> CuratorSecrets:
    """Small keys for fast tests (the roles accept them in test mode only)."""
    return CuratorSecrets.generate(paillier_bits, dgk_bits)


def run_test_job(*args: Any, **kwargs: Any) -> driver.JobResult:
    """:func:`mpdp.pathak2010.driver.run_job` in test mode (small keys, simulation seeds), 1024-bit party keys unless given."""
    kwargs.setdefault("test_mode", True)
    kwargs.setdefault("party_key_bits", 1024)
    return driver.run_job(*args, **kwargs)


def party_data(sizes: list[int], d: int = 4, seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Parties p1, p2, … with the given row counts: Gaussian rows, labels from the first feature plus noise
    (public simulation data)."""
    g = np.random.default_rng(seed)
    out = {}
    for i, n in enumerate(sizes):
        X = g.normal(size=(n, d))
        y = np.where(X[:, 0] + 0.5 * g.normal(size=n) > 0, 1.0, -1.0)
        out[f"p{i + 1}"] = (X, y)
    return out
