"""Validated DCA: a compute node's verification throughput with W = 1 vs W = 2 processes per node (TLS on).

    python benchmarks/dca_validated_workers.py [--clients 300] [--dim 1000] [--workers 1,2] [--connections 8]
        [--json benchmarks/results/dca_validated_workers.json]

For each W, a LocalFederation (curator + 3 compute nodes, each node W processes on one port) runs one validated
(range) job of N clients at dimension d. The clients' shares and proofs are built before the clock starts (the load
generator is not what is measured); then the shares are streamed to every node over ``--connections`` TLS
connections per node (each its own TCP connection, so the kernel spreads them over a node's W processes), and the
clock stops when the operator sees RELEASED. ``clients_per_second`` = N / seconds is the federation's verification
throughput (every node verifies every client; the nodes run concurrently on the same host). The machine is shared
(2 cores, other work running): the load average is recorded with each run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from mpdp.dca import validation
from mpdp.dca.params import DcaParams
from mpdp.messages import common_pb2, dca_pb2 as pb, dca_pb2_grpc as pb_grpc
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.dca_client.client import DcaOperator, _node_channels, fetch_job
from mpdp_services.launcher.federation import LocalFederation

NODES = ["node-1", "node-2", "node-3"]


def _shares(params: DcaParams, n: int) -> list[list[pb.ClientShare]]:
    """Per node, the N clients' ClientShare messages (honest inputs in [−1, 1], proofs built in batches)."""
    plan = params.validation
    assert plan is not None
    rng = np.random.default_rng(3)
    y = np.round(rng.uniform(-1, 1, (n, params.dimension)) * plan.scale).astype(np.int64)
    meas = np.stack([validation.encode_input(plan, row) for row in y])
    ids = [f"c{i:06d}" for i in range(n)]
    per_client = validation.client_shares_many(plan, params.job_id, ids, meas, params.M, seeded=False)
    return [[pb.ClientShare(job_id=params.job_id, client_id=cid, spec_digest=params.spec_digest, validated=pb.ValidatedShare(
                measurement=s[k].measurement, proof=s[k].proof, share_seed=s[k].share_seed, blind=s[k].blind, joint_rand_parts=s[k].joint_rand_parts))
             for cid, s in zip(ids, per_client)] for k in range(params.M)]


async def _stream(ann: pb.DcaJobAnnouncement, ep: Endpoints, shares: list[list[pb.ClientShare]], connections: int) -> int:
    async def one(k: int, part: list[pb.ClientShare]) -> int:
        ch = _node_channels(ann, ep.tls, own_connection=True)
        try:
            async def gen():
                for s in part:
                    yield s
            r = await pb_grpc.ComputeNodeStub(ch[k]).SubmitShares(gen(), timeout=3600)
            return r.accepted
        finally:
            await asyncio.gather(*(c.close() for c in ch))

    got = await asyncio.gather(*(one(k, shares[k][c::connections]) for k in range(len(shares)) for c in range(connections)))
    return sum(got)


def run(workers: int, n: int, d: int, connections: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        fed = LocalFederation(Path(tmp) / "fed", [], {}, test_mode=True, paillier_bits=512, dgk_bits=512, compute_nodes=NODES, node_workers=workers)
        fed.start()
        try:
            ep = Endpoints.load(fed.workdir)
            spec = pb.DcaJobSpec(dimension=d, clients=n, max_missing=1, epsilon=1.0, delta=1e-5, sensitivity=2.0, clip_bounds=[1.0], mode=common_pb2.CORRECTED,
                                 compute_nodes=NODES, deadline_seconds=3600.0, noise=pb.DISCRETE_GAUSSIAN, validate=pb.VALIDATE_RANGE,
                                 fractional_bits=16)
            with DcaOperator(ep) as op:
                job = op.create(spec)
                ann = asyncio.run(fetch_job(ep.curator_address, ep.curator_name, ep.tls, job))
                shares = _shares(DcaParams.from_spec(job, ann.spec), n)
                load = os.getloadavg()
                t0 = time.perf_counter()
                accepted = asyncio.run(_stream(ann, ep, shares, connections))
                st = op.wait(job, timeout=3600)
                seconds = time.perf_counter() - t0
                rel = op.release(job) if st.state == "RELEASED" else None
        finally:
            fed.stop()
    return {"W": workers, "N": n, "d": d, "M": len(NODES), "connections_per_node": connections, "seconds": seconds, "clients_per_second": n / seconds,
            "state": st.state, "accepted_shares": accepted, "clients_included": rel.clients_included if rel else 0, "load_before": load,
            "load_after": os.getloadavg(), "cpus": os.cpu_count()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=300)
    ap.add_argument("--dim", type=int, default=1000)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--json", default="benchmarks/results/dca_validated_workers.json")
    a = ap.parse_args()
    rows = []
    print(f"{'W':>2} {'N':>6} {'d':>5} {'seconds':>8} {'clients/s':>10} {'state':>9} {'load':>16}")
    for w in (int(x) for x in a.workers.split(",")):
        r = run(w, a.clients, a.dim, a.connections)
        rows.append(r)
        print(f"{r['W']:>2} {r['N']:>6} {r['d']:>5} {r['seconds']:>8.2f} {r['clients_per_second']:>10.1f} {r['state']:>9} {str(tuple(round(x, 1) for x in r['load_before'])):>16}", flush=True)
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps({"runs": rows, "argv": a.__dict__}, indent=1))
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
