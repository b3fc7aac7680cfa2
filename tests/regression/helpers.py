"""Shared helpers for the Algorithm 2 tests. Everything is seeded."""

from __future__ import annotations

import numpy as np

from mpdp.experiments.heikkila2017 import preprocess


def linear_data(seed: int, n: int = 1000, n_test: int = 500, d: int = 5, noise: float = 0.5):
    """Synthetic linear data, preprocessed as the UCI sets (centred, every column scaled to range 10)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n + n_test, d))
    beta = rng.normal(size=d)
    y = X @ beta + noise * rng.normal(size=n + n_test)
    D = preprocess(np.hstack([X, y[:, None]]))
    return D[:n, :-1], D[:n, -1], D[n:, :-1], D[n:, -1]
