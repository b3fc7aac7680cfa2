"""P_j as a gRPC service: receives Charlie's and other parties' steps, keeps its ledger.

Data never travels: the party loads its own records from the paths in its config when a job
names a dataset. Servicer methods only look up the job, feed its machine and forward what
comes out; the protocol lives in :mod:`mpdp.pathak2010.party`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from pathlib import Path

import grpc
import numpy as np

from mpdp.data.loaders import DatasetError, load, to_pm1
from mpdp.ledger import BudgetExceeded, PrivacyLedger
from mpdp.math.dgk import DgkPublicKey
from mpdp.math.drbg import Drbg
from mpdp.math.paillier import KeyPair, PublicKey
from mpdp.local_release import ReleaseError, party_release
from mpdp.messages import common_pb2, contribution_pb2, contribution_pb2_grpc, local_release_pb2, local_release_pb2_grpc, pathak2010_pb2 as pb, pathak2010_pb2_grpc as pb_grpc
from mpdp.pathak2010.params import InvalidJob
from mpdp.pathak2010.party import PartyMachine
from mpdp.pathak2010.resources import CuratorPublicKeys, PartyResources
from mpdp.protocol import CURATOR, Peer, ProtocolError, Record, Send
from services.common import config as cfgmod
from services.common.rpc import PeerChannels, RoleInterceptor, advertised_address, caller, method_for_message, register_at_curator, roles_by_method, serve_until_signal, start_server, tls_failure
from services.common.runtime import Hosted
from services.party.ensemble import ROLES as ENSEMBLE_ROLES, SERVICE as ENSEMBLE_SERVICE, EnsembleVoter
from mpdp.messages import hamm2016_pb2_grpc
from grpc_health.v1 import health_pb2

PRECOMPUTE_HEALTH = "mpdp.precompute"  # health service name: SERVING once pools and a spare key are ready

log = logging.getLogger("mpdp.party")

SERVICE = "mpdp.messages.Party"
CURATOR_SERVICE = "mpdp.messages.Curator"
C, P = ("curator",), ("party",)
ROLES = roles_by_method(
    SERVICE,
    {
        "AnnounceJob": C,
        "StartProtocol": C,
        "SendMaskedSizeShare": C,
        "SendComparisonBits": C,
        "SendSelectionVector": C,
        "SendPartySecrets": P,
        "SendSizeShare": P,
        "SendSealedSizeRemainder": P,
        "SendMaskedSize": P,
        "SendNoiseChain": P,
        "SendResharePiece": C + P,
        "AbortJob": C + P,
    },
)
CURATOR_METHODS = method_for_message(pb.DESCRIPTOR.services_by_name["Curator"])
DGK_POOL_TARGET = 1200  # ≥ the leader's blinding factors for K = 5 (10 pairs × ℓ = 115)


def curator_keys_from(msg: pb.CuratorKeys) -> CuratorPublicKeys:
    n = lambda b: int.from_bytes(b, "big")  # noqa: E731
    return CuratorPublicKeys(PublicKey(n(msg.paillier_n)), DgkPublicKey(n(msg.dgk_n), n(msg.dgk_g), n(msg.dgk_h), msg.dgk_u, msg.dgk_r_bits))


class Precompute:
    """Background thread that keeps randomness pools and one spare party key ξ ready (off the critical path).

    It works only while no job is running in this party (``pause``/``resume``): gmpy2 holds the GIL, so
    filling pools during a job would slow the job down. ``on_state(ready: bool)`` reports when the pools
    are full (the party publishes it as the health status of ``mpdp.precompute``).
    """

    def __init__(self, resources: PartyResources, paillier_bits: int, zeta_target: int, on_state=lambda ready: None) -> None:
        self.res = resources
        self.bits = paillier_bits
        self.zeta_target = zeta_target
        self.dgk_target = DGK_POOL_TARGET
        self._spare: list[KeyPair] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._stop = False
        self._on_state = on_state
        resources.party_key_source = self.take_key
        self._thread = threading.Thread(target=self._run, name="mpdp-precompute", daemon=True)
        self._thread.start()

    def take_key(self) -> KeyPair:
        with self._lock:
            key = self._spare.pop() if self._spare else None
        return key or KeyPair.generate(self.bits)

    def pause(self) -> None:
        self._idle.clear()

    def resume(self, dimension: int | None = None, comparisons: int | None = None) -> None:
        if dimension:
            self.zeta_target = max(self.zeta_target, 2 * dimension + 8)
        if comparisons:
            self.dgk_target = max(self.dgk_target, comparisons)
        self._idle.set()
        self._wake.set()

    def stop(self) -> None:
        self._stop = True
        self._idle.set()
        self._wake.set()

    def _full(self) -> bool:
        return bool(self._spare) and len(self.res.zeta_pool) >= self.zeta_target and len(self.res.dgk_pool) >= self.dgk_target

    def _run(self) -> None:
        while not self._stop:
            self._idle.wait()
            if self._stop:
                return
            if self._full():
                self._on_state(True)
                self._wake.wait()
                self._wake.clear()
                continue
            self._on_state(False)
            with self._lock:
                need_key = not self._spare
            if need_key:
                k = KeyPair.generate(self.bits)
                with self._lock:
                    self._spare.append(k)
            elif len(self.res.zeta_pool) < self.zeta_target:
                self.res.zeta_pool.fill(4)
            else:
                self.res.dgk_pool.fill(32)


class Party(pb_grpc.PartyServicer):
    def __init__(self, cfg: cfgmod.PartyConfig, keys: CuratorPublicKeys, on_precompute=lambda ready: None) -> None:
        self.cfg = cfg
        self._on_precompute = on_precompute
        self.rng = Drbg.from_os()
        self.jobs: dict[str, Hosted] = {}
        self.channels = PeerChannels(cfg.tls.files())
        self.ledger_path = Path(cfg.ledger)
        self.ledger = (
            PrivacyLedger.from_json(self.ledger_path.read_text(), cfg.budget_epsilon) if self.ledger_path.exists() else PrivacyLedger(cfg.budget_epsilon)
        )
        self._set_keys(keys)

    def _set_keys(self, keys: CuratorPublicKeys) -> None:
        self.keys = keys
        self.resources = PartyResources.create(self.rng.child("resources"), keys, self.cfg.paillier_bits, test_mode=self.cfg.test_mode)
        old = getattr(self, "precompute", None)
        if old is not None:
            old.stop()
        self.precompute = Precompute(self.resources, self.cfg.paillier_bits, self.cfg.pool_target, self._on_precompute)

    # -- Charlie → party: a new job ----------------------------------------------------------
    async def AnnounceJob(self, request: pb.JobAnnouncement, context) -> common_pb2.Ack:
        ident = caller(context)
        if ident.name != self.cfg.curator.name:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"WRONG_ROLE: {ident.name} is not this party's curator {self.cfg.curator.name}")
        if request.job_id in self.jobs:
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, f"REPLAY: job {request.job_id} was already announced")
        ds = self.cfg.datasets.get(request.spec.dataset)
        if ds is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"INVALID_JOB: party {self.cfg.name} has no dataset {request.spec.dataset!r} (configured: {sorted(self.cfg.datasets)})")
        try:
            self.ledger.check(request.spec.epsilon)
        except BudgetExceeded as e:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"BUDGET_EXCEEDED: party {self.cfg.name}: {e}")
        announced = curator_keys_from(request.curator_keys)
        if announced.paillier.n != self.keys.paillier.n or announced.dgk.n != self.keys.dgk.n:
            self._set_keys(announced)  # the curator restarted with new keys
        try:
            machine = await asyncio.to_thread(self._build, request, ds)
        except (DatasetError, InvalidJob, ValueError) as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"INVALID_JOB: party {self.cfg.name}: {e}")
        except ProtocolError as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"{e.problem_name}: party {self.cfg.name}: {e.detail}")
        hosted = Hosted(machine, self._route)
        hosted.addresses = dict(request.party_addresses)  # type: ignore[attr-defined]
        self.precompute.pause()
        self.jobs[request.job_id] = hosted
        log.info("job %s announced: dataset %s, %d rows, d=%d", request.job_id, request.spec.dataset, machine.n, machine.d)
        await hosted.start(machine.start())
        return common_pb2.Ack()

    def _build(self, request: pb.JobAnnouncement, ds: cfgmod.DatasetConfig) -> PartyMachine:
        X, y = load(ds.path, ds.format, ds.n_features, ds.label_column)
        return PartyMachine(self.cfg.name, request, X, to_pm1(y), self.resources)

    # -- every other step ------------------------------------------------------------------------
    async def _deliver(self, request, context) -> common_pb2.Ack:
        hosted = self.jobs.get(request.job_id)
        if hosted is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"UNKNOWN_JOB: party {self.cfg.name} has no job {request.job_id!r}")
        ident = caller(context)
        if ident.role == "curator":
            if ident.name != self.cfg.curator.name:
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"WRONG_ROLE: {ident.name} is not this party's curator")
            sender = CURATOR
        else:
            sender = Peer("party", ident.name)
        try:
            await hosted.deliver(sender, request, context)
        except ProtocolError:
            pass
        return common_pb2.Ack()

    StartProtocol = SendMaskedSizeShare = SendComparisonBits = SendSelectionVector = _deliver
    SendPartySecrets = SendSizeShare = SendSealedSizeRemainder = SendMaskedSize = SendNoiseChain = _deliver
    SendResharePiece = AbortJob = _deliver

    # -- outputs ----------------------------------------------------------------------------------
    async def _route(self, hosted: Hosted, outputs) -> None:
        for o in outputs:
            if isinstance(o, Send):
                hosted.spawn(self._send(hosted, o.to, o.message))
            elif isinstance(o, Record):
                self.record(o.entry)
        if all(h.machine.terminal for h in self.jobs.values()):
            m = hosted.machine
            self.precompute.resume(getattr(m, "d", None), len(m.params.pairs) * m.params.compare_bits)

    def record(self, entry: dict) -> None:
        """Add a release to the privacy ledger and persist it (atomically)."""
        self.ledger.record(entry)
        tmp = self.ledger_path.with_suffix(".tmp")
        self.ledger_path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(self.ledger.to_json())
        os.replace(tmp, self.ledger_path)

    async def _send(self, hosted: Hosted, to: Peer, message) -> None:
        if to == CURATOR:
            address, site = self.cfg.curator.address, self.cfg.curator.name
            call = lambda: self.channels.call(address, site, CURATOR_SERVICE, CURATOR_METHODS[message.DESCRIPTOR.full_name], message, common_pb2.Ack)  # noqa: E731
        else:
            address = hosted.addresses.get(to.name)  # type: ignore[attr-defined]
            if not address:
                await hosted.fail(common_pb2.PEER_UNREACHABLE, f"no address for party {to.name}")
                return
            method = PARTY_SELF_METHODS[message.DESCRIPTOR.full_name]
            call = lambda: self.channels.call(address, to.name, SERVICE, method, message, common_pb2.Ack)  # noqa: E731
        await hosted.send(to, message, call)


PARTY_SELF_METHODS = method_for_message(pb.DESCRIPTOR.services_by_name["Party"])
LOCAL_SERVICE = "mpdp.messages.LocalModelParty"
LOCAL_ROLES = roles_by_method(LOCAL_SERVICE, {"TrainLocalModel": C})


CONTRIBUTION_SERVICE = "mpdp.messages.ContributionParty"
CONTRIBUTION_ROLES = roles_by_method(CONTRIBUTION_SERVICE, {"Contribute": C})
STATISTICS = {"linreg/std": "std", "linreg/main": "main"}


class ContributingParty(contribution_pb2_grpc.ContributionPartyServicer):
    """The party as a DCA client: computes a statistic of its own records and submits it with its noise slice."""

    def __init__(self, holder: dict) -> None:
        self._holder = holder

    async def Contribute(self, request: contribution_pb2.StatisticRequest, context) -> contribution_pb2.ContributionReceipt:
        from mpdp.dca.params import DcaParams
        from mpdp.regression.statistics import party_statistics
        from services.client import Endpoints
        from services.dca_client import submit_vector

        party: Party | None = self._holder.get("party")
        if party is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "party is starting up")
        cfg = party.cfg
        if caller(context).name != cfg.curator.name:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"WRONG_ROLE: only curator {cfg.curator.name} may ask for contributions")
        round_name = STATISTICS.get(request.statistic)
        if round_name is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"MALFORMED: unknown statistic {request.statistic!r}; use one of {sorted(STATISTICS)}")
        if any(e.get("job_id") == request.dca_job_id for e in party.ledger.entries):
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, f"REPLAY: party {cfg.name} already contributed to {request.dca_job_id}")
        ds = cfg.datasets.get(request.dataset)
        if ds is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"INVALID_JOB: party {cfg.name} has no dataset {request.dataset!r} (configured: {sorted(cfg.datasets)})")
        tls = cfg.tls.files()
        endpoints = Endpoints(cfg.curator.address, cfg.curator.name, tls)
        try:
            from services.dca_client import _fetch_job

            ann = await _fetch_job(cfg.curator.address, cfg.curator.name, tls, request.dca_job_id)
            params = DcaParams.from_spec(request.dca_job_id, ann.spec)
        except grpc.aio.AioRpcError as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"UNKNOWN_JOB: {e.details()}")
        if params.seeded and not cfg.test_mode:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_JOB: simulation_seed is refused outside test mode")
        if params.secure_sum:  # a noise-free sum would carry the raw statistic: only DP sums take contributions
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"INVALID_JOB: DCA job {request.dca_job_id} adds no noise; statistics are contributed to DP sums only")
        try:
            party.ledger.check(params.epsilon, params.delta)
        except BudgetExceeded as e:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"BUDGET_EXCEEDED: party {cfg.name}: {e}")

        def compute():
            X, y = load(ds.path, ds.format, ds.n_features, ds.label_column)
            if len(y) > max(1, request.records_per_client):
                raise ValueError(f"{len(y)} rows exceed the job's public bound of {request.records_per_client} records per party")
            return party_statistics(X, y, round_name, tuple(request.bounds))

        try:
            z = await asyncio.to_thread(compute)
        except (DatasetError, ValueError) as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"INVALID_JOB: party {cfg.name}: {e}")
        try:
            report = await submit_vector(endpoints, tls, cfg.name, request.dca_job_id, z)
        except grpc.aio.AioRpcError as e:
            await context.abort(grpc.StatusCode.ABORTED, f"PEER_UNREACHABLE: party {cfg.name} could not submit its shares: {e.details()}")
        if report.rejected:
            await context.abort(grpc.StatusCode.ABORTED, f"JOB_FAILED: party {cfg.name}'s shares were refused: {report.rejected[0].detail}")
        party.record(params.ledger_entry())
        return contribution_pb2.ContributionReceipt(party=cfg.name, accepted_shares=report.accepted)


class LocalParty(local_release_pb2_grpc.LocalModelPartyServicer):
    """Trains and releases a DP model on this party's own records (LMGC), recording it in the ledger."""

    def __init__(self, holder: dict) -> None:
        self._holder = holder

    async def TrainLocalModel(self, request: local_release_pb2.LocalModelRequest, context) -> local_release_pb2.LocalModelRelease:
        party: Party | None = self._holder.get("party")
        if party is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "party is starting up")
        cfg = party.cfg
        if caller(context).name != cfg.curator.name:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"WRONG_ROLE: only curator {cfg.curator.name} may request releases")
        if any(e.get("job_id") == request.job_id for e in party.ledger.entries):
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, f"REPLAY: job {request.job_id} was already released")
        if request.spec.simulation_seed and not cfg.test_mode:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_JOB: simulation_seed is refused outside test mode")
        ds = cfg.datasets.get(request.spec.dataset)
        if ds is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"INVALID_JOB: party {cfg.name} has no dataset {request.spec.dataset!r} (configured: {sorted(cfg.datasets)})")
        try:
            party.ledger.check(request.spec.epsilon)
        except BudgetExceeded as e:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"BUDGET_EXCEEDED: party {cfg.name}: {e}")
        rng = Drbg.from_seed(request.spec.simulation_seed).child(f"party/{cfg.name}") if request.spec.simulation_seed else party.rng.child(f"local/{request.job_id}")

        def train():
            X, y = load(ds.path, ds.format, ds.n_features, ds.label_column)
            return party_release(cfg.name, request, X, y, rng)

        try:
            release, entry = await asyncio.to_thread(train)
        except (DatasetError, ReleaseError, ValueError, RuntimeError) as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"INVALID_JOB: party {cfg.name} cannot release: {e}")
        party.record(entry)
        log.info("local job %s: released %s (ε=%g)", request.job_id, request.spec.model, request.spec.epsilon)
        return release


async def register(cfg: cfgmod.PartyConfig, port: int, patience: float = 120.0) -> CuratorPublicKeys:
    """Tell Charlie where this party listens; returns his public keys (see :func:`register_at_curator`)."""
    keys = await register_at_curator(
        cfg.tls.files(), cfg.curator.address, cfg.curator.name, f"/{CURATOR_SERVICE}/RegisterParty",
        pb.PartyRegistration(address=advertised_address(cfg.listen, cfg.advertise, port)), pb.CuratorKeys, patience,
    )
    return curator_keys_from(keys)


async def serve(cfg: cfgmod.PartyConfig, ready_fd=sys.stdout) -> None:
    holder: dict[str, Party] = {}

    def add(server):
        pb_grpc.add_PartyServicer_to_server(_Lazy(holder), server)
        local_release_pb2_grpc.add_LocalModelPartyServicer_to_server(LocalParty(holder), server)
        contribution_pb2_grpc.add_ContributionPartyServicer_to_server(ContributingParty(holder), server)
        hamm2016_pb2_grpc.add_EnsemblePartyServicer_to_server(EnsembleVoter(holder), server)

    roles = {**ROLES, **LOCAL_ROLES, **CONTRIBUTION_ROLES, **ENSEMBLE_ROLES}
    services = [SERVICE, LOCAL_SERVICE, CONTRIBUTION_SERVICE, ENSEMBLE_SERVICE]
    server, port, health = await start_server(cfg.tls.files(), cfg.listen, RoleInterceptor(roles, cfg.federation or None, pinned={"curator": cfg.curator.name}), add, services)
    await health.set(SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)  # SERVING once registered with the curator
    try:
        keys = await register(cfg, port)
    except grpc.aio.AioRpcError as e:
        if tls_failure(e):
            hint = "this site does not trust the curator's certificate: check that ca.crt is this federation's CA and the curator's certificate is valid (`mpdp provision show ca.crt`)"
        elif e.code() == grpc.StatusCode.UNAVAILABLE:
            hint = "is the curator up and the address/port open? If it is, it refused this site's certificate (another CA or federation, or expired): run `mpdp provision check` on this site's folder and read the curator's log"
        else:
            hint = "see the curator's log"
        print(f"mpdp party {cfg.name}: cannot register with curator {cfg.curator.name} at {cfg.curator.address}: {e.code().name}: {e.details()}; {hint}", file=sys.stderr)
        await server.stop(0)
        raise SystemExit(2)
    loop = asyncio.get_running_loop()

    def on_precompute(ready: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if ready else health_pb2.HealthCheckResponse.NOT_SERVING
        loop.call_soon_threadsafe(lambda: asyncio.ensure_future(health.set(PRECOMPUTE_HEALTH, status)))

    holder["party"] = Party(cfg, keys, on_precompute)
    await health.set(SERVICE, health_pb2.HealthCheckResponse.SERVING)
    log.info("party %s listening on port %d, registered with %s", cfg.name, port, cfg.curator.name)
    await serve_until_signal(server, health, port, ready_fd)
    holder["party"].precompute.stop()
    await holder["party"].channels.close()


class _Lazy(pb_grpc.PartyServicer):
    """Forwards to the Party once registration has given it Charlie's keys (UNAVAILABLE before)."""

    def __init__(self, holder: dict[str, Party]) -> None:
        self._holder = holder

    def __getattribute__(self, name: str):
        if name[:1].isupper():
            holder = object.__getattribute__(self, "_holder")

            async def call(request, context):
                party = holder.get("party")
                if party is None:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "party is starting up")
                return await getattr(party, name)(request, context)

            return call
        return object.__getattribute__(self, name)
