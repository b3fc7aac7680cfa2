"""A compute node of W = 2 processes over real processes (services/compute_node/workers.py, worker.py): every node
of a 3-node federation runs a coordinator and one worker on one port (SO_REUSEPORT). Clients connect many times,
so the kernel spreads them over both processes of each node; one client reaches only two nodes (a dropout at the
third). The job releases the exact ring sum of the agreed clients' noisy encodings (seeded run, recomputed in
memory), A excludes the dropout, and both processes of the nodes summed clients."""

from __future__ import annotations

import asyncio
import re

import numpy as np
import pytest

from mpdp.dca import validation
from mpdp.dca.client import ClientCohort, ClientMachine
from mpdp.dca.params import DcaParams
from mpdp.math import field as F
from mpdp.math.drbg import Drbg
from mpdp.messages import common_pb2, dca_pb2 as pb, dca_pb2_grpc as pb_grpc
from mpdp.protocol import Send
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.dca_client.client import DcaOperator, _node_channels, fetch_job, submit_cohort
from mpdp_services.launcher.federation import LocalFederation

pytestmark = pytest.mark.integration
NODES = ["node-1", "node-2", "node-3"]
GROUPS, PER = 12, 5  # 12 cohorts of 5 clients, each over its own connections


@pytest.fixture(scope="module")
def fed2(tmp_path_factory):
    fed = LocalFederation(tmp_path_factory.mktemp("dcaw") / "fed", [], {}, test_mode=True, paillier_bits=768, dgk_bits=768, compute_nodes=NODES, node_workers=2)
    fed.start()
    yield fed
    fed.stop()


async def _submit(ep, job, Z, seed):
    async def group(g):
        ids = [f"c{i:02d}" for i in range(g * PER, (g + 1) * PER)]
        return await submit_cohort(ep, ep.tls, job, ids, Z[g * PER : (g + 1) * PER], batched=g % 2 == 0, batch_size=2, rng=Drbg.from_seed(seed).child(f"group/{g}"))

    reports = await asyncio.gather(*(group(g) for g in range(GROUPS)))
    # the last client: its own machine, shares to nodes 1 and 2 only (lost at node 3)
    ann = await fetch_job(ep.curator_address, ep.curator_name, ep.tls, job)
    params = DcaParams.from_spec(job, ann.spec)
    last = ClientMachine(params, f"c{GROUPS * PER:02d}", Z[-1], Drbg.from_seed(seed).child("last"), keep_noise=True)
    outs = [o for o in last.submit() if isinstance(o, Send)]
    channels = _node_channels(ann, ep.tls)
    try:
        for o in outs[:2]:
            async def one(msg=o.message):
                yield msg
            r = await pb_grpc.ComputeNodeStub(channels[params.node_index(o.to.name)]).SubmitShares(one(), timeout=60)
            assert r.accepted == 1
    finally:
        await asyncio.gather(*(c.close() for c in channels))
    return reports


def test_two_workers_per_node_release_over_the_agreed_set(fed2):
    n, d = GROUPS * PER + 1, 5
    Z = np.random.default_rng(5).uniform(-1, 1, size=(n, d))
    seed = b"workers"
    spec = pb.DcaJobSpec(dimension=d, clients=n, max_missing=3, epsilon=1.0, delta=1e-5, sensitivity=2 * np.sqrt(d), mode=common_pb2.CORRECTED,
                         clip_bounds=[1.0], compute_nodes=NODES, deadline_seconds=6.0, simulation_seed=seed, roster_range=pb.RosterRange(prefix="c", digits=2),
                         validate=pb.VALIDATE_NONE)
    ep = Endpoints.load(fed2.workdir)
    with DcaOperator(ep) as op:
        job = op.create(spec)
        reports = asyncio.run(_submit(ep, job, Z, seed))
        assert all(r.accepted == 3 * PER and not r.rejected for r in reports)
        status = op.wait(job, timeout=120)  # node 3 never gets the last client: the nodes close at the deadline
        assert status.state == "RELEASED", status.detail
        rel = op.release(job)
    assert rel.clients_included == n - 1
    # the same clients in memory: Σ_i u_i mod 2^64 over the 60 who reached every node
    params = DcaParams.from_spec(job, spec)
    enc = np.zeros(d, dtype=np.uint64)
    for g in range(GROUPS):
        ids = [f"c{i:02d}" for i in range(g * PER, (g + 1) * PER)]
        cohort = ClientCohort(params, ids, Z[g * PER : (g + 1) * PER], Drbg.from_seed(seed).child(f"group/{g}"), keep_noise=True)
        for b in cohort.batches(2):
            enc += b.encoded.sum(axis=0, dtype=np.uint64)
    assert np.frombuffer(rel.encoded_sum, dtype="<u8").tolist() == enc.tolist()
    # within noise of the true sum, too
    err = np.asarray(rel.values) - Z[:-1].clip(-1, 1).sum(axis=0)
    assert np.max(np.abs(err)) < 8 * np.sqrt(rel.noise_variance)
    # every node's second process summed some of the clients (and the coordinator the rest)
    for node in NODES:
        log = (fed2.workdir / node / "service.log").read_text()
        summed = [int(x) for x in re.findall(rf"job {job}: worker 1 summed (\d+) clients", log)]
        assert len(summed) == 1 and 0 < summed[0] < n - 1, (node, summed)


def test_two_workers_per_node_run_a_validated_job_and_reject_a_malicious_client(fed2):
    """A validated job (range): honest cohorts over many connections (spread over both processes of each node) and
    one client whose first coordinate reads 10^9, with an honest proof of that input. Every node rejects it alike
    (its verifier records come from whichever process took its share), the job releases the honest sum within its
    noise and counts one rejection; both processes of every node verified and summed clients."""
    groups, per, d, f_bits = 12, 2, 3, 16
    n = groups * per + 1
    Z = np.random.default_rng(9).uniform(-0.8, 0.8, size=(groups * per, d))
    spec = pb.DcaJobSpec(dimension=d, clients=n, max_missing=2, epsilon=1.0, delta=1e-5, sensitivity=2.0, mode=common_pb2.CORRECTED,
                         clip_bounds=[1.0], compute_nodes=NODES, deadline_seconds=30.0, noise=pb.DISCRETE_GAUSSIAN, validate=pb.VALIDATE_RANGE,
                         fractional_bits=f_bits)
    ep = Endpoints.load(fed2.workdir)
    with DcaOperator(ep) as op:
        job = op.create(spec)

        async def honest():
            async def group(g):
                ids = [f"v{i:02d}" for i in range(g * per, (g + 1) * per)]
                return await submit_cohort(ep, ep.tls, job, ids, Z[g * per : (g + 1) * per])
            return await asyncio.gather(*(group(g) for g in range(groups)))

        reports = asyncio.run(honest())
        assert all(r.accepted == per * len(NODES) and not r.rejected for r in reports)
        ann = asyncio.run(fetch_job(ep.curator_address, ep.curator_name, ep.tls, job))
        assert ann.verify_key == b""  # the nodes' key never leaves them
        params = DcaParams.from_spec(job, ann.spec)
        plan = params.validation
        assert plan is not None
        meas = validation.encode_input(plan, np.zeros(d, dtype=np.int64)).astype(np.uint64)
        meas[0] = F.scalar(10**9 * 2**f_bits + int(meas[0]))

        async def mallory():
            channels = _node_channels(ann, ep.tls)
            try:
                for k, s in enumerate(validation.client_shares(plan, job, "mallory", meas, params.M, seeded=False)):
                    async def one(msg=pb.ClientShare(job_id=job, client_id="mallory", spec_digest=params.spec_digest, validated=pb.ValidatedShare(
                            measurement=s.measurement, proof=s.proof, share_seed=s.share_seed, blind=s.blind, joint_rand_parts=s.joint_rand_parts))):
                        yield msg
                    r = await pb_grpc.ComputeNodeStub(channels[k]).SubmitShares(one(), timeout=60)
                    assert r.accepted == 1 and not r.rejected
            finally:
                await asyncio.gather(*(c.close() for c in channels))

        async def short():
            """A share one element short, over several connections (so over both processes of node 1): refused each time."""
            s = validation.client_shares(plan, job, "shorty", meas, params.M, seeded=False)[0]
            msg = pb.ClientShare(job_id=job, client_id="shorty", spec_digest=params.spec_digest, validated=pb.ValidatedShare(
                measurement=s.measurement[:-8], proof=s.proof, share_seed=s.share_seed, blind=s.blind, joint_rand_parts=s.joint_rand_parts))
            out = []
            for _ in range(6):
                channels = _node_channels(ann, ep.tls, own_connection=True)
                try:
                    async def one():
                        yield msg
                    out.append(await pb_grpc.ComputeNodeStub(channels[0]).SubmitShares(one(), timeout=60))
                finally:
                    await asyncio.gather(*(c.close() for c in channels))
            return out

        for r in asyncio.run(short()):
            assert r.accepted == 0 and [x.problem for x in r.rejected] == [common_pb2.MALFORMED], r
            assert len(r.rejected[0].detail) < 300 and "shorty" not in r.rejected[0].detail
        asyncio.run(mallory())
        status = op.wait(job, timeout=120)
        assert status.state == "RELEASED", status.detail
        rel = op.release(job)
    assert (rel.clients_included, rel.clients_rejected) == (groups * per, 1)
    err = np.asarray(rel.values) - Z.sum(axis=0)
    assert np.max(np.abs(err)) < 8 * np.sqrt(rel.noise_variance) + groups * per * 2.0**-f_bits, (err, rel.noise_variance)
    for node in NODES:
        log = (fed2.workdir / node / "service.log").read_text()
        summed = [int(x) for x in re.findall(rf"job {job}: worker 1 summed (\d+) clients", log)]
        assert len(summed) == 1 and 0 < summed[0] < groups * per, (node, summed)


def test_workers_die_with_their_node(fed2):
    """A node's worker processes are its children and die with it, even when it is SIGKILLed (last test: kills node-3)."""
    import signal
    import time
    from pathlib import Path

    pid = fed2.procs["node-3"].popen.pid
    kids = [int(c) for t in Path(f"/proc/{pid}/task").iterdir() for c in (t / "children").read_text().split()]
    assert len(kids) == 1  # W = 2: one worker besides the coordinator
    fed2.kill("node-3", signal.SIGKILL)
    def alive(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] != "Z"  # a zombie is dead
        except (OSError, IndexError):
            return False

    deadline = time.monotonic() + 30
    while alive(kids[0]):  # the kernel's death signal, not a timer, ends it: poll for it
        assert time.monotonic() < deadline, "the worker outlived its node"
        time.sleep(0.05)
