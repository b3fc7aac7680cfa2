"""A DCA compute node as a gRPC service (Heikkilä et al. 2017, Algorithm 1).

Clients (PARTY certificates, one client each) stream their share m_{i,k}; routers (OPERATOR
certificates) may stream or batch many clients' shares, each accounted per client. The node sums as
shares arrive (memory O(d) per job plus the pending buffer, see :mod:`mpdp.dca.compute_node`), agrees
with the other nodes on the clients that reached all of them, and pushes q_k to the curator. Servicer
methods only feed the job's machine and forward its outputs.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import sys
from typing import TYPE_CHECKING

import grpc

from mpdp.dca.compute_node import ComputeNodeMachine
from mpdp.dca.engine import Reply
from mpdp.dca.errors import InvalidJob
from mpdp.messages import common_pb2, dca_pb2 as pb, dca_pb2_grpc as pb_grpc
from mpdp.protocol import CURATOR, Peer, ProtocolError, Send
from mpdp_services.common import config as cfgmod
from mpdp_services.common import errors, jobs, metrics, readiness as ready
from mpdp_services.common.rpc import PeerChannels, RoleInterceptor, advertised_address, caller, method_for_message, register_at_curator, roles_by_method, serve_until_signal, start_server, tls_failure
from mpdp_services.common.runtime import Hosted

if TYPE_CHECKING:
    from mpdp_services.compute_node.workers import Coordinator

log = logging.getLogger("mpdp.compute_node")

SERVICE = "mpdp.messages.ComputeNode"
CURATOR_SERVICE = "mpdp.messages.DcaCurator"
ROLES = roles_by_method(
    SERVICE,
    {
        "AnnounceJob": ("curator",),
        "SubmitShares": ("party", "operator"),
        "SubmitShareBatch": ("operator",),
        "ReportReceivedClients": ("compute_node",),
        "ShareVerifyKeyPiece": ("compute_node",),
        "CloseSubmissions": ("curator",),
        "GetPartialSum": ("curator",),
        "AbortJob": ("curator", "compute_node"),
        "GetJobDigest": ("party", "operator"),
    },
)
NODE_METHODS = method_for_message(pb.DESCRIPTOR.services_by_name["ComputeNode"])
CURATOR_METHODS = method_for_message(pb.DESCRIPTOR.services_by_name["DcaCurator"])
FLUSH_SECONDS = 0.25  # send pending received-set deltas at least this often
SHARE_CHUNK = 4096  # at most this many single shares of one stream per machine step
SHARE_RUN, GATHER_SECONDS = 64, 0.002  # a stream with fewer shares waiting gathers for this long before a step
KEY_SECONDS = 30.0  # a validated job's announcement waits this long for every node's piece of the verify key
KEY_RETRY_SECONDS = 0.05  # a piece sent to a node that has not been announced the job yet is sent again after this
WAIT_SECONDS = 45.0  # the longest a submission waits for room (below the 60 s deadline of a client's own call)


class ComputeNode(pb_grpc.ComputeNodeServicer):
    def __init__(self, cfg: cfgmod.ComputeNodeConfig, *, retention: float = jobs.RETENTION_SECONDS, max_live: int = jobs.MAX_LIVE) -> None:
        self.cfg = cfg
        self.jobs: jobs.JobTable[Hosted] = jobs.JobTable("dca-node", jobs.machine_outcome, retention=retention, max_live=max_live)
        self.reaper = jobs.Reaper(self.jobs, self._expire)
        self.channels = PeerChannels(cfg.tls.files())
        self.coordinator: Coordinator | None = None  # with cfg.workers > 1: the local service of this node's worker processes (workers.py)
        self._held: dict[str, int] = {}  # job id → submissions held in room() now

    async def _sender(self, context) -> Peer:
        """The caller as a peer of the machine; a curator-role certificate that is not *our* curator is refused."""
        ident = caller(context)
        if ident.role == "curator":
            if ident.name != self.cfg.curator.name:
                await errors.refuse(context, common_pb2.WRONG_ROLE, f"only curator {errors.shown(self.cfg.curator.name)} may send this")
            return CURATOR
        return Peer(ident.role, ident.name)

    async def _job(self, job_id: str, context) -> Hosted:
        if not jobs.valid_id(job_id):
            await errors.refuse(context, common_pb2.UNKNOWN_JOB, "no such job (not a job id)")
        hosted = self.jobs.get(job_id)
        if hosted is None:
            record = self.jobs.record(job_id)
            if record is not None and record.problem:
                await errors.refuse(context, common_pb2.JOB_FAILED, f"job {job_id} ended {record.state} ({record.problem_name}); it is no longer held")
            if record is not None:
                await errors.refuse(context, common_pb2.UNKNOWN_JOB, f"job {job_id} ended {record.state}; it is no longer held")
            await errors.refuse(context, common_pb2.UNKNOWN_JOB, f"compute node {errors.shown(self.cfg.name)} has no job {errors.shown(job_id)}")
        return hosted

    # -- curator → node ------------------------------------------------------------------------------
    async def AnnounceJob(self, request: pb.DcaJobAnnouncement, context) -> common_pb2.Ack:
        await self._sender(context)
        if not jobs.valid_id(request.job_id):
            await errors.refuse(context, common_pb2.MALFORMED, "not a job id (1-64 letters, digits, '.', '_' or '-')")
        if request.job_id in self.jobs:
            await errors.refuse(context, common_pb2.REPLAY, f"job {request.job_id} was already announced")
        try:
            machine = ComputeNodeMachine.from_announcement(self.cfg.name, request, report_every=self.cfg.report_every, record=False, workers=self.cfg.workers,
                                                               backlog_bytes=int(self.cfg.backlog_mib * (1 << 20)))
        except InvalidJob as e:
            await errors.refuse(context, common_pb2.INVALID_JOB, e.detail)
        except ValueError:
            await errors.refuse(context, common_pb2.INVALID_JOB, "the job's parameters are out of range")
        if machine.params.seeded and not self.cfg.test_mode:
            await errors.refuse(context, common_pb2.INVALID_JOB, "simulation_seed makes a release non-private; this node is not in test mode")
        hosted = Hosted(machine, self._route)
        hosted.on_change = lambda job_id: self._changed(hosted)
        hosted.addresses = dict(request.node_addresses)  # type: ignore[attr-defined]
        hosted.announcement = request  # type: ignore[attr-defined]  # what this node's workers attach to
        deadline = machine.params.deadline_seconds
        try:  # the node's last word comes after the curator's (which fails the job at its own hard deadline)
            self.jobs.admit(request.job_id, hosted, jobs.hard_deadline(jobs.hard_deadline(deadline)))
        except ProtocolError as e:
            await errors.abort(context, e)
        self.reaper.ensure_running()
        hosted.deadline_task = asyncio.ensure_future(self._timers(hosted, deadline))
        if machine.plan is not None and not await self._agree_verify_key(hosted):
            await hosted.fail(common_pb2.PEER_UNREACHABLE, f"job {request.job_id}: the compute nodes did not agree on its verify key in {KEY_SECONDS:g} s")
            await errors.refuse(context, common_pb2.PEER_UNREACHABLE, f"job {request.job_id}: no verify key from every compute node in {KEY_SECONDS:g} s")
        log.info("job %s announced: d=%d, N=%d, T=%d, M=%d, spec_digest %s", request.job_id, machine.params.dimension, machine.params.clients, machine.params.max_missing,
                 machine.params.M, machine.params.spec_digest.hex())
        return common_pb2.Ack()

    async def _agree_verify_key(self, hosted: Hosted) -> bool:
        """A validated job: send this node's piece of the verify key to every other node and wait for theirs. The curator
        announces to every node at once and opens the job to clients only when all have acknowledged, so no client's
        share reaches a node before its key is fixed."""
        m = _node(hosted)
        await hosted.start(m.start())
        try:
            async with hosted.changed:
                await asyncio.wait_for(hosted.changed.wait_for(lambda: m.key_ready or m.terminal), KEY_SECONDS)
        except TimeoutError:
            return False
        return m.key_ready and not m.terminal

    async def _expire(self, job_id: str) -> None:
        """The job outlived its hard deadline (a peer is gone): fail it; the curator and the other nodes are told."""
        hosted = self.jobs.get(job_id)
        if hosted is not None and not hosted.machine.terminal:
            await hosted.fail(common_pb2.PEER_UNREACHABLE, f"job {job_id} did not end by its deadline (state {hosted.machine.state}); a peer is unreachable")

    async def CloseSubmissions(self, request, context) -> common_pb2.Ack:
        return await self._feed(request, context)

    async def GetPartialSum(self, request: common_pb2.JobRef, context) -> pb.PartialSum:
        await self._sender(context)
        hosted = await self._job(request.job_id, context)
        try:
            return _node(hosted).partial_sum()
        except ProtocolError as e:
            await errors.abort(context, e)

    # -- client → node, before it spends ----------------------------------------------------------------------
    async def GetJobDigest(self, request: common_pb2.JobRef, context) -> pb.JobDigest:
        """The spec digest of the job as this node was announced it (mpdp.dca.spec): a client compares it with the digest
        of the spec it checked before it spends anything."""
        await self._sender(context)
        hosted = await self._job(request.job_id, context)
        return pb.JobDigest(job_id=request.job_id, spec_digest=_node(hosted).params.spec_digest)

    # -- submissions ------------------------------------------------------------------------------------
    async def SubmitShares(self, request_iterator, context) -> pb.ShareReceipt:
        """One stream of ClientShare messages (one client, or a router's many), each accounted per client.

        A reader task takes messages off the stream as they arrive; the handler feeds the machine whatever has
        accumulated since its last step (up to SHARE_CHUNK shares) in one :meth:`ComputeNodeMachine.receive_shares`
        step, so the per-step costs (lock, table lookup, bookkeeping, notify) are paid per run of shares, not per
        share. Every share read before the stream ends, or fails with an error, is fed to the machine before the
        handler returns or re-raises. If the caller cancels the RPC, shares read but not yet taken are dropped:
        they count as never received, like shares still in flight (the agreement step excludes such clients).
        The reader pauses while 2·SHARE_CHUNK shares wait to be taken (e.g. while :meth:`room` holds them), so a
        stream costs bounded memory however fast its caller sends.
        """
        sender = await self._sender(context)
        receipt = pb.ShareReceipt()
        hosted: Hosted | None = None
        backlog: collections.deque[pb.ClientShare] = collections.deque()
        arrived = asyncio.Event()
        drained = asyncio.Event()  # the reader stops at 2·SHARE_CHUNK shares read and not taken (the node may be waiting for room)
        drained.set()
        ended = False

        async def read() -> None:
            nonlocal ended
            try:
                async for share in request_iterator:
                    backlog.append(share)
                    arrived.set()
                    if len(backlog) >= 2 * SHARE_CHUNK:
                        drained.clear()
                        await drained.wait()
            finally:
                ended = True
                arrived.set()

        reader = asyncio.ensure_future(read())
        try:
            while True:
                await arrived.wait()
                if not ended and len(backlog) < SHARE_RUN:
                    await asyncio.sleep(GATHER_SECONDS)  # a busy stream (a router's): let a run of shares gather
                arrived.clear()
                while backlog:
                    chunk = [backlog.popleft() for _ in range(min(len(backlog), SHARE_CHUNK))]
                    drained.set()
                    if hosted is None:
                        hosted = await self._job(chunk[0].job_id, context)
                        receipt.job_id = chunk[0].job_id
                    same = [s for s in chunk if s.job_id == receipt.job_id]
                    if len(same) != len(chunk):
                        for s in chunk:
                            if s.job_id != receipt.job_id:
                                receipt.rejected.add(client_id=s.client_id, problem=common_pb2.UNKNOWN_JOB, detail="one stream carries one job")
                    if same:
                        await self._take_shares(hosted, sender, same, receipt, context)
                if ended:
                    break
            await reader  # a broken stream raises here, after every share read was taken
        finally:
            reader.cancel()
        return receipt

    async def room(self, hosted: Hosted, context) -> None:
        """Hold a submission while the job's undecided clients are at the node's limit (ComputeNodeMachine, "Backlog"):
        until a peer's report decides some, for at most WAIT_SECONDS in all. When none is decided for a whole
        ``backlog_stall_seconds``, the undecided clients are presumed stuck and the limit rises above them; a call that
        only reaches WAIT_SECONDS while clients are being decided is let in without that. A terminal or closed job wakes
        it at once (the machine then refuses the shares itself). At most ``backlog_held_calls`` submissions of one job
        are held at once: more are refused OVERLOADED, nothing taken."""
        m = _node(hosted)
        if m.has_room:
            return
        held = self._held.get(m.job_id, 0)
        if held >= self.cfg.backlog_held_calls:  # each held call keeps its request (up to a message's 64 MiB) in memory
            await errors.refuse(context, common_pb2.OVERLOADED, f"{held} submissions to job {m.job_id} already wait for the other compute nodes; retry later")
        metrics.DCA_BACKLOG_WAITS.inc()
        self._held[m.job_id] = held + 1
        try:
            await self._wait_for_room(hosted, m)
        finally:
            left = self._held.get(m.job_id, 1) - 1
            if left > 0:
                self._held[m.job_id] = left
            else:
                self._held.pop(m.job_id, None)

    async def _wait_for_room(self, hosted: Hosted, m: ComputeNodeMachine) -> None:
        loop = asyncio.get_running_loop()
        stall = self.cfg.backlog_stall_seconds
        end = loop.time() + WAIT_SECONDS
        while not m.has_room:
            seen, whole = m.decided, end - loop.time() >= stall  # a whole stall period fits in what is left of the call's wait
            try:
                async with hosted.changed:
                    await asyncio.wait_for(hosted.changed.wait_for(lambda: m.has_room or m.decided != seen), stall if whole else max(0.0, end - loop.time()))
            except TimeoutError:
                if m.decided == seen and not m.has_room and whole:
                    async with hosted.lock:
                        stuck = m.presume_stuck()
                    metrics.DCA_BACKLOG_STALLS.inc()
                    log.warning("job %s: %d clients received here not decided for %.0f s; taking more shares beside them", m.job_id, stuck, stall)
                return  # a whole stall, or WAIT_SECONDS in all

    async def _take_shares(self, hosted: Hosted, sender: Peer, shares: list[pb.ClientShare], receipt: pb.ShareReceipt, context) -> None:
        await self.room(hosted, context)
        async with hosted.lock:
            outputs, rejected = _node(hosted).receive_shares(sender, shares)
        for j, e in rejected:
            log.warning("job %s: ClientShare from %s for %s refused: %s", hosted.machine.job_id, sender, errors.shown(shares[j].client_id), errors.details(e))
            if e.notices:
                hosted.spawn(self._route(hosted, e.notices))
        receipt.accepted += sum(o.message.accepted for o in outputs if isinstance(o, Reply))
        outputs = [o for o in outputs if not isinstance(o, Reply)]
        if outputs:
            await self._route(hosted, outputs)
        await hosted.notify()
        if rejected and hosted.machine.failed:
            await errors.abort(context, next((e for _, e in rejected if e is hosted.machine.error), rejected[0][1]))
        for j, e in rejected:
            receipt.rejected.add(client_id=shares[j].client_id, problem=e.problem, detail=e.detail)

    async def SubmitShareBatch(self, request: pb.ShareBatch, context) -> pb.ShareReceipt:
        sender = await self._sender(context)
        hosted = await self._job(request.job_id, context)
        replies = await self.admit(hosted, sender, request, context)
        return replies[0] if replies else pb.ShareReceipt(job_id=request.job_id)

    async def admit(self, hosted: Hosted, sender: Peer, request, context) -> list:
        """Admit one submission (a ShareBatch, or a worker process's WorkerClaim) into the job's backlog: held until
        there is room (:meth:`room`), then the machine's one step on it, its replies returned; a refusal of the
        whole submission aborts the call through the error table."""
        await self.room(hosted, context)
        try:
            return await hosted.deliver(sender, request, inline=True)
        except ProtocolError as e:
            await errors.abort(context, e)

    # -- node ↔ node and aborts ----------------------------------------------------------------------------
    async def ReportReceivedClients(self, request, context) -> common_pb2.Ack:
        return await self._feed(request, context)

    async def ShareVerifyKeyPiece(self, request, context) -> common_pb2.Ack:
        return await self._feed(request, context)

    async def AbortJob(self, request, context) -> common_pb2.Ack:
        return await self._feed(request, context)

    async def _feed(self, request, context) -> common_pb2.Ack:
        sender = await self._sender(context)  # before the job is looked up: a refused caller never touches it
        hosted = await self._job(request.job_id, context)
        try:
            await hosted.deliver(sender, request, context, inline=True)
        except ProtocolError:
            pass
        return common_pb2.Ack()

    # -- outputs and timers -------------------------------------------------------------------------------
    def _changed(self, hosted: Hosted) -> None:
        """Note a state change in the job table; once terminal, count the job's clients (metrics, once)."""
        m = _node(hosted)
        self.jobs.observe(m.job_id)
        if m.terminal and not getattr(hosted, "counted", False):
            hosted.counted = True  # type: ignore[attr-defined]
            metrics.dca_node_job_ended(m.received, m.clients_included if m.state == "RELEASED" else 0)

    async def _route(self, hosted: Hosted, outputs) -> None:
        wire: dict[int, _Wire] = {}  # a received-set report goes to M − 1 peers: serialise it once
        if self.coordinator is not None and hosted.machine.failed and not getattr(hosted, "dropped", False):
            hosted.dropped = True  # type: ignore[attr-defined]
            self.coordinator.drop(hosted.machine.job_id)  # the workers forget the job's shares
        for o in outputs:
            if isinstance(o, Send) and o.to.role == "worker":
                if self.coordinator is None:
                    raise RuntimeError(f"job {hosted.machine.job_id} sent to worker {o.to.name}, but this node runs no worker processes")
                self.coordinator.send(int(o.to.name), o.message)
            elif isinstance(o, Send):
                w = wire.get(id(o.message))
                if w is None:
                    w = wire[id(o.message)] = _Wire(o.message)
                hosted.spawn(self._send(hosted, o.to, o.message, w))

    async def _send(self, hosted: Hosted, to: Peer, message, payload=None) -> None:
        if to == CURATOR:
            address, site, service, methods = self.cfg.curator.address, self.cfg.curator.name, CURATOR_SERVICE, CURATOR_METHODS
        else:
            address, site, service, methods = hosted.addresses.get(to.name, ""), to.name, SERVICE, NODE_METHODS  # type: ignore[attr-defined]
        payload = payload or message

        async def call() -> None:
            for attempt in range(int(KEY_SECONDS / KEY_RETRY_SECONDS)):
                try:
                    await self.channels.call(address, site, service, methods[message.DESCRIPTOR.full_name], payload, common_pb2.Ack)
                    return
                except grpc.aio.AioRpcError as e:
                    # a piece of the verify key may reach a node the curator has not announced the job to yet
                    if not isinstance(message, pb.VerifyKeyPiece) or e.code() != grpc.StatusCode.NOT_FOUND or hosted.machine.terminal:
                        raise
                await asyncio.sleep(KEY_RETRY_SECONDS)

        await hosted.send(to, message, call)

    async def _timers(self, hosted: Hosted, deadline: float) -> None:
        """Flush received-set deltas periodically; close the node's own received set at the deadline."""
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline
        while not hosted.machine.terminal and loop.time() < end:
            await asyncio.sleep(min(FLUSH_SECONDS, max(0.0, end - loop.time())))
            if hosted.machine.state == "AWAIT_SHARES":
                await hosted.local(_node(hosted).flush_reports)
        if not hosted.machine.terminal:
            await hosted.local(_node(hosted).close)


def _node(hosted: Hosted) -> ComputeNodeMachine:
    """The machine of a job this service hosts (always a compute node's)."""
    if not isinstance(hosted.machine, ComputeNodeMachine):
        raise TypeError(f"job {hosted.machine.job_id} runs a {type(hosted.machine).__name__}, not a ComputeNodeMachine")
    return hosted.machine


class _Wire:
    """A message that serialises once however many peers it is sent to (PeerChannels.call serialises per call)."""

    __slots__ = ("message", "_bytes")

    def __init__(self, message) -> None:
        self.message = message
        self._bytes: bytes | None = None

    def SerializeToString(self) -> bytes:
        if self._bytes is None:
            self._bytes = self.message.SerializeToString()
        return self._bytes


async def register(cfg: cfgmod.ComputeNodeConfig, port: int) -> None:
    """Tell the curator where this node listens (gives up at once on a TLS failure, see register_at_curator)."""
    await register_at_curator(
        cfg.tls.files(), cfg.curator.address, cfg.curator.name, f"/{CURATOR_SERVICE}/RegisterComputeNode",
        pb.NodeRegistration(address=advertised_address(cfg.listen, cfg.advertise, port)), common_pb2.Ack,
    )


def interceptor(cfg: cfgmod.ComputeNodeConfig) -> RoleInterceptor:
    return RoleInterceptor(ROLES, cfg.federation or None, pinned={"curator": cfg.curator.name})


async def serve(cfg: cfgmod.ComputeNodeConfig, ready_fd=sys.stdout) -> None:
    readiness = ready.Readiness(ready.KERNELS, ready.REGISTERED)
    probes_port = ready.serve_probes(cfg.probe_listen, readiness, ready_fd)[1] if cfg.probe_listen else 0
    warm = ready.start_warm_up(readiness)  # compiles while the rest starts; awaited before the node registers
    node = ComputeNode(cfg, retention=cfg.job_retention_seconds, max_live=cfg.max_live_jobs)
    server, port, health = await start_server(
        cfg.tls.files(), cfg.listen, interceptor(cfg), lambda s: pb_grpc.add_ComputeNodeServicer_to_server(node, s), [SERVICE], reuse_port=cfg.workers > 1,
        serving=False,
    )
    await readiness.attach(health, [SERVICE])
    local: grpc.aio.Server | None = None
    if cfg.workers > 1:  # W processes on this port, this one the coordinator (workers.py)
        from mpdp_services.compute_node.workers import Coordinator

        node.coordinator = Coordinator(node, cfg.workers)
        try:
            local = await node.coordinator.start(cfg, port)
        except OSError:
            node.coordinator.stop()
            await server.stop(0)
            raise
    await warm  # the curator learns of this node (and sends it jobs) only once its kernels are compiled
    try:
        await register(cfg, port)
    except grpc.aio.AioRpcError as e:
        hint = "this site does not trust the curator's certificate: check ca.crt and the curator's certificate" if tls_failure(e) \
            else "is the curator up and reachable, and does it trust this site's certificate?"
        if node.coordinator is not None:
            node.coordinator.stop()
        print(f"mpdp compute node {cfg.name}: cannot register with curator {cfg.curator.name} at {cfg.curator.address}: {e.code().name}: {e.details()}; {hint}", file=sys.stderr)
        await server.stop(0)
        raise SystemExit(2)
    await readiness.done(ready.REGISTERED)
    log.info("compute node %s listening on port %d", cfg.name, port)
    try:
        await serve_until_signal(server, health, port, ready_fd, cfg.http_listen, cfg.http_token_file, readiness=readiness, probes_port=probes_port)
    finally:
        if node.coordinator is not None:
            node.coordinator.stop()
            if local is not None:  # set whenever the coordinator is
                await local.stop(0)
    await node.channels.close()
