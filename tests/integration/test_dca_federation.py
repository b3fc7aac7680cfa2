"""DCA over real processes: M = 3 compute nodes, the curator, and simulated clients over mutual TLS.

Invariants: the released sum is the exact ring sum of the clients' noisy encodings (seeded runs equal
the in-memory computation bit for bit) and its noise has the calibrated variance across runs; a client
dying mid-stream and a node restarting mid-job end cleanly — released over ≥ N − T clients with
sufficient noise, or failed with nothing released, never an under-noised release; jobs and releases
survive a curator restart.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import grpc
import numpy as np
import pytest
from scipy import stats

from mpdp.dca.client import ClientCohort
from mpdp.dca.params import DcaParams
from mpdp.math.drbg import Drbg
from mpdp.math.fixedpoint import decode_u64
from mpdp.messages import common_pb2, dca_pb2 as pb
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.common.processes import spawn
from mpdp_services.dca_client.client import DcaOperator, submit_cohort
from mpdp_services.launcher.federation import LocalFederation

pytestmark = pytest.mark.integration
NODES = ["node-1", "node-2", "node-3"]


@pytest.fixture(scope="module")
def dca_fed(tmp_path_factory):
    fed = LocalFederation(tmp_path_factory.mktemp("dca") / "fed", [], {}, test_mode=True, paillier_bits=768, dgk_bits=768, compute_nodes=NODES)
    fed.start()
    yield fed
    fed.stop()


def _spec(n: int, d: int, t: int, seed: bytes = b"", deadline: float = 60.0) -> pb.DcaJobSpec:
    return pb.DcaJobSpec(
        dimension=d, clients=n, max_missing=t, epsilon=1.0, delta=1e-5, sensitivity=2 * np.sqrt(d), mode=common_pb2.CORRECTED,
        clip_bounds=[1.0], compute_nodes=NODES, deadline_seconds=deadline, simulation_seed=seed, validate=pb.VALIDATE_NONE,
    )


def _run(fed, spec, Z, batched=True):
    ep = Endpoints.load(fed.workdir)
    with DcaOperator(ep) as op:
        job = op.create(spec)
        rep = asyncio.run(submit_cohort(ep, ep.tls, job, [f"c{i}" for i in range(len(Z))], Z, batched=batched, batch_size=37))
        status = op.wait(job, timeout=120)
        return job, rep, status, (op.release(job) if status.state == "RELEASED" else None)


@pytest.mark.parametrize("batched", [True, False])
def test_release_equals_exact_sum_of_noisy_encodings(dca_fed, batched):
    n, d = 120, 6
    Z = np.random.default_rng(3).uniform(-1, 1, size=(n, d))
    spec = _spec(n, d, 2, seed=f"exact-{batched}".encode())
    job, rep, status, rel = _run(dca_fed, spec, Z, batched)
    assert status.state == "RELEASED" and rep.accepted == 3 * n and not rep.rejected
    # the same cohort in memory (same seed, same job id): Σ_i u_i mod 2^64
    params = DcaParams.from_spec(job, spec)
    cohort = ClientCohort(params, [f"c{i}" for i in range(n)], Z, Drbg.from_seed(params.simulation_seed).child("cohort"), keep_noise=True)
    enc = np.zeros(d, dtype=np.uint64)
    for b in cohort.batches(37):
        enc += b.encoded.sum(axis=0, dtype=np.uint64)
    assert np.frombuffer(rel.encoded_sum, dtype="<u8").tolist() == enc.tolist()
    assert np.allclose(rel.values, decode_u64(enc, params.frac_bits))
    assert rel.clients_included == n and rel.seeded


def test_nodes_count_received_and_included_clients(dca_fed):
    """Each compute node's metrics endpoint counts the clients it received and included."""
    from tests.integration.test_metrics import _metrics

    urls = json.loads((dca_fed.workdir / "endpoints.json").read_text())["http"]
    before = {n: _metrics(urls[n]) for n in NODES}
    n, d = 40, 3
    _, _, status, rel = _run(dca_fed, _spec(n, d, 0, seed=b"metrics"), np.zeros((n, d)))
    assert status.state == "RELEASED" and rel.clients_included == n
    for node in NODES:
        after, was = _metrics(urls[node]), before[node]
        for name in ("mpdp_dca_clients_received_total", "mpdp_dca_clients_included_total"):
            assert after[name] - was.get(name, 0.0) == n, (node, name)
        assert after.get('mpdp_stage_seconds_count{protocol="dca-node",stage="AWAIT_SHARES"}', 0) >= 1


def test_noise_variance_across_runs(dca_fed):
    n, d, runs = 100, 20, 12
    Z = np.random.default_rng(4).uniform(-1, 1, size=(n, d))
    errs = []
    for r in range(runs):
        _, _, status, rel = _run(dca_fed, _spec(n, d, 0, seed=f"var-{r}".encode()), Z)
        assert status.state == "RELEASED"
        errs.append(np.array(rel.values) - Z.sum(axis=0))
        expected = rel.noise_variance
    e = np.concatenate(errs)
    assert expected == pytest.approx(n * rel.sigma_client**2)
    assert rel.sigma_client == pytest.approx(rel.sigma_std / np.sqrt(n - 0 - 1))
    # χ² test of the sample variance against the calibrated one (mean known to be 0)
    stat = np.sum(e**2) / expected
    lo, hi = stats.chi2.ppf([0.0005, 0.9995], df=len(e))
    assert lo < stat < hi, (stat, lo, hi)


def _partial_client_job(fed, n: int, t: int, full: int):
    ep = Endpoints.load(fed.workdir)
    op = DcaOperator(ep)
    job = op.create(_spec(n, 4, t, deadline=20.0))  # room for the helper process to start on a loaded machine
    proc = spawn([sys.executable, "-m", "tests.integration.dca_partial_client", str(fed.workdir), job, str(full)], stdout=subprocess.PIPE)
    line = proc.stdout.readline().decode().strip()
    assert line == "READY", line
    proc.kill()  # the client dies mid-stream
    proc.wait()
    status = op.wait(job, timeout=120)
    return op, job, status


def test_client_killed_mid_stream_within_t_is_released_with_enough_noise(dca_fed):
    op, job, status = _partial_client_job(dca_fed, n=62, t=2, full=60)
    assert status.state == "RELEASED", status.detail
    rel = op.release(job)
    assert rel.clients_included == 60 >= rel.clients_expected - rel.max_missing
    assert rel.noise_variance == pytest.approx(60 * rel.sigma_client**2)
    assert rel.noise_variance >= rel.sigma_std**2  # after removing T clients' noise, still ≥ σ²_std
    op.close()


def test_client_killed_beyond_t_releases_nothing(dca_fed):
    op, job, status = _partial_client_job(dca_fed, n=100, t=2, full=60)
    assert status.state == "FAILED" and status.problem == common_pb2.INSUFFICIENT_NOISE, status
    with pytest.raises(grpc.RpcError) as e:
        op.release(job)
    assert e.value.code() == grpc.StatusCode.ABORTED and "published nothing" in e.value.details()  # the job host: JOB_FAILED, nothing released
    op.close()


def test_node_restarted_mid_job_never_releases_silently(dca_fed):
    ep = Endpoints.load(dca_fed.workdir)
    n, d = 80, 4
    Z = np.random.default_rng(6).uniform(-1, 1, size=(n, d))
    with DcaOperator(ep) as op:
        job = op.create(_spec(n, d, 2, deadline=6.0))
        asyncio.run(submit_cohort(ep, ep.tls, job, [f"c{i}" for i in range(40)], Z[:40]))
        dca_fed.kill("node-2")
        dca_fed.restart("node-2")  # comes back without the job's state
        with pytest.raises(grpc.RpcError) as e:
            asyncio.run(submit_cohort(ep, ep.tls, job, [f"c{i}" for i in range(40, n)], Z[40:]))
        # the restarted node lost the job (NOT_FOUND), a node is down (UNAVAILABLE), the job failed (ABORTED), or,
        # on a loaded machine, the 6 s submission window closed first and the late shares are refused (FAILED_PRECONDITION)
        assert e.value.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ABORTED, grpc.StatusCode.FAILED_PRECONDITION)
        status = op.wait(job, timeout=120)
        assert status.state == "FAILED", status
        with pytest.raises(grpc.RpcError):
            op.release(job)
        # the restarted node serves new jobs
        job2, rep, status2, rel = _run(dca_fed, _spec(50, d, 0), Z[:50])
        assert status2.state == "RELEASED" and rel.clients_included == 50


def test_jobs_survive_a_curator_restart(dca_fed):
    ep = Endpoints.load(dca_fed.workdir)
    n, d = 60, 3
    Z = np.random.default_rng(7).uniform(-1, 1, size=(n, d))
    job_done, _, st, rel = _run(dca_fed, _spec(n, d, 0), Z)
    assert st.state == "RELEASED"
    with DcaOperator(ep) as op:
        job_open = op.create(_spec(n, d, 0, deadline=30.0))
        asyncio.run(submit_cohort(ep, ep.tls, job_open, [f"c{i}" for i in range(30)], Z[:30]))
    dca_fed.kill("curator")
    dca_fed.restart("curator")
    with DcaOperator(ep) as op:
        assert op.release(job_done) == rel
        asyncio.run(submit_cohort(ep, ep.tls, job_open, [f"c{i}" for i in range(30, n)], Z[30:]))
        status = op.wait(job_open, timeout=120)
        assert status.state == "RELEASED", status
        assert op.release(job_open).clients_included == n
