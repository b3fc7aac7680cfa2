"""Traces across real role processes (services/common/tracing.py): one trace per job, joined over gRPC metadata.

A local federation — curator, 3 parties and 3 compute nodes, each its own OS process over mutual TLS — runs with
``MPDP_TRACES=file:<dir>/{site}.jsonl``: every role appends its finished spans to its own JSON-lines file. One
Pathak job and one DCA job run; for each, the spans from the curator and every party (Pathak) or every compute node
(DCA) share one trace id, each role has a job span with a span per state under it, and the parent links form one
tree rooted at the curator's job span. Spans carry only value-free attributes."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import numpy as np
import pytest

from mpdp.messages import common_pb2, dca_pb2
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.dca_client.client import DcaOperator, submit_cohort
from mpdp_services.launcher.federation import LocalFederation
from mpdp_services.operator.pathak2010 import OperatorClient, make_spec

from .conftest import PARTIES, synthetic_parts, write_parts

pytest.importorskip("opentelemetry.sdk")
pytestmark = pytest.mark.integration

NODES = ["node-1", "node-2", "node-3"]
ALLOWED = {"mpdp.job_id", "mpdp.protocol", "mpdp.role", "mpdp.site", "mpdp.state", "mpdp.stage", "mpdp.problem"}


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    root = tmp_path_factory.mktemp("traces")
    spans = root / "spans"
    mp = pytest.MonkeyPatch()
    mp.setenv("MPDP_TRACES", f"file:{spans}/{{site}}.jsonl")  # the role processes inherit the environment
    fed = LocalFederation(root / "fed", PARTIES, write_parts(root, PARTIES, synthetic_parts([60, 45, 52])), test_mode=True,
                          paillier_bits=1024, dgk_bits=1024, compute_nodes=NODES)
    try:
        fed.start()
        fed.spans = spans  # type: ignore[attr-defined]
        yield fed
    finally:
        fed.stop()
        mp.undo()


def _spans(folder: Path, job_id: str) -> dict[str, list[dict]]:
    """Site → the spans of ``job_id`` its role wrote."""
    out: dict[str, list[dict]] = {}
    for f in folder.glob("*.jsonl"):
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            if rec["attributes"].get("mpdp.job_id") == job_id:
                out.setdefault(f.stem, []).append(rec)
    return out


def _ended(folder: Path, job_id: str, sites: list[str], timeout: float = 30.0) -> dict[str, list[dict]]:
    """The job is complete; wait (bounded) until every site has written its job span, which it ends at its terminal state."""
    deadline = time.monotonic() + timeout
    while True:
        got = _spans(folder, job_id)
        if all(any(s["name"].endswith(" job") for s in got.get(site, [])) for site in sites) or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def _check_one_tree(by_site: dict[str, list[dict]], sites: list[str], protocol: str, terminal: dict[str, str]) -> None:
    assert set(sites) <= set(by_site), f"no spans from {set(sites) - set(by_site)}"
    spans = [s for site in sites for s in by_site[site]]
    assert len({s["trace_id"] for s in spans}) == 1, "the job's spans are not one trace"
    ids = {s["span_id"]: s for s in spans}
    roots = [s for s in spans if s["parent_id"] is None]
    assert len(roots) == 1 and roots[0]["resource"]["mpdp.role"] == "curator" and roots[0]["name"] == f"{protocol} job"
    for s in spans:
        assert set(s["attributes"]) <= ALLOWED, s["attributes"]  # value-free only
        assert s["attributes"]["mpdp.protocol"] == protocol and s["end"] >= s["start"]
        if s["parent_id"] is not None:
            assert s["parent_id"] in ids, f"{s['name']} at {s['resource']['mpdp.site']}: its parent is not in the trace"
    for s in spans:  # every span reaches the root: one tree
        seen, cur = set(), s
        while cur["parent_id"] is not None:
            assert cur["span_id"] not in seen
            seen.add(cur["span_id"])
            cur = ids[cur["parent_id"]]
        assert cur is roots[0]
    for site in sites:
        mine = by_site[site]
        [job] = [s for s in mine if s["name"] == f"{protocol} job"]
        role = job["resource"]["mpdp.role"]
        assert job["resource"]["mpdp.site"] == site
        assert job["attributes"]["mpdp.state"] == terminal[role], (site, job["attributes"])
        stages = [s for s in mine if s is not job]
        assert stages and all(s["parent_id"] == job["span_id"] and s["attributes"]["mpdp.state"] for s in stages), site
        assert len({s["attributes"]["mpdp.state"] for s in stages}) == len(stages)  # one span per state
        if role != "curator":  # joined from the curator's message that announced the job
            assert job["parent_remote"] and ids[job["parent_id"]]["resource"]["mpdp.role"] == "curator"


def test_a_pathak_job_is_one_trace_across_curator_and_parties(traced):
    with OperatorClient(Endpoints.load(traced.workdir)) as client:
        job = client.submit(make_spec("synthetic", PARTIES, 1.0, 0.05, "corrected", 120.0))
        status = client.wait(job, timeout=180)
    assert status.state == "PUBLISHED", status.detail
    by_site = _ended(traced.spans, job, ["curator", *PARTIES])
    _check_one_tree(by_site, ["curator", *PARTIES], "pathak2010", {"curator": "PUBLISHED", "party": "DONE"})
    assert not [s for s in NODES if s in by_site]  # the nodes took no part
    curator_states = [s["attributes"]["mpdp.state"] for s in sorted(by_site["curator"], key=lambda s: s["start"]) if s["name"] != "pathak2010 job"]
    assert len(curator_states) >= 3 and all(s["attributes"].get("mpdp.stage") for s in by_site["curator"] if s["name"] != "pathak2010 job")


def test_a_dca_job_is_one_trace_across_curator_and_compute_nodes(traced):
    ep = Endpoints.load(traced.workdir)
    spec = dca_pb2.DcaJobSpec(dimension=3, clients=4, max_missing=1, epsilon=1.0, delta=1e-5, sensitivity=2 * np.sqrt(3), mode=common_pb2.CORRECTED,
                              clip_bounds=[1.0], compute_nodes=NODES, deadline_seconds=60, validate=dca_pb2.VALIDATE_NONE)
    with DcaOperator(ep) as op:
        job = op.create(spec)
        asyncio.run(submit_cohort(ep, ep.tls, job, [f"c{i}" for i in range(4)], np.zeros((4, 3)), batched=False))
        status = op.wait(job, timeout=120)
    assert status.state == "RELEASED", status.detail
    by_site = _ended(traced.spans, job, ["curator", *NODES])
    _check_one_tree(by_site, ["curator", *NODES], "dca", {"curator": "RELEASED", "compute-node": "RELEASED"})
    assert not [p for p in PARTIES if p in by_site]


def test_a_local_release_job_joins_the_parties_to_the_curators_span(traced):
    """A flow without a hosted machine (services/curator/local.py, services/party/local.py): one span per role."""
    from mpdp_services.operator.local import submit_local

    s = submit_local(Endpoints.load(traced.workdir), "synthetic", PARTIES, 1.0, 1e-3, "corrected", 1e-3, 1.0, seed=b"traces")
    by_site = _spans(traced.spans, s["job_id"])  # the curator answered after every party's span ended, and after its own
    assert set(by_site) == {"curator", *PARTIES}
    [root] = by_site["curator"]
    assert root["parent_id"] is None and root["attributes"]["mpdp.state"] == "PUBLISHED"
    for p in PARTIES:
        [mine] = by_site[p]
        assert mine["trace_id"] == root["trace_id"] and mine["parent_id"] == root["span_id"] and mine["parent_remote"]
        assert mine["attributes"]["mpdp.state"] == "RELEASED" and set(mine["attributes"]) <= ALLOWED
