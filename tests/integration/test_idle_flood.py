"""Idle connections do not deny service: while 2,000 idle TCP connections (no TLS handshake) sit on the curator,
a fresh legitimate client still gets its health check, the curator's keys and a whole Pathak job done.

Loopback only, bounded: the connections are opened by :func:`benchmarks.idle_flood.open_idle` (the benchmark runs
the same at 20,000); the curator's descriptor count proves they reached it.
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from benchmarks.idle_flood import open_idle
from mpdp.messages import common_pb2, pathak2010_pb2_grpc as pb_grpc
from mpdp_services.operator.pathak2010 import make_spec
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.operator.pathak2010 import OperatorClient
from mpdp_services.launcher.federation import LocalFederation

from .conftest import PARTIES, site_tls

N = 2000
DEADLINE = 30.0  # seconds for each legitimate RPC


def fresh_curator_channel(fed) -> grpc.Channel:
    """A channel with its own connection (never one shared through gRPC's global subchannel pool)."""
    creds = site_tls(fed, "operator").channel_credentials()
    opts = [("grpc.ssl_target_name_override", "curator"), ("grpc.use_local_subchannel_pool", 1)]
    return grpc.secure_channel(f"127.0.0.1:{fed.procs['curator'].port}", creds, options=opts)


def accepted_within(pid: int, fds: int, timeout: float) -> bool:
    """Whether process ``pid`` holds at least ``fds`` descriptors within ``timeout`` (polling /proc)."""
    deadline = time.monotonic() + timeout
    while len(os.listdir(f"/proc/{pid}/fd")) < fds:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)  # a poll interval: accepting has no event another process can wait on
    return True


def serving(fed) -> bool:
    with fresh_curator_channel(fed) as ch:
        resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=DEADLINE, wait_for_ready=False)
        return resp.status == health_pb2.HealthCheckResponse.SERVING


def test_legitimate_client_served_while_idle_connections_are_held(federation):
    curator_pid = federation.procs["curator"].popen.pid
    before = len(os.listdir(f"/proc/{curator_pid}/fd"))
    socks, held = open_idle(federation.procs["curator"].port, N, timeout=60.0)
    try:
        assert held.established == N, held
        # the kernel completes the TCP handshakes; the curator accepts them in its own time (polled, bounded)
        assert accepted_within(curator_pid, before + N, 60.0), "the curator never accepted the idle connections"
        assert serving(federation)
        with fresh_curator_channel(federation) as ch:
            keys = pb_grpc.CuratorStub(ch).GetCuratorKeys(common_pb2.Ack(), timeout=DEADLINE)
            assert keys.ByteSize() > 0
        with OperatorClient(Endpoints.load(federation.workdir)) as client:
            job = client.submit(make_spec("synthetic", PARTIES, 0.9, 0.05, "corrected", 120.0), timeout=DEADLINE)
            status = client.wait(job, timeout=120)
            assert status.state == "PUBLISHED", status.detail
    finally:
        for s in socks:
            s.close()
    assert serving(federation)  # and still serves once they are gone


def test_service_raises_its_descriptor_limit_to_the_hard_limit(tmp_path):
    """Started with a low soft limit (inherited from its launcher), a service lifts it to the hard one at start-up."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(1024, hard - 1)
    fed = LocalFederation(tmp_path / "fed", [], test_mode=True, paillier_bits=1024, dgk_bits=1024)
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))
    try:
        fed.start()  # the curator alone
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        limits = Path(f"/proc/{fed.procs['curator'].popen.pid}/limits").read_text()
        row = next(line for line in limits.splitlines() if line.startswith("Max open files")).split()
        assert (int(row[3]), int(row[4])) == (hard, hard), row
    finally:
        fed.stop()
