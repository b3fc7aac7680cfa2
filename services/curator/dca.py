"""Charlie as the DCA job owner and final aggregator (Heikkilä et al. 2017, Algorithm 1,
step 3; the job lifecycle of docs/protocols/job-model.md).

Operators create a job (d, N, T, ε, δ, mode, deadline), watch it, and fetch the released DP sum through the
curator's job host (operations.py: :meth:`DcaCurator.submit`, :meth:`DcaCurator.release`, :meth:`DcaCurator.cancel`); clients
and compute nodes fetch a job's announcement here (GetJob).
Jobs persist across a restart: the spec, and the release or failure once there is one, are files in
``state_dir/dca``; an unfinished job is rebuilt at start-up and pulls the partial sums the nodes may
have pushed to the previous process (GetPartialSum).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from mpdp import limits, registry
from mpdp.dca.aggregator import AggregatorMachine
from mpdp.dca.errors import InvalidJob
from mpdp.dca.params import DcaParams
from mpdp.messages import common_pb2, dca_pb2 as pb, dca_pb2_grpc as pb_grpc
from mpdp.protocol import Peer, ProtocolError, Publish, Send
from mpdp_services.common.durable import write_atomic
from mpdp_services.common import errors, jobs
from mpdp_services.common.rpc import PeerChannels, caller, caller_key, method_for_message, roles_by_method
from mpdp_services.common.runtime import Hosted
from mpdp_services.curator.admission import Admission
from mpdp_services.curator.registrations import Registrations

if TYPE_CHECKING:
    from mpdp_services.curator.hosting import CuratorSite, Hosting

log = logging.getLogger("mpdp.curator.dca")

SERVICE = "mpdp.messages.DcaCurator"
NODE_SERVICE = "mpdp.messages.ComputeNode"
NODE_METHODS = method_for_message(pb.DESCRIPTOR.services_by_name["ComputeNode"])
ROLES = roles_by_method(
    SERVICE,
    {
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
        write_atomic(self.folder / name, data)

    def put_spec(self, job_id: str, spec: pb.DcaJobSpec) -> None:
        self._write(f"{job_id}.spec.binpb", spec.SerializeToString())

    def put_release(self, release: pb.DpSum) -> None:
        self._write(f"{release.job_id}.release.binpb", release.SerializeToString())

    def put_queued(self, job_id: str) -> None:
        """The job waits for an admission slot (no node knows it): the mark goes when it is announced."""
        self._write(f"{job_id}.queued", b"")

    def clear_queued(self, job_id: str) -> None:
        (self.folder / f"{job_id}.queued").unlink(missing_ok=True)

    def queued(self, job_id: str) -> bool:
        return _safe(job_id) and (self.folder / f"{job_id}.queued").exists()

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


_safe = jobs.valid_id  # a job id names a file only if it could be one of ours


class DcaCurator(pb_grpc.DcaCuratorServicer):
    def __init__(self, state_dir: Path, channels: PeerChannels, test_mode: bool, static_nodes: dict[str, str], *,
                 retention: float = jobs.RETENTION_SECONDS, max_live: int = jobs.MAX_LIVE, admission: Admission | None = None,
                 members: list[str] | None = None, max_deadline: float = limits.MAX_DCA_SLOT_SECONDS) -> None:
        self.store = DcaStore(Path(state_dir) / "dca")
        self.channels = channels
        self.test_mode = test_mode
        # the nodes' addresses: provisioned ones fixed, learned ones pinned to the registering key (registrations.py);
        # ``members``: the compute nodes that may register besides the provisioned ones
        self.registrations = Registrations("compute node", static_nodes, list(members or []), Path(state_dir) / "compute_nodes.json")
        self.nodes: dict[str, str] = self.registrations.addresses
        self.jobs: jobs.JobTable[Hosted[AggregatorMachine]] = jobs.JobTable("dca", jobs.machine_outcome, retention=retention, max_live=max_live, admission=admission)
        self.reaper = jobs.Reaper(self.jobs, self._expire)
        self.jobs.on_dropped.append(self._dropped)
        self.max_deadline = max_deadline  # an operator's job holds a slot while it waits for clients: at most this long

    def trace_context(self, job_id: str):
        """The job's current span at this curator (services/common/tracing.py), for work that belongs to the job; None if not held."""
        hosted = self.jobs.get(job_id)
        return hosted.trace.context() if hosted is not None else None

    async def recover(self) -> None:
        """Rebuild unfinished jobs after a restart and pull the partial sums nodes already released."""
        for job_id, spec in self.store.specs().items():
            if self.store.release(job_id) is not None or self.store.failure(job_id) is not None or self.store.consumed(job_id) is not None:
                continue
            if self.store.queued(job_id):  # it waited for an admission slot: no node ever heard of it
                self.store.put_failure(job_id, common_pb2.JOB_FAILED, "the curator restarted while this job waited for an admission slot; it never ran")
                self.store.clear_queued(job_id)
                continue
            if spec.secure_sum:  # its consumer (an ensemble job) died with the previous process
                detail = "the curator restarted during this secure-sum job; its consuming job was lost"
                self.store.put_failure(job_id, common_pb2.JOB_FAILED, detail)
                abort = common_pb2.JobAbort(job_id=job_id, problem=common_pb2.JOB_FAILED, detail=detail, reported_by="curator")
                for n in spec.compute_nodes:  # the nodes drop the vote shares now, not at the job's deadline (best effort)
                    asyncio.ensure_future(self._tell_abort(n, abort)).add_done_callback(jobs._retrieved)
                continue
            params = DcaParams.from_spec(job_id, spec)
            machine = AggregatorMachine(params, node_addresses={n: self.nodes.get(n, "") for n in params.nodes})
            machine.announce()  # the nodes already have the job: skip re-sending it
            hosted = Hosted(machine, self._route)
            hosted.on_change = self.jobs.observe
            try:
                self.jobs.admit(job_id, hosted, jobs.hard_deadline(params.deadline_seconds) + 30.0)
            except ProtocolError as e:
                self.store.put_failure(job_id, e.problem, "the curator restarted and could not take this job back")
                continue
            self.reaper.ensure_running()
            log.info("recovering DCA job %s", job_id)
            hosted.deadline_task = asyncio.ensure_future(self._deadline(hosted, params.deadline_seconds))
            for n in params.nodes:
                hosted.spawn(self._pull(hosted, n))

    async def _tell_abort(self, node: str, abort: common_pb2.JobAbort) -> None:
        try:
            await self.channels.call(self.nodes.get(node, ""), node, NODE_SERVICE, "AbortJob", abort, common_pb2.Ack, 10.0)
        except Exception as e:  # best effort: a node not told drops the job at its own deadline
            log.warning("DCA job %s: node %s was not told of the restart (%s)", abort.job_id, errors.shown(node), type(e).__name__)

    # -- operator ---------------------------------------------------------------------------------------
    async def submit(self, request: pb.DcaJobSpec) -> str:
        """An operator's DP sum (the job host's SubmitJob): secure sums are the curator's own."""
        if request.secure_sum:
            raise errors.Refused(common_pb2.WRONG_ROLE, "secure-sum jobs (no noise) are created by the curator's own mechanisms only "
                                 "(e.g. `mpdp train hamm2016`); ask for a DP sum instead")
        if request.deadline_seconds > self.max_deadline:  # an idle job holds its admission slot no longer (job-model.md §5)
            raise errors.Refused(common_pb2.INVALID_JOB, f"deadline_seconds is at most {self.max_deadline:g} s for a DCA job at this curator "
                                 "(it holds an admission slot while it waits for clients); split the collection into shorter jobs")
        return await self.create(request)

    async def create(self, request: pb.DcaJobSpec, job_id: str | None = None) -> str:
        """Create and announce a job (operators through :meth:`submit`; the curator's own mechanisms directly, which
        may name the id first, so that their own durable state names the job before it exists)."""
        job_id = job_id or registry.new_job_id("dca")
        try:
            params = DcaParams.from_spec(job_id, request)
        except InvalidJob as e:
            raise errors.Refused(common_pb2.INVALID_JOB, e.detail) from None
        except ValueError:
            raise errors.Refused(common_pb2.INVALID_JOB, "the job's parameters are out of range") from None
        if params.seeded and not self.test_mode:
            raise errors.Refused(common_pb2.INVALID_JOB, "simulation_seed (the fixed-noise debug switch) is refused outside test mode")
        missing = [n for n in params.nodes if n not in self.nodes]
        if missing:
            names = ", ".join(errors.shown(n) for n in missing[:4])
            raise errors.Refused(common_pb2.INVALID_JOB, f"compute nodes {names} are not registered with the curator ({len(self.nodes)} are)")
        machine = AggregatorMachine(params, node_addresses={n: self.nodes[n] for n in params.nodes}, record=False)
        hosted = Hosted(machine, self._route)
        hosted.on_change = self.jobs.observe
        announced: list[asyncio.Task] = []
        submitted = contextvars.copy_context()  # the submitter's call: a queued job is announced in it, not in the call that freed its slot

        def start() -> None:  # the job has its admission slot (now, or later from the queue): the nodes are told
            announced.append(submitted.copy().run(asyncio.ensure_future, self._announce(hosted)))
            announced[-1].add_done_callback(jobs._retrieved)

        try:  # an operator's job without a slot waits QUEUED: no node hears of it and its clients cannot fetch it (GetJob)
            self.jobs.admit(job_id, hosted, jobs.hard_deadline(params.deadline_seconds) + 5.0, start=start)
        except ProtocolError as e:
            raise errors.Refused(e.problem, e.detail) from None
        self.reaper.ensure_running()
        if not announced:
            self.store.put_queued(job_id)  # before its spec: a restart finds it never announced (recover)
        self.store.put_spec(job_id, request)
        log.info("DCA job %s%s: d=%d N=%d T=%d M=%d ε=%g δ=%g mode=%s spec_digest %s", job_id, "" if announced else " (queued)", params.dimension, params.clients,
                 params.max_missing, params.M, params.epsilon, params.delta, params.mode, params.spec_digest.hex())
        if not announced:
            return job_id
        return await asyncio.shield(announced[0])  # announced: when the ticket returns, every node knows the job and clients may submit

    async def _announce(self, hosted: Hosted[AggregatorMachine]) -> str:
        """Start a job that has its admission slot: its deadline runs from now, and every node is told (synchronously:
        the operator's ticket returns once they all know it); errors.Refused if one could not be told."""
        machine = hosted.machine
        job_id, params = machine.job_id, machine.params
        self.store.clear_queued(job_id)  # its spec is on disk already: from now a restart takes the job back
        hosted.deadline_task = asyncio.ensure_future(self._deadline(hosted, params.deadline_seconds))
        async with hosted.lock:
            outputs = machine.announce()
        with hosted.traced():  # the nodes' spans of the job join its trace
            await asyncio.gather(*(self._send(hosted, o.to, o.message) for o in outputs if isinstance(o, Send)))
        await hosted.notify()
        if machine.failed and machine.error is not None:
            self.forget(job_id)  # never announced everywhere: nothing will ever arrive for it
            raise errors.Refused(common_pb2.PEER_UNREACHABLE, f"job {job_id} could not be announced: {machine.error.detail}")
        return job_id

    async def result(self, job_id: str) -> pb.DpSum:
        """Wait for a job of this process to end; its sum (secure-sum jobs included) or errors.Refused."""
        hosted = self.jobs.get(job_id)
        if hosted is None:
            raise errors.Refused(common_pb2.UNKNOWN_JOB, f"no running DCA job {errors.shown(job_id)}")
        async for st in hosted.watch(lambda: hosted.machine.status()):
            if st.terminal:
                break
        m = hosted.machine
        if m.failed or m.error is not None:
            detail = m.error.detail if m.error is not None else m.state
            raise errors.Refused(m.error.problem if m.error else common_pb2.JOB_FAILED, f"DCA job {job_id}: {detail}")
        return m.dp_sum()

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
        """Drop a finished job from memory (a consumed secure sum must not linger in the process); its record stays."""
        hosted = self.jobs.get(job_id)
        self.jobs.forget(job_id)
        if hosted is not None and hosted.deadline_task is not None:
            hosted.deadline_task.cancel()

    async def _expire(self, job_id: str) -> None:
        """The job outlived its hard deadline: fail it (the nodes are told), and record the failure."""
        hosted = self.jobs.get(job_id)
        if hosted is not None and not hosted.machine.terminal:
            await hosted.fail(common_pb2.PEER_UNREACHABLE, f"job {job_id} did not end by its deadline (state {hosted.machine.state})")
            await self._route(hosted, [])

    def _dropped(self, record: jobs.JobRecord) -> None:
        """The table ended a queued job (cancelled or expired; no node ever heard of it): its failure on disk."""
        self.store.put_failure(record.job_id, record.problem, record.detail)
        self.store.clear_queued(record.job_id)

    async def cancel(self, job_id: str) -> bool:
        """The operator's `mpdp jobs cancel`: fail a running job with CANCELLED (the nodes are told), recorded; a
        queued job leaves the queue (it never ran)."""
        hosted = self.jobs.get(job_id)
        if hosted is not None and self.jobs.cancel_queued(job_id):
            await hosted.notify()
            return True
        if hosted is None or hosted.machine.terminal:
            return False
        await hosted.fail(common_pb2.CANCELLED, f"job {job_id} was cancelled by the operator in state {hosted.machine.state}")
        await self._route(hosted, [])
        return True

    def release(self, job_id: str) -> pb.DpSum | None:
        """What the job host serves of a DCA job (JobOperations.GetRelease): its DP sum once released, else None. A
        secure sum's values are never served: only the curator's own mechanism consumes them (errors.Refused)."""
        spec = self.store.spec(job_id)
        if spec is not None and spec.secure_sum:
            raise errors.Refused(common_pb2.WRONG_ROLE, f"DCA job {job_id} is a secure sum without noise; only the curator's own mechanism consumes it, "
                                 "and it publishes only its own DP output")
        return self.store.release(job_id)

    async def GetJob(self, request: common_pb2.JobRef, context) -> pb.DcaJobAnnouncement:
        await _check_id(request.job_id, context)
        hosted = self.jobs.get(request.job_id)
        if hosted is None or self.jobs.queued(request.job_id):  # a queued job is told to no one: the same answer as none
            await errors.refuse(context, common_pb2.UNKNOWN_JOB, f"no running DCA job {errors.shown(request.job_id)}")
        return hosted.machine.announcement()

    async def RegisterComputeNode(self, request: pb.NodeRegistration, context) -> common_pb2.Ack:
        if not _address(request.address):
            await errors.refuse(context, common_pb2.MALFORMED, "address must be host:port (at most 255 characters)")
        try:  # a member: the gate refused every other name before the body was read
            self.registrations.register(caller(context).name, caller_key(context), request.address)
        except errors.Refused as e:
            await errors.refuse(context, e.problem, e.detail)
        return common_pb2.Ack()

    # -- node → curator -----------------------------------------------------------------------------------
    async def SendPartialSum(self, request, context) -> common_pb2.Ack:
        return await self._feed(request, context)

    async def AbortJob(self, request, context) -> common_pb2.Ack:
        return await self._feed(request, context)

    async def _feed(self, request, context) -> common_pb2.Ack:
        await _check_id(request.job_id, context)
        hosted = self.jobs.get(request.job_id)
        if hosted is None or self.jobs.queued(request.job_id):  # no node knows a queued job
            await errors.refuse(context, common_pb2.UNKNOWN_JOB, f"no DCA job {errors.shown(request.job_id)}")
        name = caller(context).name
        if name not in hosted.machine.params.nodes:  # an outsider never touches the job
            await errors.refuse(context, common_pb2.WRONG_ROLE, f"the caller is not a compute node of job {request.job_id}")
        try:
            await hosted.deliver(Peer("compute_node", name), request, context)
        except ProtocolError:
            pass
        return common_pb2.Ack()

    # -- outputs ----------------------------------------------------------------------------------------------
    async def _route(self, hosted: Hosted[AggregatorMachine], outputs) -> None:
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

    async def _send(self, hosted: Hosted[AggregatorMachine], to: Peer, message) -> None:
        address = self.nodes.get(to.name, "")
        method = NODE_METHODS[message.DESCRIPTOR.full_name]
        await hosted.send(to, message, lambda: self.channels.call(address, to.name, NODE_SERVICE, method, message, common_pb2.Ack))
        m = hosted.machine
        if m.failed and m.error is not None and self.store.failure(m.job_id) is None:
            self.store.put_failure(m.job_id, m.error.problem, m.error.detail)

    async def _pull(self, hosted: Hosted[AggregatorMachine], node: str) -> None:
        try:
            ps = await self.channels.call(self.nodes.get(node, ""), node, NODE_SERVICE, "GetPartialSum", common_pb2.JobRef(job_id=hosted.machine.job_id), pb.PartialSum, timeout=30)
        except grpc.aio.AioRpcError as e:
            problem = errors.problem_from_status(e.code(), e.details())
            if problem == common_pb2.STEP_OUT_OF_ORDER:
                return  # not released yet: the node will push it
            if problem == common_pb2.UNKNOWN_JOB:  # the node restarted and lost the job: nothing will ever come
                await hosted.fail(common_pb2.JOB_FAILED, f"compute node {node} no longer has job {hosted.machine.job_id} (it restarted)")
            elif e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
                await hosted.fail(common_pb2.PEER_UNREACHABLE, f"compute node {node} is unreachable ({e.code().name})")
            else:
                await hosted.fail(common_pb2.JOB_FAILED, f"compute node {node} cannot provide its partial sum ({errors.problem_name(problem)})")
            await self._route(hosted, [])
            return
        try:
            await hosted.deliver(Peer("compute_node", node), ps)
        except ProtocolError:
            pass

    async def _deadline(self, hosted: Hosted[AggregatorMachine], seconds: float) -> None:
        await asyncio.sleep(seconds)
        if hosted.machine.terminal:
            return
        await hosted.local(hosted.machine.close_submissions)
        # give the nodes a grace period to agree and push; then the job fails rather than hang
        await asyncio.sleep(max(10.0, 0.2 * seconds))
        if not hosted.machine.terminal:
            # ask every node: one that restarted answers UNKNOWN_JOB and the job fails now, naming it
            for n in hosted.machine.params.nodes:
                if not hosted.machine.terminal:
                    await self._pull(hosted, n)
            if not hosted.machine.terminal:
                await hosted.fail(common_pb2.JOB_FAILED, f"compute nodes did not release partial sums within the grace period after the deadline ({hosted.machine.state})")
                await self._route(hosted, [])


async def _check_id(job_id: str, context) -> None:
    """A string that cannot be a job id names no job: refused before it reaches a store or the file system."""
    if not jobs.valid_id(job_id):
        await errors.refuse(context, common_pb2.UNKNOWN_JOB, "no such job (not a job id)")


def _address(address: str) -> bool:
    return 0 < len(address) <= 255 and ":" in address and address.isprintable()


# -- its place at the curator (mpdp.registry: Hooks.curator) ---------------------------------------------------------
def of(site: "CuratorSite") -> DcaCurator:
    """The site's one DCA host (the ensemble's vote sums and the learners' rounds run on it too)."""
    cfg, curator = site.cfg, site.curator
    return site.part("dca", lambda: DcaCurator(site.state_dir, curator.channels, cfg.test_mode, dict(cfg.compute_nodes), retention=site.retention,
                                               max_live=site.max_live, admission=curator.admission, members=cfg.compute_node_members,
                                               max_deadline=cfg.max_dca_deadline_seconds))


def hosting(site: "CuratorSite", protocol: registry.Protocol) -> "Hosting":
    from mpdp_services.curator import catalog
    from mpdp_services.curator.hosting import Hosting, Servicer

    dca = of(site)
    site.on_restart(protocol.name, dca.recover)
    folder = site.state_dir / "dca"
    source = catalog.Source(protocol.name, dca.jobs, lambda j: dca.store.release(j) is not None or dca.store.consumed(j) is not None,
                            lambda: [*catalog.files(folder, ".release.binpb", "RELEASED"), *catalog.files(folder, ".consumed.json", "RELEASED"),
                                     *catalog.files(folder, ".failed.json", "FAILED")], catalog.hosted_live, catalog.hosted_stage)
    servicer = Servicer(SERVICE, lambda server: pb_grpc.add_DcaCuratorServicer_to_server(dca, server), ROLES,
                        {f"/{SERVICE}/RegisterComputeNode": dca.registrations.members})
    return Hosting(dca.submit, dca.release, dca.cancel, source, (servicer,), store=dca.store)
