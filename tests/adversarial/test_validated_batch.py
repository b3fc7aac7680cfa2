"""Validated shares in bulk over real processes and mutual TLS: a raw operator stub sends ShareBatch messages carrying
many clients' ValidatedShares into a validated DCA job (``--validate range``, N = 5, T = 2).

- a batch whose blinds field is one byte short is refused whole (INVALID_ARGUMENT, a clean detail), nothing taken;
- a batch of three honest clients is taken at every node; the same batch again is refused client by client (REPLAY);
- a batch with Mallory (10^9 in her first coordinate, an honest proof of it) and an honest client named twice is taken
  for Mallory and the first copy, the second copy refused (REPLAY); every node rejects Mallory's proof alike;
- the job releases the honest clients' sum within its noise, Mallory counted in ``clients_rejected``, never named.
"""

from __future__ import annotations

import math

import grpc
import numpy as np

from mpdp.dca import validation
from mpdp.dca.client import validated_cohort
from mpdp.dca.params import DcaParams
from mpdp.math import field as F
from mpdp.math.drbg import Drbg
from mpdp.messages import common_pb2, dca_pb2, dca_pb2_grpc
from mpdp_services.common.endpoints import Endpoints

from tests.adversarial.conftest import job_host, NODES, assert_all_serving, assert_status, channel, create_dca, dca_spec, operator_curator, refused, wait_dca

D, N, T, F_BITS = 3, 5, 2, 16


def _send(fed, tls, node: str, batch: dca_pb2.ShareBatch) -> dca_pb2.ShareReceipt:
    with channel(fed, node, tls) as ch:
        return dca_pb2_grpc.ComputeNodeStub(ch).SubmitShareBatch(batch, timeout=30)


def _mallory(params: DcaParams, job: str, ids: list[str]) -> list[dca_pb2.ShareBatch]:
    """Per node, a batch of ``ids``: ids[0] is Mallory (coordinate 0's lowest 'bit' holds 10^9·2^f, proven honestly);
    the others hold zeros."""
    plan = params.validation
    assert plan is not None
    zeros = np.zeros((len(ids), D), dtype=np.int64)
    meas = validation.encode_inputs(plan, zeros).astype(np.uint64)
    meas[0, 0] = F.scalar(10**9 * 2**F_BITS + int(meas[0, 0]))
    packed = validation.client_shares_packed(plan, job, ids, meas, params.M, seeded=False)
    return [dca_pb2.ShareBatch(job_id=job, spec_digest=params.spec_digest, client_ids=ids, validated=dca_pb2.ValidatedShares(
        measurements=p.measurements, proofs=p.proofs, share_seeds=p.share_seeds, blinds=p.blinds, joint_rand_parts=p.joint_rand_parts)) for p in packed]


def test_validated_batches_are_checked_client_by_client_over_tls(fed):
    spec = dca_spec(n=N, d=D, deadline=20.0, max_missing=T, noise=dca_pb2.DISCRETE_GAUSSIAN, validate=dca_pb2.VALIDATE_RANGE, fractional_bits=F_BITS,
                    sensitivity=2.0)
    job = create_dca(fed, spec)
    ep = Endpoints.load(fed.workdir)  # the operator certificate: a router / load generator
    with channel(fed, "curator", ep.tls) as ch:
        ann = dca_pb2_grpc.DcaCuratorStub(ch).GetJob(common_pb2.JobRef(job_id=job), timeout=30)
    params = DcaParams.from_spec(job, ann.spec)

    honest = ["b-1", "b-2", "b-3"]
    Z = np.random.default_rng(5).uniform(-0.8, 0.8, (len(honest), D))  # public test data
    ids, batches = next(validated_cohort(params, honest, Z, Drbg.from_os()))
    assert ids == honest

    short = dca_pb2.ShareBatch()
    short.CopyFrom(batches[0])
    short.validated.blinds = short.validated.blinds[:-1]
    with channel(fed, NODES[0], ep.tls) as ch:
        e = refused(lambda: dca_pb2_grpc.ComputeNodeStub(ch).SubmitShareBatch(short, timeout=30))
    assert_status(e, grpc.StatusCode.INVALID_ARGUMENT, "b-1")

    for k, node in enumerate(NODES):
        r = _send(fed, ep.tls, node, batches[k])
        assert (r.accepted, len(r.rejected)) == (3, 0), r
    again = _send(fed, ep.tls, NODES[1], batches[1])
    assert again.accepted == 0 and {x.problem for x in again.rejected} == {common_pb2.REPLAY}

    for k, batch in enumerate(_mallory(params, job, ["mallory", "b-4", "b-4"])):
        r = _send(fed, ep.tls, NODES[k], batch)
        assert r.accepted == 2 and [(x.client_id, x.problem) for x in r.rejected] == [("b-4", common_pb2.REPLAY)], r

    st = wait_dca(fed, job, timeout=120)
    assert st.state == "RELEASED", st
    with operator_curator(fed) as ch:
        rel = job_host(ch).GetRelease(common_pb2.JobRef(job_id=job), timeout=30).dca
    assert (rel.clients_included, rel.clients_rejected) == (len(honest) + 1, 1) and "mallory" not in str(rel)
    err = np.array(rel.values) - Z.sum(axis=0)  # b-4 holds zeros
    assert np.all(np.abs(err) <= 6 * math.sqrt(rel.noise_variance) + 4 * 2.0**-F_BITS), (err, rel.noise_variance)
    assert_all_serving(fed)
