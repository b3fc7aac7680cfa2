"""Every role serves Prometheus metrics on its own loopback HTTP port: read during and after real jobs.

A local federation (curator, 3 parties, in test mode) runs a Pathak job; a raw client is refused once. Each
role's GET /metrics then shows the counters moved: the job by protocol and state, RPCs by method and status, the
refusal by Problem, a party's ledger; and the curator exports nothing about dataset sizes."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import grpc
import pytest

from mpdp.messages import pathak2010_pb2 as pb, pathak2010_pb2_grpc as pb_grpc
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.operator.pathak2010 import OperatorClient, make_spec

from .conftest import PARTIES, curator_channel, site_tls

pytestmark = pytest.mark.integration


def _metrics(url: str) -> dict[str, float]:
    """The samples of a Prometheus text page: 'name{labels}' → value."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def test_every_role_serves_metrics_and_the_counters_move(federation):
    urls = json.loads((federation.workdir / "endpoints.json").read_text())["http"]
    assert set(urls) == {"curator", *PARTIES} and all(u.startswith("http://127.0.0.1:") for u in urls.values())
    before = {name: _metrics(url) for name, url in urls.items()}
    assert before["curator"].get("process_resident_memory_bytes", 0) > 0  # process metrics
    with OperatorClient(Endpoints.load(federation.workdir)) as client:
        job = client.submit(make_spec("synthetic", PARTIES, 1.0, 0.05, "corrected", 120.0))
        during = _metrics(urls["curator"])  # readable while a job runs
        status = client.wait(job, timeout=120)
    assert status.state == "PUBLISHED", status.detail
    assert during.get('mpdp_jobs_live{protocol="pathak2010"}', 0) >= 0
    with curator_channel(federation, site_tls(federation, "operator")) as ch, pytest.raises(grpc.RpcError):
        pb_grpc.CuratorStub(ch).AcceptJob(pb.JobAcceptance(job_id="pk-000000000000", dimension=4), timeout=10)  # operator may not
    after = {name: _metrics(url) for name, url in urls.items()}

    cur, cur0 = after["curator"], before["curator"]
    key = 'mpdp_jobs_total{protocol="pathak2010",state="PUBLISHED"}'
    assert cur.get(key, 0) >= cur0.get(key, 0) + 1
    assert cur.get('mpdp_job_seconds_count{protocol="pathak2010",state="PUBLISHED"}', 0) >= 1
    assert cur.get('mpdp_rpcs_total{code="OK",method="/mpdp.messages.JobOperations/SubmitJob"}', 0) >= 1
    refusals = {k: v for k, v in cur.items() if k.startswith("mpdp_refusals_total")}
    assert refusals.get('mpdp_refusals_total{problem="WRONG_ROLE"}', 0) >= cur0.get('mpdp_refusals_total{problem="WRONG_ROLE"}', 0) + 1
    names = {k.split("{")[0] for k in cur}  # metric names (an RPC's name in a label is not data)
    assert not [n for n in names if any(w in n for w in ("size", "records", "rows", "value"))]  # nothing about data sizes or values

    assert cur.get('mpdp_stage_seconds_count{protocol="pathak2010",stage="ADMITTED"}', 0) >= 1  # stage histograms
    for p in PARTIES:
        party = after[p]
        assert party.get('mpdp_precompute_pool_target{kind="dgk"}', 0) > 0 and 'mpdp_precompute_pool{kind="paillier_zeta"}' in party
        assert party["mpdp_ledger_entries"] >= 1 and party["mpdp_ledger_spent_epsilon"] > 0
        assert party["mpdp_ledger_budget_epsilon"] > party["mpdp_ledger_spent_epsilon"]
        assert any(k.startswith('mpdp_rpcs_total{code="OK"') for k in party)
        assert "mpdp_ledger_spent_epsilon" not in after["curator"]  # a party's ledger only at its own endpoint


def test_the_endpoint_serves_metrics_and_pages_only(federation):
    """/ is the dashboard (curator) or the ledger page (party); any other path is 404; nothing but GET (405)."""
    urls = json.loads((federation.workdir / "endpoints.json").read_text())["http"]
    with urllib.request.urlopen(urls["curator"] + "/", timeout=10) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/html") and r.headers["X-Frame-Options"] == "DENY"
        assert "Jobs" in r.read().decode()
    with urllib.request.urlopen(urls[PARTIES[0]] + "/", timeout=10) as r:
        assert "Privacy ledger of party-1" in r.read().decode()
    for url in (urls["curator"], urls[PARTIES[0]]):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url + "/no-such-page", timeout=10)
        assert e.value.code == 404 and b"no-such-page" not in e.value.read()
        req = urllib.request.Request(url + "/metrics", data=b"x", method="POST")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10)
        assert e.value.code == 405


def test_json_logs_name_the_role_site_and_job(tmp_path):
    """`mpdp serve … --log-format json`: every line of every role's log is one JSON object; a DCA job's steps at a
    compute node carry its job_id, protocol and stage."""
    import asyncio

    import numpy as np

    from mpdp.messages import common_pb2, dca_pb2
    from mpdp_services.dca_client.client import DcaOperator, submit_cohort
    from mpdp_services.launcher.federation import LocalFederation

    nodes = ["node-1", "node-2"]
    fed = LocalFederation(tmp_path / "fed", [], {}, test_mode=True, paillier_bits=768, dgk_bits=768, compute_nodes=nodes, log_format="json")
    fed.start()
    try:
        ep = Endpoints.load(fed.workdir)
        spec = dca_pb2.DcaJobSpec(dimension=3, clients=4, max_missing=1, epsilon=1.0, delta=1e-5, sensitivity=2 * np.sqrt(3), mode=common_pb2.CORRECTED,
                                  clip_bounds=[1.0], compute_nodes=nodes, deadline_seconds=60, validate=dca_pb2.VALIDATE_NONE)
        with DcaOperator(ep) as op:
            job = op.create(spec)
            asyncio.run(submit_cohort(ep, ep.tls, job, [f"c{i}" for i in range(4)], np.zeros((4, 3)), batched=False))
            assert op.wait(job, timeout=120).state == "RELEASED"
    finally:
        fed.stop()
    lines = [json.loads(line) for line in (fed.workdir / "node-1" / "service.log").read_text().splitlines() if line.strip()]
    assert lines and all({"time", "level", "role", "site", "event"} <= set(x) for x in lines)
    assert {x["role"] for x in lines} == {"compute-node"} and {x["site"] for x in lines} == {"node-1"}
    mine = [x for x in lines if x.get("job_id") == job]
    assert mine and all(x["protocol"] == "dca" and x["stage"] for x in mine)
    curator = [json.loads(line) for line in (fed.workdir / "curator" / "service.log").read_text().splitlines() if line.strip()]
    assert any(x.get("job_id") == job for x in curator)
