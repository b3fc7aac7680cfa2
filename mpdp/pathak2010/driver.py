"""In-memory driver: a whole Pathak job in one process (tests, simulations with many parties).

It plays the network: routes every outgoing Send to its recipient's machine, optionally in
a random order (to exercise early arrival), and records each role's transcript (each
machine's ``transcript`` holds what it received). The same machines run over gRPC in
``services/``.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from mpdp.math.dgk import DgkKeyPair
from mpdp.math.drbg import Drbg
from mpdp.math.paillier import KeyPair
from mpdp.messages import common_pb2, pathak2010_pb2 as pb
from mpdp.pathak2010.curator import CuratorMachine
from mpdp.pathak2010.params import PathakParams
from mpdp.pathak2010.party import PartyMachine
from mpdp.pathak2010.resources import CuratorResources, CuratorSecrets, PartyResources
from mpdp.protocol import CURATOR, Output, Peer, ProtocolError, Publish, Record, Send


@dataclass
class JobResult:
    curator: CuratorMachine
    parties: dict[str, PartyMachine]
    model: pb.PublishedModel | None
    error: ProtocolError | None
    ledger: dict[str, list[dict]] = field(default_factory=dict)
    messages: int = 0


def make_spec(parties: list[str], epsilon: float, lam: float, mode: str = "corrected", seed: bytes | None = None, dataset: str = "data") -> pb.PathakJobSpec:
    spec = pb.PathakJobSpec(
        dataset=dataset,
        epsilon=epsilon,
        mode=common_pb2.CORRECTED if mode == "corrected" else common_pb2.PAPER,
        parties=parties,
        simulation_seed=seed or b"",
    )
    setattr(spec, "lambda", lam)
    return spec


def test_curator_secrets(paillier_bits: int = 1024, dgk_bits: int = 1024) -> CuratorSecrets:
    """Small keys for fast tests (test mode only)."""
    return CuratorSecrets(KeyPair.generate(paillier_bits), DgkKeyPair.generate(dgk_bits))


def run_job(
    data: dict[str, tuple[np.ndarray, np.ndarray]],
    spec: pb.PathakJobSpec,
    secrets: CuratorSecrets,
    *,
    party_key_bits: int = 1024,
    job_id: str = "job-1",
    order: Drbg | None = None,
    tamper: Callable[[Peer, Peer, object], object | None] | None = None,
    before_each: Callable[[JobResult], None] | None = None,
    test_mode: bool = True,
    clock: Callable[[], float] = time.perf_counter,
) -> JobResult:
    """Run one job to completion or failure. ``tamper(sender, recipient, msg)`` may replace or drop (None) a message;
    ``before_each(result)`` runs before every delivery and sees the machines built so far (tests: messages from outsiders)."""
    params = PathakParams.from_spec(job_id, spec)
    root = Drbg.from_os() if not spec.simulation_seed else Drbg.from_seed(spec.simulation_seed)
    curator = CuratorMachine(params, spec, {p: f"inmemory:{p}" for p in params.parties}, CuratorResources(root.child("curator-res"), secrets, test_mode, clock=clock))
    parties: dict[str, PartyMachine] = {}
    ledger: dict[str, list[dict]] = {p: [] for p in params.parties}
    queue: collections.deque[tuple[Peer, Peer, object]] = collections.deque()
    result = JobResult(curator, parties, None, None, ledger)

    def route(sender: Peer, outputs: list[Output]) -> None:
        for o in outputs:
            if isinstance(o, Send):
                queue.append((sender, o.to, o.message))
            elif isinstance(o, Publish):
                result.model = o.release
            elif isinstance(o, Record):
                ledger[sender.name].append(o.entry)

    route(CURATOR, curator.start())
    while queue:
        if order is not None and len(queue) > 1:
            queue.rotate(-order.randbelow(len(queue)))
        sender, to, msg = queue.popleft()
        if before_each is not None:
            before_each(result)
        if tamper is not None:
            msg = tamper(sender, to, msg)
            if msg is None:
                continue
        result.messages += 1
        try:
            if to == CURATOR:
                route(CURATOR, curator.receive(sender, msg))
            elif isinstance(msg, pb.JobAnnouncement):
                X, y = data[to.name]
                res = PartyResources.create(root.child(f"party-res/{to.name}"), secrets.public, party_key_bits, test_mode=test_mode)
                res.clock = clock
                m = PartyMachine(to.name, msg, X, y, res)
                parties[to.name] = m
                route(to, m.start())
            else:
                route(to, parties[to.name].receive(sender, msg))
        except ProtocolError as e:
            result.error = result.error or e
            route(to, e.notices)
    if result.error is None and curator.error is not None:
        result.error = curator.error
    return result
