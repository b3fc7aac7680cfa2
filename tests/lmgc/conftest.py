"""Fixtures for the LMGC tests. Deterministic: every generator is seeded."""

from __future__ import annotations

import pytest
from threadpoolctl import threadpool_limits


@pytest.fixture(autouse=True, scope="session")
def _one_blas_thread():
    """One BLAS thread: the machines are shared, and oversubscribed OpenBLAS is 10-100x slower here."""
    with threadpool_limits(limits=1):
        yield
