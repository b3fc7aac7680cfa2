"""Charlie as the DCA job owner and final aggregator (spec dca.md §4.3 step 4; issue: job lifecycle).

Operators create a job (d, N, T, ε, δ, mode, deadline), watch it, and fetch the released DP sum.
Jobs persist across a restart: the spec, and the release or failure once there is one, are files in
``state_dir/dca``; an unfinished job is rebuilt at start-up and pulls the partial sums the nodes may
have pushed to the previous process (GetPartialSum).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets as pysecrets
from pathlib import Path

import grpc

from mpdp.dca.aggregator import AggregatorMachine
from mpdp.dca.errors import InvalidJob
from mpdp.dca.params import DcaParams
from mpdp.messages import common_pb2, dca_pb2 as pb, dca_pb2_grpc as pb_grpc
from mpdp.protocol import Peer, ProtocolError, Publish, Send
from services.common import errors
from services.common.rpc import PeerChannels, caller, method_for_message, roles_by_method
from services.common.runtime import Hosted

log = logging.getLogger("mpdp.curator.dca")

SERVICE = "mpdp.messages.DcaCurator"
NODE_SERVICE = "mpdp.messages.ComputeNode"
NODE_METHODS = method_for_message(pb.DESCRIPTOR.services_by_name["ComputeNode"])
ROLES = roles_by_method(
    SERVICE,
    {
        "CreateJob": ("operator",),
        "WatchJob": ("operator",),
        "GetRelease": ("operator", "party"),
        "GetJob": ("party", "operator", "compute_node"),
        "RegisterComputeNode": ("compute_node",),
        "SendPartialSum": ("compute_node",),
        "AbortJob": ("compute_node",),
    },
)


class DcaStore:
    """Job specs, releases and failures on disk."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def _write(self, name: str, data: bytes) -> None:
        tmp = self.folder / f".{name}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, self.folder / name)

    def put_spec(self, job_id: str, spec: pb.DcaJobSpec) -> None:
        self._write(f"{job_id}.spec.binpb", spec.SerializeToString())

    def put_release(self, release: pb.DpSum) -> None:
        self._write(f"{release.job_id}.release.binpb", release.SerializeToString())

    def put_failure(self, job_id: str, problem: int, detail: str) -> None:
        self._write(f"{job_id}.failed.json", json.dumps({"problem": problem, "detail": detail}).encode())

    def put_consumed(self, release: pb.DpSum) -> None:
        """A secure sum reached its consumer: its outcome without its values."""
        self._write(f"{release.job_id}.consumed.json", json.dumps({"clients_included": release.clients_included, "compute_nodes": release.compute_nodes, "purpose": release.purpose}).encode())

    def consumed(self, job_id: str) -> dict | None:
        p = self.folder / f"{job_id}.consumed.json"
        return json.loads(p.read_text()) if _safe(job_id) and p.exists() else None

    def release(self, job_id: str) -> pb.DpSum | None:
        p = self.folder / f"{job_id}.release.binpb"
        return pb.DpSum.FromString(p.read_bytes()) if _safe(job_id) and p.exists() else None

    def failure(self, job_id: str) -> dict | None:
        p = self.folder / f"{job_id}.failed.json"
        return json.loads(p.read_text()) if _safe(job_id) and p.exists() else None

    def spec(self, job_id: str) -> pb.DcaJobSpec | None:
        p = self.folder / f"{job_id}.spec.binpb"
        return pb.DcaJobSpec.FromString(p.read_bytes()) if _safe(job_id) and p.exists() else None

    def specs(self) -> dict[str, pb.DcaJobSpec]:
        return {p.name.split(".")[0]: pb.DcaJobSpec.FromString(p.read_bytes()) for p in self.folder.glob("*.spec.binpb")}


class DcaJobRefused(Exception):
    """A job could not be created or ended without a sum: the gRPC status and its message."""

    def __init__(self, code: grpc.StatusCode, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


def _safe(job_id: str) -> bool:
    return bool(job_id) and "/" not in job_id and not job_id.startswith(".")


class DcaCurator(pb_grpc.DcaCuratorServicer):
    def __init__(self, state_dir: Path, channels: PeerChannels, test_mode: bool, static_nodes: dict[str, str]) -> None:
        self.store = DcaStore(Path(state_dir) / "dca")
        self.channels = channels
        self.test_mode = test_mode
        self._nodes_file = Path(state_dir) / "compute_nodes.json"
        self.nodes: dict[str, str] = dict(static_nodes)
        if self._nodes_file.exists():
            self.nodes.update(json.loads(self._nodes_file.read_text()))
        self.jobs: dict[str, Hosted] = {}

    async def recover(self) -> None:
        """Rebuild unfinished jobs after a restart and pull the partial sums nodes already released."""
        for job_id, spec in self.store.specs().items():
            if self.store.release(job_id) is not None or self.store.failure(job_id) is not None or self.store.consumed(job_id) is not None:
                continue
            if spec.secure_sum:  # its consumer (an ensemble job) died with the previous process
                self.store.put_failure(job_id, common_pb2.JOB_FAILED, "the curator restarted during this secure-sum job; its consuming job was lost")
                continue
            params = DcaParams.from_spec(job_id, spec)
            machine = AggregatorMachine(params, node_addresses={n: self.nodes.get(n, "") for n in params.nodes})
            machine.announce()  # the nodes already have the job: skip re-sending it
            hosted = Hosted(machine, self._route)
            self.jobs[job_id] = hosted
            log.info("recovering DCA job %s", job_id)
            hosted.deadline_task = asyncio.ensure_future(self._deadline(hosted, params.deadline_seconds, pull=True))
            for n in params.nodes:
                hosted.spawn(self._pull(hosted, n))

    # -- operator ---------------------------------------------------------------------------------------
    async def CreateJob(self, request: pb.DcaJobSpec, context) -> pb.DcaJobTicket:
        if request.secure_sum:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, "WRONG_ROLE: secure-sum jobs (no noise) are created by the curator's own mechanisms only (e.g. `mpdp train --model hamm2016`); ask for a DP sum instead")
        try:
            job_id = await self.create(request)
        except DcaJobRefused as e:
            await context.abort(e.code, e.detail)
        return pb.DcaJobTicket(job_id=job_id)

    async def create(self, request: pb.DcaJobSpec) -> str:
        """Create and announce a job (operators through CreateJob; the curator's own mechanisms directly)."""
        job_id = "dca-" + pysecrets.token_hex(6)
        try:
            params = DcaParams.from_spec(job_id, request)
        except (InvalidJob, ValueError) as e:
            raise DcaJobRefused(grpc.StatusCode.INVALID_ARGUMENT, f"INVALID_JOB: {e}") from None
        if params.seeded and not self.test_mode:
            raise DcaJobRefused(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_JOB: simulation_seed (the fixed-noise debug switch) is refused outside test mode")
        missing = [n for n in params.nodes if n not in self.nodes]
        if missing:
            raise DcaJobRefused(grpc.StatusCode.FAILED_PRECONDITION, f"INVALID_JOB: compute nodes {missing} are not registered with the curator (known: {sorted(self.nodes)})")
        self.store.put_spec(job_id, request)
        machine = AggregatorMachine(params, node_addresses={n: self.nodes[n] for n in params.nodes})
        hosted = Hosted(machine, self._route)
        self.jobs[job_id] = hosted
        hosted.deadline_task = asyncio.ensure_future(self._deadline(hosted, params.deadline_seconds))
        log.info("DCA job %s: d=%d N=%d T=%d M=%d ε=%g δ=%g mode=%s", job_id, params.dimension, params.clients, params.max_missing, params.M, params.epsilon, params.delta, params.mode)
        # announce synchronously: when the ticket returns, every node knows the job and clients may submit
        async with hosted.lock:
            outputs = machine.announce()
        await asyncio.gather(*(self._send(hosted, o.to, o.message) for o in outputs if isinstance(o, Send)))
        await hosted.notify()
        if machine.failed and machine.error is not None:
            self.forget(job_id)  # never announced everywhere: nothing will ever arrive for it
            raise DcaJobRefused(grpc.StatusCode.UNAVAILABLE, f"JOB_FAILED: {machine.error.detail}")
        return job_id

    async def result(self, job_id: str) -> pb.DpSum:
        """Wait for a job of this process to end; its sum (secure-sum jobs included) or DcaJobRefused."""
        hosted = self.jobs.get(job_id)
        if hosted is None:
            raise DcaJobRefused(grpc.StatusCode.NOT_FOUND, f"UNKNOWN_JOB: no running DCA job {job_id!r}")
        async for st in hosted.watch(lambda: hosted.machine.status()):
            if st.terminal:
                break
        m = hosted.machine
        if m.failed or m.error is not None:
            detail = m.error.detail if m.error is not None else m.state
            raise DcaJobRefused(errors.status_for(m.error.problem) if m.error else grpc.StatusCode.ABORTED, f"JOB_FAILED: DCA job {job_id}: {detail}")
        return m.dp_sum()

    async def WatchJob(self, request: common_pb2.JobRef, context):
        hosted = self.jobs.get(request.job_id)
        if hosted is None:
            stored = self._stored_status(request.job_id)
            if stored is None:
                await context.abort(grpc.StatusCode.NOT_FOUND, f"UNKNOWN_JOB: no DCA job {request.job_id!r}")
            yield stored
            return
        async for st in hosted.watch(lambda: hosted.machine.status()):
            yield st

    async def close(self, job_id: str) -> None:
        """Close submissions now (the consumer knows every client has submitted) instead of at the deadline."""
        hosted = self.jobs.get(job_id)
        if hosted is not None and not hosted.machine.terminal:
            await hosted.local(hosted.machine.close_submissions)

    async def abort(self, job_id: str, detail: str) -> None:
        """Fail a job of this process (its consumer gave up); the nodes are told and drop their shares."""
        hosted = self.jobs.get(job_id)
        if hosted is not None and not hosted.machine.terminal:
            await hosted.fail(common_pb2.JOB_FAILED, detail)
            await self._route(hosted, [])

    def forget(self, job_id: str) -> None:
        """Drop a finished job from memory (a consumed secure sum must not linger in the process)."""
        hosted = self.jobs.pop(job_id, None)
        if hosted is not None and hosted.deadline_task is not None:
            hosted.deadline_task.cancel()

    async def GetRelease(self, request: common_pb2.JobRef, context) -> pb.DpSum:
        spec = self.store.spec(request.job_id)
        if spec is not None and spec.secure_sum:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"WRONG_ROLE: DCA job {request.job_id} is a secure sum without noise; only the curator's mechanism ({spec.purpose or 'unnamed'}) consumes it, and it publishes only its own DP output")
        rel = self.store.release(request.job_id)
        if rel is not None:
            return rel
        fail = self.store.failure(request.job_id)
        if fail is not None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"JOB_FAILED: DCA job {request.job_id} released nothing: {fail['detail']}")
        hosted = self.jobs.get(request.job_id)
        if hosted is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"UNKNOWN_JOB: no DCA job {request.job_id!r}")
        try:
            return hosted.machine.dp_sum()
        except ProtocolError as e:
            await errors.abort(context, e)

    async def GetJob(self, request: common_pb2.JobRef, context) -> pb.DcaJobAnnouncement:
        hosted = self.jobs.get(request.job_id)
        if hosted is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"UNKNOWN_JOB: no running DCA job {request.job_id!r}")
        return hosted.machine.announcement()

    async def RegisterComputeNode(self, request: pb.NodeRegistration, context) -> common_pb2.Ack:
        if not request.address or ":" not in request.address:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "MALFORMED: address must be host:port")
        name = caller(context).name
        self.nodes[name] = request.address
        tmp = self._nodes_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.nodes, indent=2))
        os.replace(tmp, self._nodes_file)
        log.info("compute node %s registered at %s", name, request.address)
        return common_pb2.Ack()

    # -- node → curator -----------------------------------------------------------------------------------
    async def SendPartialSum(self, request, context) -> common_pb2.Ack:
        return await self._feed(request, context)

    async def AbortJob(self, request, context) -> common_pb2.Ack:
        return await self._feed(request, context)

    async def _feed(self, request, context) -> common_pb2.Ack:
        hosted = self.jobs.get(request.job_id)
        if hosted is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"UNKNOWN_JOB: no DCA job {request.job_id!r}")
        try:
            await hosted.deliver(Peer("compute_node", caller(context).name), request, context)
        except ProtocolError:
            pass
        return common_pb2.Ack()

    # -- outputs ----------------------------------------------------------------------------------------------
    async def _route(self, hosted: Hosted, outputs) -> None:
        for o in outputs:
            if isinstance(o, Send):
                hosted.spawn(self._send(hosted, o.to, o.message))
            elif isinstance(o, Publish):
                if o.release.secure_sum:  # the values stay in the machine for its consumer (result()); never on disk
                    self.store.put_consumed(o.release)
                    log.info("DCA secure-sum job %s complete over %d clients", o.release.job_id, o.release.clients_included)
                    continue
                self.store.put_release(o.release)
                log.info("DCA job %s released over %d clients", o.release.job_id, o.release.clients_included)
        m = hosted.machine
        if m.failed and m.error is not None and self.store.failure(m.job_id) is None:
            self.store.put_failure(m.job_id, m.error.problem, m.error.detail)

    async def _send(self, hosted: Hosted, to: Peer, message) -> None:
        address = self.nodes.get(to.name, "")
        method = NODE_METHODS[message.DESCRIPTOR.full_name]
        await hosted.send(to, message, lambda: self.channels.call(address, to.name, NODE_SERVICE, method, message, common_pb2.Ack))
        m = hosted.machine
        if m.failed and m.error is not None and self.store.failure(m.job_id) is None:
            self.store.put_failure(m.job_id, m.error.problem, m.error.detail)

    async def _pull(self, hosted: Hosted, node: str) -> None:
        try:
            ps = await self.channels.call(self.nodes.get(node, ""), node, NODE_SERVICE, "GetPartialSum", common_pb2.JobRef(job_id=hosted.machine.job_id), pb.PartialSum, timeout=30)
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.FAILED_PRECONDITION and "STEP_OUT_OF_ORDER" in (e.details() or ""):
                return  # not released yet: the node will push it
            await hosted.fail(common_pb2.JOB_FAILED, f"compute node {node} cannot provide its partial sum after the curator restarted: {e.details()}")
            await self._route(hosted, [])
            return
        try:
            await hosted.deliver(Peer("compute_node", node), ps)
        except ProtocolError:
            pass

    async def _deadline(self, hosted: Hosted, seconds: float, pull: bool = False) -> None:
        await asyncio.sleep(seconds)
        if hosted.machine.terminal:
            return
        await hosted.local(hosted.machine.close_submissions)
        # give the nodes a grace period to agree and push; then the job fails rather than hang
        await asyncio.sleep(max(10.0, 0.2 * seconds))
        if not hosted.machine.terminal:
            if pull:
                for n in hosted.machine.params.nodes:
                    await self._pull(hosted, n)
            if not hosted.machine.terminal:
                await hosted.fail(common_pb2.JOB_FAILED, f"compute nodes did not release partial sums within the grace period after the deadline ({hosted.machine.state})")
                await self._route(hosted, [])

    def _stored_status(self, job_id: str) -> pb.DcaJobStatus | None:
        rel = self.store.release(job_id)
        if rel is not None:
            return pb.DcaJobStatus(job_id=job_id, state="RELEASED", nodes_reported=rel.compute_nodes, clients_included=rel.clients_included, terminal=True)
        fail = self.store.failure(job_id)
        if fail is not None:
            return pb.DcaJobStatus(job_id=job_id, state="FAILED", problem=fail["problem"], detail=fail["detail"], terminal=True)
        used = self.store.consumed(job_id)
        if used is not None:
            return pb.DcaJobStatus(job_id=job_id, state="RELEASED", nodes_reported=used["compute_nodes"], clients_included=used["clients_included"], terminal=True,
                                   detail=f"secure sum consumed inside the curator by {used['purpose'] or 'its mechanism'}; its values are not served")
        return None
