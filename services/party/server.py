"""P_j as a gRPC service: the site (config, privacy ledger, peer channels) and one servicer per flow.

Data never travels: the party loads its own records from the paths in its config when a job names a
dataset. Each flow has its own module, named by its protocol's registry entry (``mpdp.registry.Hooks.party``;
services/party/flows.py): e.g. :mod:`mpdp_services.party.pathak2010` (the Pathak 2010 protocol, with
:mod:`mpdp_services.party.precompute` keeping its pools) or :mod:`mpdp_services.party.contribution` (every
DCA-based protocol's contributions). They share one :class:`Party`: its ledger is the one place where this party
spends ε.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import sys
import tempfile
from collections import Counter
from contextlib import asynccontextmanager
from typing import AsyncIterator, NoReturn

import grpc

from mpdp.ledger import FAILED, BudgetExceeded, Ledger, LedgerError
from mpdp.math.drbg import Drbg
from mpdp.messages import common_pb2, pathak2010_pb2 as pb
from mpdp.pathak2010.resources import CuratorPublicKeys
from mpdp_services.common import config as cfgmod, errors, metrics, readiness as ready
from mpdp_services.common.errors import shown
from mpdp_services.common.pki import check_server_certificate
from mpdp_services.common.rpc import PeerChannels, RoleInterceptor, register_at_curator, serve_until_signal, start_local_server, tls_failure
from mpdp_services.party import datasets
from mpdp_services.party.flows import Flow, PartySite
from mpdp_services.party.pathak2010 import CURATOR_SERVICE, curator_keys_from
from mpdp_services.party.ledger_page import LedgerPage
from mpdp_services.party.link import PartyLink

log = logging.getLogger("mpdp.party")
Problem = common_pb2.Problem


class Party:
    """This site: its config, randomness, peer channels and privacy ledger, shared by every flow's servicer.

    Flows call :meth:`ready` first: the party serves once it has registered with its curator.
    """

    def __init__(self, cfg: cfgmod.PartyConfig) -> None:
        self.cfg = cfg
        self.rng = Drbg.from_os()
        self.channels = PeerChannels(cfg.tls.files())  # to the curator and the compute nodes (servers); never to a party
        self.link: PartyLink | None = None  # every call to this party, and every party-to-party step, travels over it
        self.ledger = Ledger(cfg.ledger, cfg.budget_epsilon, cfg.budget_delta)
        metrics.watch_ledger(self._ledger_figures)
        LedgerPage(cfg.name, self.ledger).install()
        self.registered = False
        self._claimed: set[tuple[str, str]] = set()  # (protocol, job id) being started in this process
        # DCA submissions: every ledger entry a live submission spent, with the number of submissions holding it, and
        # those of them a second submission spent again while held; spends and voids are ordered by the lock
        self._held: Counter[tuple[str, str]] = Counter()
        self._reused: set[tuple[str, str]] = set()
        self._charging = asyncio.Lock()
        self.unavailable: dict[str, str] = {}  # dataset → why its data could not be read at start-up (services/party/datasets.py)

    async def dataset(self, context, name: str) -> cfgmod.DatasetConfig:
        """The configured dataset ``name``; INVALID_JOB if there is none or it is unavailable (its file unreadable at start-up)."""
        ds = self.cfg.datasets.get(name)
        if ds is None:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {self.cfg.name} has no dataset {shown(name)} (configured: {sorted(self.cfg.datasets)})")
        if name in self.unavailable:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {self.cfg.name}: dataset {shown(name)} is unavailable; see the party's log")
        return ds

    async def ready(self, context) -> None:
        """NOT_READY (UNAVAILABLE) until registration with the curator has completed."""
        if not self.registered:
            await errors.refuse(context, Problem.NOT_READY, "party is starting up (not yet registered with its curator)")

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
                await self.ledger_broken(context, e)
            if spent is not None:
                await errors.refuse(context, Problem.REPLAY, f"party {self.cfg.name} already spent ε on job {shown(job_id)} ({spent.get('status', 'spent')})")
            yield
        finally:
            self._claimed.discard(key)

    async def precheck(self, context, epsilon: float, delta: float, mechanism: dict | None = None) -> None:
        """Refuse early, before costly local work, a job that cannot fit (advisory: :meth:`spend` decides).
        ``mechanism``: the entry's ``accounting`` record, so that the check composes as the spend will."""
        try:
            led = await asyncio.to_thread(self.ledger.snapshot)
            await asyncio.to_thread(led.check, epsilon, delta, mechanism)
        except BudgetExceeded as e:
            await errors.refuse(context, Problem.BUDGET_EXCEEDED, f"party {self.cfg.name}: {e}")
        except (LedgerError, OSError) as e:
            await self.ledger_broken(context, e)

    def _ledger_figures(self) -> tuple[float, float, int]:
        """(composed ε spent, ε budget, entries) for this party's own metrics endpoint."""
        led = self.ledger.snapshot()
        return led.composition().epsilon, self.ledger.budget_epsilon, len(led.entries)

    async def spend(self, context, entry: dict) -> dict:
        """Spend the entry's true (ε, δ) in one durable step, or refuse the RPC with BUDGET_EXCEEDED.

        Called before the job's first data-dependent message. The ledger write runs in a thread that a cancel (the
        operator's, the job's deadline, the curator's call dropped) cannot stop: a cancel that lands meanwhile
        waits for the write, then voids the entry if this call created it, since nothing can have left this party
        after it (its caller never resumes), and ends the call cancelled. Without this the write would finish after
        the cancel and leave the charge "spent" for a job that sent nothing."""
        write = asyncio.ensure_future(asyncio.to_thread(self.ledger.spend_new, entry))
        try:
            stored, _ = await asyncio.shield(write)
        except asyncio.CancelledError:
            await self._void_cancelled(write, entry)
            raise
        except BudgetExceeded as e:
            await errors.refuse(context, Problem.BUDGET_EXCEEDED, f"party {self.cfg.name}: {e}")
        except (LedgerError, OSError) as e:
            await self.ledger_broken(context, e)
        return stored

    async def _void_cancelled(self, write: "asyncio.Future[tuple[dict, bool]]", entry: dict) -> None:
        """The spend ``write`` was cancelled while its thread ran: wait for it, and void the entry it created."""
        while not write.done():
            try:
                await asyncio.wait({write})
            except asyncio.CancelledError:  # cancelled again: the write still has to be settled
                continue
        if write.cancelled() or write.exception() is not None:
            return  # nothing was written
        stored, created = write.result()
        if created:
            await self.void(str(stored["protocol"]), str(stored["job_id"]), "cancelled while spending; nothing left this party after its spend")
        log.info("job %s: cancelled while spending", shown(str(entry.get("job_id", ""))))

    async def mark(self, protocol: str, job_id: str, status: str, details: dict | None = None) -> None:
        """Mark a spent job released or failed (a failed job keeps its charge)."""
        try:
            await asyncio.to_thread(self.ledger.mark, protocol, job_id, status, details)
        except (LedgerError, OSError) as e:
            log.error("ledger %s: cannot mark job %s %s: %s", self.ledger.path, shown(job_id), status, e)

    async def void(self, protocol: str, job_id: str, reason: str) -> None:
        """Void a failed job's charge: nothing left this party after it spent (docs/protocols/accounting.md)."""
        try:
            await asyncio.to_thread(self.ledger.void, protocol, job_id, reason)
            log.info("job %s: charge voided (%s)", shown(job_id), reason)
        except (LedgerError, OSError) as e:
            log.error("ledger %s: cannot void job %s: %s", self.ledger.path, shown(job_id), e)

    async def hold(self, context, entry: dict) -> tuple[dict, bool]:
        """Spend ``entry`` for a DCA submission and hold it until :meth:`let_go` or :meth:`settle_unsent`; returns the
        stored entry and whether this spend created it (False: an earlier submission had spent it, e.g. the dp-gd
        job's one entry in a later round)."""
        key = (str(entry["protocol"]), str(entry["job_id"]))
        async with self._charging:
            try:
                before = await asyncio.to_thread(self.ledger.find, *key)
            except (LedgerError, OSError) as e:
                await self.ledger_broken(context, e)
            self._held[key] += 1
            if before is not None:
                self._reused.add(key)
            try:
                stored = await self.spend(context, entry)
            except BaseException:
                self._let_go(key)
                raise
        return stored, before is None

    def let_go(self, entries: list[tuple[dict, bool]]) -> None:
        """The submission that held ``entries`` (from :meth:`hold`) is over, its charge settled elsewhere."""
        for entry, _ in entries:
            self._let_go((str(entry["protocol"]), str(entry["job_id"])))

    def _let_go(self, key: tuple[str, str]) -> None:
        self._held[key] -= 1
        if self._held[key] <= 0:
            del self._held[key]
            self._reused.discard(key)

    async def settle_unsent(self, entries: list[tuple[dict, bool]], reason: str) -> None:
        """A DCA submission that held ``entries`` failed before any of its shares was handed to the network: void
        each entry this submission created that no other submission spent again meanwhile (nothing of the party's
        data left under it; docs/protocols/accounting.md, "When a job spends, and when a charge is voided"); an
        entry an earlier or a concurrent submission spent too keeps its charge, marked failed. Lets go of every
        entry."""
        async with self._charging:  # no submission spends (or reuses) one of these entries meanwhile
            for entry, created in entries:
                protocol, job_id = key = (str(entry["protocol"]), str(entry["job_id"]))
                if created and key not in self._reused:
                    await self.void(protocol, job_id, reason)
                else:
                    await self.mark(protocol, job_id, FAILED)
                self._let_go(key)

    async def ledger_broken(self, context, e: Exception) -> NoReturn:
        log.error("ledger %s: %s", self.ledger.path, e)
        await errors.refuse(context, Problem.INTERNAL, f"party {self.cfg.name} cannot use its privacy ledger; see its log")


LINK_UP_SECONDS = 120.0  # the link must open this soon after registration, or the party does not start


async def register(cfg: cfgmod.PartyConfig, patience: float = 120.0) -> CuratorPublicKeys:
    """Register with Charlie (this party listens nowhere: he reaches it over its link); returns his public keys
    (see :func:`register_at_curator`)."""
    keys = await register_at_curator(
        cfg.tls.files(), cfg.curator.address, cfg.curator.name, f"/{CURATOR_SERVICE}/RegisterParty",
        pb.PartyRegistration(), pb.CuratorKeys, patience,
    )
    return curator_keys_from(keys)


async def serve(cfg: cfgmod.PartyConfig, ready_fd=sys.stdout) -> None:
    problems, unavailable = datasets.check(cfg.datasets)
    if problems:  # before anything listens: a dataset with another dataset's schema would only fail at job time
        print(f"mpdp party {cfg.name}: " + "; ".join(problems) + f"; {datasets.HINT}", file=sys.stderr)
        raise SystemExit(2)
    for name, why in unavailable.items():  # its jobs are refused; the party serves its other datasets
        log.error("dataset %s is unavailable: %s; its jobs are refused until the file is fixed and the party restarted", name, why)
    readiness = ready.Readiness(ready.KERNELS, ready.LEDGER, ready.REGISTERED)
    probes_port = ready.serve_probes(cfg.probe_listen, readiness, ready_fd)[1] if cfg.probe_listen else 0
    warm = ready.start_warm_up(readiness)  # compiles while the rest starts; awaited before the party registers
    party = Party(cfg)
    party.unavailable = dict(unavailable)
    await readiness.done(ready.LEDGER)
    # every protocol's servicer, by the factory its registry entry names (services/party/flows.py)
    site = PartySite(party, asyncio.get_running_loop())
    flows = site.flows()

    def add(server):
        for flow in flows:
            flow.add(server)

    roles = {m: r for flow in flows for m, r in flow.roles.items()}
    services = [flow.service for flow in flows]
    federation = cfg.federation or check_server_certificate(cfg.tls.files().read()[0])
    # no TCP port: the services listen on a socket in a folder only this process's user may open (mkdtemp: 0700),
    # reached by the link client alone, which names each call's authenticated caller (services/party/link.py)
    socket_dir = tempfile.mkdtemp(prefix=f"mpdp-{cfg.name[:32]}-")
    socket_path = f"{socket_dir}/party.sock"
    gate = RoleInterceptor(roles, federation, pinned={"curator": cfg.curator.name}, linked=True)
    try:
        server, health = await start_local_server(socket_path, gate, add, services, serving=False)
        site.health = health
        await _serve(cfg, ready_fd, party, flows, server, health, roles, services, socket_path, federation, readiness, warm, probes_port)
    finally:
        shutil.rmtree(socket_dir, ignore_errors=True)


async def _serve(cfg: cfgmod.PartyConfig, ready_fd, party: Party, flows: list[Flow], server, health, roles, services, socket_path: str, federation: str,
                 readiness: ready.Readiness, warm, probes_port: int) -> None:
    await readiness.attach(health, services)  # SERVING once the kernels are compiled and the party registered with the curator
    await warm  # no job reaches a party that is still compiling: the curator learns of it only after this
    try:
        keys = await register(cfg)
    except grpc.aio.AioRpcError as e:
        if tls_failure(e):
            hint = "this site does not trust the curator's certificate: check that ca.crt is this federation's CA and the curator's certificate is valid (`mpdp provision show ca.crt`)"
        elif e.code() == grpc.StatusCode.UNAVAILABLE:
            hint = ("is the curator up and the address/port open? If it is, it refused this site's certificate (another CA or federation, or expired): "
                    "run `mpdp provision check` on this site's folder and read the curator's log")
        else:
            hint = "see the curator's log"
        print(f"mpdp party {cfg.name}: cannot register with curator {cfg.curator.name} at {cfg.curator.address}: {e.code().name}: {e.details()}; {hint}", file=sys.stderr)
        await server.stop(0)
        raise SystemExit(2)
    for flow in flows:
        if flow.on_registered is not None:
            flow.on_registered(keys)
    party.registered = True
    party.link = PartyLink(cfg, socket_path, federation, roles)
    party.link.start()
    try:
        await party.link.wait_up(LINK_UP_SECONDS)
    except TimeoutError:
        print(f"mpdp party {cfg.name}: registered with curator {cfg.curator.name} at {cfg.curator.address}, but its link did not open "
              f"in {LINK_UP_SECONDS:g} s; see this party's and the curator's logs", file=sys.stderr)
        await party.link.stop()
        await server.stop(0)
        raise SystemExit(2)
    await readiness.done(ready.REGISTERED)
    log.info("party %s linked to %s (no listening port; its services on %s)", cfg.name, cfg.curator.name, socket_path)
    await serve_until_signal(server, health, 0, ready_fd, cfg.http_listen, cfg.http_token_file, readiness=readiness, probes_port=probes_port,
                             on_stop=party.link.stop, announce=f"local={socket_path}")
    for flow in flows:
        if flow.on_stop is not None:
            flow.on_stop()
    await party.channels.close()
