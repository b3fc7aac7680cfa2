"""In-memory driver: a whole DCA job (N clients, M compute nodes, the aggregator) in one process
(Heikkilä et al. 2017, Algorithm 1; the core's tests run on an in-memory driver).

It builds the machines and feeds the clients' messages into the one in-memory network
(:class:`~mpdp.driver.Wire`), which routes every :class:`~mpdp.protocol.Send` to its recipient, optionally
in a random order, and drops what the test says is lost. Each machine keeps its transcript (routers' in
:attr:`DcaRun.router_transcripts`). The same machines run over
gRPC in ``services/``.

Two client modes:

* ``"machines"`` — one :class:`~mpdp.dca.client.ClientMachine` per client with its own Drbg, sending
  single ClientShare messages straight to the nodes (faithful, for small N);
* ``"cohort"`` — a vectorised :class:`~mpdp.dca.client.ClientCohort` whose ShareBatch messages reach node k
  through its own router ``operator:router-k`` (one router per node, so no router sees two messages of a
  client), for N up to 10^5 and more.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from mpdp.dca.aggregator import AggregatorMachine
from mpdp.dca.client import ClientCohort, ClientMachine, node_peer
from mpdp.dca.compute_node import DEFAULT_REPORT_EVERY, ComputeNodeMachine
from mpdp.dca.params import DcaParams
from mpdp.driver import Wire
from mpdp.ledger import PrivacyLedger
from mpdp.math.drbg import Drbg
from mpdp.messages import dca_pb2 as pb
from mpdp.protocol import CURATOR, Output, Peer, ProtocolError, Send


@dataclass
class DcaRun:
    params: DcaParams
    aggregator: AggregatorMachine
    nodes: dict[str, ComputeNodeMachine]
    clients: dict[str, ClientMachine]
    client_ids: list[str]
    release: pb.DpSum | None = None
    error: ProtocolError | None = None
    rejections: list[tuple[Peer, Peer, ProtocolError]] = field(default_factory=list)  # (sender, recipient, error)
    receipts: list[pb.ShareReceipt] = field(default_factory=list)
    ledger: dict[str, list[dict]] = field(default_factory=dict)
    router_transcripts: dict[str, list[tuple[Peer, Any]]] = field(default_factory=dict)
    clipped: np.ndarray | None = None  # (N, d) clipped z, with keep_noise
    noise: np.ndarray | None = None  # (N, d) η, with keep_noise (rows of clients that never ran are NaN)
    encoded: np.ndarray | None = None  # (N, d) u, with keep_noise
    messages: int = 0
    seconds: dict[str, float] = field(default_factory=dict)

    def included(self) -> list[int]:
        """Indices of the clients in the agreed set A (from node 0's view)."""
        agreed = next(iter(self.nodes.values())).agreed_ids or ()
        pos = {c: i for i, c in enumerate(self.client_ids)}
        return sorted(pos[c] for c in agreed)


def run_job(
    params: DcaParams,
    Z: np.ndarray,
    rng: Drbg,
    *,
    client_ids: list[str] | None = None,
    client_mode: str | None = None,
    batch_size: int = 1024,
    drop: Iterable[int] = (),
    lost: Iterable[tuple[int, int]] = (),
    order: Drbg | None = None,
    tamper: Callable[[Peer, Peer, Any], Any | None] | None = None,
    record: bool = True,
    keep_noise: bool = False,
    report_every: int = DEFAULT_REPORT_EVERY,
    close: bool = True,
    ledgers: Mapping[str, PrivacyLedger] | None = None,
    charge: Callable[[DcaParams], tuple[dict, ...]] | None = None,
) -> DcaRun:
    """Run one job to release or refusal.

    ``drop``: client indices that never submit. ``lost``: (client index, node index) messages lost in
    transit. ``order``: shuffle the delivery queue. ``tamper(sender, recipient, msg)`` may replace a message
    or drop it (None). ``close``: the aggregator closes submissions once every client has sent (the deadline).
    ``ledgers``: the parties' ledgers by client id; a client's Spend is checked and recorded there before its shares
    leave (:class:`~mpdp.driver.Wire`; over budget, :class:`~mpdp.driver.SpendRefused`). ``charge``: what a client
    machine spends for its shares when the job that asked for them charges otherwise than the sum's own guarantee
    (a dp-gd round, an ensemble's votes), as a party's contribution does.
    """
    if client_mode is None:  # a listed roster's clients submit for themselves; others may be relayed as a cohort
        client_mode = "machines" if params.roster or params.validation is not None else "cohort"
    t0 = time.perf_counter()
    Z = np.asarray(Z, dtype=np.float64)
    n = Z.shape[0]
    ids = client_ids or [f"client-{i:06d}" for i in range(n)]
    drop_set, lost_set = set(drop), set(lost)
    agg = AggregatorMachine(params, record=record)
    run = DcaRun(params, agg, {}, {}, ids)

    def spawn(to: Peer, msg: Any) -> list[Output] | None:
        if to.role != "compute_node" or not isinstance(msg, pb.DcaJobAnnouncement):
            return None
        run.nodes[to.name] = wire.machines[to] = ComputeNodeMachine.from_announcement(to.name, msg, report_every=report_every, record=record)
        return []

    wire = Wire(order=order, tamper=tamper, spawn=spawn, ledgers=ledgers)
    wire.machines[CURATOR] = agg
    wire.ledger = run.ledger
    route, pump = wire.route, wire.pump

    route(CURATOR, agg.announce())
    pump()
    for node in list(run.nodes.values()):  # every node has the job: a validated job's nodes exchange their key pieces
        route(node.me, node.start())
    pump()
    t_setup = time.perf_counter()
    seconds: collections.defaultdict[str, float] = collections.defaultdict(float)

    if keep_noise:
        clipped: np.ndarray = np.full(Z.shape, np.nan)
        noise: np.ndarray = np.full(Z.shape, np.nan)
        encoded: np.ndarray = np.zeros(Z.shape, dtype=np.uint64)
        run.clipped, run.noise, run.encoded = clipped, noise, encoded
    if client_mode == "machines":
        for i, cid in enumerate(ids):
            if i in drop_set:
                continue
            t = time.perf_counter()
            c = ClientMachine(params, cid, Z[i], rng.child(f"client/{cid}"), keep_noise=keep_noise, record=record,
                              charge=None if charge is None else charge(params))
            run.clients[cid] = c
            outs = c.submit()
            seconds["clients"] += time.perf_counter() - t
            if keep_noise:
                noise[i], encoded[i] = c.noise, c.encoded
                clipped[i] = np.clip(Z[i], -params.clip_vector(), params.clip_vector())
            kept = [o for o in outs if not (isinstance(o, Send) and (i, params.node_index(o.to.name)) in lost_set)]
            route(c.me, kept)
            t = time.perf_counter()
            pump()
            seconds["network+nodes"] += time.perf_counter() - t
    elif client_mode == "cohort":
        alive = [i for i in range(n) if i not in drop_set]
        cohort = ClientCohort(params, [ids[i] for i in alive], Z[alive], rng.child("cohort"), keep_noise=keep_noise)
        pos = {i: j for j, i in enumerate(alive)}
        lost_alive = {(pos[i], k) for i, k in lost_set if i in pos}
        routers = [Peer("operator", f"router-{k}") for k in range(params.M)]
        gen = cohort.batches(batch_size, lost_alive)
        start = 0
        while True:
            t = time.perf_counter()
            b = next(gen, None)
            seconds["clients"] += time.perf_counter() - t
            if b is None:
                break
            if keep_noise:
                rows = alive[start : start + len(b.client_ids)]
                clipped[rows], noise[rows], encoded[rows] = b.clipped, b.noise, b.encoded
            start += len(b.client_ids)
            t = time.perf_counter()
            for k, msg in enumerate(b.batches):
                if record:
                    run.router_transcripts.setdefault(routers[k].name, []).append((Peer("party", "cohort"), msg))
                wire.queue.append((routers[k], node_peer(params.nodes[k]), msg))
            pump()
            seconds["network+nodes"] += time.perf_counter() - t
        entry = params.ledger_entry()
        for cid in cohort.client_ids:
            run.ledger.setdefault(cid, []).append(entry)
    else:
        raise ValueError(f"client_mode must be 'machines' or 'cohort', got {client_mode!r}")

    t = time.perf_counter()
    if close and agg.state == "AWAIT_PARTIAL_SUMS":
        route(CURATOR, agg.close_submissions())
    pump()
    seconds["agreement+release"] += time.perf_counter() - t
    run.release = wire.releases[0] if wire.releases else None
    run.error = wire.error or agg.error or next((m.error for m in run.nodes.values() if m.error is not None), None)
    run.rejections = wire.rejections
    run.receipts = [r for r in wire.replies if isinstance(r, pb.ShareReceipt)]
    run.messages = wire.messages
    run.seconds = {"setup": t_setup - t0, **seconds, "total": time.perf_counter() - t0}
    return run
