"""Charlie as a gRPC service: the protocol steps parties send him and the model registry; operators submit, watch
and fetch his jobs through the curator's job host (operations.py, :meth:`Curator.submit`, ``registry``, :meth:`Curator.cancel`).

Servicer methods only look up the job, feed its machine and forward what comes out
(style.md §5); the protocol lives in :mod:`mpdp.pathak2010.curator`.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import sys
from pathlib import Path

import grpc

from mpdp import registry
from mpdp.math.drbg import Drbg
from mpdp.math.paillier import check_key_bits
from mpdp.messages import common_pb2, pathak2010_pb2 as pb, pathak2010_pb2_grpc as pb_grpc
from mpdp.pathak2010.curator import CuratorMachine
from mpdp.pathak2010.params import InvalidJob, PathakParams
from mpdp.pathak2010.resources import CuratorResources, CuratorSecrets
from mpdp.protocol import Peer, ProtocolError, Publish, Send
from mpdp_services.common import config as cfgmod
from mpdp_services.common import errors, jobs, metrics, readiness as ready
from mpdp_services.common import link
from mpdp_services.curator.links import ROLES as LINK_ROLES, SERVICE as LINK_SERVICE, PartyLinks
from mpdp_services.curator.admission import Admission
from mpdp_services.curator.pathak_pool import CuratorDgkPool
from mpdp_services.common.rpc import PeerChannels, RoleInterceptor, caller, caller_key, method_for_message, roles_by_method, serve_until_signal, start_server
from mpdp_services.common.runtime import Hosted
from mpdp_services.common.store import MessageStore
from mpdp_services.common.transcript import from_env as transcript_from_env
from mpdp.messages import link_pb2_grpc, operations_pb2_grpc
from mpdp_services.curator import catalog as catalogs
from mpdp_services.curator.dashboard import Dashboard
from mpdp_services.curator.hosting import CuratorSite, Hosting
from mpdp_services.curator.operations import ROLES as OPERATIONS_ROLES, SERVICE as OPERATIONS_SERVICE, HostedProtocol, JobOperations
from mpdp_services.curator.ownership import Ownership
from mpdp_services.curator.registrations import Registrations

log = logging.getLogger("mpdp.curator")

SERVICE = "mpdp.messages.Curator"
PARTY_SERVICE = "mpdp.messages.Party"
OPERATOR, PARTY = ("operator",), ("party",)
ROLES = roles_by_method(
    SERVICE,
    {
        "GetCuratorKeys": OPERATOR + PARTY,
        "RegisterParty": PARTY,
        "AcceptJob": PARTY,
        "SendPartyPublicKey": PARTY,
        "ForwardSizeRemainders": PARTY,
        "SendEncryptedSizeShare": PARTY,
        "SendBlindedComparisons": PARTY,
        "SendMaskedNoise": PARTY,
        "SendResharePiece": PARTY,
        "PublishShare": PARTY,
        "AbortJob": PARTY,
    },
)
PARTY_METHODS = method_for_message(pb.DESCRIPTOR.services_by_name["Party"])
ABORT_SECONDS = 10.0  # the restarted curator's AbortJob to each party of a lost job: one attempt
ABORT_WINDOW_SECONDS = 120.0  # ... retried while the party is unreachable or busy, for at most this long (best effort)
ABORT_RETRIED = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED})


class ModelRegistry(MessageStore[pb.PublishedModel]):
    """Published models on disk (one file per job), so a restart keeps them."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder, pb.PublishedModel)

    def put(self, model: pb.PublishedModel) -> None:  # type: ignore[override]
        super().put(model.job_id, model)


class Curator(pb_grpc.CuratorServicer):
    def __init__(self, cfg: cfgmod.CuratorConfig, secrets: CuratorSecrets, *, retention: float = jobs.RETENTION_SECONDS, max_live: int = jobs.MAX_LIVE) -> None:
        self.admission = Admission(cfg.max_live_jobs_federation, cfg.max_live_jobs_per_operator,
                                   queue_total=cfg.max_queued_jobs, queue_per_operator=cfg.max_queued_jobs_per_operator)
        metrics.watch_queue(self.admission.queued)
        # The spend step of every job (ProtocolStart, after which the parties spend) runs one job at a time, so every
        # party sees the jobs' spends in the same order (docs/protocols/accounting.md, "Voided charges").
        self.spend_order = asyncio.Lock()
        self.cfg = cfg
        self.secrets = secrets
        self.rng = Drbg.from_os()
        self.registry = ModelRegistry(Path(cfg.state_dir) / "models")
        # each job's durable mark beside the models (jobs.JobMarks): running from admission, failed once it fails, so a
        # curator killed mid-job reports the job FAILED after its restart and tells its parties (:meth:`recover`)
        self.marks = jobs.JobMarks(self.registry.folder, "pathak2010")
        # the parties' addresses: provisioned ones fixed, learned ones pinned to the registering key (registrations.py)
        # the parties: members, each pinned to the certificate key it first registered with (registrations.py). A party
        # has no address (it listens nowhere; the curator reaches it over its link), so the config's `parties` names
        # members only, and every party's registration pins its key: only that key may open its link
        self.registrations = Registrations("party", {}, [*cfg.members, *cfg.parties], Path(cfg.state_dir) / "parties.json")
        self.addresses: dict[str, str] = self.registrations.addresses
        self.jobs: jobs.JobTable[Hosted[CuratorMachine]] = jobs.JobTable("pathak2010", jobs.machine_outcome, retention=retention, max_live=max_live,
                                                                              admission=self.admission)
        self.jobs.on_end.append(self._queued_ended)  # a job that ended without its machine (while queued) ends its mark too
        self.reaper = jobs.Reaper(self.jobs, self._expire)
        self.dgk_pool = CuratorDgkPool(secrets.dgk, self.rng.child("pool/dgk"), lambda: self.jobs.live_count() > 0, zeta=secrets.paillier)
        self.channels = PeerChannels(cfg.tls.files())
        # every call to a party goes down the link the party opened (it opens no port); a job's watch on its parties
        # is their links (services/curator/links.py)
        self.links = PartyLinks(self.registrations.members, self.registrations.key)
        self.channels.router = self.links
        self.watch = self.links
        pub = secrets.public
        self.keys_msg = pb.CuratorKeys(
            paillier_n=_b(pub.paillier.n), dgk_n=_b(pub.dgk.n), dgk_g=_b(pub.dgk.g), dgk_h=_b(pub.dgk.h), dgk_u=pub.dgk.u, dgk_r_bits=pub.dgk.r_bits
        )

    # -- operator (through the job host, operations.py) ---------------------------------------
    async def submit(self, request: pb.PathakJobSpec) -> str:
        """Check, admit and start a job; its id once every party has been told (errors.Refused otherwise). A job the
        admission has no slot for is QUEUED: its id returns at once, and it starts (the parties are told) when it
        gets its slot (docs/protocols/job-model.md §5)."""
        job_id = registry.new_job_id("pathak2010")
        try:
            params = PathakParams.from_spec(job_id, request)
        except InvalidJob as e:
            raise errors.Refused(common_pb2.INVALID_JOB, str(e)) from None
        except ValueError:
            raise errors.Refused(common_pb2.INVALID_JOB, "the job's parameters are out of range") from None
        if params.seeded and not self.cfg.test_mode:
            raise errors.Refused(common_pb2.INVALID_JOB, "simulation_seed makes a release non-private; the curator is not in test mode")
        unknown = [p for p in params.parties if p not in self.addresses]
        if unknown:
            raise errors.Refused(common_pb2.INVALID_JOB, f"parties {_names(unknown)} are not registered with the curator; start them or fix their names "
                                 f"({len(self.addresses)} are registered)")
        machine = CuratorMachine(params, request, {p: self.addresses[p] for p in params.parties}, CuratorResources(self.rng.child(job_id), self.secrets, self.cfg.test_mode,
                                                                                                                      dgk_pool=self.dgk_pool.pool, zeta_pool=self.dgk_pool.zeta_pool))
        hosted = Hosted(machine, self._route)
        hosted.on_change = self._changed
        started: list[asyncio.Task] = []
        submitted = contextvars.copy_context()  # the submitter's call: a queued job starts in it, not in the call that freed its slot

        def start() -> None:  # the job has its slot (now, or later from the queue): the parties are told
            started.append(asyncio.create_task(self._begin(hosted), context=submitted.copy()))
            started[-1].add_done_callback(jobs._retrieved)

        try:  # the job table's bounds and the federation's and operator's (admission): before any party hears of it
            self.jobs.admit(job_id, hosted, jobs.hard_deadline(params.deadline_seconds), start=start)
        except ProtocolError as e:
            raise errors.Refused(e.problem, e.detail) from None
        self.marks.running(job_id, dict(machine.addresses))  # durable before any party hears of the job (queued or started)
        self.reaper.ensure_running()  # also ends a queued job past its deadline
        log.info("job %s submitted%s: %d parties, dataset %s, ε=%g, mode %s", job_id, " (queued)" if not started else "", params.K, params.dataset,
                 params.calibration.epsilon, params.calibration.mode)
        if started:
            await asyncio.shield(started[0])  # a job that started at once: its id once every party has been told
        return job_id

    async def _begin(self, hosted: Hosted[CuratorMachine]) -> None:
        """Start a job that has its admission slot."""
        params = hosted.machine.params
        hosted.deadline_task = asyncio.ensure_future(self._deadline(hosted, params.deadline_seconds))
        hosted.spawn(self._watch_parties(hosted))
        await hosted.start(hosted.machine.start())

    async def GetCuratorKeys(self, request, context) -> pb.CuratorKeys:
        return self.keys_msg

    async def RegisterParty(self, request: pb.PartyRegistration, context) -> pb.CuratorKeys:
        ident = caller(context)  # a member: the gate refused every other name before the body was read
        if request.address:
            await errors.refuse(context, common_pb2.MALFORMED, "a party listens on no address: it is reached over its link (register with none)")
        try:  # the key pins the party's name to its certificate key (registrations.py); it is reached down its link
            self.registrations.register(ident.name, caller_key(context), link.LINK_ADDRESS)
        except errors.Refused as e:
            await errors.refuse(context, e.problem, e.detail)
        return self.keys_msg

    # -- party → Charlie protocol steps (all the same: feed the job's machine) -----------------
    async def _deliver(self, request, context) -> common_pb2.Ack:
        await _check_id(request.job_id, context)
        hosted = self.jobs.get(request.job_id)
        if hosted is None:
            record = self.jobs.record(request.job_id)
            if record is not None and record.terminal:
                await errors.refuse(context, common_pb2.JOB_FAILED if record.problem else common_pb2.STEP_OUT_OF_ORDER, f"job {request.job_id} has ended ({record.state})")
            if self.failure(request.job_id) is not None:  # lost at a restart: the party learns it failed, not that it never was
                await errors.refuse(context, common_pb2.JOB_FAILED, f"job {request.job_id} has ended (FAILED)")
            await errors.refuse(context, common_pb2.UNKNOWN_JOB, f"no job {errors.shown(request.job_id)} at this curator")
        name = caller(context).name
        if name not in hosted.machine.addresses:  # an outsider is refused and never touches the job
            await errors.refuse(context, common_pb2.WRONG_ROLE, f"the caller is not a party of job {request.job_id}")
        try:
            await hosted.deliver(Peer("party", name), request, context)
        except ProtocolError:
            pass  # the status was already set by abort
        return common_pb2.Ack()

    AcceptJob = SendPartyPublicKey = ForwardSizeRemainders = SendEncryptedSizeShare = _deliver
    SendBlindedComparisons = SendMaskedNoise = SendResharePiece = PublishShare = AbortJob = _deliver

    # -- outputs ------------------------------------------------------------------------------
    async def _route(self, hosted: Hosted[CuratorMachine], outputs) -> None:
        starts = [o for o in outputs if isinstance(o, Send) and isinstance(o.message, pb.ProtocolStart)]
        if starts:
            hosted.spawn(self._spend_step(hosted, starts))
        for o in outputs:
            if isinstance(o, Send) and o not in starts:
                hosted.spawn(self._send(hosted, o.to, o.message))
            elif isinstance(o, Publish):  # on disk before anything here awaits: a watcher seeing PUBLISHED finds the model
                self.registry.put(o.release)
                log.info("job %s published (%d shares)", o.release.job_id, len(o.release.shares))

    async def _send(self, hosted: Hosted[CuratorMachine], to: Peer, message) -> None:
        address = hosted.machine.addresses.get(to.name) or self.addresses.get(to.name) or ""  # "" fails the send, naming the peer
        method = PARTY_METHODS[message.DESCRIPTOR.full_name]
        m = hosted.machine
        keys = self.secrets.public
        timeout = m.params.call_seconds(m.d, max(keys.paillier.bits, keys.dgk.n.bit_length()))  # sized from the job's work
        await hosted.send(to, message, lambda: self.channels.call(address, to.name, PARTY_SERVICE, method, message, common_pb2.Ack, timeout))

    async def _spend_step(self, hosted: Hosted[CuratorMachine], starts: list[Send]) -> None:
        """ProtocolStart, after which each party spends (services/party/pathak2010.py), in one order for every party.

        Every party has accepted the job (so every one is reachable) before this step. It runs one job at a time
        across the federation (``spend_order``): every party then sees the jobs' spends in the same order, so of
        concurrent jobs that do not all fit, the same ones are refused everywhere. Within a job the other parties
        go first and P1 last, each call answered only once that party has spent (or refused): a non-leader sends
        nothing after its spend but its π1 reveal to P1 until P1's PartySecrets, and P1 starts the protocol only
        when everyone else has paid. A refusal fails the job before any data-dependent message left anyone, so the parties that paid
        void their charges (docs/protocols/accounting.md, "Voided charges")."""
        leader = hosted.machine.params.parties[0]
        async with self.spend_order:
            if hosted.machine.terminal:
                return
            await asyncio.gather(*(self._send(hosted, s.to, s.message) for s in starts if s.to.name != leader))
            if hosted.machine.terminal:  # a party refused (or was lost): P1 is never asked to spend
                return
            for s in starts:
                if s.to.name == leader:
                    await self._send(hosted, s.to, s.message)

    async def _expire(self, job_id: str) -> None:
        """Past the hard deadline and still not terminal: fail it (the parties are told)."""
        hosted = self.jobs.get(job_id)
        if hosted is not None and not hosted.machine.terminal:
            await hosted.fail(common_pb2.PEER_UNREACHABLE, f"job {job_id} did not end by its deadline (state {hosted.machine.state})")

    async def cancel(self, job_id: str) -> bool:
        """The operator's `mpdp jobs cancel`: fail a running job with CANCELLED (the parties are told); a queued job
        leaves the queue and never runs (no party ever hears of it)."""
        hosted = self.jobs.get(job_id)
        if hosted is not None and self.jobs.drop_queued(job_id, common_pb2.CANCELLED, f"job {job_id} was cancelled by the operator while queued; it never ran"):
            await hosted.notify()
            return True
        if hosted is None or hosted.machine.terminal:
            return False
        await hosted.fail(common_pb2.CANCELLED, f"job {job_id} was cancelled by the operator in state {hosted.machine.state}")
        return True

    async def _deadline(self, hosted: Hosted[CuratorMachine], seconds: float) -> None:
        await asyncio.sleep(seconds)
        if not hosted.machine.terminal:
            await hosted.fail(common_pb2.JOB_FAILED, f"deadline of {seconds:g} s passed in state {hosted.machine.state}")

    async def _watch_parties(self, hosted: Hosted[CuratorMachine]) -> None:
        """While the job runs, a party that stops serving fails the job, named.

        Without this, a party that dies while the others wait for its next message would stall the job until
        its deadline. Every job subscribes to its parties' links (services/curator/links.py): a party whose link stays
        down is lost.
        """

        def lost(name: str):
            async def on_lost(reason: str) -> None:
                if not hosted.machine.terminal:
                    await hosted.fail(common_pb2.PEER_UNREACHABLE, f"party {name} is unreachable ({reason})")
            return on_lost

        subs = [self.watch.subscribe(hosted.machine.addresses.get(n) or self.addresses.get(n) or "", n, lost(n)) for n in hosted.machine.addresses]
        try:
            async with hosted.changed:
                await hosted.changed.wait_for(lambda: hosted.machine.terminal)
        finally:
            for sub in subs:
                self.watch.unsubscribe(sub)

    def _changed(self, job_id: str) -> None:
        """A job's machine moved: the table notes it; a terminal one ends the job's durable mark (its failure kept)."""
        self.jobs.observe(job_id)
        hosted = self.jobs.get(job_id)
        if hosted is not None and hosted.machine.terminal and not getattr(hosted, "marked_end", False):
            hosted.marked_end = True  # type: ignore[attr-defined]
            error = hosted.machine.error
            self.marks.ended(job_id, (error.problem, error.detail) if error is not None else None)

    def _queued_ended(self, record: jobs.JobRecord) -> None:
        """The table ended a job its machine never ran (cancelled, or past its deadline, while queued): its durable mark
        ends with the table's words, so a later restart does not report it lost. A job whose machine ended is :meth:`_changed`'s."""
        hosted = self.jobs.get(record.job_id)
        if hosted is None or hosted.machine.terminal or getattr(hosted, "marked_end", False):
            return
        hosted.marked_end = True  # type: ignore[attr-defined]
        self.marks.ended(record.job_id, (record.problem, record.detail) if record.problem else None)

    async def recover(self) -> list[str]:
        """After a restart: every job the previous process was running is FAILED (JOB_FAILED, "the curator restarted
        mid-job; nothing was released"), and each of its parties is told at once (an AbortJob, best effort), so it fails
        the job now rather than at its deadline and settles its charge as the ledger rule says (docs/protocols/job-model.md §3)."""
        lost = self.marks.recover(f"{jobs.RESTARTED}; a party that spent keeps its charge unless nothing data-dependent left it")
        for job_id, parties in lost:
            log.warning("job %s: the curator restarted mid-job; marked FAILED; telling its %d parties", job_id, len(parties))
            abort = common_pb2.JobAbort(job_id=job_id, problem=common_pb2.JOB_FAILED, detail=jobs.RESTARTED, reported_by=self.cfg.name)
            for name, address in parties.items():
                asyncio.ensure_future(self._tell_abort(self.addresses.get(name) or address, name, abort)).add_done_callback(jobs._retrieved)
        return [job_id for job_id, _ in lost]

    async def _tell_abort(self, address: str, name: str, abort: common_pb2.JobAbort) -> None:
        """Tell one party, retrying while it is unreachable or busy (a restart under load, the party restarting too) for
        at most ABORT_WINDOW_SECONDS; a definite answer (Ack, or the job already ended there) stops it."""
        end = asyncio.get_running_loop().time() + ABORT_WINDOW_SECONDS
        pause = 0.5
        while True:
            try:
                await self.channels.call(address, name, PARTY_SERVICE, "AbortJob", abort, common_pb2.Ack, ABORT_SECONDS)
                return
            except grpc.aio.AioRpcError as e:
                left = end - asyncio.get_running_loop().time()
                if e.code() not in ABORT_RETRIED or left <= pause:
                    log.warning("job %s: party %s was not told of the restart (%s)", abort.job_id, errors.shown(name), e.code().name)
                    return  # best effort: a party not told fails the job by its own deadline
            except Exception as e:  # noqa: BLE001 - best effort, as above
                log.warning("job %s: party %s was not told of the restart (%s)", abort.job_id, errors.shown(name), type(e).__name__)
                return
            await asyncio.sleep(pause)
            pause = min(2 * pause, 8.0)

    def failure(self, job_id: str) -> tuple[int, str] | None:
        """(Problem, detail) of a job that failed, this run or an earlier one (its durable mark)."""
        return self.marks.failure(job_id)


def load_secrets(cfg: cfgmod.CuratorConfig) -> CuratorSecrets:
    check_key_bits(cfg.paillier_bits, test_mode=cfg.test_mode)
    check_key_bits(cfg.dgk_bits, test_mode=cfg.test_mode)
    return CuratorSecrets.generate(cfg.paillier_bits, cfg.dgk_bits)


async def serve(cfg: cfgmod.CuratorConfig, ready_fd=sys.stdout) -> None:
    readiness = ready.Readiness(ready.KERNELS, ready.KEYS, ready.RECOVERED)
    probes_port = ready.serve_probes(cfg.probe_listen, readiness, ready_fd)[1] if cfg.probe_listen else 0
    warm = ready.start_warm_up(readiness)  # the DCA aggregator's sums; compiles while the keys are made
    secrets = await asyncio.to_thread(load_secrets, cfg)
    await readiness.done(ready.KEYS)
    curator = Curator(cfg, secrets, retention=cfg.job_retention_seconds, max_live=cfg.max_live_jobs)
    # every protocol of the registry, by the factory its entry names (services/curator/hosting.py)
    site = CuratorSite(cfg, curator, retention=cfg.job_retention_seconds, max_live=cfg.max_live_jobs)
    hostings = site.hostings()
    catalog = job_catalog(Path(cfg.state_dir), hostings)
    operations = JobOperations(catalog, hosted_protocols(hostings), Path(cfg.state_dir))
    Dashboard.of(cfg.name, catalog, hostings, asyncio.get_running_loop()).install()

    servicers = {s.service: s for h in hostings.values() for s in h.servicers}  # a service two protocols share is served once
    adders = [lambda server: pb_grpc.add_CuratorServicer_to_server(curator, server),
              lambda server: operations_pb2_grpc.add_JobOperationsServicer_to_server(operations, server),
              lambda server: link_pb2_grpc.add_PartyLinkServicer_to_server(curator.links, server),
              *(s.add for s in servicers.values())]

    def add(server) -> None:
        for add_one in adders:
            add_one(server)

    roles = {**ROLES, **OPERATIONS_ROLES, **LINK_ROLES, **{m: r for s in servicers.values() for m, r in s.roles.items()}}
    services = [SERVICE, OPERATIONS_SERVICE, LINK_SERVICE, *servicers]
    transcript = transcript_from_env(cfg.test_mode, cfg.name)
    curator.channels.transcript = transcript
    owners = Ownership(Path(cfg.state_dir)).install()  # jobs belong to the operator who asked for them (ownership.py)
    registering = {f"/{SERVICE}/RegisterParty": curator.registrations.members, **{m: curator.registrations.members for m in LINK_ROLES},
                   **{m: members for s in servicers.values() for m, members in s.registering.items()}}  # only members register or link
    gate = RoleInterceptor(roles, cfg.federation or None, transcript, scope=owners, names=registering)
    server, port, health = await start_server(cfg.tls.files(), cfg.listen, gate, add, services, serving=False)
    await readiness.attach(health, services)
    curator.links.attach_health(health)
    await site.recover()  # every job the previous process was running is FAILED (and its parties or nodes told), protocol by protocol
    await readiness.done(ready.RECOVERED)
    await warm
    log.info("curator %s listening on port %d (test_mode=%s)", cfg.name, port, cfg.test_mode)
    await serve_until_signal(server, health, port, ready_fd, cfg.http_listen, cfg.http_token_file, readiness=readiness, probes_port=probes_port,
                             on_stop=curator.links.close)
    curator.dgk_pool.stop()
    await curator.links.close()
    await curator.channels.close()


def hosting(site: CuratorSite, protocol: registry.Protocol) -> Hosting:
    """Pathak 2010 at the curator (mpdp.registry: Hooks.curator): its jobs are the :class:`Curator`'s own."""
    curator = site.curator
    site.on_restart(protocol.name, curator.recover)  # a job the previous process was running is FAILED and its parties are told
    source = catalogs.Source(protocol.name, curator.jobs, lambda j: curator.registry.get(j) is not None,
                             lambda: [*catalogs.files(curator.registry.folder, ".binpb", "PUBLISHED"), *curator.marks.failures()],
                             catalogs.hosted_live, catalogs.hosted_stage, failure=curator.failure)
    return Hosting(curator.submit, curator.registry.get, curator.cancel, source, store=curator.registry)


def job_catalog(state_dir: Path, hostings: dict[str, Hosting]) -> catalogs.Catalog:
    """Every protocol's jobs at this curator, for `mpdp jobs`, the job host and the dashboard."""
    return catalogs.Catalog([h.source for h in hostings.values()], times_dir=state_dir / "job-times")


def hosted_protocols(hostings: dict[str, Hosting]) -> list[HostedProtocol]:
    """Each protocol of the registry with the calls that run its jobs (the job host's JobOperations)."""
    return [HostedProtocol(registry.BY_NAME[name], h.submit, h.release, h.cancel) for name, h in hostings.items()]


async def _check_id(job_id: str, context) -> None:
    """A string that cannot be a job id names no job: refused before it reaches a store or the file system."""
    if not jobs.valid_id(job_id):
        await errors.refuse(context, common_pb2.UNKNOWN_JOB, "no such job (not a job id)")


def _names(names: list[str]) -> str:
    shown = ", ".join(errors.shown(n) for n in names[:4])
    return shown + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def _b(v: int) -> bytes:
    return int(v).to_bytes(max(1, (int(v).bit_length() + 7) // 8), "big")
