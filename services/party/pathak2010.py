"""P_j in a Pathak 2010 job: receives Charlie's and other parties' steps, forwards what its machine sends.

Servicer methods only check the caller, look up the job, feed its machine and forward what comes out;
the protocol lives in :mod:`mpdp.pathak2010.party`. The ledger is the site's (:class:`services.party.server.Party`):
the job's true guarantee is spent before JobAcceptance leaves and marked released or failed when it ends.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from mpdp.data.loaders import DatasetError, load, to_pm1
from mpdp.ledger import FAILED, RELEASED
from mpdp.math.dgk import DgkPublicKey
from mpdp.math.paillier import PublicKey
from mpdp.messages import common_pb2, pathak2010_pb2 as pb, pathak2010_pb2_grpc as pb_grpc
from mpdp.pathak2010.params import InvalidJob
from mpdp.pathak2010.party import PartyMachine
from mpdp.pathak2010.resources import CuratorPublicKeys, PartyResources
from mpdp.protocol import CURATOR, FAILED as MACHINE_FAILED, Peer, ProtocolError, Record, Send
from services.common import config as cfgmod, errors
from services.common.errors import shown
from services.common.rpc import caller, method_for_message, roles_by_method
from services.common.runtime import Hosted
from services.party.precompute import Precompute

if TYPE_CHECKING:
    from services.party.server import Party

log = logging.getLogger("mpdp.party")
Problem = common_pb2.Problem

PROTOCOL = "pathak2010"
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
        "SendNoiseScaleShare": P,
        "SendNoiseScale": P,
        "SendResharePiece": C + P,
        "AbortJob": C + P,
    },
)
CURATOR_METHODS = method_for_message(pb.DESCRIPTOR.services_by_name["Curator"])
PARTY_METHODS = method_for_message(pb.DESCRIPTOR.services_by_name["Party"])


def curator_keys_from(msg: pb.CuratorKeys) -> CuratorPublicKeys:
    n = lambda b: int.from_bytes(b, "big")  # noqa: E731
    return CuratorPublicKeys(PublicKey(n(msg.paillier_n)), DgkPublicKey(n(msg.dgk_n), n(msg.dgk_g), n(msg.dgk_h), msg.dgk_u, msg.dgk_r_bits))


def pathak_entry(machine: PartyMachine) -> dict:
    """What a Pathak job charges: the guarantee the release really gives (:meth:`PathakCalibration.guarantee`;
    in paper mode √d·ε/(2K), not the nominal ε), the same figures the machine's DONE record carries."""
    cal = machine.params.calibration
    g = cal.guarantee(machine.d)
    return {"job_id": machine.job_id, "protocol": PROTOCOL, "mechanism": g.mechanism, "epsilon": g.epsilon, "nominal_epsilon": cal.epsilon,
            "delta": g.delta, "mode": cal.mode, "dataset": machine.params.dataset}


class PathakParty(pb_grpc.PartyServicer):
    """The Pathak party servicer. It serves once :meth:`start` has given it Charlie's keys (NOT_READY before)."""

    def __init__(self, party: "Party", on_precompute=lambda ready: None) -> None:
        self.party = party
        self.cfg = party.cfg
        self._on_precompute = on_precompute
        self.jobs: dict[str, Hosted] = {}
        self._settled: set[str] = set()  # jobs whose ledger entry is marked released or failed
        self.keys: CuratorPublicKeys | None = None
        self.precompute: Precompute | None = None

    def start(self, keys: CuratorPublicKeys) -> None:
        """Charlie's public keys (from registration, or a newer announcement): fresh resources and pools."""
        self.keys = keys
        self.resources = PartyResources.create(self.party.rng.child("resources"), keys, self.cfg.paillier_bits, test_mode=self.cfg.test_mode)
        if self.precompute is not None:
            self.precompute.stop()
        self.precompute = Precompute(self.resources, self.cfg.paillier_bits, self.cfg.pool_target, self._on_precompute)

    def stop(self) -> None:
        if self.precompute is not None:
            self.precompute.stop()

    async def _ready(self, context) -> None:
        await self.party.ready(context)
        if self.keys is None:
            await errors.refuse(context, Problem.NOT_READY, "party is starting up (not yet registered with its curator)")

    # -- Charlie → party: a new job ----------------------------------------------------------
    async def AnnounceJob(self, request: pb.JobAnnouncement, context) -> common_pb2.Ack:
        await self._ready(context)
        ident = caller(context)
        if ident.name != self.cfg.curator.name:
            await errors.refuse(context, Problem.WRONG_ROLE, f"{shown(ident.name)} is not the curator of party {self.cfg.name}")
        if request.job_id in self.jobs:
            await errors.refuse(context, Problem.REPLAY, f"party {self.cfg.name}: job {shown(request.job_id)} was already announced")
        async with self.party.claimed(context, PROTOCOL, request.job_id):
            await self._announce(request, context)
        return common_pb2.Ack()

    async def _announce(self, request: pb.JobAnnouncement, context) -> None:
        name = self.cfg.name
        ds = self.cfg.datasets.get(request.spec.dataset)
        if ds is None:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {name} has no dataset {shown(request.spec.dataset)} (configured: {sorted(self.cfg.datasets)})")
        announced = curator_keys_from(request.curator_keys)
        if announced.paillier.n != self.keys.paillier.n or announced.dgk.n != self.keys.dgk.n:
            self.start(announced)  # the curator restarted with new keys
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
        await self.party.spend(context, pathak_entry(machine))
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
        await self._ready(context)
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
    SendNoiseScaleShare = SendNoiseScale = _deliver
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
                await self.party.mark(PROTOCOL, m.job_id, RELEASED)
        await self._settle(m)
        if all(h.machine.terminal for h in self.jobs.values()):
            m = hosted.machine
            self.precompute.resume(getattr(m, "d", None), len(m.params.pairs) * m.params.compare_bits)

    async def _settle(self, m: PartyMachine) -> None:
        """A failed Pathak job keeps its charge, marked failed: its data may already have left in a message."""
        if m.state == MACHINE_FAILED and m.job_id not in self._settled:
            self._settled.add(m.job_id)
            await self.party.mark(PROTOCOL, m.job_id, FAILED, {"failure": errors.problem_name(m.error.problem) if m.error else "JOB_FAILED"})

    async def _send(self, hosted: Hosted, to: Peer, message) -> None:
        channels = self.party.channels
        if to == CURATOR:
            address, site = self.cfg.curator.address, self.cfg.curator.name
            call = lambda: channels.call(address, site, CURATOR_SERVICE, CURATOR_METHODS[message.DESCRIPTOR.full_name], message, common_pb2.Ack)  # noqa: E731
        else:
            address = hosted.addresses.get(to.name)  # type: ignore[attr-defined]
            if not address:
                await hosted.fail(Problem.PEER_UNREACHABLE, f"no address for party {to.name}")
                return
            method = PARTY_METHODS[message.DESCRIPTOR.full_name]
            call = lambda: channels.call(address, to.name, SERVICE, method, message, common_pb2.Ack)  # noqa: E731
        await hosted.send(to, message, call)
