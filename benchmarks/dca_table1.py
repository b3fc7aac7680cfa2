"""Benchmark DCA (Heikkilä et al. 2017, Table 1) over real processes: M compute nodes, a curator, mutual TLS.

    python benchmarks/dca_table1.py [--clients 100,1000,10000,100000] [--dims 10,100,1000,10000]
        [--nodes 3,10] [--batching batched,unbatched] [--json FILE [--update]] [--max-seconds 600]
        [--max-memory-gib 16] [--budget-seconds S] [--fresh nodes|dim|cell] [--workers 1,2] [--connections C]
        [--roster range|open] [--seed-compressed] [--in-flight 2] [--warmup 1] [--repeats R] [--dry-run]
    python benchmarks/dca_table1.py --markdown FILE      # the tables of docs/benchmarks.md from a results file

A fresh :class:`~mpdp_services.launcher.federation.LocalFederation` (the curator and M compute-node processes, throwaway CA,
mutual TLS; test_mode with 1024-bit Paillier/DGK keys only so that the curator, whose keys DCA does not use,
starts fast; TLS is unaffected) is started per (M, d) (``--fresh dim``, default), per M (``nodes``) or per
cell, and per ``--workers`` W (each compute node W processes on one port, docs/deploy.md); ``--warmup`` unmeasured
small jobs (default 1) first set up the TLS connections between the processes. The job's clients are a roster range
(``--roster range``, default: nodes agree by roster index) or any N clients (``open``: by id); ``--seed-compressed``
gives nodes k ≥ 1 a 32-byte seed per client instead of the masked vector. Then for every cell (N, d), in order of increasing size, and every batching mode,
``--repeats`` R jobs (default 3; the cell is the median job, every job's seconds kept in ``repeats``: the first job
of a cell at a new size is often the slowest, as the load generator and the nodes touch new memory), each job (T = 0, ε = 1,
δ = 1e−5, clip bounds ±1, f = 32) is created and N simulated clients submit from this process through
:func:`mpdp_services.dca_client.submit_cohort`: one long-lived TLS channel per node (never one per client),

* ``batched``: ShareBatch messages of ``--batch-bytes`` of shares per node (each client still accounted on
  its own by the node), ``--in-flight`` batches in flight (default 2: the next batch is built while the nodes take
  the previous one);
* ``unbatched``: one ClientShare message per client and node over one long-lived stream per node.

Measured per job (see docs/benchmarks.md for the definitions):

* ``seconds`` — end to end: from the call to ``submit_cohort`` (fetch the job, open one TLS channel per node,
  build and send) until the operator sees the job RELEASED (includes the TLS handshakes, building, sending,
  node-side accounting and summing, agreement, q_k to the curator, decoding). Job creation is excluded.
* ``client_seconds`` — the part of ``seconds`` spent building shares (clip, noise, encoding, M-way sharing,
  packing into messages). The load generator does not overlap building with sending, so
* ``node_seconds`` = ``seconds`` − ``client_seconds`` is the node-side cost: serialisation, TLS, transport,
  the nodes' per-client accounting and summing, agreement and release.
* ``node_peak_rss_mb`` — the largest VmHWM over the M compute-node processes, reset before each job by
  writing 5 to /proc/<pid>/clear_refs (so it is that job's high-water mark, floored at the RSS the process
  had when the job started, which is also reported as ``node_base_rss_mb``).

Cells whose estimated client memory (Z is N×d float64, plus the shares of one batch) exceeds
``--max-memory-gib`` or whose estimated run time exceeds ``--max-seconds`` are skipped and listed, as are
cells that no longer fit the ``--budget-seconds`` wall-time budget. The paper's Spark seconds (M = 10,
encryption excluded) are printed next to every cell. The JSON holds ``cells`` (every measured job: N, d, M,
batched, seconds, client_seconds, node_seconds, node_peak_rss_mb, paper_seconds, CPU seconds, load), ``skipped``
(with the reason) and ``runs`` (command line, load and wall time of each invocation; ``--update`` merges a new
invocation into an existing file, its cells replacing the same cells of earlier runs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mpdp.messages import common_pb2, dca_pb2 as pb  # noqa: E402
from mpdp_services.common.endpoints import Endpoints  # noqa: E402
from mpdp_services.dca_client.client import DcaOperator, submit_cohort  # noqa: E402
from mpdp_services.launcher.federation import LocalFederation  # noqa: E402

# Heikkilä et al. 2017, Table 1: seconds, M = 10 compute nodes, 5 repeats, encryption excluded.
PAPER_SECONDS: dict[int, dict[int, float]] = {
    10: {100: 1.72, 1000: 1.89, 10000: 2.99, 100000: 8.58},
    100: {100: 2.03, 1000: 2.86, 10000: 12.36, 100000: 65.64},
    1000: {100: 3.43, 1000: 10.56, 10000: 101.2, 100000: 610.55},
    10000: {100: 15.30, 1000: 84.95, 10000: 994.96, 100000: 1592.29},
}
GIB = 1 << 30

# Cost model used only to decide what to skip. Fitted on runs of this script on the 2 shared cores at a load
# average of 8–12 (other engineers' jobs), so deliberately pessimistic for an idle machine: a fixed cost per job,
# per client id per node (ids are handled per node and in the received-set reports), and per byte of shares
# (building, packing, TLS, parsing, summing). Unbatched: per ClientShare message, growing with its size.
MODEL = {"job": 0.5, "id_batched": 5e-6, "byte_batched": 9e-9}
UNBATCHED_MSG_SECONDS = {10: 80e-6, 100: 85e-6, 1000: 430e-6, 10000: 1150e-6}


def parse_ints(s: str) -> list[int]:
    return [int(float(x)) for x in s.split(",") if x]


def batch_size_for(n: int, d: int, batch_bytes: int) -> int:
    return max(1, min(n, batch_bytes // (8 * d)))


def estimate_seconds(n: int, d: int, m: int, batched: bool) -> float:
    if batched:
        return MODEL["job"] + n * m * MODEL["id_batched"] + 8.0 * n * d * m * MODEL["byte_batched"]
    ds = sorted(UNBATCHED_MSG_SECONDS)
    lo = max([x for x in ds if x <= d] or [ds[0]])
    hi = min([x for x in ds if x >= d] or [ds[-1]])
    w = 0.0 if hi == lo else (np.log(d) - np.log(lo)) / (np.log(hi) - np.log(lo))
    per_msg = np.exp((1 - w) * np.log(UNBATCHED_MSG_SECONDS[lo]) + w * np.log(UNBATCHED_MSG_SECONDS[hi]))
    return MODEL["job"] + n * m * float(per_msg)


def estimate_client_bytes(n: int, d: int, m: int, batch: int) -> float:
    """Z (N×d float64) plus one batch in flight: clipped, η, u, M−1 masks, M shares, M packed copies, M messages."""
    return 8.0 * n * d + 8.0 * batch * d * (3 * m + 6)


def proc_status(pid: int, key: str) -> float:
    """VmHWM / VmRSS of a process in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024.0
    raise KeyError(key)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def reset_hwm(pid: int) -> bool:
    """Reset the peak-RSS high-water mark of ``pid`` to its current RSS (Linux ≥ 4.0)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def mem_gib(key: str) -> float:
    """A /proc/meminfo field (MemTotal, MemAvailable) in GiB."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / (1 << 20)
    raise KeyError(key)


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def spec_for(n: int, d: int, nodes: list[str], roster: str = "range", seed_compressed: bool = False) -> pb.DcaJobSpec:
    """The benchmark job; ``roster`` "range": the N client ids client-000000… are the job's roster (nodes agree by
    roster index, docs/protocols/dca.md "Agreement"); "open": any N clients (nodes agree by id)."""
    return pb.DcaJobSpec(
        roster_range=pb.RosterRange(prefix="client-", digits=6) if roster == "range" else None,
        seed_compressed=seed_compressed,
        dimension=d,
        clients=n,
        max_missing=0,
        epsilon=1.0,
        delta=1e-5,
        sensitivity=2.0 * np.sqrt(d),  # replace-one adjacency, every coordinate in [−1, 1]
        mode=common_pb2.CORRECTED,
        fractional_bits=32,
        clip_bounds=[1.0],
        compute_nodes=nodes,
        deadline_seconds=3600.0,  # the job releases as soon as all N clients are in
        purpose="benchmark dca_table1",
        validate=pb.VALIDATE_NONE,  # the paper's (unproven) DCA
    )


def default_connections(workers: int) -> int:
    """Connections per node from the load generator: 1, or 4·W so that the kernel spreads them over all W processes
    (with W = 2 and 8 connections, all land on one process with probability 2^-7)."""
    return 1 if workers == 1 else 4 * workers


def node_pids(fed: LocalFederation, nodes: list[str]) -> list[int]:
    """Every process of the compute nodes: each node's coordinator and its worker processes (its children)."""
    pids = []
    for x in nodes:
        pid = fed.procs[x].popen.pid
        pids.append(pid)
        try:
            pids += [int(c) for t in Path(f"/proc/{pid}/task").iterdir() for c in (t / "children").read_text().split()]
        except OSError:
            pass
    return pids


def run_job(fed: LocalFederation, nodes: list[str], Z: np.ndarray, batched: bool, batch_bytes: int, roster: str = "range", connections: int = 0,
            seed_compressed: bool = False, in_flight: int = 1) -> dict:
    n, d = Z.shape
    ep = Endpoints.load(fed.workdir)
    pids = node_pids(fed, nodes)
    ids = [f"client-{i:06d}" for i in range(n)]
    bs = batch_size_for(n, d, batch_bytes)
    with DcaOperator(ep) as op:
        job = op.create(spec_for(n, d, nodes, roster, seed_compressed))
        base = max(proc_status(p, "VmRSS") for p in pids)
        hwm_reset = all(reset_hwm(p) for p in pids)
        la0 = load_average()
        cpu0 = [cpu_seconds(p) for p in pids], cpu_seconds(fed.procs["curator"].popen.pid), os.times()
        t0 = time.perf_counter()
        rep = asyncio.run(submit_cohort(ep, ep.tls, job, ids, Z, batched=batched, batch_size=bs, connections=connections or default_connections(fed.node_workers), in_flight=in_flight))
        st = op.wait(job, timeout=3600)
        seconds = time.perf_counter() - t0
        me = os.times()
        node_cpu = sum(cpu_seconds(p) for p in pids) - sum(cpu0[0])
        curator_cpu = cpu_seconds(fed.procs["curator"].popen.pid) - cpu0[1]
        client_cpu = (me.user + me.system) - (cpu0[2].user + cpu0[2].system)
        peaks = [proc_status(p, "VmHWM") for p in pids]
        if st.state != "RELEASED":
            raise SystemExit(f"job {job} (N={n}, d={d}, M={len(nodes)}, batched={batched}) ended {st.state}: {st.detail}")
        rel = op.release(job)
    if rep.accepted != n * len(nodes) or rep.rejected or rel.clients_included != n:
        raise SystemExit(f"job {job}: accepted {rep.accepted} of {n * len(nodes)}, {len(rep.rejected)} rejected, released over {rel.clients_included}")
    # sanity: the release is Σ z_i plus noise of variance N·σ_client² (≈ σ_std²) per coordinate
    err = np.asarray(rel.values) - Z.sum(axis=0)
    sd = np.sqrt(rel.noise_variance)
    if np.max(np.abs(err)) > 8 * sd + n * 2.0**-rel.fractional_bits:
        raise SystemExit(f"job {job}: release is off by {np.max(np.abs(err)):.3g} (noise sd {sd:.3g})")
    return {
        "N": n,
        "d": d,
        "M": len(nodes),
        "batched": batched,
        "batch_size": bs if batched else 1,
        "roster": roster,
        "seed_compressed": seed_compressed,
        "in_flight": in_flight,
        "workers": fed.node_workers,
        "connections": connections or default_connections(fed.node_workers),
        "seconds": seconds,
        "client_seconds": rep.client_seconds,
        "node_seconds": seconds - rep.client_seconds,
        "cpu_seconds": {"client_process": client_cpu, "nodes": node_cpu, "curator": curator_cpu},
        "node_peak_rss_mb": max(peaks),
        "node_peak_rss_mb_each": peaks,
        "node_base_rss_mb": base,
        "hwm_reset": hwm_reset,
        "paper_seconds": PAPER_SECONDS.get(d, {}).get(n),
        "noise_sd_ratio": float(np.std(err) / sd) if d > 1 else None,
        "load_before": la0,
        "load_after": load_average(),
        "job": job,
    }


def median_job(runs: list[dict]) -> dict:
    """One cell from R repeated jobs: the job with the median seconds (the lower middle one for even R), with every
    job's seconds, their mean and the CPU seconds of every job kept beside it."""
    order = sorted(runs, key=lambda r: r["seconds"])
    r = dict(order[(len(order) - 1) // 2])
    r["repeats"] = [x["seconds"] for x in runs]
    r["seconds_mean"] = float(np.mean(r["repeats"]))
    r["cpu_seconds_each"] = [x["cpu_seconds"] for x in runs]
    r["load_before_each"] = [x["load_before"] for x in runs]
    return r


def fmt_row(r: dict) -> str:
    paper = r["paper_seconds"]
    w = r.get("workers", 1)
    sp = f"{paper / r['seconds']:7.1f}×" if paper else "       -"
    spn = f"{paper / r['node_seconds']:7.1f}×" if paper and r["node_seconds"] > 0 else "       -"
    mode = ("batched" if r["batched"] else "unbatched") + (f"/W{w}" if w > 1 else "")
    return (
        f"{r['M']:>3} {r['N']:>7} {r['d']:>6} {mode:<10} {r['seconds']:>9.2f} {r['client_seconds']:>8.2f} {r['node_seconds']:>8.2f}"
        f" {(paper if paper else float('nan')):>9.2f} {sp} {spn} {r['node_peak_rss_mb']:>9.1f} {r['node_base_rss_mb']:>8.1f}"
        f" {r['cpu_seconds']['client_process']:>7.2f} {r['cpu_seconds']['nodes']:>7.2f}  {r['load_before'][0]:.2f}"
    )


HEADER = (
    f"{'M':>3} {'N':>7} {'d':>6} {'mode':<10} {'seconds':>9} {'client':>8} {'node':>8} {'paper(s)':>9} {'speedup':>8} {'sp.node':>8}"
    f" {'peakRSS':>9} {'baseRSS':>8} {'cpu.cl':>7} {'cpu.nd':>7}  load1"
)


def markdown(res: dict) -> str:
    """The measured-vs-paper tables (one per M) and the skipped cells, as Markdown."""
    plain = lambda r: r.get("workers", 1) == 1 and not r.get("seed_compressed")  # noqa: E731
    cells = {(r["M"], r["N"], r["d"], r["batched"]): r for r in res["cells"] if plain(r)}
    skipped = {(r["M"], r["N"], r["d"], r["batched"]): r for r in res["skipped"] if plain(r)}
    multi = [r for r in res["cells"] if not plain(r)]
    Ms = sorted({k[0] for k in list(cells) + list(skipped)}, reverse=True)
    Ns = sorted({k[1] for k in list(cells) + list(skipped)})
    ds = sorted({k[2] for k in list(cells) + list(skipped)})
    out = []

    def cell(M: int, n: int, d: int, batched: bool) -> str:
        r = cells.get((M, n, d, batched))
        if r is None:
            return "skipped" if (M, n, d, batched) in skipped else "–"
        paper = r["paper_seconds"]
        x = paper / r["seconds"] if paper else 0.0
        sp = (f" ({x:.0f}×)" if x >= 10 else f" ({x:.1f}×)") if paper else ""
        return f"{r['seconds']:.2f}{sp}"

    for M in Ms:
        out += [f"**M = {M}** — end-to-end seconds (speed-up vs the paper's M = 10 Spark seconds)", ""]
        out += ["| d | N | paper (Spark, M = 10) | batched | unbatched | client s (b / u) | node s (b / u) | node CPU s (b / u) | peak node RSS MiB (b / u) |", "|---|---|---|---|---|---|---|---|---|"]
        for d in ds:
            for n in Ns:
                b, u = cells.get((M, n, d, True)), cells.get((M, n, d, False))
                paper = PAPER_SECONDS.get(d, {}).get(n)

                def two(key, fmt="{:.2f}", sub=None):
                    vals = []
                    for r in (b, u):
                        if r is None:
                            vals.append("–")
                        else:
                            v = r[key] if sub is None else r[key][sub]
                            vals.append(fmt.format(v))
                    return " / ".join(vals)

                out.append(
                    f"| {d:g} | {n:g} | {paper if paper else '–'} | {cell(M, n, d, True)} | {cell(M, n, d, False)} | {two('client_seconds')} | {two('node_seconds')}"
                    f" | {two('cpu_seconds', '{:.1f}', 'nodes')} | {two('node_peak_rss_mb', '{:.0f}')} |"
                )
        out.append("")
    if multi:
        out += ["**Other configurations** (W processes per node, seed-compressed shares; the plain W = 1 cell from the tables above)", ""]
        out += ["| M | d | N | mode | W | seed-compressed | seconds (speed-up) | client s | node s | node CPU s | plain seconds |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in sorted(multi, key=lambda r: (-r["M"], r["d"], r["N"], not r["batched"], r.get("workers", 1), r.get("seed_compressed", False))):
            one = cells.get((r["M"], r["N"], r["d"], r["batched"]))
            paper = r["paper_seconds"]
            sp = f" ({paper / r['seconds']:.1f}×)" if paper else ""
            plain_s = f"{one['seconds']:.2f}" if one else "–"
            out.append(
                f"| {r['M']} | {r['d']:g} | {r['N']:g} | {'batched' if r['batched'] else 'unbatched'} | {r.get('workers', 1)} | {'yes' if r.get('seed_compressed') else 'no'}"
                f" | {r['seconds']:.2f}{sp} | {r['client_seconds']:.2f} | {r['node_seconds']:.2f} | {r['cpu_seconds']['nodes']:.1f} | {plain_s} |"
            )
        out.append("")
    for batched in (True, False):
        xs = [r["paper_seconds"] / r["seconds"] for r in res["cells"] if r["batched"] == batched and r["paper_seconds"] and r.get("workers", 1) == 1]
        if xs:
            out.append(
                f"{'Batched' if batched else 'Unbatched'}: {len(xs)} cells measured; {sum(x >= 5 for x in xs)} at least 5× and {sum(x >= 10 for x in xs)} at least 10× "
                f"faster than the paper end to end (min {min(xs):.1f}×, median {float(np.median(xs)):.1f}×)."
            )
    out.append("")
    if res["skipped"]:
        out += ["Skipped:", ""]
        for r in res["skipped"]:
            out.append(f"- M = {r['M']}, N = {r['N']:g}, d = {r['d']:g}, {'batched' if r['batched'] else 'unbatched'}: {r['reason']}")
        out.append("")
    return "\n".join(out)


def grid_markdown(res: dict) -> str:
    """Batched W = 1 cells, one table per M: full vectors and seed-compressed side by side, the faster one in bold,
    with the repeats (median of R) and the CPU split of the faster one; then how many cells reach 10×."""
    out: list[str] = []
    key = lambda r: (r["M"], r["d"], r["N"], bool(r.get("seed_compressed")))  # noqa: E731
    cells = {key(r): r for r in res["cells"] if r["batched"] and r.get("workers", 1) == 1}
    best_x: list[float] = []

    def show(r: dict | None, bold: bool) -> str:
        if r is None:
            return "–"
        x = r["paper_seconds"] / r["seconds"]
        txt = f"{r['seconds']:.2f} ({x:.0f}×)" if x >= 10 else f"{r['seconds']:.2f} ({x:.1f}×)"
        return f"**{txt}**" if bold else txt

    for M in sorted({k[0] for k in cells}, reverse=True):
        out += [f"**M = {M}, batched, TLS on** — end-to-end seconds, median of R jobs (speed-up vs the paper's Spark seconds, M = 10)", ""]
        out += ["| d | N | paper | full vectors | seed-compressed | R | CPU s, client / nodes (faster) | peak node RSS MiB |", "|---|---|---|---|---|---|---|---|"]
        for d, n in sorted({(k[1], k[2]) for k in cells if k[0] == M}):
            full, seed = cells.get((M, d, n, False)), cells.get((M, d, n, True))
            fast = min((r for r in (full, seed) if r), key=lambda r: r["seconds"])
            best_x.append(fast["paper_seconds"] / fast["seconds"])
            cpu = fast["cpu_seconds"]
            out.append(
                f"| {d:g} | {n:g} | {fast['paper_seconds']} | {show(full, fast is full and seed is not None)} | {show(seed, fast is seed and full is not None)}"
                f" | {len(fast.get('repeats', [fast['seconds']]))} | {cpu['client_process']:.2f} / {cpu['nodes']:.2f} | {fast['node_peak_rss_mb']:.0f} |"
            )
        out.append("")
    if best_x:
        out.append(f"{len(best_x)} cells; {sum(x >= 10 for x in best_x)} at least 10× faster than the paper (min {min(best_x):.1f}×, median {float(np.median(best_x)):.1f}×).")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", default="100,1000,10000,100000", help="comma-separated N values")
    ap.add_argument("--dims", default="10,100,1000,10000", help="comma-separated d values")
    ap.add_argument("--nodes", default="3,10", help="comma-separated M values (compute-node processes)")
    ap.add_argument("--batching", default="batched,unbatched", help="batched, unbatched or both")
    ap.add_argument("--batch-bytes", type=int, default=4 << 20, help="bytes of shares per ShareBatch message (batch size = this / 8d)")
    ap.add_argument("--fresh", choices=("nodes", "dim", "cell"), default="dim", help="start a new federation per M, per (M, d) or per (M, N, d)")
    ap.add_argument("--max-seconds", type=float, default=600.0, help="skip a job whose estimated time exceeds this")
    ap.add_argument("--max-memory-gib", type=float, default=16.0, help="skip a cell whose estimated client memory exceeds this")
    ap.add_argument("--budget-seconds", type=float, default=float("inf"), help="skip jobs that would end after this much wall time")
    ap.add_argument("--key-bits", type=int, default=1024, help="curator Paillier/DGK bits (test mode; DCA does not use them)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--roster", choices=("range", "open"), default="range", help="the job's clients: a roster range (agreement by index) or open (by id)")
    ap.add_argument("--workers", default="1", help="comma-separated W values: processes per compute node (each W gets its own federations)")
    ap.add_argument("--in-flight", type=int, default=2, help="batches in flight per job (the load generator builds the next batch while the nodes take the previous)")
    ap.add_argument("--warmup", type=int, default=1, help="unmeasured jobs (N = 10, d = 1) per federation first: the nodes' TLS mesh and the operator's channel are set up")
    ap.add_argument("--repeats", type=int, default=3, help="jobs per cell (the paper: mean of 5); the cell reports the median job, every job's seconds in `repeats`")
    ap.add_argument("--seed-compressed", action="store_true", help="seed-compressed jobs: nodes k ≥ 1 get a 32-byte seed per client instead of the vector")
    ap.add_argument("--connections", type=int, default=0, help="TLS connections per node from the load generator (0 = 1 for W = 1, else 4·W so that every worker gets clients)")
    ap.add_argument("--json", dest="json_out", help="write every measured cell (and the skipped ones) to this JSON file")
    ap.add_argument("--update", action="store_true", help="merge into an existing --json file: cells measured (or skipped) now replace the same cells")
    ap.add_argument("--dry-run", action="store_true", help="print the plan with estimated times and stop")
    ap.add_argument("--markdown", metavar="JSON", help="print the tables of docs/benchmarks.md from a results file and stop")
    ap.add_argument("--grid-markdown", metavar="JSON", help="print the batched grid (full vectors beside seed-compressed, median of R) from a results file and stop")
    args = ap.parse_args()
    if args.grid_markdown:
        print(grid_markdown(json.loads(Path(args.grid_markdown).read_text())))
        return
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())))
        return
    Ns, ds, Ms, Ws = parse_ints(args.clients), parse_ints(args.dims), parse_ints(args.nodes), parse_ints(args.workers)
    modes = [m.strip() for m in args.batching.split(",") if m.strip()]
    if not set(modes) <= {"batched", "unbatched"}:
        raise SystemExit("--batching takes batched and/or unbatched")
    started = time.perf_counter()
    rows: list[dict] = []
    skipped: list[dict] = []
    fed_seconds: list[float] = []
    load0 = load_average()
    print(f"machine: {os.cpu_count()} cores, {mem_gib('MemTotal'):.1f} GiB, {platform.platform()}, Python {platform.python_version()}; load average {load0}", flush=True)

    def skip(n: int, d: int, m: int, mode: str, why: str, w: int = 1) -> None:
        skipped.append({"N": n, "d": d, "M": m, "batched": mode == "batched", "workers": w, "reason": why, "paper_seconds": PAPER_SECONDS.get(d, {}).get(n)})
        print(f"{m:>3} {n:>7} {d:>6} {mode:<10} skipped: {why}", flush=True)

    previous: dict | None = None
    if args.update and args.json_out and Path(args.json_out).exists():
        previous = json.loads(Path(args.json_out).read_text())
        if "runs" not in previous:  # a file written by a single invocation
            previous = {"runs": [{k: previous[k] for k in ("command", "load_average_at_start", "load_average_at_end", "wall_seconds", "federation_start_seconds") if k in previous}],
                        "cells": [dict(c, run=0) for c in previous["cells"]], "skipped": [dict(c, run=0) for c in previous["skipped"]]}
    run_index = len(previous["runs"]) if previous else 0

    def write_json() -> None:
        if not args.json_out:
            return
        this_run = {"command": " ".join(["python", *sys.argv]), "load_average_at_start": load0, "load_average_at_end": load_average(),
                    "wall_seconds": time.perf_counter() - started, "federation_start_seconds": fed_seconds}
        key = lambda c: (c["N"], c["d"], c["M"], c["batched"], c.get("workers", 1), c.get("seed_compressed", False))  # noqa: E731
        new_cells = [dict(r, run=run_index) for r in rows]
        new_skipped = [dict(r, run=run_index) for r in skipped]
        cells, skips, runs = new_cells, new_skipped, [this_run]
        if previous:  # --update: cells measured or skipped now replace the same cells of earlier runs
            now = {key(c) for c in new_cells + new_skipped}
            cells = [c for c in previous["cells"] if key(c) not in now] + new_cells
            skips = [c for c in previous["skipped"] if key(c) not in now] + new_skipped
            runs = previous["runs"] + [this_run]
        out = {
            "machine": {"cores": os.cpu_count(), "memory_gib": round(mem_gib("MemTotal"), 1), "platform": platform.platform(), "python": platform.python_version()},
            "runs": runs,
            "cells": sorted(cells, key=lambda c: (-c["M"], c["d"], c["N"], not c["batched"])),
            "skipped": sorted(skips, key=lambda c: (-c["M"], c["d"], c["N"], not c["batched"])),
        }
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(out, indent=2) + "\n")

    # the plan: per M (in the order given), cells by increasing d then N; one federation per group
    mem_limit = min(args.max_memory_gib, 0.75 * mem_gib("MemAvailable"))
    groups: list[tuple[int, int, list[tuple[int, int, str, float]]]] = []
    for M, W in ((m, w) for m in Ms for w in Ws):
        cells = sorted(((n, d) for d in ds for n in Ns), key=lambda c: (c[1], c[0]))
        keyf = {"nodes": lambda c: 0, "dim": lambda c: c[1], "cell": lambda c: c}[args.fresh]
        for key in dict.fromkeys(keyf(c) for c in cells):
            plan = []
            for n, d in (c for c in cells if keyf(c) == key):
                for mode in modes:
                    batched = mode == "batched"
                    mem = estimate_client_bytes(n, d, M, batch_size_for(n, d, args.batch_bytes))
                    est = estimate_seconds(n, d, M, batched)
                    if mem > mem_limit * GIB:
                        skip(n, d, M, mode, w=W, why=f"memory: the client needs ≈ {mem / GIB:.1f} GiB (Z = N·d·8 B = {8 * n * d / GIB:.1f} GiB plus one batch of shares) > {mem_limit:.1f} GiB")
                    elif est > args.max_seconds:
                        skip(n, d, M, mode, f"time: estimated {est:.0f} s > {args.max_seconds:g} s", W)
                    else:
                        plan.append((n, d, mode, est * max(1, args.repeats)))  # the cell's R jobs
            if plan:
                groups.append((M, W, plan))
    total_est = sum(e for _, _, plan in groups for *_, e in plan)
    print(f"plan: {sum(len(p) for _, _, p in groups)} jobs in {len(groups)} federations, estimated {total_est:.0f} s of jobs (pessimistic model)", flush=True)
    if args.dry_run:
        for M, W, plan in groups:
            for n, d, mode, est in plan:
                print(f"{M:>3} {n:>7} {d:>6} {mode:<10} W={W} ≈ {est:8.1f} s")
        return
    print(HEADER, flush=True)
    with tempfile.TemporaryDirectory(prefix="mpdp-dca-bench-") as tmp:
        for gi, (M, W, plan) in enumerate(groups):
            nodes = [f"node-{i + 1}" for i in range(M)]
            left = [job for job in plan if time.perf_counter() - started + job[3] <= args.budget_seconds]
            for n, d, mode, est in plan:
                if (n, d, mode, est) not in left:
                    skip(n, d, M, mode, f"wall-time budget: estimated {est:.0f} s, {time.perf_counter() - started:.0f} s of {args.budget_seconds:g} s used", W)
            if not left:
                continue
            fed = LocalFederation(Path(tmp) / f"fed-{gi}-M{M}", [], {}, test_mode=True, paillier_bits=args.key_bits, dgk_bits=args.key_bits, compute_nodes=nodes, node_workers=W)
            t = time.perf_counter()
            with fed:
                fed_seconds.append(time.perf_counter() - t)
                for _ in range(args.warmup):  # not measured: first contact between the processes (TLS handshakes)
                    run_job(fed, nodes, np.zeros((10, 1)), True, args.batch_bytes, args.roster, args.connections, args.seed_compressed, args.in_flight)
                Z: np.ndarray | None = None
                for n, d, mode, est in left:
                    elapsed = time.perf_counter() - started
                    if elapsed + est > args.budget_seconds:
                        skip(n, d, M, mode, f"wall-time budget: estimated {est:.0f} s, {elapsed:.0f} s of {args.budget_seconds:g} s used", W)
                        continue
                    if Z is None or Z.shape != (n, d):
                        Z = None
                        Z = np.random.default_rng([args.seed, n, d]).uniform(-1.0, 1.0, size=(n, d))
                    runs = [run_job(fed, nodes, Z, mode == "batched", args.batch_bytes, args.roster, args.connections, args.seed_compressed, args.in_flight)
                            for _ in range(max(1, args.repeats))]
                    r = median_job(runs)
                    r["estimated_seconds"] = est / max(1, args.repeats)
                    rows.append(r)
                    print(fmt_row(r) + (f"  (median of {len(runs)}: {', '.join(f'{x:.2f}' for x in r['repeats'])})" if len(runs) > 1 else ""), flush=True)
                    write_json()
                Z = None
    write_json()
    print(f"\n{len(rows)} jobs measured, {len(skipped)} skipped, {time.perf_counter() - started:.0f} s wall time (federation start-ups {sum(fed_seconds):.0f} s); load average {load0} at start, {load_average()} now")


if __name__ == "__main__":
    main()
