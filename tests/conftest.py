"""Shared fixtures. Data lives in ../shared/data beside the repository; in CI a missing file fails."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def shared_file(*parts: str) -> Path:
    p = SHARED_DATA.joinpath(*parts)
    if not p.exists():
        pytest.fail(f"required dataset {p} is missing (../shared/data must sit beside the repository)")
    return p


@pytest.fixture(scope="session")
def small_secrets():
    from tests.pathak_helpers import small_curator_secrets

    return small_curator_secrets(768, 768)


@pytest.fixture(scope="session")
def ci() -> bool:
    return os.environ.get("CI") == "true"
