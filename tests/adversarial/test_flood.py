"""Idle-connection flood: a bounded number of TCP connections that never start TLS, on loopback only.

Models an attacker with no certificate at all who opens many connections to the curator (and a compute node)
and leaves them idle, to exhaust descriptors or handshake slots (the reported attack: about 20,000 idle connections and
every legitimate client gets DEADLINE_EXCEEDED). Expected: connection limits and a handshake timeout keep the
service usable: while the flood is held, the health check answers and a legitimate DCA job (curator and
three nodes) completes.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import assert_serving, dca_job, start_federation

FLOOD = 20_000  # the reported attack's size; split over two helper processes (each under its own descriptor limit)
PER_PROCESS = 10_000


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    f = start_federation(tmp_path_factory.mktemp("flood"))
    yield f
    f.stop()


def _flood(port: int, n: int) -> tuple[list[subprocess.Popen], int]:
    procs, opened = [], 0
    for _ in range(0, n, PER_PROCESS):
        p = subprocess.Popen([sys.executable, "-m", "tests.adversarial.idle_flood", "127.0.0.1", str(port), str(PER_PROCESS)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(p)
    for p in procs:
        line = p.stdout.readline().strip()  # type: ignore[union-attr]
        assert line.startswith("READY "), line
        opened += int(line.split()[1])
    return procs, opened


def _release(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.stdin.close()  # type: ignore[union-attr]
    for p in procs:
        p.wait(60)


@pytest.mark.parametrize("target", ["curator", "node-1"])
def test_legitimate_job_completes_under_an_idle_connection_flood(fed, target):
    procs, opened = _flood(fed.procs[target].port, FLOOD)
    try:
        assert opened >= 1000, f"only {opened} connections could be opened"
        assert_serving(fed, target, timeout=20.0)
        dca_job(fed)  # curator → nodes → curator, with the operator's and clients' connections
        assert_serving(fed, target, timeout=20.0)
    finally:
        _release(procs)
    assert_serving(fed, target, timeout=20.0)
