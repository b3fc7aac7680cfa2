"""Refusals are counted under the method that was refused (``mpdp_rpcs_total{method,code}``), never under "?".

A raw client with a party certificate calls the curator's operator RPCs (its job host) and a compute node's curator RPC; each
refusal must raise the counter of exactly that method with the refusal's gRPC status, read from the role's own
/metrics page.
"""

from __future__ import annotations

import http.client
import re

import grpc

from mpdp.messages import common_pb2, operations_pb2 as ops

from .conftest import NODE_SERVICE, assert_status, channel, garbage, job_host, mint, pathak_spec, raw_unary, refused

OPS_SERVICE = "mpdp.messages.JobOperations"


def _scrape(fed, site: str) -> str:
    c = http.client.HTTPConnection("127.0.0.1", fed.procs[site].http_port, timeout=10)
    try:
        c.request("GET", "/metrics")
        return c.getresponse().read().decode()
    finally:
        c.close()


def _count(page: str, method: str, code: str) -> float:
    total = 0.0
    for line in page.splitlines():
        if line.startswith("mpdp_rpcs_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.index("}")]))
            if labels.get("method") == method and labels.get("code") == code:
                total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_refusal_counts_under_its_method(fed):
    submit = f"/{OPS_SERVICE}/SubmitJob"
    release = f"/{OPS_SERVICE}/GetRelease"
    before = _scrape(fed, "curator")
    with channel(fed, "curator", mint(fed, "party", "party-9")) as ch:
        for _ in range(3):
            assert_status(refused(lambda: job_host(ch).SubmitJob(ops.JobSubmission(pathak2010=pathak_spec()), timeout=20)), grpc.StatusCode.PERMISSION_DENIED)
        assert_status(refused(lambda: job_host(ch).GetRelease(common_pb2.JobRef(job_id="dca-000000000000"), timeout=20)), grpc.StatusCode.PERMISSION_DENIED)
    with channel(fed, "curator", mint(fed, "operator", "op-metrics")) as ch:  # admitted, then an undecodable body: MALFORMED
        assert_status(refused(lambda: raw_unary(ch, OPS_SERVICE, "SubmitJob")(garbage(), timeout=20)), grpc.StatusCode.INVALID_ARGUMENT)
    after = _scrape(fed, "curator")
    assert _count(after, submit, "PERMISSION_DENIED") - _count(before, submit, "PERMISSION_DENIED") == 3
    assert _count(after, release, "PERMISSION_DENIED") - _count(before, release, "PERMISSION_DENIED") == 1
    assert _count(after, submit, "INVALID_ARGUMENT") - _count(before, submit, "INVALID_ARGUMENT") == 1
    assert _count(after, "?", "PERMISSION_DENIED") == _count(before, "?", "PERMISSION_DENIED") == 0
    assert _count(after, "?", "INVALID_ARGUMENT") == 0


def test_a_refusal_at_a_compute_node_counts_under_its_method(fed):
    method = f"/{NODE_SERVICE}/AnnounceJob"
    before = _scrape(fed, "node-1")
    with channel(fed, "node-1", mint(fed, "party", "party-9")) as ch:
        assert_status(refused(lambda: raw_unary(ch, NODE_SERVICE, "AnnounceJob")(b"", timeout=20)), grpc.StatusCode.PERMISSION_DENIED)
    after = _scrape(fed, "node-1")
    assert _count(after, method, "PERMISSION_DENIED") - _count(before, method, "PERMISSION_DENIED") == 1
    assert "mpdp_rpcs_total{code=\"PERMISSION_DENIED\",method=\"?\"}" not in after

