"""A real PostgreSQL server for the tests (:class:`mpdp_services.launcher.postgres.LocalPostgres`): Debian's binaries,
which deploy/postgres-setup.sh installs with apt-get when missing, a fresh cluster in a temporary folder, the server
a child of the test process on a loopback port (it dies with the test). Nothing here skips: a server that cannot be
installed or started fails the test loudly."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mpdp_services.launcher.postgres import LocalPostgres, PostgresError

REPO = Path(__file__).resolve().parents[1]


def server_bin() -> Path:
    """Where initdb and postgres are, installing Debian's postgresql package first if they are missing."""
    setup = subprocess.run(["bash", str(REPO / "deploy" / "postgres-setup.sh")], capture_output=True, text=True, timeout=900)
    if setup.returncode != 0:
        pytest.fail(f"deploy/postgres-setup.sh could not provide PostgreSQL (exit {setup.returncode}): {setup.stderr.strip()[-2000:]}")
    return Path(setup.stdout.strip().splitlines()[-1])


def Postgres() -> LocalPostgres:
    """A server not yet started; ``.start()`` fails the test (never skips) if it cannot start."""
    server = LocalPostgres(server_bin())
    start = server.start

    def started(timeout: float = 60.0) -> LocalPostgres:
        try:
            return start(timeout)
        except PostgresError as e:
            server.stop()
            pytest.fail(f"PostgreSQL could not start: {e}")

    server.start = started  # type: ignore[method-assign]
    return server
