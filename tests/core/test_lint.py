"""The linter (ruff) and the type checker (mypy) run on mpdp/ and services/ as part of `make test`.

Their configuration is in pyproject.toml: ruff's rule set and line length; mypy's typing-debt list (modules that
still have type errors are followed silently until they are fixed and removed from the list)."""

from __future__ import annotations

import pytest
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*args], cwd=REPO, capture_output=True, text=True, timeout=300)


@pytest.mark.process  # starts a process or opens a socket: not in `make test-fast`
def test_ruff_finds_nothing():
    r = _run(str(BIN / "ruff"), "check", "mpdp", "services")
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_mypy_finds_nothing():
    r = _run(sys.executable, str(REPO / "tools" / "typecheck.py"))
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_api_reference_builds(tmp_path):
    """`make docs` in small: pdoc renders the public core modules' docstrings to HTML."""
    r = _run(sys.executable, "-m", "pdoc", "--docformat", "restructuredtext", "-o", str(tmp_path), "mpdp.ledger", "mpdp.accounting", "mpdp.limits", "mpdp.protocol")
    assert r.returncode == 0, r.stderr
    page = (tmp_path / "mpdp" / "ledger.html").read_text()
    assert "Ledger" in page and "spend" in page
