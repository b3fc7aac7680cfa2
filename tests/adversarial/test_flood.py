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


# -- large bodies from a certificate with no role ---------------------------------------------------------------
BODY_MB = 56
BODIES = 4


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize("target, service, method", [
    ("curator", "mpdp.messages.JobOperations", "SubmitJob"),  # unary
    ("curator", "mpdp.messages.JobOperations", "WatchJob"),  # unary request, streamed answer
    ("curator", "mpdp.messages.PartyLink", "Relay"),  # a party listens nowhere: what reaches a party goes through here
])
def test_large_bodies_from_a_roleless_certificate_are_refused_before_they_are_received(fed, target, service, method):
    """4 × 56 MB bodies at once from a certificate of the federation's CA with no role (no OU): each is refused
    PERMISSION_DENIED, and the target's RSS neither grows by the bodies (peak within 50 MB of its level after
    warm-up: the gate runs before the body is read) nor stays up afterwards (within 50 MB). Figures are printed."""
    import threading
    import time

    import grpc
    from cryptography.x509.oid import ExtendedKeyUsageOID as EKU, NameOID

    from .conftest import assert_status, channel, mint_custom, raw_unary, refused

    tls = mint_custom(fed, "roleless", [(NameOID.ORGANIZATION_NAME, "local"), (NameOID.COMMON_NAME, "nobody")], [EKU.SERVER_AUTH, EKU.CLIENT_AUTH])
    pid = fed.procs[target].popen.pid
    body = b"\x0a\xff\xff\xff\x1a" + bytes(BODY_MB * 2**20 - 5)
    opts = {"grpc.max_send_message_length": 64 << 20}
    with channel(fed, target, tls) as ch:  # warm-up: TLS, the gate and the refusal path once
        assert_status(refused(lambda: raw_unary(ch, service, method)(b"", timeout=20)), grpc.StatusCode.PERMISSION_DENIED)
    time.sleep(1.0)
    before = _rss_mb(pid)
    peak, stop = [before], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _rss_mb(pid))
            time.sleep(0.01)

    codes: list = []

    def flood() -> None:
        with channel(fed, target, tls, **opts) as ch:
            e = refused(lambda: raw_unary(ch, service, method)(body, timeout=60))
            codes.append(e.code())

    watcher = threading.Thread(target=watch)
    watcher.start()
    senders = [threading.Thread(target=flood) for _ in range(BODIES)]
    for t in senders:
        t.start()
    for t in senders:
        t.join()
    time.sleep(3.0)
    stop.set()
    watcher.join()
    after = _rss_mb(pid)
    print(f"\n{target} {method}: RSS before {before:.0f} MB, peak {peak[0]:.0f} MB, after {after:.0f} MB ({BODIES} × {BODY_MB} MB, no role)")
    assert codes == [grpc.StatusCode.PERMISSION_DENIED] * BODIES, codes
    assert peak[0] - before < 50, f"RSS {before:.0f} → peak {peak[0]:.0f} MB: a refused caller's bodies were received"
    assert after - before < 50, f"RSS {before:.0f} → {after:.0f} MB after the flood"
    assert_serving(fed, target)

