"""A raw DcaJobSpec that says nothing about validation is a validated job, over real processes and mutual TLS.

The operator is a raw client of the job host (JobOperations.SubmitJob) and leaves ``validate`` and
``fractional_bits`` unset, asking only for the discrete Gaussian noise a validated job needs. The wire's zero value
of ``validate`` is the range proof (dca.proto, Validation), so: the job the curator announces is VALIDATE_RANGE at
f = 16; Mallory (a party certificate) sends well-formed shares of an input whose first coordinate reads 10^9 with an
honest proof of it, and every node rejects her; the release is over the honest clients, says VALIDATE_RANGE and
counts one rejected contribution. A spec that leaves the noise unset too (the floating-point Gaussian, which cannot be
proven) is refused INVALID_ARGUMENT with nothing created: it is never run unproven. Only VALIDATE_NONE asks for an
unproven job.
"""

from __future__ import annotations

import asyncio
import math

import grpc
import numpy as np
import pytest

from mpdp.dca import validation
from mpdp.dca.params import DcaParams
from mpdp.math import field as F
from mpdp.messages import common_pb2, dca_pb2, dca_pb2_grpc, operations_pb2 as ops, operations_pb2_grpc as ops_grpc

from .conftest import NODES, assert_all_serving, assert_status, channel, client_ledger, mint, operator_curator, refused

pytestmark = pytest.mark.integration

D, N, T = 3, 5, 2  # N − 3 honest = 2: one client never comes, Mallory is rejected
HONEST = ["plain-1", "plain-2", "plain-3"]


def _raw_spec(**fields) -> dca_pb2.DcaJobSpec:
    """Nothing about validation: no validate, no fractional_bits."""
    base = dict(dimension=D, clients=N, max_missing=T, epsilon=1.0, delta=1e-5, sensitivity=2.0, mode=common_pb2.CORRECTED,
                clip_bounds=[1.0], compute_nodes=list(NODES), deadline_seconds=20.0)
    return dca_pb2.DcaJobSpec(**{**base, **fields})


def _submit(fed, spec: dca_pb2.DcaJobSpec) -> str:
    with operator_curator(fed) as ch:
        return ops_grpc.JobOperationsStub(ch).SubmitJob(ops.JobSubmission(dca=spec), timeout=60).job_id


def _jobs(fed) -> set[str]:
    with operator_curator(fed) as ch:
        return {j.job_id for j in ops_grpc.JobOperationsStub(ch).ListJobs(ops.JobQuery(), timeout=30).jobs}


def _watch(fed, job: str) -> ops.JobSummary:
    last = None
    with operator_curator(fed) as ch:
        for last in ops_grpc.JobOperationsStub(ch).WatchJob(common_pb2.JobRef(job_id=job), timeout=180):
            if last.terminal:
                break
    assert last is not None and last.terminal, last
    return last


def test_a_spec_silent_on_validation_runs_validated_and_rejects_an_invalid_contribution(fed):
    from mpdp_services.common.endpoints import Endpoints
    from mpdp_services.dca_client.client import submit_vector

    job = _submit(fed, _raw_spec(noise=dca_pb2.DISCRETE_GAUSSIAN))
    mallory = mint(fed, "party", "mallory-default")
    with channel(fed, "curator", mallory) as ch:
        ann = dca_pb2_grpc.DcaCuratorStub(ch).GetJob(common_pb2.JobRef(job_id=job), timeout=30)
    assert ann.spec.validate == dca_pb2.VALIDATE_RANGE
    params = DcaParams.from_spec(job, ann.spec)
    plan = params.validation
    assert plan is not None and params.frac_bits == 16

    ep = Endpoints.load(fed.workdir)
    Z = np.random.default_rng(5).uniform(-0.8, 0.8, (len(HONEST), D))
    for cid, z in zip(HONEST, Z):
        assert not asyncio.run(submit_vector(ep, mint(fed, "party", cid), cid, job, z, ledger=client_ledger(fed, cid))).rejected

    meas = validation.encode_input(plan, np.zeros(D, dtype=np.int64)).astype(np.uint64)
    meas[0] = F.scalar(10**9 * 2**16 + int(meas[0]))  # its lowest "bit" holds 10^9·2^f; the proof below is honest about it
    shares = validation.client_shares(plan, job, "mallory-default", meas, params.M, seeded=False)
    for k, s in enumerate(shares):
        share = dca_pb2.ClientShare(job_id=job, client_id="mallory-default", spec_digest=params.spec_digest, validated=dca_pb2.ValidatedShare(
            measurement=s.measurement, proof=s.proof, share_seed=s.share_seed, blind=s.blind, joint_rand_parts=s.joint_rand_parts))
        with channel(fed, NODES[k], mallory) as ch:
            assert dca_pb2_grpc.ComputeNodeStub(ch).SubmitShares(iter([share]), timeout=30).accepted == 1

    end = _watch(fed, job)
    assert end.state == "RELEASED", end
    with operator_curator(fed) as ch:
        r = ops_grpc.JobOperationsStub(ch).GetRelease(common_pb2.JobRef(job_id=job), timeout=30).dca
    assert (r.validate, r.clients_included, r.clients_rejected) == (dca_pb2.VALIDATE_RANGE, len(HONEST), 1)
    err = np.array(r.values) - Z.sum(axis=0)
    assert np.all(np.abs(err) <= 6 * math.sqrt(r.noise_variance) + len(HONEST) * 2.0**-16), (err, r.noise_variance)
    assert_all_serving(fed)


def test_a_spec_silent_on_validation_and_noise_is_refused_not_run_unproven(fed):
    before = _jobs(fed)
    with operator_curator(fed) as ch:
        e = refused(lambda: ops_grpc.JobOperationsStub(ch).SubmitJob(ops.JobSubmission(dca=_raw_spec()), timeout=60))
    assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
    assert "validated" in (e.details() or "")
    assert _jobs(fed) == before
    # naming the opt-out runs the unproven job
    job = _submit(fed, _raw_spec(validate=dca_pb2.VALIDATE_NONE, deadline_seconds=5.0))
    with operator_curator(fed) as ch:
        assert dca_pb2_grpc.DcaCuratorStub(ch).GetJob(common_pb2.JobRef(job_id=job), timeout=30).spec.validate == dca_pb2.VALIDATE_NONE
