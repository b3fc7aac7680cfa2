"""Many Pathak jobs at once: do they all end, published or refused before anyone spends?

    python benchmarks/concurrent_jobs.py [--jobs 130] [--operators 1] [--key-bits 512] [--deadline 120] [--timeout 900]
                                         [--json FILE] [--curator KEY=VALUE ...]

Starts a fresh :class:`~mpdp_services.launcher.federation.LocalFederation` (curator and 3 parties, test mode, small
keys, small synthetic data: what ``mpdp federation up --test-mode --key-bits 512 --parties 3`` runs), then, with raw
gRPC clients holding the operator's certificate, submits ``--jobs`` Pathak jobs (``corrected`` noise) all at once and
follows every job until it is terminal or ``--timeout`` passes. ``--operators N`` spreads the submissions over N
operator certificates (the federation's and N-1 more from its CA), job i from operator i mod N. ``--curator max_live_jobs_per_operator=8`` (repeatable)
sets curator configuration fields.

Each job ends in one of four rows:

* ``published``: the curator published its model;
* ``refused_before_spend``: the curator refused the submission, or the job failed and no party holds a charge for it
  (none spent, or every charge was voided);
* ``failed_after_spend``: the job failed and some party keeps a charge for it (a wasted charge);
* ``hung``: not terminal when ``--timeout`` passed.

Printed: one table (the rows, the wall time from the first submission to the last job's end, the seconds jobs waited
in the curator's admission queue (p50, p95, max; the summary's ``stage_seconds["QUEUED"]``), the curator's resident
memory before, at its peak (sampled while polling) and after); the JSON holds the same plus the refusals' Problem names and the configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mpdp.ledger import VOIDED  # noqa: E402
from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import serialization  # noqa: E402

from mpdp.messages import common_pb2, operations_pb2 as ops, operations_pb2_grpc as ops_grpc, pathak2010_pb2 as pk  # noqa: E402
from mpdp_services.common import errors, pki  # noqa: E402
from mpdp_services.common.rpc import TlsFiles  # noqa: E402
from mpdp_services.launcher.federation import LocalFederation  # noqa: E402

PARTIES = ["party-1", "party-2", "party-3"]
D = 4
POLL_CONCURRENCY = 64  # status reads in flight at once (each is one short WatchJob stream)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def start(root: Path, key_bits: int, curator: dict) -> LocalFederation:
    datasets: dict[str, dict[str, dict]] = {}
    for j, p in enumerate(PARTIES):
        g = np.random.default_rng(j)
        n = 40 + 7 * j
        X = np.clip(g.normal(size=(n, D)) / (1.5 * D), -0.9 / np.sqrt(D), 0.9 / np.sqrt(D))
        y = np.where(X @ np.linspace(1.0, -0.5, D) > 0, 1.0, -1.0)
        f = root / "data" / f"{p}.csv"
        f.parent.mkdir(parents=True, exist_ok=True)
        np.savetxt(f, np.column_stack([X, y]), delimiter=",", fmt="%.17g")
        datasets[p] = {"synthetic": {"path": str(f), "format": "csv"}}
    fed = LocalFederation(root / "fed", PARTIES, datasets, test_mode=True, paillier_bits=key_bits, dgk_bits=key_bits, budget_epsilon=1e6, budget_delta=0.5, curator_options=curator)
    fed.start()
    return fed


def spec(deadline: float) -> pk.PathakJobSpec:
    s = pk.PathakJobSpec(dataset="synthetic", epsilon=0.5, mode=common_pb2.CORRECTED, parties=PARTIES, deadline_seconds=deadline)
    setattr(s, "lambda", 0.05)
    return s


def operator_tls(fed: LocalFederation, k: int) -> TlsFiles:
    """The federation's operator certificate (k = 0), or operator-k's, issued by the federation's CA."""
    d = fed.workdir / "operator" if k == 0 else fed.workdir / "bench-operators" / f"operator-{k}"
    if not (d / "site.crt").exists():
        ca = fed.workdir / "ca"
        ca_key = serialization.load_pem_private_key((ca / "ca.key").read_bytes(), None)
        ca_cert = x509.load_pem_x509_certificate((ca / "ca.crt").read_bytes())
        key, cert = pki.issue(ca_key, ca_cert, "operator", f"operator-{k}", ["127.0.0.1"])
        pki.write_site(d, key, cert, ca_cert)
    return TlsFiles(d / "site.crt", d / "site.key", d / "ca.crt")


def percentile(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else 0.0


async def run(fed: LocalFederation, jobs: int, deadline: float, timeout: float, operators: int = 1) -> dict:
    address = f"127.0.0.1:{fed.procs['curator'].port}"
    opts = [("grpc.ssl_target_name_override", "curator"), ("grpc.use_local_subchannel_pool", 1)]
    # one connection per 100 submissions (and per operator): the benchmark itself must not queue on one connection's stream limit
    lanes = max(operators, (jobs + 99) // 100)
    tls = [operator_tls(fed, k % operators) for k in range(lanes)]
    channels = [grpc.aio.secure_channel(address, tls[i].channel_credentials(), options=opts + [("mpdp.bench.lane", i)]) for i in range(lanes)]
    hosts = [ops_grpc.JobOperationsStub(ch) for ch in channels]
    curator_pid = fed.procs["curator"].popen.pid
    rss_peak = rss_kib(curator_pid)
    refused: collections.Counter[str] = collections.Counter()
    t0 = time.monotonic()

    async def submit(i: int) -> str | None:
        try:
            return (await hosts[lane(i)].SubmitJob(ops.JobSubmission(pathak2010=spec(deadline)), timeout=120)).job_id
        except grpc.aio.AioRpcError as e:
            refused[(e.details() or e.code().name).split(":")[0]] += 1
            return None

    def lane(i: int) -> int:  # job i is operator (i mod operators)'s, on one of that operator's connections
        k = i % operators
        own = [x for x in range(lanes) if x % operators == k]
        return own[(i // operators) % len(own)]

    got = await asyncio.gather(*(submit(i) for i in range(jobs)))
    lane_of = {j: lane(i) for i, j in enumerate(got) if j is not None}
    ids = list(lane_of)
    submitted = time.monotonic() - t0
    states: dict[str, str] = {}
    gate = asyncio.Semaphore(POLL_CONCURRENCY)

    async def status(i: int, job_id: str) -> ops.JobSummary | None:
        async with gate:
            call = hosts[lane_of[job_id]].WatchJob(common_pb2.JobRef(job_id=job_id), timeout=30)
            try:
                async for st in call:
                    return st
            except grpc.aio.AioRpcError:
                return None
            finally:
                call.cancel()
        return None

    pending = dict(enumerate(ids))
    end = t0 + timeout
    while pending and time.monotonic() < end:
        got = await asyncio.gather(*(status(i, j) for i, j in pending.items()))
        for (i, j), st in zip(list(pending.items()), got):
            if st is not None and st.terminal:
                states[j] = st.state if st.state == "PUBLISHED" else f"FAILED:{errors.problem_name(st.problem)}"
                del pending[i]
        rss_peak = max(rss_peak, rss_kib(curator_pid))
        if pending:
            await asyncio.sleep(0.5)  # a benchmark polls; tests wait on the watch stream instead
    wall = time.monotonic() - t0

    async def waited(job_id: str) -> float:  # seconds in the admission queue, from the job host's summary
        async with gate:
            summary = await hosts[lane_of[job_id]].GetJob(common_pb2.JobRef(job_id=job_id), timeout=30)
        return float(summary.stage_seconds["QUEUED"]) if "QUEUED" in summary.stage_seconds else 0.0

    queue_seconds = list(await asyncio.gather(*(waited(j) for j in ids)))
    await asyncio.gather(*(ch.close() for ch in channels))
    return {"ids": ids, "states": states, "hung": sorted(pending.values()), "refused": dict(refused), "submit_seconds": submitted, "wall_seconds": wall,
            "queue_seconds": queue_seconds, "rss_peak": rss_peak}


def charged(fed: LocalFederation) -> dict[str, int]:
    """Job id → how many parties keep a charge for it (entries not voided)."""
    out: collections.Counter[str] = collections.Counter()
    for p in PARTIES:
        path = fed.workdir / p / "state" / "ledger.json"
        entries = json.loads(path.read_text())["entries"] if path.exists() else []
        for e in entries:
            if e.get("status") != VOIDED:
                out[str(e.get("job_id"))] += 1
    return dict(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=130)
    ap.add_argument("--operators", type=int, default=1, help="operator certificates the jobs are spread over")
    ap.add_argument("--key-bits", type=int, default=512)
    ap.add_argument("--deadline", type=float, default=120.0, help="each job's spec deadline (s)")
    ap.add_argument("--timeout", type=float, default=900.0, help="give up following the jobs after this long (s)")
    ap.add_argument("--curator", action="append", default=[], metavar="KEY=VALUE", help="a curator configuration field (YAML value)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--keep", action="store_true", help="keep the federation's folder (printed)")
    a = ap.parse_args(argv)
    curator = {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in a.curator)}
    tmp = tempfile.TemporaryDirectory(prefix="mpdp-concurrent-")
    root = Path(tmp.name)
    fed = start(root, a.key_bits, curator)
    try:
        pid = fed.procs["curator"].popen.pid
        rss_before = rss_kib(pid)
        load_before = os.getloadavg()  # the machine is shared: its load is part of the figure
        r = asyncio.run(run(fed, a.jobs, a.deadline, a.timeout, a.operators))
        rss_after = rss_kib(pid)
        load_after = os.getloadavg()
        charges = charged(fed)
        published = sum(1 for s in r["states"].values() if s == "PUBLISHED")
        failed = {j: s for j, s in r["states"].items() if s != "PUBLISHED"}
        wasted = {j: s for j, s in failed.items() if charges.get(j, 0) > 0}
        before_spend = sum(r["refused"].values()) + len(failed) - len(wasted)
        failures = collections.Counter(s for s in failed.values())
        rows = {"published": published, "refused_before_spend": before_spend, "failed_after_spend": len(wasted), "hung": len(r["hung"])}
    finally:
        fed.stop()
        if a.keep:
            print(f"federation folder kept: {root}")
        else:
            tmp.cleanup()
    q = r["queue_seconds"]
    queue = {"queued_jobs": sum(1 for x in q if x > 0), "p50": round(percentile(q, 50), 2), "p95": round(percentile(q, 95), 2), "max": round(max(q, default=0.0), 2)}
    print(f"{a.jobs} Pathak jobs at once from {a.operators} operators, {a.key_bits}-bit keys, 3 parties, curator {curator or 'defaults'}")
    print(f"{'outcome':<24}{'jobs':>8}")
    for k, v in rows.items():
        print(f"{k:<24}{v:>8}")
    print(f"{'wall time (s)':<24}{r['wall_seconds']:>8.1f}")
    print(f"{'queue wait (s)':<24}p50 {queue['p50']:.1f}, p95 {queue['p95']:.1f}, max {queue['max']:.1f} ({queue['queued_jobs']} jobs waited)")
    print(f"{'curator RSS (MiB)':<24}{rss_before / 1024:>8.1f} → peak {r['rss_peak'] / 1024:.1f} → {rss_after / 1024:.1f}")
    print(f"submission refusals: {r['refused'] or 'none'}; failures: {dict(failures) or 'none'}")
    print(f"load average (1, 5, 15 min) before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({
            "jobs": a.jobs, "operators": a.operators, "queue_wait_seconds": queue, "curator_rss_kib_peak": r["rss_peak"],
            "key_bits": a.key_bits, "parties": len(PARTIES), "deadline_seconds": a.deadline, "curator_options": curator,
            **rows, "wall_seconds": round(r["wall_seconds"], 2), "submit_seconds": round(r["submit_seconds"], 2),
            "curator_rss_kib_before": rss_before, "curator_rss_kib_after": rss_after,
            "submission_refusals": r["refused"], "failures": dict(failures), "wasted_charges": {j: charges[j] for j in wasted},
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "loadavg_before": [round(x, 2) for x in load_before],
                        "loadavg_after": [round(x, 2) for x in load_after]},
        }, indent=2))
    return 0 if rows["hung"] == 0 and rows["failed_after_spend"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
