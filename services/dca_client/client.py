"""DCA from the outside: operators create and follow jobs; clients (or a load generator) submit shares.

- :class:`DcaOperator` (OPERATOR certificate): create a job, watch it, fetch the released DP sum (through the
  curator's job host).
- :func:`submit_vector`: one client (PARTY certificate, client id = its site name) secret-shares its
  vector with fresh Gaussian noise and streams one share to each compute node. It spends the job's true (ε, δ)
  in the client's privacy ledger (a required argument) before any share leaves (a failed submission keeps it).
- :func:`submit_cohort`: many simulated clients from one process over long-lived TLS channels, either one
  ClientShare message per client on a stream per node (``batched=False``) or ShareBatch messages carrying
  many clients' shares (``batched=True``); every client is still accounted on its own by the nodes.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, AsyncIterator, Awaitable, Callable, Iterator

import grpc

from mpdp import limits
from mpdp.messages import common_pb2, dca_pb2 as pb, dca_pb2_grpc as pb_grpc
from mpdp.protocol import Send, Spend
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.common.channels import CHANNEL_OPTIONS, MAX_MESSAGE, TlsFiles

if TYPE_CHECKING:  # the DCA core (numpy, the accountant) loads when clients are simulated, not for an operator's call
    import numpy as np

    from mpdp.dca.client import ClientCohort
    from mpdp.dca.params import DcaParams
    from mpdp.ledger import Ledger
    from mpdp.math.drbg import Drbg
    from mpdp.messages.operations_pb2 import JobSummary

# Batches of simulated clients are sized in bytes, not clients: a node's ShareBatch carries 8·d bytes of share per
# client (32 with seed compression) plus its id, and must stay under the gRPC message limit for every d in the
# limits table. A quarter of the limit leaves room for the encoding and keeps a batch's memory modest.
BATCH_BYTES = MAX_MESSAGE // 4
_ID_OVERHEAD = 8  # per repeated-string entry: tag, length (a roster job names clients by 4-byte index instead)


def client_bytes(dimension: int, client_id_bytes: int = limits.MAX_CLIENT_ID_BYTES) -> int:
    """An upper bound on the bytes one client adds to the largest of a batch's per-node messages (the full share)."""
    return 8 * dimension + client_id_bytes + _ID_OVERHEAD


def batch_size_for(dimension: int, clients: int, batch_bytes: int = BATCH_BYTES, client_id_bytes: int = limits.MAX_CLIENT_ID_BYTES,
                   most: int | None = None) -> int:
    """Clients per batch so that no node's message of the batch exceeds ``batch_bytes`` (at least 1; at most
    ``most`` when given, and never more than ``clients``). ValueError if one client alone does not fit."""
    if not 0 < batch_bytes <= MAX_MESSAGE:
        raise ValueError(f"batch bytes must be in [1, {MAX_MESSAGE}] (the gRPC message limit), got {batch_bytes}")
    per = client_bytes(dimension, client_id_bytes)
    if per > batch_bytes:
        raise ValueError(f"one client's share of d = {dimension} takes {per} bytes, more than a batch of {batch_bytes} bytes")
    n = batch_bytes // per
    if most is not None:
        n = min(n, most)
    return max(1, min(n, max(clients, 1)))


NOISES = ("gaussian", "discrete-gaussian")  # by their NoiseKind number (dca.proto)
VALIDATIONS = ("range", "none", "l2", "one-hot", "votes")  # by their Validation number (dca.proto; 0 = range, the default)


def job_spec(*, dimension: int, clients: int, epsilon: float, delta: float, sensitivity: float, nodes: list[str], max_missing: int = 0,
             clip: float = 1.0, calibration: str = "corrected", validate: str = "range", noise: str | None = None,
             frac_bits: int | None = None, deadline_seconds: float = 600.0, seed_compressed: bool = False,
             colluders: int | None = None) -> pb.DcaJobSpec:
    """A DP-sum job's spec with the user-facing defaults (as the wire's: validate 0 is the range proof): every
    contribution proven within the public clip bound (``validate="range"``) with discrete Gaussian noise and f = 16.
    ``validate="none"`` trusts contributions unproven, with floating-point Gaussian noise and f = 32 by default.
    ``colluders``: a validated job's c, the compute nodes that may pool their noise with the curator (None: M − 1).
    ValueError if ``noise`` cannot be proven (gaussian in a validated job)."""
    if noise is None:
        noise = "gaussian" if validate == "none" else "discrete-gaussian"
    if validate not in VALIDATIONS or noise not in NOISES or calibration not in ("corrected", "paper"):
        raise ValueError(f"validate in {VALIDATIONS}, noise in {NOISES}, calibration corrected or paper")
    if validate != "none" and noise != "discrete-gaussian":
        raise ValueError(f"noise {noise} cannot be proven valid: a validated job (validate {validate}) needs noise discrete-gaussian, the integer "
                         "noise the compute nodes add; validate none trusts contributions unproven with floating-point noise")
    if frac_bits is None:
        frac_bits = 32 if validate == "none" else 16
    return pb.DcaJobSpec(
        dimension=dimension, clients=clients, max_missing=max_missing, epsilon=epsilon, delta=delta, sensitivity=sensitivity,
        mode=common_pb2.CORRECTED if calibration == "corrected" else common_pb2.PAPER, clip_bounds=[clip], compute_nodes=list(nodes),
        deadline_seconds=deadline_seconds, seed_compressed=seed_compressed, noise=pb.NoiseKind.ValueType(NOISES.index(noise)), fractional_bits=frac_bits,
        validate=pb.Validation.ValueType(VALIDATIONS.index(validate)), colluders=colluders,
    )


class DcaOperator:
    """DP sums through the curator's one job host (JobOperations): create, watch the summary, fetch the release; the
    job's announcement (spec, node addresses) from the DCA curator service, as its clients fetch it."""

    def __init__(self, endpoints: Endpoints) -> None:
        from mpdp.messages import operations_pb2_grpc

        opts = CHANNEL_OPTIONS + [("grpc.ssl_target_name_override", endpoints.curator_name)]
        self.channel = grpc.secure_channel(endpoints.curator_address, endpoints.tls.channel_credentials(), options=opts)
        self.stub = pb_grpc.DcaCuratorStub(self.channel)
        self.host = operations_pb2_grpc.JobOperationsStub(self.channel)

    def create(self, spec: pb.DcaJobSpec) -> str:
        from mpdp.messages import operations_pb2

        return self.host.SubmitJob(operations_pb2.JobSubmission(dca=spec), timeout=60).job_id

    def watch(self, job_id: str, timeout: float | None = None) -> Iterator[JobSummary]:
        yield from self.host.WatchJob(common_pb2.JobRef(job_id=job_id), timeout=timeout)

    def wait(self, job_id: str, timeout: float | None = None) -> JobSummary:
        last = None
        for st in self.watch(job_id, timeout):
            last = st
            if st.terminal:
                break
        assert last is not None
        return last

    def release(self, job_id: str) -> pb.DpSum:
        """The released DP sum; refused JOB_FAILED if the job released nothing, STEP_OUT_OF_ORDER while it runs."""
        return self.host.GetRelease(common_pb2.JobRef(job_id=job_id), timeout=60).dca

    def job(self, job_id: str) -> pb.DcaJobAnnouncement:
        return self.stub.GetJob(common_pb2.JobRef(job_id=job_id), timeout=60)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> "DcaOperator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


REACH_SECONDS = 20.0  # a submission waits this long for every compute node's connection before it spends


class NodesUnreachable(ConnectionError):
    """A compute node of the job could not be connected to (TCP and TLS) before the client spent: nothing was
    charged and nothing sent."""


@dataclass
class Handoff:
    """Whether a share of a submission may have reached a compute node. Set the moment a request stream hands its
    first share to gRPC (from then on the network may carry it, whatever the call's outcome) and never unset; a
    failure while it is still False happened before any share left (docs/protocols/accounting.md, "When a job
    spends, and when a charge is voided")."""

    shares: bool = False


@dataclass
class SubmitReport:
    accepted: int = 0
    rejected: list[pb.ShareRejection] = field(default_factory=list)
    client_seconds: float = 0.0  # building shares (noise, encoding, sharing)
    seconds: float = 0.0  # wall time of the whole submission


async def fetch_job(curator_address: str, curator_name: str, tls: TlsFiles, job_id: str) -> pb.DcaJobAnnouncement:
    opts = CHANNEL_OPTIONS + [("grpc.ssl_target_name_override", curator_name)]
    async with grpc.aio.secure_channel(curator_address, tls.channel_credentials(), options=opts) as ch:
        return await pb_grpc.DcaCuratorStub(ch).GetJob(common_pb2.JobRef(job_id=job_id), timeout=60)


_fetch_job = fetch_job


def _node_channels(ann: pb.DcaJobAnnouncement, tls: TlsFiles, own_connection: bool = False) -> list[grpc.aio.Channel]:
    """One channel per node; ``own_connection``: never share a TCP connection with another channel (so that a node
    of W processes on one port may take each connection in another process)."""
    creds = tls.channel_credentials()
    extra = [("grpc.use_local_subchannel_pool", 1)] if own_connection else []
    return [
        grpc.aio.secure_channel(ann.node_addresses[n], creds, options=CHANNEL_OPTIONS + [("grpc.ssl_target_name_override", n)] + extra)
        for n in ann.spec.compute_nodes
    ]


async def submit_vector(
    endpoints: Endpoints,
    tls: TlsFiles,
    client_id: str,
    job_id: str,
    z: np.ndarray,
    rng: Drbg | None = None,
    *,
    ledger: Ledger,
    announcement: pb.DcaJobAnnouncement | None = None,
) -> SubmitReport:
    """One client's contribution: shares with fresh noise, one stream per node. Raises if any node refuses.

    The client machine's Spend (the job's true (ε, δ), :meth:`DcaParams.ledger_entry`) is spent in ``ledger`` (the
    client's own privacy ledger: required, there is no submission without a spend) before any share leaves:
    :class:`mpdp.ledger.BudgetExceeded` if it does not fit, and then nothing is sent. A submission that fails after
    spending keeps its charge, marked failed. ``announcement`` is the job as the caller already fetched and checked
    it (fetched here otherwise).
    """
    from mpdp.dca.client import ClientMachine
    from mpdp.dca.params import DcaParams
    from mpdp.ledger import FAILED
    from mpdp.math.drbg import Drbg
    from mpdp_services.common.readiness import compile_kernels

    t0 = time.perf_counter()
    ann = announcement if announcement is not None else await fetch_job(endpoints.curator_address, endpoints.curator_name, tls, job_id)
    params = DcaParams.from_spec(job_id, ann.spec)
    if params.validation is not None:  # the proofs' kernels compiled (or loaded) before anything is built or spent
        await asyncio.to_thread(compile_kernels)
        t0 = time.perf_counter()
    rng = rng or (Drbg.from_seed(params.simulation_seed).child(f"client/{client_id}") if params.seeded else Drbg.from_os())
    outputs = ClientMachine(params, client_id, z, rng).submit()
    client_seconds = time.perf_counter() - t0
    spent: list[dict] = []

    async def spend(entries: tuple[dict, ...]) -> None:
        if not entries:
            raise RuntimeError("the client machine's Spend is empty: no share leaves without a charge")
        for e in entries:
            await asyncio.to_thread(ledger.spend, e)
            spent.append(e)

    try:
        report = await carry_out(ann, tls, params, outputs, spend, client_seconds=client_seconds)
    except BaseException:
        for e in spent:
            await asyncio.to_thread(ledger.mark, e["protocol"], e["job_id"], FAILED)
        raise
    if report.rejected:
        for e in spent:
            await asyncio.to_thread(ledger.mark, e["protocol"], e["job_id"], FAILED)
    report.seconds = time.perf_counter() - t0
    return report


async def confirm_spec(ann: pb.DcaJobAnnouncement, tls: TlsFiles, params: DcaParams, channels: list[grpc.aio.Channel] | None = None) -> None:
    """Ask every compute node of the job (at the addresses of ``ann``, each checked by its certificate name) for the
    digest of the spec it was announced, and compare each with the digest of ``params``, the spec this client checked
    (:func:`mpdp.dca.spec.confirm`). Raises :class:`mpdp.dca.spec.SpecMismatch` naming the first node that answered
    another digest, or the refusal of a node that did not answer (grpc.aio.AioRpcError: e.g. NOT_FOUND from a node
    that does not hold the job); nothing has been spent or sent then. ``channels``: the caller's open channels to the
    nodes, in node order (otherwise opened and closed here)."""
    from mpdp.dca import spec

    own = channels is None
    chans = _node_channels(ann, tls) if channels is None else channels
    try:
        async def one(k: int) -> bytes | None:
            got = await pb_grpc.ComputeNodeStub(chans[k]).GetJobDigest(common_pb2.JobRef(job_id=params.job_id), timeout=30)
            return got.spec_digest if got.job_id == params.job_id else None

        answers = await asyncio.gather(*(one(k) for k in range(params.M)))
    finally:
        if own:
            await asyncio.gather(*(c.close() for c in chans))
    spec.confirm(params, {n: a for n, a in zip(params.nodes, answers) if a is not None})


async def carry_out(ann: pb.DcaJobAnnouncement, tls: TlsFiles, params: DcaParams, outputs: list, spend: Callable[[tuple[dict, ...]], Awaitable[None]],
                    *, client_seconds: float = 0.0, handoff: Handoff | None = None, reach_seconds: float = REACH_SECONDS) -> SubmitReport:
    """Carry out a client machine's outputs in their order: connect to every compute node (:class:`NodesUnreachable`
    after ``reach_seconds``), have every node confirm it was announced the spec this client checked
    (:func:`confirm_spec`; :class:`mpdp.dca.spec.SpecMismatch` otherwise) — both before anything is spent — then its
    :class:`~mpdp.protocol.Spend` through ``spend`` (durable; a refusal raises and nothing after it is sent), then its
    shares, one stream per node. ``handoff`` records whether any share may have left (see :class:`Handoff`)."""
    if ann.job_id != params.job_id or tuple(ann.spec.compute_nodes) != params.nodes:
        raise ValueError("the announcement is not of the job the client checked")
    spends: list[tuple[dict, ...]] = []
    sends: list[Send] = []
    for o in outputs:
        if isinstance(o, Spend):
            if sends:
                raise RuntimeError("a share came before the client's spend")  # the engine's spend rule forbids this
            spends.append(o.entries)
        elif isinstance(o, Send):
            sends.append(o)
    channels = _node_channels(ann, tls)
    try:
        await _reach(ann, channels, reach_seconds)
        await confirm_spec(ann, tls, params, channels)
        for entries in spends:
            await spend(entries)
        return await _send_shares(channels, params, sends, client_seconds, handoff or Handoff())
    finally:
        await asyncio.gather(*(c.close() for c in channels))


async def _reach(ann: pb.DcaJobAnnouncement, channels: list[grpc.aio.Channel], seconds: float) -> None:
    """Every node's channel connected (TCP and TLS), or :class:`NodesUnreachable` naming the first (in node order)
    that is not. The nodes are dialled at once: one connection's round trips, not M of them one after another."""

    async def ready(ch: grpc.aio.Channel) -> bool:
        try:
            await asyncio.wait_for(ch.channel_ready(), seconds)
        except asyncio.TimeoutError:
            return False
        return True

    reached = await asyncio.gather(*(ready(ch) for ch in channels))
    for name, ok in zip(ann.spec.compute_nodes, reached):
        if not ok:
            raise NodesUnreachable(f"compute node {name} could not be reached in {seconds:g} s")


async def _send_shares(channels: list[grpc.aio.Channel], params: DcaParams, outs: list[Send], client_seconds: float, handoff: Handoff) -> SubmitReport:
    report = SubmitReport(client_seconds=client_seconds)

    async def one(k: int, msg: pb.ClientShare) -> pb.ShareReceipt:
        async def it() -> AsyncIterator[pb.ClientShare]:
            handoff.shares = True  # before gRPC holds the share: from here on it may reach the node
            yield msg

        return await pb_grpc.ComputeNodeStub(channels[k]).SubmitShares(it(), timeout=60)

    receipts = await asyncio.gather(*(one(params.node_index(o.to.name), o.message) for o in outs))
    for r in receipts:
        report.accepted += r.accepted
        report.rejected.extend(r.rejected)
    return report


async def submit_cohort(
    endpoints: Endpoints,
    tls: TlsFiles,
    job_id: str,
    client_ids: list[str],
    Z: np.ndarray,
    *,
    batched: bool = True,
    batch_size: int | None = None,
    batch_bytes: int = BATCH_BYTES,
    rng: Drbg | None = None,
    connections: int = 1,
    in_flight: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> SubmitReport:
    """Simulate many clients over long-lived TLS channels (load generator, benchmarks, tests): ``connections``
    connections per node (each its own TCP connection), batches spread over them round-robin, up to
    max(``in_flight``, ``connections``) batches in flight (batched: the next batch is built while the nodes take the
    previous ones) or one stream per connection (unbatched).

    A batch holds as many clients as fit in ``batch_bytes`` per node message (:func:`batch_size_for`: any d of the
    limits table works), at most ``batch_size`` when given. ``progress(clients sent, clients)`` is called as batches go."""
    from mpdp.dca.client import ClientCohort
    from mpdp.dca.params import DcaParams
    from mpdp.math.drbg import Drbg
    from mpdp_services.common.readiness import compile_kernels

    t0 = time.perf_counter()
    ann = await fetch_job(endpoints.curator_address, endpoints.curator_name, tls, job_id)
    params = DcaParams.from_spec(job_id, ann.spec)
    if params.validation is not None:  # the proofs' kernels compiled (or loaded) before the first share is built
        await asyncio.to_thread(compile_kernels)
        t0 = time.perf_counter()
    await confirm_spec(ann, tls, params)  # the simulated clients' shares are bound to this spec; the nodes must hold it
    id_bytes = max((len(c.encode()) for c in client_ids), default=0)
    size = batch_size_for(params.dimension, len(client_ids), batch_bytes, id_bytes, batch_size)
    rng = rng or (Drbg.from_seed(params.simulation_seed).child("cohort") if params.seeded else Drbg.from_os())
    if params.validation is not None:
        report = await _submit_validated(ann, tls, params, client_ids, Z, rng, batched=batched, batch_bytes=batch_bytes, most=batch_size,
                                         in_flight=max(2, in_flight), progress=progress)
        report.seconds = time.perf_counter() - t0
        return report
    cohort = ClientCohort(params, client_ids, Z, rng)
    conns = max(1, connections)
    channel_sets = [_node_channels(ann, tls, own_connection=conns > 1) for _ in range(conns)]
    stubs = [[pb_grpc.ComputeNodeStub(c) for c in channels] for channels in channel_sets]
    report = SubmitReport()
    take, went = _tally(report, len(client_ids), progress)

    try:
        if batched:
            pending: list[asyncio.Future] = []
            for j, b in enumerate(_timed_batches(cohort, size, report)):
                ss = stubs[j % conns]
                pending.append(asyncio.ensure_future(asyncio.gather(*(ss[k].SubmitShareBatch(msg, timeout=120) for k, msg in enumerate(b.batches)))))
                if len(pending) >= max(conns, in_flight):
                    take(await pending.pop(0))
                    went(size)
            for f in pending:
                take(await f)
                went(size)
        else:
            queues: list[list[asyncio.Queue[tuple[list[str], pb.ShareBatch] | None]]] = [[asyncio.Queue(maxsize=4) for _ in ss] for ss in stubs]

            async def stream(c: int, k: int) -> pb.ShareReceipt:
                async def it() -> AsyncIterator[pb.ClientShare]:
                    while (item := await queues[c][k].get()) is not None:
                        for msg in _split(item[1], params.dimension, item[0]):
                            yield msg

                return await stubs[c][k].SubmitShares(it(), timeout=3600)

            tasks = [asyncio.ensure_future(stream(c, k)) for c in range(conns) for k in range(len(stubs[c]))]
            for j, b in enumerate(_timed_batches(cohort, size, report)):
                for k, msg in enumerate(b.batches):
                    await queues[j % conns][k].put((b.client_ids, msg))
                went(len(b.client_ids))
            for qs in queues:
                for q in qs:
                    await q.put(None)
            take(await asyncio.gather(*tasks))
    finally:
        await asyncio.gather(*(c.close() for channels in channel_sets for c in channels))
    report.seconds = time.perf_counter() - t0
    return report


VALIDATED_BATCH_CLIENTS = 1024  # at most this many clients a validated batch: proving the next overlaps the nodes' verifying


def validated_batch_size(params: DcaParams, clients: int, batch_bytes: int = BATCH_BYTES, most: int | None = None) -> int:
    """Clients per validated batch: node 0's message (a full share and proof, its blind and the M parts per client)
    within ``batch_bytes``, at most :data:`VALIDATED_BATCH_CLIENTS` (or ``most``), at least 1."""
    plan = params.validation
    assert plan is not None
    per = 8 * plan.share_len + 32 * (params.M + 1) + limits.MAX_CLIENT_ID_BYTES + _ID_OVERHEAD
    n = min(batch_bytes // per, VALIDATED_BATCH_CLIENTS if most is None else most)
    return max(1, min(n, max(clients, 1)))


async def _submit_validated(ann: pb.DcaJobAnnouncement, tls: TlsFiles, params: DcaParams, client_ids: list[str], Z: np.ndarray, rng: Drbg, *,
                            batched: bool, batch_bytes: int, most: int | None, in_flight: int,
                            progress: Callable[[int, int], None] | None) -> SubmitReport:
    """A validated job's cohort: batches of clients proven in a worker thread while the nodes verify the previous
    ones; each batch goes to node k as one ShareBatch carrying its clients' ValidatedShares (``batched``) or as one
    ClientShare per client on a stream per node."""
    from mpdp.dca.client import validated_cohort
    from mpdp.dca.validation import PackedShares

    channels = _node_channels(ann, tls)
    stubs = [pb_grpc.ComputeNodeStub(c) for c in channels]
    report = SubmitReport()
    size = validated_batch_size(params, len(client_ids), batch_bytes, most)
    gen = validated_cohort(params, client_ids, Z, rng, batch_size=size)

    async def build():
        t = time.perf_counter()
        item = await asyncio.to_thread(next, gen, None)
        report.client_seconds += time.perf_counter() - t
        return item

    take, went = _tally(report, len(client_ids), progress)

    queues: list[asyncio.Queue[list[pb.ClientShare] | None]] = [asyncio.Queue(maxsize=2) for _ in stubs]

    async def stream(k: int) -> pb.ShareReceipt:
        async def it() -> AsyncIterator[pb.ClientShare]:
            while (item := await queues[k].get()) is not None:
                for msg in item:
                    yield msg

        return await stubs[k].SubmitShares(it(), timeout=3600)

    tasks = [] if batched else [asyncio.ensure_future(stream(k)) for k in range(len(stubs))]
    pending: list[tuple[int, asyncio.Future]] = []
    try:
        while (item := await build()) is not None:
            ids, batches = item
            if batched:
                pending.append((len(ids), asyncio.ensure_future(asyncio.gather(*(stubs[k].SubmitShareBatch(msg, timeout=600) for k, msg in enumerate(batches))))))
                while len(pending) >= in_flight:
                    n, fut = pending.pop(0)
                    take(await fut)
                    went(n)
                continue
            for k, msg in enumerate(batches):
                v = msg.validated
                packed = PackedShares(len(ids), v.measurements, v.proofs, v.share_seeds, v.blinds, v.joint_rand_parts)
                rows = [packed.row(i) for i in range(len(ids))]
                await queues[k].put([pb.ClientShare(job_id=msg.job_id, client_id=cid, spec_digest=msg.spec_digest, validated=pb.ValidatedShare(
                    measurement=r.measurement, proof=r.proof, share_seed=r.share_seed, blind=r.blind, joint_rand_parts=r.joint_rand_parts))
                    for cid, r in zip(ids, rows)])
            went(len(ids))
        for n, fut in pending:
            take(await fut)
            went(n)
        pending.clear()
        if tasks:
            for q in queues:
                await q.put(None)
            take(await asyncio.gather(*tasks))
    finally:
        for _, fut in pending:
            fut.cancel()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*(c.close() for c in channels))
    return report


def _tally(report: SubmitReport, clients: int, progress: Callable[[int, int], None] | None):
    """(take, went): add a batch's receipts to ``report``; count n more clients sent and call ``progress``."""
    sent = 0

    def take(receipts) -> None:
        for r in receipts:
            report.accepted += r.accepted
            report.rejected.extend(r.rejected)

    def went(n: int) -> None:
        nonlocal sent
        sent = min(sent + n, clients)  # the last batch may be short
        if progress is not None:
            progress(sent, clients)

    return take, went


def _timed_batches(cohort: ClientCohort, batch_size: int, report: SubmitReport):
    gen = cohort.batches(batch_size)
    while True:
        t = time.perf_counter()
        b = next(gen, None)
        report.client_seconds += time.perf_counter() - t
        if b is None:
            return
        yield b


def _split(batch: pb.ShareBatch, d: int, ids: list[str] | None = None) -> Iterator[pb.ClientShare]:
    """A ShareBatch as one ClientShare per client (unbatched submission); ``ids`` names the batch's clients when
    it names them by roster index (a client's own share carries its id, the name on its certificate).

    The bytes field is read once: every read of a protobuf bytes field returns a fresh copy, so slicing
    ``batch.masked_vectors`` per client would copy the whole batch once per client (quadratic)."""
    job_id, digest = batch.job_id, batch.spec_digest
    ids = list(batch.client_ids) if ids is None else ids
    if batch.WhichOneof("shares") == "mask_seeds":
        data = memoryview(batch.mask_seeds)
        for j, cid in enumerate(ids):
            yield pb.ClientShare(job_id=job_id, client_id=cid, spec_digest=digest, mask_seed=bytes(data[32 * j : 32 * (j + 1)]))
    else:
        w = 8 * d
        data = memoryview(batch.masked_vectors)
        for j, cid in enumerate(ids):
            yield pb.ClientShare(job_id=job_id, client_id=cid, spec_digest=digest, masked_vector=bytes(data[w * j : w * (j + 1)]))
