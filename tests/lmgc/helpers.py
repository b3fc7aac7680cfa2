"""Shared test data for the LMGC tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def shared_path(*parts: str) -> Path:
    """A path under ../shared/data; a missing one fails the test (as everywhere in the suite), never skips."""
    p = SHARED_DATA.joinpath(*parts)
    if not p.exists():
        pytest.fail(f"required dataset {p} is missing (../shared/data must sit beside the repository)")
    return p


def three_gaussians(n: int, seed: int, d: int = 2, spread: float = 0.12) -> tuple[np.ndarray, np.ndarray]:
    """Public synthetic data: three Gaussian classes inside the unit ball."""
    gen = np.random.default_rng(seed)
    centres = 0.5 * np.array([[1.0, 0.0], [-0.5, 0.8], [-0.5, -0.8]])
    if d > 2:
        centres = np.hstack([centres, np.zeros((3, d - 2))])
    y = gen.integers(0, 3, size=n)
    X = centres[y] + spread * gen.normal(size=(n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    return X, y
