"""Idle connections do not deny service: while 2,000 idle TCP connections (no TLS handshake) sit on the curator,
a fresh legitimate client still gets its health check, the curator's keys and a whole Pathak job done.

Loopback only, bounded: the connections are opened by :func:`benchmarks.idle_flood.open_idle` (the benchmark runs
the same at 20,000); the curator's descriptor count proves they reached it.
"""

from __future__ import annotations

import os

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from benchmarks.idle_flood import open_idle
from mpdp.messages import common_pb2, pathak2010_pb2_grpc as pb_grpc
from services.cli.jobs import make_spec
from services.client import Endpoints, OperatorClient

from .conftest import PARTIES, site_tls

N = 2000
DEADLINE = 30.0  # seconds for each legitimate RPC


def fresh_curator_channel(fed) -> grpc.Channel:
    """A channel with its own connection (never one shared through gRPC's global subchannel pool)."""
    creds = site_tls(fed, "operator").channel_credentials()
    opts = [("grpc.ssl_target_name_override", "curator"), ("grpc.use_local_subchannel_pool", 1)]
    return grpc.secure_channel(f"127.0.0.1:{fed.procs['curator'].port}", creds, options=opts)


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
        assert len(os.listdir(f"/proc/{curator_pid}/fd")) >= before + N  # the curator accepted and holds them all
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
