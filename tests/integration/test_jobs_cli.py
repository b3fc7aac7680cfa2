"""`mpdp jobs ls|show|logs|cancel` on a running federation: the curator's jobs of every protocol.

One local federation (curator, 5 parties, 3 compute nodes, test mode) runs a Pathak job, an LMGC release and an
ensemble (whose votes are a DCA job); `mpdp jobs ls --json` lists all four protocols. A DCA job left waiting for
clients is cancelled: it ends FAILED with CANCELLED at the curator and publishes nothing. Raw clients show the
service's refusals: a party may not list jobs, unknown and hostile ids are NOT_FOUND, an ended job cannot be
cancelled."""

from __future__ import annotations

import json

import grpc
import numpy as np
import pytest
from click.testing import CliRunner

from mpdp.messages import common_pb2, dca_pb2 as dpb, operations_pb2 as pb, operations_pb2_grpc as pb_grpc
from mpdp_services.cli.operate import jobs as jobs_cmd
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.dca_client.client import DcaOperator
from mpdp_services.operator.ensemble import train_ensemble
from mpdp_services.operator.local import submit_local
from mpdp_services.operator.pathak2010 import OperatorClient, make_spec
from tests.integration.conftest import curator_channel, site_tls
from tests.integration.test_ensemble_federation import NODES, PARTIES, fed, spec  # noqa: F401 - the fixture

pytestmark = pytest.mark.integration


def _cli(fed, *args: str) -> dict:
    result = CliRunner().invoke(jobs_cmd, [*args, "--endpoints", str(fed.workdir), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _waiting_dca_job(ep: Endpoints) -> str:
    """A DCA job whose clients never send: it waits until its deadline."""
    d = 3
    s = dpb.DcaJobSpec(dimension=d, clients=4, max_missing=0, epsilon=1.0, delta=1e-5, sensitivity=2 * np.sqrt(d), mode=common_pb2.CORRECTED,
                       clip_bounds=[1.0], compute_nodes=NODES, deadline_seconds=600, simulation_seed=b"jobs-cancel", validate=dpb.VALIDATE_NONE)
    with DcaOperator(ep) as op:
        return op.create(s)


def test_jobs_ls_lists_every_protocol_and_show_logs_follow_one(fed):
    ep = Endpoints.load(fed.workdir)
    with OperatorClient(ep) as client:
        pk = client.submit(make_spec("bc", PARTIES[:3], 1.0, 0.05, "corrected", 120.0))
        assert client.wait(pk, timeout=120).state == "PUBLISHED"
    lm = submit_local(ep, "wine", PARTIES[:3], 1000.0, 1e-3, "corrected", 1e-3, 1.0, seed=b"jobs-lmgc")["job_id"]
    hm = train_ensemble(ep, spec(simulation_seed=b"jobs-hamm"))

    listed = _cli(fed, "ls")["jobs"]
    by_id = {j["job_id"]: j for j in listed}
    assert {"pathak2010", "dca", "lmgc", "hamm2016"} <= {j["protocol"] for j in listed}
    assert by_id[pk]["protocol"] == "pathak2010" and by_id[pk]["state"] == "PUBLISHED" and by_id[pk]["released"]
    assert by_id[lm]["protocol"] == "lmgc" and by_id[lm]["state"] == "PUBLISHED" and by_id[lm]["released"]
    assert by_id[hm.job_id]["protocol"] == "hamm2016" and by_id[hm.job_id]["released"]
    assert by_id[hm.dca_job_id]["protocol"] == "dca" and by_id[hm.dca_job_id]["terminal"]
    created = [j["created"] for j in listed]
    assert created == sorted(created, reverse=True)  # newest first
    assert [j["job_id"] for j in _cli(fed, "ls", "--protocol", "lmgc")["jobs"]] == [j["job_id"] for j in listed if j["protocol"] == "lmgc"]

    shown = _cli(fed, "show", pk)
    assert shown["state"] == "PUBLISHED" and shown["terminal"] and shown["seconds"] > 0
    assert {"stage1", "stage2", "stage3"} <= set(shown["stage_seconds"])  # the Pathak machine's own stage clock
    events = _cli(fed, "logs", pk)["events"]
    assert events[0]["state"] == "ADMITTED" and events[-1]["state"] == "PUBLISHED"
    assert [e["at"] for e in events] == sorted(e["at"] for e in events)


def test_cancel_fails_a_running_job_and_publishes_nothing(fed):
    ep = Endpoints.load(fed.workdir)
    job = _waiting_dca_job(ep)
    assert _cli(fed, "ls", "--live")["jobs"][0]["job_id"] == job
    cancelled = _cli(fed, "cancel", job)
    assert cancelled["terminal"] and cancelled["state"] == "FAILED" and cancelled["problem"] == "CANCELLED" and not cancelled["released"]
    with DcaOperator(ep) as op:
        assert op.wait(job, timeout=60).state == "FAILED"
        with pytest.raises(grpc.RpcError) as e:
            op.release(job)
    assert e.value.code() == grpc.StatusCode.ABORTED
    again = CliRunner().invoke(jobs_cmd, ["cancel", job, "--endpoints", str(fed.workdir)])
    assert again.exit_code != 0 and "already ended" in again.output and "FAILED_PRECONDITION" in again.output


@pytest.mark.parametrize("job_id", ["pk-000000000000", "../../etc/passwd", "x" * 300, ""])
def test_unknown_and_hostile_ids_are_not_found(fed, job_id):
    with curator_channel(fed, site_tls(fed, "operator")) as ch:
        stub = pb_grpc.JobOperationsStub(ch)
        for call in (stub.GetJob, stub.CancelJob):
            with pytest.raises(grpc.RpcError) as e:
                call(common_pb2.JobRef(job_id=job_id), timeout=10)
            assert e.value.code() == grpc.StatusCode.NOT_FOUND
            assert len(e.value.details()) <= 240 and "passwd" not in e.value.details() and "xxxxxxxx" not in e.value.details()


def test_only_the_operator_may_list_or_cancel(fed):
    for site in ("party-1", "node-1"):
        with curator_channel(fed, site_tls(fed, site)) as ch:
            stub = pb_grpc.JobOperationsStub(ch)
            with pytest.raises(grpc.RpcError) as e:
                stub.ListJobs(pb.JobQuery(), timeout=10)
            assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
            with pytest.raises(grpc.RpcError) as e:
                stub.CancelJob(common_pb2.JobRef(job_id="pk-000000000000"), timeout=10)
            assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with curator_channel(fed, site_tls(fed, "operator")) as ch:  # and the service keeps serving
        stub = pb_grpc.JobOperationsStub(ch)
        with pytest.raises(grpc.RpcError) as e:
            stub.ListJobs(pb.JobQuery(protocol="nope"), timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert stub.ListJobs(pb.JobQuery(limit=1), timeout=10).jobs is not None


def test_predict_reads_the_protocol_from_the_curator(fed):
    """`mpdp predict` asks the curator which protocol published a job (no guess from the id's prefix)."""
    from mpdp_services.cli.jobs import predict as predict_cmd

    ep = Endpoints.load(fed.workdir)
    lm = submit_local(ep, "bc", PARTIES[:3], 1000.0, 1e-3, "corrected", 1e-3, 1.0, seed=b"jobs-predict")["job_id"]
    args = ["--endpoints", str(fed.workdir), "--data", fed.tests["bc"], "--format", "csv", "--json"]
    out = CliRunner().invoke(predict_cmd, ["--job", lm, *args])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["accuracy"] > 0.8
    # one shape for every protocol: job_id, protocol, rows, rows per class, accuracy, guarantee
    assert list(doc)[:5] == ["job_id", "protocol", "rows", "predicted", "accuracy"] and doc["protocol"] == "lmgc", doc
    assert {"majority_rate", "beats_majority", "guarantee"} <= set(doc), doc
    assert sum(doc["predicted"].values()) == doc["rows"], doc
    dca = _waiting_dca_job(ep)
    _cli(fed, "cancel", dca)
    out = CliRunner().invoke(predict_cmd, ["--job", dca, *args])
    assert out.exit_code != 0 and "released no model" in out.output
    out = CliRunner().invoke(predict_cmd, ["--job", "pk-000000000000", *args])
    assert out.exit_code != 0 and "mpdp jobs ls" in out.output
