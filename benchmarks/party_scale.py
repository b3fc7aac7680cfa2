"""A party's local computations at scale: a synthetic Parquet table read in batches under a schema, one DP-GD round's
contribution (round 1: the clipped gradient sum) and Pathak's local training (exact Newton, gradient and Hessian
accumulated over batches), in one process and on a Dask local cluster of 2 worker processes.

    python benchmarks/party_scale.py                       # 10^6 rows × 20 features (the default on a shared machine)
    python benchmarks/party_scale.py --rows 10000000       # 10^7 × 20 (about 1.6 GB of Parquet on local disk)
    python benchmarks/party_scale.py --rows 1000000 --rows 10000000 --json benchmarks/results/party_scale.json

Each measurement runs in a fresh party process (this script re-run with --measure) whose peak RSS (ru_maxrss) is
reported; with Dask, the workers' peak RSS too. No network: this is the party's own computation (what leaves it is
one vector). Prints a table and writes JSON with the machine's load average.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

PART_ROWS = 250_000  # rows per Parquet part: the Dask tasks' unit
FEATURES = 20


def schema_text(d: int) -> str:
    feats = "".join(f"  - {{name: x{i}, type: numeric, bounds: [-4, 4]}}\n" for i in range(d))
    return f"mpdp_schema: 1\nfeatures:\n{feats}label: {{column: t, positive: ['1'], negative: ['0']}}\nscale: symmetric\n"


def make_table(folder: Path, rows: int, d: int, seed: int = 1) -> None:
    """Parquet parts of PART_ROWS rows (public synthetic data: a numpy RNG), written part by part (bounded memory)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    g = np.random.default_rng(seed)
    w = g.normal(size=d)
    for i, start in enumerate(range(0, rows, PART_ROWS)):
        n = min(PART_ROWS, rows - start)
        X = g.normal(size=(n, d))
        t = (X @ w + g.normal(size=n) > 0).astype(np.int8)
        pq.write_table(pa.table({**{f"x{j}": X[:, j] for j in range(d)}, "t": t}), folder / f"part-{i:05d}.parquet", row_group_size=65_536)


def measure(folder: Path, schema: Path, what: str, dask: str, batch_rows: int) -> dict:
    """In a fresh process: one computation over the table; seconds, rows/s, peak RSS (this process, and Dask's workers)."""
    from mpdp.data import engine
    from mpdp.dpgd.model import Task
    from mpdp.dpgd.plan import DpgdPlan

    ds = SimpleNamespace(path=folder, format="parquet", n_features=None, label_column=-1, schema_file=schema, batch_rows=batch_rows,
                         dask=dask, dask_workers=2)
    d = FEATURES
    if dask:
        engine.dask_client(dask, 2)  # the cluster's start-up is not the computation's time
    passes = {"n": 0}
    real = engine.reduce_rows

    def counted(*a, **k):  # one pass over the rows per call
        passes["n"] += 1
        return real(*a, **k)

    engine.reduce_rows = counted  # type: ignore[assignment]
    t0 = time.perf_counter()
    if what == "dpgd":
        plan = DpgdPlan(Task("binary"), d, 1.0, 1e-6, lam=1e-3, rounds=1, total_records=None, adjacency="add-remove")
        v = engine.dpgd_contribution(ds, "bench", plan, 1, np.full((d, 1), 0.05), 10**9)
        assert np.all(np.isfinite(v))
    else:
        w, _ = engine.local_logreg(ds, "bench", 1e-3, "half", clip=1.0, tol=1e-10, max_iter=100)
        assert np.all(np.isfinite(w))
    seconds = time.perf_counter() - t0
    out = {"what": what, "engine": dask or "one process", "seconds": seconds, "passes": passes["n"],
           "party_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if dask:
        client = engine.dask_client(dask, 2)
        out["worker_peak_rss_mib"] = sorted(v / 1024 for v in client.run(_peak_rss).values())
        engine.close_clients()
    return out


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, action="append", help="table sizes (repeatable; default 10^6)")
    ap.add_argument("--batch-rows", type=int, default=65_536)
    ap.add_argument("--dir", type=Path, default=None, help="where the Parquet tables go (default: a temporary folder, removed)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--measure", nargs=4, metavar=("FOLDER", "SCHEMA", "WHAT", "DASK"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        folder, schema, what, dask = args.measure
        print(json.dumps(measure(Path(folder), Path(schema), what, "" if dask == "-" else dask, args.batch_rows)))
        return
    sizes = args.rows or [1_000_000]
    results = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        schema = root / "schema.yaml"
        schema.write_text(schema_text(FEATURES))
        for n in sizes:
            folder = root / f"t{n}"
            t0 = time.perf_counter()
            make_table(folder, n, FEATURES)
            size = sum(f.stat().st_size for f in folder.iterdir())
            print(f"{n:>11,} rows × {FEATURES}: {size / 2**20:,.0f} MiB of Parquet in {len(list(folder.iterdir()))} parts ({time.perf_counter() - t0:.0f} s to write)", flush=True)
            for what in ("dpgd", "pathak"):
                for dask in ("-", "local"):
                    done = subprocess.run([sys.executable, __file__, "--batch-rows", str(args.batch_rows), "--measure", str(folder), str(schema), what, dask],
                                          capture_output=True, text=True)
                    if done.returncode != 0:
                        raise SystemExit(f"measurement failed: {done.stderr[-3000:]}")
                    r = json.loads(done.stdout.strip().splitlines()[-1])
                    r.update(table_rows=n, parquet_mib=size / 2**20, batch_rows=args.batch_rows)
                    r["rows_per_second"] = n / r["seconds"]  # table rows per second of the whole computation
                    r["row_passes_per_second"] = n * r["passes"] / r["seconds"]  # rows read and computed on per second
                    results.append(r)
                    workers = f", workers {'/'.join(f'{x:.0f}' for x in r['worker_peak_rss_mib'])} MiB" if "worker_peak_rss_mib" in r else ""
                    print(f"  {what:7} {r['engine']:12} {r['seconds']:8.1f} s  {r['passes']:3d} passes  {r['rows_per_second']:>11,.0f} rows/s "
                          f"({r['row_passes_per_second']:>11,.0f} rows·passes/s)  party peak RSS {r['party_peak_rss_mib']:6.0f} MiB{workers}",
                          flush=True)
    doc = {"command": " ".join(["python benchmarks/party_scale.py", *sys.argv[1:]]),
           "load_average_before": load_before, "load_average_after": os.getloadavg(), "cpus": os.cpu_count(), "features": FEATURES,
           "part_rows": PART_ROWS, "results": results}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"load average before {load_before}, after {os.getloadavg()} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
