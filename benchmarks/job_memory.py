"""Does the curator's memory stay bounded over thousands of jobs?

    python benchmarks/job_memory.py [--jobs 5000] [--wave 32] [--warmup 200] [--key-bits 512] [--json FILE]

Starts the same fresh local federation as ``benchmarks/concurrent_jobs.py`` (curator and 3 parties, test mode, small
keys, small synthetic data), then runs ``--jobs`` Pathak jobs in waves of ``--wave`` (within the curator's
admission bounds: submit a wave, follow every job of it to its end, then the next) and samples the curator's
resident memory after every wave. Printed: the RSS after warm-up (the first ``--warmup`` jobs), its peak and its
last value, every job's outcome and the wall time; the JSON holds the samples too. A curator whose memory grows
with the number of jobs it has run (records, caches, per-job tasks) shows as a last value far above the warm-up one.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from concurrent_jobs import rss_kib, spec, start  # noqa: E402
from mpdp.messages import common_pb2, operations_pb2 as ops, operations_pb2_grpc as ops_grpc  # noqa: E402
from mpdp_services.common import errors  # noqa: E402
from mpdp_services.common.rpc import TlsFiles  # noqa: E402


async def waves(fed, jobs: int, wave: int, warmup: int, deadline: float, pid: int, progress) -> dict:
    d = fed.workdir / "operator"
    tls = TlsFiles(d / "site.crt", d / "site.key", d / "ca.crt")
    address = f"127.0.0.1:{fed.procs['curator'].port}"
    ch = grpc.aio.secure_channel(address, tls.channel_credentials(), options=[("grpc.ssl_target_name_override", "curator")])
    stub = ops_grpc.JobOperationsStub(ch)
    outcomes: collections.Counter[str] = collections.Counter()
    samples: list[tuple[int, int]] = []  # (jobs ended, RSS KiB)

    async def one() -> str:
        try:
            job_id = (await stub.SubmitJob(ops.JobSubmission(pathak2010=spec(deadline)), timeout=120)).job_id
        except grpc.aio.AioRpcError as e:
            return "refused:" + (e.details() or e.code().name).split(":")[0]
        last = None
        async for st in stub.WatchJob(common_pb2.JobRef(job_id=job_id), timeout=deadline + 60):
            last = st
            if st.terminal:
                break
        if last is None or not last.terminal:
            return "hung"
        return "PUBLISHED" if last.state == "PUBLISHED" else "FAILED:" + errors.problem_name(last.problem)

    t0 = time.monotonic()
    done = 0
    while done < jobs:
        n = min(wave, jobs - done)
        outcomes.update(await asyncio.gather(*(one() for _ in range(n))))
        done += n
        samples.append((done, rss_kib(pid)))
        progress(done, samples[-1][1])
    await ch.close()
    after_warmup = next((r for n, r in samples if n >= warmup), samples[0][1])
    return {"outcomes": dict(outcomes), "samples": samples, "rss_after_warmup_kib": after_warmup,
            "rss_peak_kib": max(r for _, r in samples), "rss_last_kib": samples[-1][1], "wall_seconds": time.monotonic() - t0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--wave", type=int, default=32, help="jobs in flight at once (at most the per-operator admission bound)")
    ap.add_argument("--warmup", type=int, default=200, help="jobs after which the baseline RSS is read")
    ap.add_argument("--key-bits", type=int, default=512)
    ap.add_argument("--deadline", type=float, default=120.0)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    tmp = tempfile.TemporaryDirectory(prefix="mpdp-job-memory-")
    fed = start(Path(tmp.name), a.key_bits, {})
    try:
        pid = fed.procs["curator"].popen.pid
        rss_start = rss_kib(pid)

        def progress(done: int, rss: int) -> None:
            if done % 500 < a.wave or done == a.jobs:
                print(f"  {done:>6} jobs ended, curator RSS {rss / 1024:.1f} MiB", file=sys.stderr, flush=True)

        r = asyncio.run(waves(fed, a.jobs, a.wave, a.warmup, a.deadline, pid, progress))
    finally:
        fed.stop()
        tmp.cleanup()
    mib = lambda k: k / 1024  # noqa: E731
    print(f"{a.jobs} Pathak jobs in waves of {a.wave}, {a.key_bits}-bit keys, 3 parties")
    print(f"{'outcomes':<28}{r['outcomes']}")
    print(f"{'wall time (s)':<28}{r['wall_seconds']:.1f}")
    print(f"{'curator RSS at start':<28}{mib(rss_start):.1f} MiB")
    print(f"{'after warm-up':<28}{mib(r['rss_after_warmup_kib']):.1f} MiB ({a.warmup} jobs)")
    print(f"{'peak':<28}{mib(r['rss_peak_kib']):.1f} MiB")
    print(f"{'last':<28}{mib(r['rss_last_kib']):.1f} MiB (+{mib(r['rss_last_kib'] - r['rss_after_warmup_kib']):.1f} over warm-up)")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"jobs": a.jobs, "wave": a.wave, "warmup": a.warmup, "key_bits": a.key_bits, "rss_start_kib": rss_start, **r,
                                      "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()}}, indent=1))
    return 0 if set(r["outcomes"]) <= {"PUBLISHED"} else 1


if __name__ == "__main__":
    raise SystemExit(main())
