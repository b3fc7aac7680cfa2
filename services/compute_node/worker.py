"""A worker process of a compute node (w = 1..W−1; started by the node's coordinator, see workers.py).

    python -m mpdp_services.compute_node.worker --config-json FILE --worker W --port P --socket PATH

It serves the node's public ComputeNode service on the node's port (SO_REUSEPORT) with the node's certificate
and the same role gate. Shares (SubmitShares, SubmitShareBatch) are taken here: their shape is checked and the
shares kept by :class:`mpdp.dca.worker.WorkerShares`, their clients accounted by the coordinator (``Claim``).
Every other RPC is relayed to the coordinator with the caller's verified certificate. Orders from the
coordinator (WorkerFinish: sum and report, or drop) arrive on the ``Link`` stream. Prints
``MPDP-WORKER-READY`` once it serves.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from pathlib import Path

import grpc
from google.protobuf.message import Message

from mpdp.dca.errors import InvalidJob
from mpdp.dca.params import DcaParams
from mpdp.dca.worker import Parsed, WorkerShares, rejection_receipt
from mpdp.messages import common_pb2, dca_pb2 as pb, dca_pb2_grpc as pb_grpc
from mpdp.protocol import Peer, ProtocolError
from mpdp_services.common import config as cfgmod
from mpdp_services.common import errors, jobs
from mpdp_services.common.processes import exit_if_orphaned, raise_fd_limit
from mpdp_services.common.readiness import compile_kernels
from mpdp_services.common.rpc import start_server
from mpdp_services.compute_node.server import SERVICE, ComputeNode, interceptor
from mpdp_services.compute_node.workers import RELAYED, WORKER_HEADER

log = logging.getLogger("mpdp.compute_node.worker")
LOCAL_SECONDS = 120.0  # deadline of a call on the local socket


class _Job:
    """One job at this worker: its shares and a lock (a claim and the keeping of its shares are one step)."""

    def __init__(self, shares: WorkerShares) -> None:
        self.shares = shares
        self.lock = asyncio.Lock()


class WorkerNode(ComputeNode):
    """The public service at a worker: shares here, everything else relayed to the coordinator."""

    def __init__(self, cfg: cfgmod.ComputeNodeConfig, worker: int, local: grpc.aio.Channel) -> None:
        super().__init__(cfg)
        self.worker = worker
        self.local = pb_grpc.ComputeNodeLocalStub(local)
        self.md = ((WORKER_HEADER, str(worker)),)
        self.held: dict[str, _Job] = {}

    async def _job(self, job_id: str, context) -> _Job:  # type: ignore[override]
        job = self.held.get(job_id)
        if job is not None and not job.shares.finished:
            return job
        if not jobs.valid_id(job_id):
            await errors.refuse(context, common_pb2.UNKNOWN_JOB, "no such job (not a job id)")
        try:
            ann = await self.local.Attach(common_pb2.JobRef(job_id=job_id), timeout=LOCAL_SECONDS, metadata=self.md)
        except grpc.aio.AioRpcError as e:
            await errors.relay(context, e.code(), e.details())
        if job_id in self.held:  # attached meanwhile by another call
            return self.held[job_id]
        try:
            shares = WorkerShares(DcaParams.from_spec(job_id, ann.spec), self.cfg.name, ann.verify_key)
        except (InvalidJob, ValueError):
            await errors.refuse(context, common_pb2.INVALID_JOB, "the job's parameters are out of range")
        job = self.held[job_id] = _Job(shares)
        return job

    async def _claim(self, job: _Job, parsed: Parsed) -> tuple[int, list]:
        """Claim the parsed clients at the coordinator and keep the accepted shares (one step per job).

        While the node's backlog is full the coordinator holds a claim until there is room (ComputeNode.room). A claim
        holds the job's lock here, so while another claim holds it this call first waits for room with an empty claim,
        beside the held one: a held claim must not make the calls behind it wait out its whole wait before their own."""
        if not parsed.positions:
            return 0, parsed.rejected
        if job.lock.locked():
            try:
                await self.local.Claim(pb.WorkerClaim(job_id=parsed.claim.job_id), timeout=LOCAL_SECONDS, metadata=self.md)
            except grpc.aio.AioRpcError:
                pass  # the claim itself meets the same refusal and reports it
        async with job.lock:
            if job.shares.finished:
                return 0, job.shares.refused(parsed, common_pb2.STEP_OUT_OF_ORDER, "submissions to this job are closed")
            try:
                reply = await self.local.Claim(parsed.claim, timeout=LOCAL_SECONDS, metadata=self.md)
            except grpc.aio.AioRpcError as e:
                return 0, job.shares.refused(parsed, common_pb2.Problem.ValueType(errors.problem_from_status(e.code(), e.details())), (e.details() or "").split(": ", 1)[-1])
            return job.shares.apply(parsed, reply)

    async def _take_shares(self, hosted, sender: Peer, shares, receipt: pb.ShareReceipt, context) -> None:
        parsed = hosted.shares.parse_shares(sender.role, sender.name, [s for s in shares])
        accepted, rejected = await self._claim(hosted, parsed)
        receipt.accepted += accepted
        for _, r in sorted(rejected, key=lambda x: x[0]):
            receipt.rejected.append(r)

    async def SubmitShareBatch(self, request: pb.ShareBatch, context) -> pb.ShareReceipt:
        sender = await self._sender(context)
        job = await self._job(request.job_id, context)
        try:
            parsed = job.shares.parse_batch(sender.role, sender.name, request)
        except ProtocolError as e:
            await errors.abort(context, e)
        accepted, rejected = await self._claim(job, parsed)
        return rejection_receipt(request.job_id, accepted, rejected)

    async def _relay(self, method: str, request, context):
        pems = context.auth_context().get("x509_pem_cert") or [b""]
        call = pb.RelayedCall(method=method, caller_certificate=pems[0], request=request.SerializeToString())
        try:
            reply = await self.local.Relay(call, timeout=LOCAL_SECONDS, metadata=self.md)
        except grpc.aio.AioRpcError as e:
            await errors.refuse(context, common_pb2.PEER_UNREACHABLE, f"the node's coordinator is unreachable ({e.code().name})")
        if reply.code:
            code = next((c for c in grpc.StatusCode if c.value[0] == reply.code), grpc.StatusCode.UNKNOWN)
            await errors.relay(context, code, reply.details)
        return RELAYED_RESPONSES[method].FromString(reply.response)

    async def AnnounceJob(self, request, context):
        return await self._relay("AnnounceJob", request, context)

    async def ReportReceivedClients(self, request, context):
        return await self._relay("ReportReceivedClients", request, context)

    async def ShareVerifyKeyPiece(self, request, context):
        return await self._relay("ShareVerifyKeyPiece", request, context)

    async def CloseSubmissions(self, request, context):
        return await self._relay("CloseSubmissions", request, context)

    async def GetPartialSum(self, request, context):
        return await self._relay("GetPartialSum", request, context)

    async def AbortJob(self, request, context):
        return await self._relay("AbortJob", request, context)

    async def GetJobDigest(self, request, context):
        return await self._relay("GetJobDigest", request, context)

    # -- orders from the coordinator -------------------------------------------------------------------
    async def follow(self) -> None:
        """Carry out the coordinator's orders until the link ends (then the node is stopping: so does this worker)."""
        async for order in self.local.Link(pb.WorkerHello(worker=self.worker), metadata=self.md):
            job = self.held.get(order.job_id)
            if job is None and order.drop:
                continue
            if job is None:  # no client of the job reached this worker: its partial sum is 0 over 0 clients
                try:
                    ann = await self.local.Attach(common_pb2.JobRef(job_id=order.job_id), timeout=LOCAL_SECONDS, metadata=self.md)
                    job = _Job(WorkerShares(DcaParams.from_spec(order.job_id, ann.spec), self.cfg.name, ann.verify_key))
                except (grpc.aio.AioRpcError, InvalidJob, ValueError) as e:
                    log.warning("job %s: cannot attach to finish it: %s", order.job_id, e)
                    continue
            async with job.lock:
                if order.drop:
                    job.shares.drop()
                    self.held.pop(order.job_id, None)
                    continue
                out = job.shares.finish(order)
            self.held.pop(order.job_id, None)
            try:
                await self.local.Sum(out, timeout=LOCAL_SECONDS, metadata=self.md)
            except grpc.aio.AioRpcError as e:
                log.warning("job %s: the coordinator refused worker %d's partial sum: %s", order.job_id, self.worker, e.details())


RELAYED_RESPONSES: dict[str, type[Message]] = {"AnnounceJob": common_pb2.Ack, "ReportReceivedClients": common_pb2.Ack,
                     "ShareVerifyKeyPiece": common_pb2.Ack, "CloseSubmissions": common_pb2.Ack,
                     "GetPartialSum": pb.PartialSum, "AbortJob": common_pb2.Ack, "GetJobDigest": pb.JobDigest}
assert set(RELAYED_RESPONSES) == set(RELAYED)


async def run(cfg: cfgmod.ComputeNodeConfig, worker: int, port: int, sock: str) -> None:
    local = grpc.aio.insecure_channel(f"unix:{sock}", options=[("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)])
    node = WorkerNode(cfg, worker, local)
    host = cfg.listen.rsplit(":", 1)[0]
    await asyncio.to_thread(compile_kernels)  # before this worker shares the node's port: no job meets it compiling
    server, _, _ = await start_server(cfg.tls.files(), f"{host}:{port}", interceptor(cfg), lambda s: pb_grpc.add_ComputeNodeServicer_to_server(node, s), [SERVICE], reuse_port=True)
    follow = asyncio.ensure_future(node.follow())
    print("MPDP-WORKER-READY", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    follow.add_done_callback(lambda _: stop.set())
    await stop.wait()
    follow.cancel()
    await server.stop(1)
    await local.close()
    await node.channels.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config-json", required=True)
    ap.add_argument("--worker", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--socket", required=True)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format=f"%(asctime)s %(name)s[{args.worker}] %(levelname)s %(message)s")
    exit_if_orphaned()
    raise_fd_limit()
    cfg = cfgmod.ComputeNodeConfig(**json.loads(Path(args.config_json).read_text()))
    asyncio.run(run(cfg, args.worker, args.port, args.socket))


if __name__ == "__main__":
    main()
