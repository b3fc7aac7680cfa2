"""Jobs belong to the operator who created them; an admin sees and cancels all.

A second operator of the same federation (minted operator-2, valid certificate, right role) learns the first
operator's job ids and tries every operator RPC that names a job (the job host's list, get, watch, release and
cancel; and a DCA job's announcement). Invariants: each is refused with UNKNOWN_JOB (NOT_FOUND,
the answer for an id never issued, so operator-2 learns nothing), list answers leave the job out, the job is
untouched; the owner and an ``admin`` certificate see it, and the admin may cancel it; a party, not an operator, is
refused the job host whatever the job (PERMISSION_DENIED); ownership survives a curator restart.
"""

from __future__ import annotations

import signal

import grpc

from mpdp.messages import common_pb2, dca_pb2_grpc, operations_pb2 as ops, operations_pb2_grpc as ops_grpc

from .conftest import assert_status, channel, create_dca, dca_spec, mint, pathak_job, refused, site_tls

REF = common_pb2.JobRef


def _listed(ch, job: str) -> bool:
    return job in {j.job_id for j in ops_grpc.JobOperationsStub(ch).ListJobs(ops.JobQuery(limit=1000), timeout=20).jobs}


def _not_found(call) -> None:
    assert_status(refused(call), grpc.StatusCode.NOT_FOUND)


def test_another_operator_cannot_see_or_touch_a_dca_job_and_an_admin_can(fed):
    job = create_dca(fed, dca_spec(deadline=120.0))  # operator-1: the federation's operator certificate
    with channel(fed, "curator", mint(fed, "operator", "operator-2")) as ch:
        jobs, dca = ops_grpc.JobOperationsStub(ch), dca_pb2_grpc.DcaCuratorStub(ch)
        assert not _listed(ch, job)
        _not_found(lambda: jobs.GetJob(REF(job_id=job), timeout=20))
        _not_found(lambda: jobs.CancelJob(REF(job_id=job), timeout=20))
        _not_found(lambda: dca.GetJob(REF(job_id=job), timeout=20))
        _not_found(lambda: jobs.GetRelease(REF(job_id=job), timeout=20))
        _not_found(lambda: list(jobs.WatchJob(REF(job_id=job), timeout=20)))
        mine = jobs.SubmitJob(ops.JobSubmission(dca=dca_spec(deadline=120.0)), timeout=60).job_id
        assert _listed(ch, mine) and jobs.GetJob(REF(job_id=mine), timeout=20).job_id == mine
    with channel(fed, "curator", site_tls(fed, "operator")) as ch:  # the owner
        jobs = ops_grpc.JobOperationsStub(ch)
        assert _listed(ch, job) and not _listed(ch, mine)
        summary = jobs.GetJob(REF(job_id=job), timeout=20)
        assert not summary.terminal, summary  # operator-2's attempts left it running
        _not_found(lambda: jobs.CancelJob(REF(job_id=mine), timeout=20))
    with channel(fed, "curator", mint(fed, "admin", "admin-1")) as ch:
        jobs = ops_grpc.JobOperationsStub(ch)
        assert _listed(ch, job) and _listed(ch, mine)
        assert dca_pb2_grpc.DcaCuratorStub(ch).GetJob(REF(job_id=job), timeout=20).job_id == job
        for j in (job, mine):
            cancelled = jobs.CancelJob(REF(job_id=j), timeout=30)
            assert cancelled.terminal and cancelled.problem == common_pb2.CANCELLED, cancelled


def test_another_operator_cannot_fetch_a_published_model_and_ownership_survives_a_restart(fed):
    job = pathak_job(fed, seed=b"owned")
    for tls, sees in ((mint(fed, "operator", "operator-2"), False), (site_tls(fed, "operator"), True), (mint(fed, "admin", "admin-1"), True)):
        with channel(fed, "curator", tls) as ch:
            host = ops_grpc.JobOperationsStub(ch)
            assert _listed(ch, job) == sees
            if sees:
                assert host.GetRelease(REF(job_id=job), timeout=20).pathak2010.job_id == job
            else:
                _not_found(lambda: host.GetRelease(REF(job_id=job), timeout=20))
                _not_found(lambda: list(host.WatchJob(REF(job_id=job), timeout=20)))
    with channel(fed, "curator", site_tls(fed, "party-1")) as ch:  # not an operator: the job host is closed to it
        host = ops_grpc.JobOperationsStub(ch)
        assert_status(refused(lambda: host.GetRelease(REF(job_id=job), timeout=20)), grpc.StatusCode.PERMISSION_DENIED)
        assert_status(refused(lambda: host.ListJobs(ops.JobQuery(), timeout=20)), grpc.StatusCode.PERMISSION_DENIED)
    fed.kill("curator", signal.SIGTERM)
    fed.restart("curator")
    with channel(fed, "curator", mint(fed, "operator", "operator-2")) as ch:
        _not_found(lambda: ops_grpc.JobOperationsStub(ch).GetRelease(REF(job_id=job), timeout=20))
        assert not _listed(ch, job)
    with channel(fed, "curator", site_tls(fed, "operator")) as ch:
        assert ops_grpc.JobOperationsStub(ch).GetRelease(REF(job_id=job), timeout=20).pathak2010.job_id == job
        assert _listed(ch, job)
