"""Helper process for the DCA integration tests: submits some clients fully, one client to node 0 only,
prints READY, then blocks until killed (a client dying mid-stream)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import numpy as np

from mpdp.dca.client import ClientCohort
from mpdp.dca.params import DcaParams
from mpdp.math.drbg import Drbg
from mpdp.messages import dca_pb2 as pb, dca_pb2_grpc as pb_grpc
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.dca_client.client import _fetch_job, _node_channels, _split


async def main(endpoints: str, job_id: str, full: int) -> None:
    ep = Endpoints.load(Path(endpoints))
    ann = await _fetch_job(ep.curator_address, ep.curator_name, ep.tls, job_id)
    params = DcaParams.from_spec(job_id, ann.spec)
    Z = np.random.default_rng(1).uniform(-1, 1, size=(full + 1, params.dimension))
    cohort = ClientCohort(params, [f"c{i}" for i in range(full + 1)], Z, Drbg.from_os())
    batch = next(cohort.batches(full + 1))
    channels = _node_channels(ann, ep.tls)
    queues = [asyncio.Queue() for _ in channels]

    async def stream(k: int):
        async def it():
            while (m := await queues[k].get()) is not None:
                yield m

        return await pb_grpc.ComputeNodeStub(channels[k]).SubmitShares(it(), timeout=600)

    stubs = [pb_grpc.ComputeNodeStub(c) for c in channels]
    # the first `full` clients: acknowledged batches, so exactly they reach every node
    for k, b in enumerate(batch.batches):
        rows = pb.ShareBatch(job_id=b.job_id, spec_digest=b.spec_digest, client_ids=b.client_ids[:full], masked_vectors=b.masked_vectors[: 8 * params.dimension * full])
        receipt = await stubs[k].SubmitShareBatch(rows, timeout=60)
        assert receipt.accepted == full, receipt
    # the last client: one share on an open stream to node 0, nothing to the others, then the process dies
    tasks = [asyncio.ensure_future(stream(k)) for k in range(len(channels))]
    last = list(_split(batch.batches[0], params.dimension))[full]
    await queues[0].put(last)
    while not queues[0].empty():
        await asyncio.sleep(0.01)
    print("READY", flush=True)
    await asyncio.gather(*tasks)  # never completes: the streams stay open until the process is killed


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
