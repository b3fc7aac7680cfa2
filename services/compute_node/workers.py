"""A compute node of W processes: the coordinator's side (worker 0; docs/deploy.md "Scaling a compute node").

With ``workers: W > 1`` the node process (the coordinator) binds its port with SO_REUSEPORT and spawns W − 1
worker processes (:mod:`mpdp_services.compute_node.worker`, each through :func:`mpdp_services.common.processes.spawn`, so
they die with it) that listen on the same port with the same certificate; the kernel spreads incoming connections
over the W listening processes. Each job's :class:`~mpdp.dca.compute_node.ComputeNodeMachine` lives here. A worker
checks and keeps the shares it receives and asks this process to account their clients (``Claim``); every other
RPC that reaches a worker (from the curator or another node) is relayed here with the caller's certificate
(``Relay``). At agreement the machine asks each worker for its partial sum (a WorkerFinish on the worker's
``Link`` stream); the worker answers with ``Sum``.

The local channel is gRPC over a Unix socket in a fresh 0700 directory: only processes of the node's own OS user
can connect, so a local caller is one of the node's workers, and the identity a worker relays is the one its TLS
and role gate verified.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.message import Message

from mpdp.messages import common_pb2, dca_pb2 as pb, dca_pb2_grpc as pb_grpc
from mpdp.protocol import Peer, ProtocolError
from mpdp_services.common import errors
from mpdp_services.common.processes import spawn

log = logging.getLogger("mpdp.compute_node")

WORKER_HEADER = "mpdp-worker"  # metadata naming the calling worker (1..W−1) on the local socket
RELAYED: dict[str, type[Message]] = {  # the ComputeNode RPCs a worker relays: method → request type
    "AnnounceJob": pb.DcaJobAnnouncement,
    "ReportReceivedClients": pb.ReceivedClients,
    "ShareVerifyKeyPiece": pb.VerifyKeyPiece,
    "CloseSubmissions": pb.SubmissionsClose,
    "GetPartialSum": common_pb2.JobRef,
    "AbortJob": common_pb2.JobAbort,
    "GetJobDigest": common_pb2.JobRef,
}


class RelayContext:
    """What a relayed call's servicer method sees as its context: the caller's certificate; refusals are captured."""

    class Aborted(Exception):
        pass

    def __init__(self, pem: bytes) -> None:
        self._pem = pem
        self.code: grpc.StatusCode | None = None
        self.details = ""

    def auth_context(self) -> dict[str, list[bytes]]:
        return {"x509_pem_cert": [self._pem]}

    async def abort(self, code: grpc.StatusCode, details: str = "", *_: Any) -> None:
        self.code, self.details = code, details
        raise RelayContext.Aborted()


class Coordinator(pb_grpc.ComputeNodeLocalServicer):
    """Worker 0: the local service the other workers call, and the orders it sends them."""

    def __init__(self, node: Any, workers: int) -> None:
        self.node = node  # the ComputeNode servicer (its jobs and handlers)
        self.workers = workers
        self.orders: dict[int, asyncio.Queue] = {w: asyncio.Queue() for w in range(1, workers)}
        self.procs: list[subprocess.Popen] = []

    # -- the orders --------------------------------------------------------------------------------
    def send(self, worker: int, order: pb.WorkerFinish) -> None:
        self.orders[worker].put_nowait(order)

    def drop(self, job_id: str) -> None:
        for q in self.orders.values():
            q.put_nowait(pb.WorkerFinish(job_id=job_id, drop=True))

    # -- the local service ---------------------------------------------------------------------------
    def _worker(self, context) -> int:
        md = dict(context.invocation_metadata() or ())
        try:
            w = int(md.get(WORKER_HEADER, ""))
        except ValueError:
            w = 0
        return w if 1 <= w < self.workers else 0

    async def Link(self, request: pb.WorkerHello, context):
        q = self.orders.get(request.worker)
        if q is None:
            await errors.refuse(context, common_pb2.WRONG_ROLE, "no such worker")
        while True:
            yield await q.get()

    async def Attach(self, request: common_pb2.JobRef, context) -> pb.DcaJobAnnouncement:
        hosted = await self.node._job(request.job_id, context)
        try:
            key = hosted.machine.worker_key()  # a validated job's verify key: to this node's own workers only
        except ProtocolError as e:
            await errors.abort(context, e)
        if not key:
            return hosted.announcement
        ann = pb.DcaJobAnnouncement()
        ann.CopyFrom(hosted.announcement)
        ann.verify_key = key
        return ann

    async def Claim(self, request: pb.WorkerClaim, context) -> pb.WorkerClaimReply:
        w = self._worker(context)
        hosted = await self.node._job(request.job_id, context)
        if not (request.client_ids or request.client_indices):  # a worker waiting for room before it claims (worker.py, _claim)
            await self.node.room(hosted, context)
            return pb.WorkerClaimReply()
        replies = await self.node.admit(hosted, Peer("worker", str(w)), request, context)  # the worker's SubmitShares / SubmitShareBatch waits with it
        return replies[0]

    async def Sum(self, request: pb.WorkerSum, context) -> common_pb2.Ack:
        w = self._worker(context)
        hosted = await self.node._job(request.job_id, context)
        try:
            await hosted.deliver(Peer("worker", str(w)), request, inline=True)
        except ProtocolError as e:
            await errors.abort(context, e)
        log.info("job %s: worker %d summed %d clients", request.job_id, w, request.clients_summed)
        return common_pb2.Ack()

    async def Relay(self, request: pb.RelayedCall, context) -> pb.RelayedReply:
        kind = RELAYED.get(request.method)
        if kind is None:
            return pb.RelayedReply(code=grpc.StatusCode.UNIMPLEMENTED.value[0], details="not a relayed method")
        ctx = RelayContext(request.caller_certificate)
        try:
            msg = kind.FromString(request.request)
            response = await getattr(self.node, request.method)(msg, ctx)
        except RelayContext.Aborted:
            return pb.RelayedReply(code=ctx.code.value[0], details=ctx.details)  # type: ignore[union-attr]
        return pb.RelayedReply(response=response.SerializeToString())

    # -- processes -------------------------------------------------------------------------------------
    async def start(self, cfg: Any, port: int) -> grpc.aio.Server:
        """Serve the local socket, then spawn the W − 1 workers on ``port`` and wait until each serves."""
        folder = Path(tempfile.mkdtemp(prefix="mpdp-node-"))  # 0700
        sock = folder / "local.sock"
        server = grpc.aio.server(options=[("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)])
        pb_grpc.add_ComputeNodeLocalServicer_to_server(self, server)
        server.add_insecure_port(f"unix:{sock}")
        await server.start()
        os.chmod(sock, 0o600)
        conf = folder / "node.json"
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(cfg.model_dump(mode="json")))
        for w in range(1, self.workers):
            self.procs.append(spawn(
                [sys.executable, "-m", "mpdp_services.compute_node.worker", "--config-json", str(conf), "--worker", str(w), "--port", str(port), "--socket", str(sock)],
                stdout=subprocess.PIPE,
            ))
        for p in self.procs:
            line = await asyncio.to_thread(p.stdout.readline)  # type: ignore[union-attr]
            if not line.startswith(b"MPDP-WORKER-READY"):
                raise OSError(f"a worker of compute node {cfg.name} did not start (exit code {p.poll()})")
        log.info("compute node %s: %d worker processes share port %d", cfg.name, self.workers - 1, port)
        return server

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
