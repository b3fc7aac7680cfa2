"""In-memory driver: a whole Pathak job in one process (the in-process :class:`mpdp.Federation`, tests, simulations).

The network is the one in-memory :class:`~mpdp.driver.Wire`: it routes every outgoing Send to its
recipient's machine, optionally in a random order (to exercise early arrival); each machine's
``transcript`` holds what it took. The same machines run over gRPC in ``services/``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

from mpdp.dp.pathak_noise import GAUSSIAN, MODES
from mpdp.driver import Wire
from mpdp.ledger import PrivacyLedger
from mpdp.math.drbg import Drbg
from mpdp.messages import common_pb2, pathak2010_pb2 as pb
from mpdp.pathak2010.curator import CuratorMachine
from mpdp.pathak2010.params import PathakParams
from mpdp.learn.model_cache import LocalModel
from mpdp.pathak2010.party import PartyMachine, train_local
from mpdp.pathak2010.resources import CuratorResources, CuratorSecrets, PartyResources
from mpdp.protocol import CURATOR, Output, Peer, Problem, ProtocolError


@dataclass
class JobResult:
    curator: CuratorMachine
    parties: dict[str, PartyMachine]
    model: pb.PublishedModel | None
    error: ProtocolError | None
    ledger: dict[str, list[dict]] = field(default_factory=dict)
    messages: int = 0
    rejections: list[tuple[Peer, Peer, ProtocolError]] = field(default_factory=list)  # refused, recipient untouched


def make_spec(parties: list[str], epsilon: float, lam: float, mode: str = "corrected", seed: bytes | None = None, dataset: str = "data",
              delta: float = 0.0, colluders: int | None = None) -> pb.PathakJobSpec:
    """A job in one of the calibration modes: corrected, paper (the smallest party's noise) or gaussian-distributed
    (``delta`` 0 = default; ``colluders`` None = default)."""
    spec = pb.PathakJobSpec(
        dataset=dataset,
        epsilon=epsilon,
        mode=common_pb2.PAPER if mode == "paper" else common_pb2.CORRECTED,
        noise=pb.DISTRIBUTED_GAUSSIAN if mode == GAUSSIAN else pb.SMALLEST_PARTY,
        parties=parties,
        simulation_seed=seed or b"",
        delta=delta,
    )
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; use one of {MODES}")
    if colluders is not None:
        spec.colluders = colluders
    setattr(spec, "lambda", lam)
    return spec


def run_job(
    data: dict[str, tuple[np.ndarray, np.ndarray]],
    spec: pb.PathakJobSpec,
    secrets: CuratorSecrets,
    *,
    party_key_bits: int = 2048,
    job_id: str = "job-1",
    order: Drbg | None = None,
    tamper: Callable[[Peer, Peer, object], object | None] | None = None,
    before_each: Callable[[JobResult], None] | None = None,
    test_mode: bool = False,
    clock: Callable[[], float] = time.perf_counter,
    train: Callable[[np.ndarray, np.ndarray, PathakParams], LocalModel] = train_local,
    local_work_seconds: float = 0.0,
    wait_until: Callable[[float], None] | None = None,
    ledgers: Mapping[str, PrivacyLedger] | None = None,
) -> JobResult:
    """Run one job to completion or failure. ``secrets``: the curator's keys (:meth:`CuratorSecrets.generate`);
    ``test_mode`` allows keys below 2048 bits and simulation seeds, as a federation's test mode does (never for real data).
    ``tamper(sender, recipient, msg)`` may replace or drop (None) a message;
    ``before_each(result)`` runs before every delivery and sees the machines built so far (tests: messages from outsiders).
    A party accepts with d = its records' column count (in memory, the schema's width) and trains with ``train`` once
    it has spent and the network is quiet (as a served party trains after ProtocolStart); a training error fails its
    job (INVALID_JOB) as a served party's does. ``local_work_seconds``: every party's pad (PartyResources); the driver
    calls ``wait_until(t)`` with the machine's ``local_work_until`` before handing it the model (a served party awaits
    that time; None: no wait, so a pad the injected ``clock`` has not passed fails the job INTERNAL). ``ledgers``: the
    parties' ledgers by name; a party's Spend is checked against its budget and recorded there before its first
    data-dependent message (over budget: :class:`~mpdp.driver.SpendRefused`, the party's job failed)."""
    params = PathakParams.from_spec(job_id, spec)
    root = Drbg.from_os() if not spec.simulation_seed else Drbg.from_seed(spec.simulation_seed)
    curator = CuratorMachine(params, spec, {p: f"inmemory:{p}" for p in params.parties}, CuratorResources(root.child("curator-res"), secrets, test_mode, clock=clock))
    result = JobResult(curator, {}, None, None, {p: [] for p in params.parties})

    def spawn(to: Peer, msg: object) -> list[Output] | None:
        if to == CURATOR or not isinstance(msg, pb.JobAnnouncement):
            return None
        X, y = data[to.name]
        res = PartyResources.create(root.child(f"party-res/{to.name}"), secrets.public, party_key_bits, test_mode=test_mode)
        res.clock = clock
        res.local_work_seconds = local_work_seconds
        m = PartyMachine(to.name, msg, int(np.asarray(X).shape[1]), res)
        result.parties[to.name] = wire.machines[to] = m
        return m.start()

    def train_spent() -> bool:
        """Give every party that has spent and awaits its local model that model (or fail its job); True if any."""
        moved = False
        for name, m in result.parties.items():
            if m.state != "AWAIT_PARTY_SECRETS" or m.w is not None:
                continue
            moved = True
            me = Peer("party", name)
            try:
                local = train(*data[name], params)
            except (ValueError, RuntimeError) as e:  # the records cannot give ŵ_j: fails the job, as a served party's
                wire.route(me, m.fail(Problem.INVALID_JOB, f"party {name} cannot train on its dataset: {e}"))
            else:
                if wait_until is not None and m.local_work_until is not None:
                    wait_until(m.local_work_until)
                try:
                    wire.route(me, m.trained(local))
                except ProtocolError as e:
                    wire.route(me, e.notices)
            if m.failed and wire.error is None:
                wire.error = m.error
        return moved

    wire = Wire(order=order, tamper=tamper, spawn=spawn, before_each=None if before_each is None else lambda: before_each(result), ledgers=ledgers)
    wire.machines[CURATOR] = curator
    wire.ledger = result.ledger
    wire.route(CURATOR, curator.start())
    wire.pump()
    while train_spent():
        wire.pump()
    result.model = wire.releases[0] if wire.releases else None
    result.error = wire.error
    result.rejections = wire.rejections
    result.messages = wire.messages
    return result
