"""Prebuilt client submissions for whole DCA jobs in the convention of Heikkilä et al. 2017, Table 1 ("encryption
excluded": the clients' share generation is not timed).

Used by ``benchmarks/dca_validated.py --federation … --prebuilt``. For one job already created at the curator:

1. :func:`build` — every client's messages, exactly as the load generator (``submit_cohort``) would send them (one
   ``ShareBatch`` per node per batch: ValidatedShares for a validated job, seed-compressed helper shares when the job
   says so; the same batch sizes), built by :class:`mpdp.dca.client.ClientCohort` / :func:`validated_cohort` in a
   process pool (untimed) and written to files under a temporary directory: per chunk of clients and per node, the
   serialised messages, each preceded by its length (4 bytes, little endian). No memory for all clients is needed.
2. :func:`stream` — the timed phase: per node, the files read back in order (in a thread) and each message sent as it
   was serialised (no re-encoding) over mutual TLS with ``SubmitShareBatch``, ``window`` messages in flight per node,
   every node fed independently, as fast as it takes them. The channels are connected before the clock starts.
3. :class:`NodeMeter` — per node process (and its worker processes), CPU seconds from /proc/<pid>/stat and the peak
   resident set (VmHWM, reset before the timed phase through /proc/<pid>/clear_refs where the kernel allows it).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import struct
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

_LEN = struct.Struct("<I")


def write_messages(path: Path, messages: list[bytes]) -> int:
    """Append length-prefixed messages to ``path``; returns the payload bytes written (without the prefixes)."""
    with open(path, "ab") as f:
        for m in messages:
            f.write(_LEN.pack(len(m)))
            f.write(m)
    return sum(len(m) for m in messages)


def read_messages(path: Path) -> Iterator[bytes]:
    """The messages of a file written by :func:`write_messages`, in order; ValueError on a truncated file."""
    with open(path, "rb") as f:
        while head := f.read(_LEN.size):
            if len(head) != _LEN.size:
                raise ValueError(f"{path.name}: truncated length prefix")
            (n,) = _LEN.unpack(head)
            body = f.read(n)
            if len(body) != n:
                raise ValueError(f"{path.name}: truncated message")
            yield body


def simulated_data(kind: str, d: int, n: int, start: int, stop: int) -> np.ndarray:
    """Public simulation data for clients [start, stop) of an N-client job (range: uniform in [−1, 1]), drawn per
    chunk so that no process holds all N rows."""
    rng = np.random.default_rng([n, d, start])
    return rng.uniform(-1, 1, (stop - start, d))


def _chunk_file(root: Path, chunk: int, k: int) -> Path:
    return root / f"chunk{chunk:06d}.node{k:03d}"


def _build_chunk(job_id: str, spec_bytes: bytes, kind: str, n: int, start: int, stop: int, batch: int, chunk: int, root: str) -> tuple[int, list[int], float]:
    """One pool task: clients [start, stop) (a whole number of load-generator batches) into one file per node."""
    from mpdp.dca.client import ClientCohort, validated_cohort
    from mpdp.dca.params import DcaParams
    from mpdp.math.drbg import Drbg
    from mpdp.messages import dca_pb2 as pb

    t0 = time.process_time()
    spec = pb.DcaJobSpec.FromString(spec_bytes)
    params = DcaParams.from_spec(job_id, spec)
    ids = [f"{spec.roster_range.prefix}{i:0{spec.roster_range.digits}d}" for i in range(start, stop)]
    Z = simulated_data(kind, params.dimension, n, start, stop)
    rng = Drbg.from_os()
    out = [0] * params.M
    if params.validation is not None:
        batches: Iterator[list[pb.ShareBatch]] = (msgs for _, msgs in validated_cohort(params, ids, Z, rng, batch_size=batch))
    else:
        batches = (b.batches for b in ClientCohort(params, ids, Z, rng).batches(batch))
    for msgs in batches:
        for k, msg in enumerate(msgs):
            out[k] += write_messages(_chunk_file(Path(root), chunk, k), [msg.SerializeToString()])
    return stop - start, out, time.process_time() - t0


@dataclass
class Built:
    """What :func:`build` wrote: chunk files per node, in client order."""

    root: Path
    chunks: int
    nodes: int
    batch: int
    bytes_per_node: list[int]
    seconds: float  # wall time of the build
    cpu_seconds: float  # summed over the pool's processes

    def files(self, k: int) -> list[Path]:
        return [_chunk_file(self.root, c, k) for c in range(self.chunks)]


def build(job_id: str, spec_bytes: bytes, kind: str, n: int, batch: int, nodes: int, root: Path, processes: int = 2) -> Built:
    """Every client's submissions into files under ``root`` (a process pool of ``processes``; chunks of whole batches)."""
    per_chunk = batch * max(1, -(-n // (batch * 8 * processes)))  # ≥ 8 chunks a process when N allows (balance)
    starts = list(range(0, n, per_chunk))
    t0 = time.perf_counter()
    total = [0] * nodes
    cpu = 0.0
    ctx = multiprocessing.get_context("spawn")  # the parent holds gRPC channels: never fork it
    with ProcessPoolExecutor(max_workers=processes, mp_context=ctx) as pool:
        futs = [pool.submit(_build_chunk, job_id, spec_bytes, kind, n, s, min(s + per_chunk, n), batch, c, str(root)) for c, s in enumerate(starts)]
        for f in futs:
            _, sizes, secs = f.result()
            total = [a + b for a, b in zip(total, sizes)]
            cpu += secs
    return Built(root, len(starts), nodes, batch, total, time.perf_counter() - t0, cpu)


@dataclass
class StreamReport:
    accepted: int = 0
    rejected: int = 0
    messages: list[int] = field(default_factory=list)  # per node
    bytes: list[int] = field(default_factory=list)  # per node, serialised messages as sent


async def stream(built: Built, channels: list, window: int = 2) -> StreamReport:
    """The timed phase: each node's files sent as ``SubmitShareBatch`` calls on ``channels[k]`` (already connected),
    the serialised bytes as they are on disk, ``window`` calls in flight per node."""
    from mpdp.messages import dca_pb2 as pb

    report = StreamReport(messages=[0] * built.nodes, bytes=[0] * built.nodes)

    async def one(k: int) -> None:
        call = channels[k].unary_unary("/mpdp.messages.ComputeNode/SubmitShareBatch", request_serializer=lambda b: b,
                                       response_deserializer=pb.ShareReceipt.FromString)
        files = iter(built.files(k))
        reader: Iterator[bytes] = iter(())

        def next_message() -> bytes | None:
            nonlocal reader
            while True:
                m = next(reader, None)
                if m is not None:
                    return m
                path = next(files, None)
                if path is None:
                    return None
                reader = read_messages(path)

        pending: list[asyncio.Future] = []
        while (msg := await asyncio.to_thread(next_message)) is not None:
            report.messages[k] += 1
            report.bytes[k] += len(msg)
            pending.append(asyncio.ensure_future(call(msg, timeout=3600)))
            while len(pending) >= window:
                _take(report, await pending.pop(0))
        for f in pending:
            _take(report, await f)

    await asyncio.gather(*(one(k) for k in range(built.nodes)))
    return report


def _take(report: StreamReport, receipt) -> None:
    report.accepted += receipt.accepted
    report.rejected += len(receipt.rejected)


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a node's worker processes)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def _cpu(pid: int) -> float:
    """utime + stime + cutime + cstime of one process, in seconds (reaped children included)."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in f[11:15]) / os.sysconf("SC_CLK_TCK")


def _hwm_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class NodeMeter:
    """CPU seconds and peak RSS of each node's process tree over the timed phase."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.cpu0: dict[str, float] = {}
        self.hwm_reset = True

    def start(self) -> None:
        for name, pid in self.pids.items():
            procs = _tree(pid)
            self.cpu0[name] = sum(_cpu(p) for p in procs)
            for p in procs:
                try:
                    Path(f"/proc/{p}/clear_refs").write_text("5")  # resets VmHWM to the current RSS
                except OSError:
                    self.hwm_reset = False

    def stop(self) -> dict[str, dict]:
        out = {}
        for name, pid in self.pids.items():
            procs = _tree(pid)
            out[name] = {"cpu_seconds": sum(_cpu(p) for p in procs) - self.cpu0[name], "processes": len(procs),
                         "peak_rss_mib": sum(_hwm_kib(p) for p in procs) / 1024, "peak_rss_reset": self.hwm_reset}
        return out
