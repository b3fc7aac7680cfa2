"""In-memory driver: a whole Pathak job in one process (the in-process :class:`mpdp.Federation`, tests, simulations).

The network is the one in-memory :class:`~mpdp.driver.Wire`: it routes every outgoing Send to its
recipient's machine, optionally in a random order (to exercise early arrival); each machine's
``transcript`` holds what it took. The same machines run over gRPC in ``services/``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from mpdp.dp.pathak_noise import GAUSSIAN, MODES
from mpdp.driver import Wire
from mpdp.math.drbg import Drbg
from mpdp.messages import common_pb2, pathak2010_pb2 as pb
from mpdp.pathak2010.curator import CuratorMachine
from mpdp.pathak2010.params import PathakParams
from mpdp.pathak2010.party import PartyMachine
from mpdp.pathak2010.resources import CuratorResources, CuratorSecrets, PartyResources
from mpdp.protocol import CURATOR, Output, Peer, ProtocolError


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
) -> JobResult:
    """Run one job to completion or failure. ``secrets``: the curator's keys (:meth:`CuratorSecrets.generate`);
    ``test_mode`` allows keys below 2048 bits and simulation seeds, as a federation's test mode does (never for real data).
    ``tamper(sender, recipient, msg)`` may replace or drop (None) a message;
    ``before_each(result)`` runs before every delivery and sees the machines built so far (tests: messages from outsiders)."""
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
        m = PartyMachine(to.name, msg, X, y, res)
        result.parties[to.name] = wire.machines[to] = m
        return m.start()

    wire = Wire(order=order, tamper=tamper, spawn=spawn, before_each=None if before_each is None else lambda: before_each(result))
    wire.machines[CURATOR] = curator
    wire.ledger = result.ledger
    wire.route(CURATOR, curator.start())
    wire.pump()
    result.model = wire.releases[0] if wire.releases else None
    result.error = wire.error
    result.rejections = wire.rejections
    result.messages = wire.messages
    return result
