"""DCA at a million clients: M compute-node processes, a curator, mutual TLS, batched shares.

    python benchmarks/dca_million.py [--clients 1000000] [--dimension 10] [--nodes 3] [--seed-compressed]
        [--roster range|open] [--batch-bytes 4194304] [--in-flight 2] [--repeats 1] [--fresh] [--json FILE]

``--clients`` takes a comma-separated list (e.g. ``100000,200000,500000,1000000``) to show the trend in N, smallest
first, all in one federation or, with ``--fresh``, each N in a new one (so that every N's node RSS starts alike). One job per repeat, measured exactly as in ``benchmarks/dca_table1.py``
(``run_job``: the client process builds and sends ShareBatch messages over one long-lived TLS channel per node,
the nodes account each client, agree on the received set and release; the release is checked against Σ z_i).
Per job, beside ``dca_table1``'s fields (seconds, client_seconds, node_seconds, node_peak_rss_mb_each, CPU):

* ``share_message_bytes`` — the serialised ShareBatch messages the load generator sent to all nodes (ids, packed
  shares, protobuf framing), against the payload N·d·8·M (``payload_bytes``; with ``--seed-compressed`` nodes
  k ≥ 1 get a 32-byte seed instead of the 8d-byte vector);
* ``loopback_bytes`` — bytes over the loopback interface during the job (/proc/net/dev): everything on the wire,
  TLS records, HTTP/2, acks, the nodes' agreement and q_k to the curator — and any other process's loopback
  traffic in the same network namespace, so an upper bound on a shared machine;
* ``node_rss_mb_per_client`` — (peak − base RSS) / N over the nodes, which stays near 0 if a node keeps no
  per-client state beyond its received set's bitmap.

Writes one JSON file (default benchmarks/results/dca_million_d<d>.json) with the machine, the load before and after,
and every job.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dca_table1 import load_average, mem_gib, parse_ints, run_job  # noqa: E402
from mpdp.dca.client import ClientCohort, CohortBatch  # noqa: E402
from mpdp_services.dca_client import client as dca_client  # noqa: E402
from mpdp_services.dca_client.client import SubmitReport, _timed_batches  # noqa: E402
from mpdp_services.launcher.federation import LocalFederation  # noqa: E402


SENT = {"message_bytes": 0}


def _counted_batches(cohort: ClientCohort, batch_size: int, report: SubmitReport) -> Iterator[CohortBatch]:
    """The load generator's batches, unchanged, their serialised ShareBatch bytes added to ``SENT`` as they go."""
    for b in _timed_batches(cohort, batch_size, report):
        SENT["message_bytes"] += sum(m.ByteSize() for m in b.batches)
        yield b


dca_client._timed_batches = _counted_batches  # count what submit_cohort sends (no change to what it sends)


def loopback_bytes() -> int:
    """Bytes sent over the loopback interface so far (/proc/net/dev; the whole network namespace, TLS included)."""
    for line in Path("/proc/net/dev").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == "lo":
            return int(rest.split()[8])
    raise KeyError("lo")


def payload_bytes(n: int, d: int, m: int, seed_compressed: bool) -> int:
    """The shares' own bytes: N·d·8 per node, or with seed compression one full vector and M − 1 seeds per client."""
    return n * d * 8 * m if not seed_compressed else n * (d * 8 + 32 * (m - 1))


def run_n(fed: LocalFederation, nodes: list[str], n: int, d: int, args: argparse.Namespace) -> list[dict]:
    """``--repeats`` jobs of N clients (one data set Z), each measured by ``dca_table1.run_job`` plus the bytes sent."""
    m = len(nodes)
    t = time.perf_counter()
    Z = np.random.default_rng([args.seed, n, d]).uniform(-1.0, 1.0, size=(n, d))
    gen_seconds = time.perf_counter() - t
    jobs = []
    for _ in range(max(1, args.repeats)):
        lo0, SENT["message_bytes"] = loopback_bytes(), 0
        r = run_job(fed, nodes, Z, True, args.batch_bytes, args.roster, 0, args.seed_compressed, args.in_flight)
        r["loopback_bytes"] = loopback_bytes() - lo0
        r["share_message_bytes"] = SENT["message_bytes"]
        r["payload_bytes"] = payload_bytes(n, d, m, args.seed_compressed)
        r["messages_over_payload"] = r["share_message_bytes"] / r["payload_bytes"]
        r["loopback_over_payload"] = r["loopback_bytes"] / r["payload_bytes"]
        r["node_rss_mb_per_client"] = max(p - r["node_base_rss_mb"] for p in r["node_peak_rss_mb_each"]) / n
        r["data_generation_seconds"] = gen_seconds
        r["fresh_federation"] = bool(args.fresh)
        r["client_process_peak_rss_mb"] = int(Path("/proc/self/status").read_text().split("VmHWM:")[1].split()[0]) / 1024.0
        jobs.append(r)
        print(f"N={n:>8} d={d:>5} M={m}: {r['seconds']:7.2f} s (client {r['client_seconds']:.2f}, node {r['node_seconds']:.2f});"
              f" node peak RSS {', '.join(f'{x:.0f}' for x in r['node_peak_rss_mb_each'])} MiB (base {r['node_base_rss_mb']:.0f});"
              f" ShareBatch bytes {r['share_message_bytes'] / 1e6:.1f} MB = {r['messages_over_payload']:.3f}× payload,"
              f" loopback {r['loopback_bytes'] / 1e6:.1f} MB = {r['loopback_over_payload']:.3f}×; load {r['load_before'][0]:.2f}", flush=True)
    return jobs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", default="1000000", help="N, or a comma-separated list of N values (one federation, smallest first)")
    ap.add_argument("--dimension", type=int, default=10, help="d")
    ap.add_argument("--nodes", type=int, default=3, help="M compute-node processes")
    ap.add_argument("--roster", choices=("range", "open"), default="range", help="a roster range (agreement by index) or open (by id)")
    ap.add_argument("--seed-compressed", action="store_true", help="nodes k ≥ 1 get a 32-byte seed per client instead of the vector")
    ap.add_argument("--batch-bytes", type=int, default=4 << 20, help="bytes of shares per ShareBatch message")
    ap.add_argument("--in-flight", type=int, default=2, help="batches in flight per node")
    ap.add_argument("--repeats", type=int, default=1, help="jobs per N")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fresh", action="store_true", help="a new federation per N (each N's node RSS from the same start)")
    ap.add_argument("--json", dest="json_out", help="results file (default benchmarks/results/dca_million_d<d>.json)")
    args = ap.parse_args()
    ns, d, m = sorted(parse_ints(args.clients)), args.dimension, args.nodes
    out_path = Path(args.json_out or Path(__file__).resolve().parent / "results" / f"dca_million_d{d}.json")
    nodes = [f"node-{i + 1}" for i in range(m)]
    started = time.perf_counter()
    load0 = load_average()
    print(f"machine: {os.cpu_count()} cores, {mem_gib('MemTotal'):.1f} GiB, load average {load0}; M = {m}, d = {d}, N = {ns}", flush=True)
    jobs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="mpdp-dca-million-") as tmp:
        for group in ([[n] for n in ns] if args.fresh else [ns]):
            fed = LocalFederation(Path(tmp) / f"fed-{group[0]}", [], {}, test_mode=True, paillier_bits=1024, dgk_bits=1024, compute_nodes=nodes)
            with fed:
                run_job(fed, nodes, np.zeros((10, 1)), True, args.batch_bytes, args.roster, 0, args.seed_compressed, args.in_flight)  # TLS mesh up
                for n in group:
                    jobs += run_n(fed, nodes, n, d, args)
                    out_path.parent.mkdir(parents=True, exist_ok=True)
                    out_path.write_text(json.dumps({
                        "machine": {"cores": os.cpu_count(), "memory_gib": round(mem_gib("MemTotal"), 1), "platform": platform.platform(), "python": platform.python_version()},
                        "command": " ".join(["python", *sys.argv]), "load_average_at_start": load0, "load_average_now": load_average(),
                        "wall_seconds": time.perf_counter() - started, "jobs": jobs}, indent=2) + "\n")
    print(f"{len(jobs)} jobs, {time.perf_counter() - started:.0f} s wall time; wrote {out_path}")


if __name__ == "__main__":
    main()
