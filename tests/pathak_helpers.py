"""Test-only helpers for the in-memory Pathak driver: small keys and seeded jobs need test mode."""

from __future__ import annotations

from typing import Any

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
