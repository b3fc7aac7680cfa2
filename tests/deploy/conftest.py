"""Deployment tests: provisioning (fast, no root), the docker compose stage and the network-namespace
federation (root: they install docker.io/debootstrap/iproute2 when missing, start an engine, make
namespaces). The last two fail loudly, never skip, when the machine cannot do what they need."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PY = str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv" / "bin" / "python").exists() else "python3"


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "deploy: real containers or network namespaces (root; part of `make test`)")


def run(cmd: list[str], *, timeout: float = 300, check: bool = True, env: dict | None = None, cwd: Path | None = None, input: str | None = None) -> subprocess.CompletedProcess:
    """Run a command; on failure raise with its output, so CI logs say what broke."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd, input=input)
    if check and p.returncode != 0:
        raise AssertionError(f"command failed (exit {p.returncode}): {' '.join(cmd)}\n--- stdout\n{p.stdout[-4000:]}\n--- stderr\n{p.stderr[-4000:]}")
    return p


def need_root(what: str) -> None:
    if os.geteuid() != 0:
        pytest.fail(f"{what} needs root (it installs packages and changes network namespaces); run `make test` as root", pytrace=False)
