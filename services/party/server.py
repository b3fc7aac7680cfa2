"""P_j as a gRPC service: receives Charlie's and other parties' steps, keeps its ledger.

Data never travels: the party loads its own records from the paths in its config when a job
names a dataset. Servicer methods only look up the job, feed its machine and forward what
comes out; the protocol lives in :mod:`mpdp.pathak2010.party`.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from contextlib import asynccontextmanager
from typing import AsyncIterator

import grpc
import numpy as np

from mpdp.data.loaders import DatasetError, load, to_pm1
from mpdp.ledger import FAILED, RELEASED, BudgetExceeded, Ledger, LedgerError
from mpdp.math.dgk import DgkPublicKey
from mpdp.math.drbg import Drbg
from mpdp.math.paillier import KeyPair, PublicKey
from mpdp.local_release import PROTOCOL as LOCAL, ReleaseError, ledger_entry as local_ledger_entry, party_release
from mpdp.messages import common_pb2, contribution_pb2, contribution_pb2_grpc, local_release_pb2, local_release_pb2_grpc, pathak2010_pb2 as pb, pathak2010_pb2_grpc as pb_grpc
from mpdp.pathak2010.params import InvalidJob
from mpdp.pathak2010.party import PartyMachine
from mpdp.pathak2010.resources import CuratorPublicKeys, PartyResources
from mpdp.protocol import CURATOR, FAILED as MACHINE_FAILED, Peer, ProtocolError, Record, Send
from services.common import config as cfgmod, errors
from services.common.errors import shown
from services.common.rpc import PeerChannels, RoleInterceptor, advertised_address, caller, method_for_message, register_at_curator, roles_by_method, serve_until_signal, start_server, tls_failure
from services.common.runtime import Hosted
from services.party.ensemble import ROLES as ENSEMBLE_ROLES, SERVICE as ENSEMBLE_SERVICE, EnsembleVoter
from mpdp.messages import hamm2016_pb2_grpc
from grpc_health.v1 import health_pb2

PRECOMPUTE_HEALTH = "mpdp.precompute"  # health service name: SERVING once pools and a spare key are ready

log = logging.getLogger("mpdp.party")
Problem = common_pb2.Problem

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
        self.ledger = Ledger(cfg.ledger, cfg.budget_epsilon, cfg.budget_delta)
        self._claimed: set[tuple[str, str]] = set()  # (protocol, job id) being started in this process
        self._settled: set[str] = set()  # Pathak jobs whose ledger entry is marked released or failed
        self._set_keys(keys)

    def _set_keys(self, keys: CuratorPublicKeys) -> None:
        self.keys = keys
        self.resources = PartyResources.create(self.rng.child("resources"), keys, self.cfg.paillier_bits, test_mode=self.cfg.test_mode)
        old = getattr(self, "precompute", None)
        if old is not None:
            old.stop()
        self.precompute = Precompute(self.resources, self.cfg.paillier_bits, self.cfg.pool_target, self._on_precompute)

    # -- the ledger: one spend per job, before its first data-dependent message ------------------
    @asynccontextmanager
    async def claimed(self, context, protocol: str, job_id: str) -> AsyncIterator[None]:
        """Hold (protocol, job id) while a job starts: a job id runs and spends once (REPLAY otherwise)."""
        key = (protocol, job_id)
        if key in self._claimed:
            await errors.refuse(context, Problem.REPLAY, f"party {self.cfg.name}: job {shown(job_id)} is already being started")
        self._claimed.add(key)
        try:
            try:
                spent = await asyncio.to_thread(self.ledger.find, protocol, job_id)
            except (LedgerError, OSError) as e:
                await self._ledger_broken(context, e)
            if spent is not None:
                await errors.refuse(context, Problem.REPLAY, f"party {self.cfg.name} already spent ε on job {shown(job_id)} ({spent.get('status', 'spent')})")
            yield
        finally:
            self._claimed.discard(key)

    async def precheck(self, context, epsilon: float, delta: float) -> None:
        """Refuse early, before costly local work, a job that cannot fit (advisory: :meth:`spend` decides)."""
        try:
            led = await asyncio.to_thread(self.ledger.snapshot)
            led.check(epsilon, delta)
        except BudgetExceeded as e:
            await errors.refuse(context, Problem.BUDGET_EXCEEDED, f"party {self.cfg.name}: {e}")
        except (LedgerError, OSError) as e:
            await self._ledger_broken(context, e)

    async def spend(self, context, entry: dict) -> dict:
        """Spend the entry's true (ε, δ) in one durable step, or refuse the RPC with BUDGET_EXCEEDED."""
        try:
            return await asyncio.to_thread(self.ledger.spend, entry)
        except BudgetExceeded as e:
            await errors.refuse(context, Problem.BUDGET_EXCEEDED, f"party {self.cfg.name}: {e}")
        except (LedgerError, OSError) as e:
            await self._ledger_broken(context, e)

    async def mark(self, protocol: str, job_id: str, status: str, details: dict | None = None) -> None:
        """Mark a spent job released or failed (a failed job keeps its charge)."""
        try:
            await asyncio.to_thread(self.ledger.mark, protocol, job_id, status, details)
        except (LedgerError, OSError) as e:
            log.error("ledger %s: cannot mark job %s %s: %s", self.ledger.path, shown(job_id), status, e)

    async def _ledger_broken(self, context, e: Exception):
        log.error("ledger %s: %s", self.ledger.path, e)
        await errors.refuse(context, Problem.INTERNAL, f"party {self.cfg.name} cannot use its privacy ledger; see its log")

    # -- Charlie → party: a new job ----------------------------------------------------------
    async def AnnounceJob(self, request: pb.JobAnnouncement, context) -> common_pb2.Ack:
        ident = caller(context)
        if ident.name != self.cfg.curator.name:
            await errors.refuse(context, Problem.WRONG_ROLE, f"{shown(ident.name)} is not the curator of party {self.cfg.name}")
        if request.job_id in self.jobs:
            await errors.refuse(context, Problem.REPLAY, f"party {self.cfg.name}: job {shown(request.job_id)} was already announced")
        async with self.claimed(context, PATHAK, request.job_id):
            await self._announce(request, context)
        return common_pb2.Ack()

    async def _announce(self, request: pb.JobAnnouncement, context) -> None:
        name = self.cfg.name
        ds = self.cfg.datasets.get(request.spec.dataset)
        if ds is None:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {name} has no dataset {shown(request.spec.dataset)} (configured: {sorted(self.cfg.datasets)})")
        announced = curator_keys_from(request.curator_keys)
        if announced.paillier.n != self.keys.paillier.n or announced.dgk.n != self.keys.dgk.n:
            self._set_keys(announced)  # the curator restarted with new keys
        try:
            machine = await asyncio.to_thread(self._build, request, ds)
        except DatasetError as e:
            log.error("job %s: dataset %s: %s", shown(request.job_id), request.spec.dataset, e)
            await errors.refuse(context, Problem.INVALID_JOB, f"party {name} cannot read its dataset {shown(request.spec.dataset)}; see its log")
        except (InvalidJob, ValueError) as e:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {name}: {e}")
        except ProtocolError as e:
            await errors.refuse(context, e.problem, f"party {name}: {e.detail}")
        # the true guarantee (paper mode: √d·ε/(2K), not the nominal ε) is spent before JobAcceptance leaves
        await self.spend(context, pathak_entry(machine))
        hosted = Hosted(machine, self._route)
        hosted.addresses = dict(request.party_addresses)  # type: ignore[attr-defined]
        self.precompute.pause()
        self.jobs[request.job_id] = hosted
        log.info("job %s announced: dataset %s, %d rows, d=%d", request.job_id, request.spec.dataset, machine.n, machine.d)
        await hosted.start(machine.start())

    def _build(self, request: pb.JobAnnouncement, ds: cfgmod.DatasetConfig) -> PartyMachine:
        X, y = load(ds.path, ds.format, ds.n_features, ds.label_column)
        return PartyMachine(self.cfg.name, request, X, to_pm1(y), self.resources)

    # -- every other step ------------------------------------------------------------------------
    async def _deliver(self, request, context) -> common_pb2.Ack:
        hosted = self.jobs.get(request.job_id)
        if hosted is None:
            await errors.refuse(context, Problem.UNKNOWN_JOB, f"party {self.cfg.name} has no job {shown(request.job_id)}")
        ident = caller(context)
        if ident.role == "curator":
            if ident.name != self.cfg.curator.name:
                await errors.refuse(context, Problem.WRONG_ROLE, f"{shown(ident.name)} is not the curator of party {self.cfg.name}")
            sender = CURATOR
        else:
            sender = Peer("party", ident.name)
        try:
            await hosted.deliver(sender, request, context)
        except ProtocolError:
            pass
        finally:
            await self._settle(hosted.machine)
        return common_pb2.Ack()

    StartProtocol = SendMaskedSizeShare = SendComparisonBits = SendSelectionVector = _deliver
    SendPartySecrets = SendSizeShare = SendSealedSizeRemainder = SendMaskedSize = SendNoiseChain = _deliver
    SendResharePiece = AbortJob = _deliver

    # -- outputs ----------------------------------------------------------------------------------
    async def _route(self, hosted: Hosted, outputs) -> None:
        m = hosted.machine
        for o in outputs:
            if isinstance(o, Send):
                hosted.spawn(self._send(hosted, o.to, o.message))
            elif isinstance(o, Record):  # DONE: the charge was spent at announce; the release only marks it
                if o.entry.get("epsilon") != pathak_entry(m)["epsilon"]:
                    log.error("job %s: the release records ε=%s, but ε=%s was spent", m.job_id, o.entry.get("epsilon"), pathak_entry(m)["epsilon"])
                self._settled.add(m.job_id)
                await self.mark(PATHAK, m.job_id, RELEASED)
        await self._settle(m)
        if all(h.machine.terminal for h in self.jobs.values()):
            m = hosted.machine
            self.precompute.resume(getattr(m, "d", None), len(m.params.pairs) * m.params.compare_bits)

    async def _settle(self, m: PartyMachine) -> None:
        """A failed Pathak job keeps its charge, marked failed: its data may already have left in a message."""
        if m.state == MACHINE_FAILED and m.job_id not in self._settled:
            self._settled.add(m.job_id)
            await self.mark(PATHAK, m.job_id, FAILED, {"failure": errors.problem_name(m.error.problem) if m.error else "JOB_FAILED"})

    async def _send(self, hosted: Hosted, to: Peer, message) -> None:
        if to == CURATOR:
            address, site = self.cfg.curator.address, self.cfg.curator.name
            call = lambda: self.channels.call(address, site, CURATOR_SERVICE, CURATOR_METHODS[message.DESCRIPTOR.full_name], message, common_pb2.Ack)  # noqa: E731
        else:
            address = hosted.addresses.get(to.name)  # type: ignore[attr-defined]
            if not address:
                await hosted.fail(Problem.PEER_UNREACHABLE, f"no address for party {to.name}")
                return
            method = PARTY_SELF_METHODS[message.DESCRIPTOR.full_name]
            call = lambda: self.channels.call(address, to.name, SERVICE, method, message, common_pb2.Ack)  # noqa: E731
        await hosted.send(to, message, call)


PARTY_SELF_METHODS = method_for_message(pb.DESCRIPTOR.services_by_name["Party"])
PATHAK = "pathak2010"


def pathak_entry(machine: PartyMachine) -> dict:
    """What a Pathak job charges: the guarantee the release really gives (:meth:`PathakCalibration.guarantee`;
    in paper mode √d·ε/(2K), not the nominal ε), the same figures the machine's DONE record carries."""
    cal = machine.params.calibration
    g = cal.guarantee(machine.d)
    return {"job_id": machine.job_id, "protocol": PATHAK, "mechanism": g.mechanism, "epsilon": g.epsilon, "nominal_epsilon": cal.epsilon,
            "delta": g.delta, "mode": cal.mode, "dataset": machine.params.dataset}
LOCAL_SERVICE = "mpdp.messages.LocalModelParty"
LOCAL_ROLES = roles_by_method(LOCAL_SERVICE, {"TrainLocalModel": C})


CONTRIBUTION_SERVICE = "mpdp.messages.ContributionParty"
CONTRIBUTION_ROLES = roles_by_method(CONTRIBUTION_SERVICE, {"Contribute": C})
STATISTICS = {"linreg/std": "std", "linreg/main": "main"}
DCA = "dca"


async def ready(holder: dict, context) -> "Party":
    """The party once registration gave it Charlie's keys; NOT_READY (UNAVAILABLE) before."""
    party = holder.get("party")
    if party is None:
        await errors.refuse(context, Problem.NOT_READY, "party is starting up (not yet registered with its curator)")
    return party


class ContributingParty(contribution_pb2_grpc.ContributionPartyServicer):
    """The party as a DCA client: computes a statistic of its own records and submits it with its noise slice."""

    def __init__(self, holder: dict) -> None:
        self._holder = holder

    async def Contribute(self, request: contribution_pb2.StatisticRequest, context) -> contribution_pb2.ContributionReceipt:
        party = await ready(self._holder, context)
        cfg = party.cfg
        if caller(context).name != cfg.curator.name:
            await errors.refuse(context, Problem.WRONG_ROLE, f"only the curator of party {cfg.name} may ask for contributions")
        round_name = STATISTICS.get(request.statistic)
        if round_name is None:
            await errors.refuse(context, Problem.MALFORMED, f"unknown statistic {shown(request.statistic)}; use one of {sorted(STATISTICS)}")
        async with party.claimed(context, DCA, request.dca_job_id):
            return await self._contribute(party, request, round_name, context)

    async def _contribute(self, party: "Party", request: contribution_pb2.StatisticRequest, round_name: str, context) -> contribution_pb2.ContributionReceipt:
        from mpdp.dca.params import DcaParams
        from mpdp.regression.statistics import party_statistics
        from services.client import Endpoints
        from services.dca_client import fetch_job, submit_vector

        cfg = party.cfg
        job = shown(request.dca_job_id)
        ds = cfg.datasets.get(request.dataset)
        if ds is None:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name} has no dataset {shown(request.dataset)} (configured: {sorted(cfg.datasets)})")
        tls = cfg.tls.files()
        endpoints = Endpoints(cfg.curator.address, cfg.curator.name, tls)
        try:
            ann = await fetch_job(cfg.curator.address, cfg.curator.name, tls, request.dca_job_id)
            params = DcaParams.from_spec(request.dca_job_id, ann.spec)
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                await errors.refuse(context, Problem.UNKNOWN_JOB, f"party {cfg.name}: the curator has no DCA job {job}")
            await errors.refuse(context, Problem.PEER_UNREACHABLE, f"party {cfg.name} could not fetch DCA job {job} from its curator ({e.code().name})")
        except ValueError as e:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name}: DCA job {job}: {e}")
        if params.seeded and not cfg.test_mode:
            await errors.refuse(context, Problem.INVALID_JOB, "simulation_seed is refused outside test mode")
        if params.secure_sum:  # a noise-free sum would carry the raw statistic: only DP sums take contributions
            await errors.refuse(context, Problem.INVALID_JOB, f"DCA job {job} adds no noise; statistics are contributed to DP sums only")
        charge = params.ledger_entry()
        await party.precheck(context, charge["epsilon"], charge["delta"])

        def compute():
            X, y = load(ds.path, ds.format, ds.n_features, ds.label_column)
            if len(y) > max(1, request.records_per_client):
                raise ValueError(f"{len(y)} rows exceed the job's public bound of {request.records_per_client} records per party")
            return party_statistics(X, y, round_name, tuple(request.bounds))

        try:
            z = await asyncio.to_thread(compute)
        except DatasetError as e:
            log.error("DCA job %s: dataset %s: %s", job, request.dataset, e)
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name} cannot read its dataset {shown(request.dataset)}; see its log")
        except ValueError as e:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name}: {e}")
        try:  # spends the job's true (ε, δ) in the ledger before any share leaves; a failed submission keeps it
            report = await submit_vector(endpoints, tls, cfg.name, request.dca_job_id, z, ledger=party.ledger, announcement=ann)
        except BudgetExceeded as e:
            await errors.refuse(context, Problem.BUDGET_EXCEEDED, f"party {cfg.name}: {e}")
        except (LedgerError, OSError) as e:
            await party._ledger_broken(context, e)
        except grpc.aio.AioRpcError as e:
            await errors.refuse(context, Problem.PEER_UNREACHABLE, f"party {cfg.name} could not submit its shares ({e.code().name})")
        if report.rejected:
            await errors.refuse(context, Problem.JOB_FAILED, f"party {cfg.name}'s shares were refused ({errors.problem_name(report.rejected[0].problem)})")
        return contribution_pb2.ContributionReceipt(party=cfg.name, accepted_shares=report.accepted)


class LocalParty(local_release_pb2_grpc.LocalModelPartyServicer):
    """Trains and releases a DP model on this party's own records (LMGC), spending its ε first."""

    def __init__(self, holder: dict) -> None:
        self._holder = holder

    async def TrainLocalModel(self, request: local_release_pb2.LocalModelRequest, context) -> local_release_pb2.LocalModelRelease:
        party = await ready(self._holder, context)
        cfg = party.cfg
        if caller(context).name != cfg.curator.name:
            await errors.refuse(context, Problem.WRONG_ROLE, f"only the curator of party {cfg.name} may request releases")
        if request.spec.simulation_seed and not cfg.test_mode:
            await errors.refuse(context, Problem.INVALID_JOB, "simulation_seed is refused outside test mode")
        try:
            entry = local_ledger_entry(request)
        except ReleaseError as e:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name}: {e}")
        ds = cfg.datasets.get(request.spec.dataset)
        if ds is None:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name} has no dataset {shown(request.spec.dataset)} (configured: {sorted(cfg.datasets)})")
        async with party.claimed(context, LOCAL, request.job_id):
            await party.spend(context, entry)  # before training: the release is the first data-dependent message
            return await self._release(party, request, ds, context)

    async def _release(self, party: "Party", request: local_release_pb2.LocalModelRequest, ds: cfgmod.DatasetConfig, context) -> local_release_pb2.LocalModelRelease:
        cfg = party.cfg
        rng = Drbg.from_seed(request.spec.simulation_seed).child(f"party/{cfg.name}") if request.spec.simulation_seed else party.rng.child(f"local/{request.job_id}")

        def train():
            X, y = load(ds.path, ds.format, ds.n_features, ds.label_column)
            return party_release(cfg.name, request, X, y, rng)

        try:
            release, details = await asyncio.to_thread(train)
        except Exception as e:  # noqa: BLE001 - any failure after spending keeps the charge, marked failed
            await party.mark(LOCAL, request.job_id, FAILED)
            if isinstance(e, DatasetError):
                log.error("local job %s: dataset %s: %s", shown(request.job_id), request.spec.dataset, e)
                await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name} cannot read its dataset {shown(request.spec.dataset)}; see its log")
            if isinstance(e, (ReleaseError, ValueError, RuntimeError)):
                await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name} cannot release: {e}")
            log.exception("local job %s failed", shown(request.job_id))
            await errors.refuse(context, Problem.INTERNAL, f"party {cfg.name} could not train; see its log")
        await party.mark(LOCAL, request.job_id, RELEASED, details)
        log.info("local job %s: released %s (ε=%g)", shown(request.job_id), request.spec.model, request.spec.epsilon)
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
                party = await ready(holder, context)
                return await getattr(party, name)(request, context)

            return call
        return object.__getattribute__(self, name)
