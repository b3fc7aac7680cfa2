"""The curator's and compute nodes' servicers under raw gRPC clients (real processes, loopback, mutual TLS).

Invariants:
- a second curator-role certificate (CN=curator-2, same CA) is refused at every node's curator-only RPC with
  PERMISSION_DENIED, and the job it named is untouched (it still releases);
- a string that cannot be a job id (300 characters, 20 kB) is refused NOT_FOUND or INVALID_ARGUMENT with short
  details that hold neither the string nor a path;
- a terminal job leaves memory after the retention, and its record still answers;
- a node that restarts answers UNKNOWN_JOB for the jobs it lost, and the curator fails such a job, naming the node.
"""

from __future__ import annotations

import asyncio
import os
import time

import grpc
import numpy as np
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from mpdp.messages import common_pb2, dca_pb2 as pb, dca_pb2_grpc as pb_grpc
from mpdp.messages import operations_pb2_grpc
from mpdp.messages import operations_pb2 as ops
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.common import pki
from mpdp_services.common.rpc import TlsFiles
from mpdp_services.dca_client.client import DcaOperator, submit_cohort
from mpdp_services.launcher.federation import LocalFederation

pytestmark = pytest.mark.integration
NODES = ["node-1", "node-2", "node-3"]
RETENTION = 4.0  # seconds a terminal job stays in memory in this federation


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    saved = os.environ.get("MPDP_JOB_RETENTION_SECONDS")
    os.environ["MPDP_JOB_RETENTION_SECONDS"] = str(RETENTION)  # the processes read it (config env override)
    try:
        fed = LocalFederation(tmp_path_factory.mktemp("hyg") / "fed", [], {}, test_mode=True, paillier_bits=768, dgk_bits=768, compute_nodes=NODES)
        fed.start()
    finally:
        if saved is None:
            os.environ.pop("MPDP_JOB_RETENTION_SECONDS", None)
        else:
            os.environ["MPDP_JOB_RETENTION_SECONDS"] = saved
    ca_dir = fed.workdir / "ca"
    ca_key = serialization.load_pem_private_key((ca_dir / "ca.key").read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate((ca_dir / "ca.crt").read_bytes())
    key, cert = pki.issue(ca_key, ca_cert, "curator", "curator-2", ["127.0.0.1"])
    pki.write_site(fed.workdir / "curator-2", key, cert, ca_cert)
    yield fed
    fed.stop()


def tls(fed: LocalFederation, site: str) -> TlsFiles:
    d = fed.workdir / site
    return TlsFiles(d / "site.crt", d / "site.key", d / "ca.crt")


def channel(fed: LocalFederation, to: str, as_site: str) -> grpc.Channel:
    opts = [("grpc.ssl_target_name_override", to)]
    return grpc.secure_channel(f"127.0.0.1:{fed.procs[to].port}", tls(fed, as_site).channel_credentials(), options=opts)


def spec(n: int, d: int, deadline: float = 60.0) -> pb.DcaJobSpec:
    return pb.DcaJobSpec(dimension=d, clients=n, max_missing=1, epsilon=1.0, delta=1e-5, sensitivity=2 * np.sqrt(d), mode=common_pb2.CORRECTED,
                         clip_bounds=[1.0], compute_nodes=NODES, deadline_seconds=deadline, simulation_seed=b"hygiene", validate=pb.VALIDATE_NONE)


def run_cohort(fed: LocalFederation, op: DcaOperator, job: str, n: int, d: int) -> ops.JobSummary:
    ep = Endpoints.load(fed.workdir)
    Z = np.random.default_rng(1).uniform(-1, 1, size=(n, d))
    asyncio.run(submit_cohort(ep, ep.tls, job, [f"c{i}" for i in range(n)], Z, batched=True, batch_size=16))
    return op.wait(job, timeout=120)


def test_a_second_curator_certificate_is_refused_at_every_node_and_the_job_is_untouched(fed):
    n, d = 20, 3
    with DcaOperator(Endpoints.load(fed.workdir)) as op:
        job = op.create(spec(n, d))
        for node in NODES:
            with channel(fed, node, "curator-2") as ch:
                stub = pb_grpc.ComputeNodeStub(ch)
                calls = [
                    lambda: stub.GetPartialSum(common_pb2.JobRef(job_id=job), timeout=10),
                    lambda: stub.CloseSubmissions(pb.SubmissionsClose(job_id=job), timeout=10),
                    lambda: stub.AbortJob(common_pb2.JobAbort(job_id=job, problem=common_pb2.JOB_FAILED, detail="curator-2 says stop", reported_by="curator"), timeout=10),
                    lambda: stub.AnnounceJob(pb.DcaJobAnnouncement(job_id="dca-fake01", spec=spec(n, d)), timeout=10),
                ]
                for call in calls:
                    with pytest.raises(grpc.RpcError) as e:
                        call()
                    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED, e.value.details()
                    assert e.value.details().startswith("WRONG_ROLE")
        # untouched: still taking shares, then released over every client
        status = run_cohort(fed, op, job, n, d)
        assert status.state == "RELEASED" and op.release(job).clients_included == n, status
        # the real curator's certificate still reads partial sums
        with channel(fed, "node-1", "curator") as ch:
            ps = pb_grpc.ComputeNodeStub(ch).GetPartialSum(common_pb2.JobRef(job_id=job), timeout=10)
        assert ps.job_id == job and len(ps.partial_sum) == 8 * d


@pytest.mark.parametrize("size", [300, 20_000])
def test_attacker_sized_job_ids_are_refused_short_with_no_path_and_no_echo(fed, size):
    bad = "A" * size
    ref = common_pb2.JobRef(job_id=bad)
    state_dir = str(fed.workdir)
    calls = {
        ("node-1", "curator", "GetPartialSum"): lambda ch: pb_grpc.ComputeNodeStub(ch).GetPartialSum(ref, timeout=10),
        ("node-1", "operator", "SubmitShareBatch"): lambda ch: pb_grpc.ComputeNodeStub(ch).SubmitShareBatch(pb.ShareBatch(job_id=bad), timeout=10),
        ("node-2", "node-1", "ReportReceivedClients"): lambda ch: pb_grpc.ComputeNodeStub(ch).ReportReceivedClients(pb.ReceivedClients(job_id=bad), timeout=10),
        ("node-1", "curator", "AnnounceJob"): lambda ch: pb_grpc.ComputeNodeStub(ch).AnnounceJob(pb.DcaJobAnnouncement(job_id=bad, spec=spec(10, 2)), timeout=10),
        ("curator", "operator", "GetRelease"): lambda ch: operations_pb2_grpc.JobOperationsStub(ch).GetRelease(ref, timeout=10),
        ("curator", "operator", "WatchJob"): lambda ch: list(operations_pb2_grpc.JobOperationsStub(ch).WatchJob(ref, timeout=10)),
        ("curator", "operator", "GetJob"): lambda ch: pb_grpc.DcaCuratorStub(ch).GetJob(ref, timeout=10),
        ("curator", "node-1", "SendPartialSum"): lambda ch: pb_grpc.DcaCuratorStub(ch).SendPartialSum(pb.PartialSum(job_id=bad), timeout=10),
        ("curator", "operator", "JobWatchJob"): lambda ch: list(operations_pb2_grpc.JobOperationsStub(ch).WatchJob(ref, timeout=10)),
        ("curator", "operator", "JobGetRelease"): lambda ch: operations_pb2_grpc.JobOperationsStub(ch).GetRelease(ref, timeout=10),
    }
    for (to, as_site, name), call in calls.items():
        with channel(fed, to, as_site) as ch:
            with pytest.raises(grpc.RpcError) as e:
                call(ch)
        code, details = e.value.code(), e.value.details() or ""
        assert code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT), (name, code, details[:200])
        assert len(details) <= 300, (name, len(details))
        assert "AAAAAAAA" not in details and state_dir not in details and "/" not in details and "Error" not in details, (name, details)


def test_terminal_jobs_leave_memory_after_the_retention_and_their_record_answers(fed):
    n, d = 12, 2
    with DcaOperator(Endpoints.load(fed.workdir)) as op:
        job = op.create(spec(n, d))
        assert run_cohort(fed, op, job, n, d).state == "RELEASED"
        with channel(fed, "node-2", "curator") as ch:
            stub = pb_grpc.ComputeNodeStub(ch)
            assert stub.GetPartialSum(common_pb2.JobRef(job_id=job), timeout=10).job_id == job  # held while retained
            # the node sweeps once a second: within retention + a few sweeps the entry is gone, its record stays
            give_up = time.monotonic() + RETENTION + 30.0
            while True:
                try:
                    stub.GetPartialSum(common_pb2.JobRef(job_id=job), timeout=10)
                except grpc.RpcError as e:
                    err = e
                    break
                assert time.monotonic() < give_up, "the node still holds a terminal job long past its retention"
                time.sleep(0.5)
        assert err.code() == grpc.StatusCode.NOT_FOUND and "ended RELEASED" in err.details() and "no longer held" in err.details(), err.details()
        # a job id the node never had is a different answer
        with channel(fed, "node-2", "curator") as ch, pytest.raises(grpc.RpcError) as e:
            pb_grpc.ComputeNodeStub(ch).GetPartialSum(common_pb2.JobRef(job_id="dca-000000000000"), timeout=10)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND and "has no job" in e.value.details()
        # the curator's record still answers too
        assert op.wait(job, timeout=10).state == "RELEASED"
        assert op.release(job).clients_included == n


def test_a_restarted_node_answers_unknown_job_and_the_curator_fails_the_job_naming_it(fed):
    with DcaOperator(Endpoints.load(fed.workdir)) as op:
        job = op.create(spec(10, 2, deadline=3.0))
        fed.kill("node-3")
        fed.restart("node-3")  # comes back without the job
        with channel(fed, "node-3", "curator") as ch, pytest.raises(grpc.RpcError) as e:
            pb_grpc.ComputeNodeStub(ch).GetPartialSum(common_pb2.JobRef(job_id=job), timeout=10)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND and e.value.details().startswith("UNKNOWN_JOB")
        status = op.wait(job, timeout=90)
        assert status.state == "FAILED" and "node-3" in status.detail, status
        with pytest.raises(grpc.RpcError):
            op.release(job)
