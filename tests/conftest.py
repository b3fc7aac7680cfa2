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


# -- `make test-fast`: which tests are fast, and the guard that keeps them so (tests/fast.py) -------------------------

def pytest_collection_modifyitems(config, items):
    from tests import fast

    for item in items:
        if fast.is_fast(Path(str(item.fspath)), {m.name for m in item.iter_markers()}):
            item.add_marker(pytest.mark.fast)


@pytest.fixture(autouse=True)
def _fast_tests_start_no_process(request):
    """A test marked fast that starts a process or opens a network socket fails (tests/fast.py)."""
    if request.node.get_closest_marker("fast") is None:
        yield
        return
    from tests import fast

    violations: list[str] = []
    with fast.in_process_only(request.node.nodeid, violations):
        yield
    if violations:
        pytest.fail(violations[0], pytrace=False)
