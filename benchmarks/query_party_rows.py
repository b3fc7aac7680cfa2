"""A party's DP-query vector over a large source: seconds and peak RSS as the rows grow (bounded memory).

    python benchmarks/query_party_rows.py --rows 1000000 --rows 10000000 --dir /tmp --json benchmarks/results/query_party_rows.json

A synthetic table with UCI Adult's columns (``examples/adult/schema.yaml``: public synthetic values drawn with a numpy
RNG from the schema's bounds and vocabularies, never real records) is written as Parquet parts of PART_ROWS rows, part
by part, into a temporary folder (removed afterwards). Then, for each query below, a fresh process computes the party's
vector as the party service does (:func:`mpdp.query.evaluate.dataset_vector`: the source's batches, only the query's
columns) and reports its seconds and peak RSS (VmHWM; before the computation and after). No network: this is the party's own computation; what
leaves it is one vector of the query's dimension.
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

from mpdp.query.plan import QUANTILE_BINS

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "examples" / "adult" / "schema.yaml"
PART_ROWS = 500_000
QUERIES = (
    "SELECT sex, income, COUNT(*) AS n, AVG(age) AS mean_age FROM adult GROUP BY sex, income",
    'SELECT race, MEDIAN("hours-per-week") AS median_hours, QUANTILE(age, 0.9) AS p90_age FROM adult WHERE age BETWEEN 25 AND 64 GROUP BY race',
    'SELECT COUNT(*) AS n, SUM("capital-gain") AS gains FROM adult GROUP BY BIN(age, 4)',
)


def make_table(folder: Path, rows: int, seed: int = 1) -> None:
    """Parquet parts with every column the schema needs, written part by part (bounded memory)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mpdp.schema import Binary, Categorical, Numeric, Schema

    schema = Schema.load(SCHEMA)
    folder.mkdir(parents=True, exist_ok=True)
    g = np.random.default_rng(seed)
    for i, start in enumerate(range(0, rows, PART_ROWS)):
        n = min(PART_ROWS, rows - start)
        cols: dict[str, object] = {}
        for f in schema.features:
            if isinstance(f, Numeric):
                cols[f.name] = g.integers(int(f.bounds[0]), int(f.bounds[1]) + 1, size=n).astype(np.float64)
            elif isinstance(f, Categorical):
                cols[f.name] = pa.array(np.asarray(f.vocabulary, dtype=object)[g.integers(0, len(f.vocabulary), size=n)], type=pa.string())
            elif isinstance(f, Binary):
                cols[f.name] = pa.array(np.where(g.random(n) < 0.5, f.positive, f.negative).astype(object), type=pa.string())
        lab = schema.label
        cols[lab.column] = pa.array(np.where(g.random(n) < 0.25, lab.positive[0], lab.negative[0]).astype(object), type=pa.string())
        pq.write_table(pa.table(cols), folder / f"part-{i:05d}.parquet", row_group_size=65_536)


def peak_rss_mib() -> float:
    """This process's peak RSS (VmHWM): its own address space's high-water mark. Not ru_maxrss, which Linux keeps
    across execve, so a measuring child would report its parent's peak (the table writer's) when that is higher."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(folder: Path, sql: str, batch_rows: int) -> dict:
    """In a fresh process: the party's vector of ``sql`` over the table; seconds and peak RSS."""
    from mpdp.query.evaluate import dataset_vector
    from mpdp.query.plan import compile_query
    from mpdp.schema import Schema

    rss0 = peak_rss_mib()
    plan = compile_query(sql, Schema.load(SCHEMA), "adult")
    ds = SimpleNamespace(path=folder, format="parquet", n_features=None, label_column=-1, schema_file=SCHEMA, batch_rows=batch_rows)
    t0 = time.perf_counter()
    z = dataset_vector(ds, "adult", plan, 10**9)
    seconds = time.perf_counter() - t0
    assert np.all(np.isfinite(z))
    return {"sql": sql, "dimension": plan.dimension, "seconds": seconds, "peak_rss_mib": peak_rss_mib(),
            "rss_before_mib": rss0, "counted_rows": counted(plan, z)}


def counted(plan, z: np.ndarray) -> float:
    """The rows the vector counts: its count part, or its first histogram's bins (every counted row falls in one)."""
    p = plan.parts[0]
    width = plan.cells if p.kind == "count" else plan.cells * QUANTILE_BINS if p.kind == "hist" else 0
    return float(z[p.offset:p.offset + width].sum()) if width else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, action="append", help="table sizes (repeatable; default 10^6)")
    ap.add_argument("--batch-rows", type=int, default=65_536)
    ap.add_argument("--dir", type=Path, default=None, help="where the Parquet tables go (default: a temporary folder, removed)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--measure", nargs=2, metavar=("FOLDER", "SQL"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(Path(args.measure[0]), args.measure[1], args.batch_rows)))
        return
    results = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for n in args.rows or [1_000_000]:
            folder = Path(tmp) / f"t{n}"
            t0 = time.perf_counter()
            make_table(folder, n)
            size = sum(f.stat().st_size for f in folder.iterdir())
            print(f"{n:>11,} rows: {size / 2**20:,.0f} MiB of Parquet ({time.perf_counter() - t0:.0f} s to write)", flush=True)
            for sql in QUERIES:
                out = subprocess.run([sys.executable, __file__, "--batch-rows", str(args.batch_rows), "--measure", str(folder), sql],
                                     check=True, capture_output=True, text=True)
                r = {"rows": n, "parquet_mib": size / 2**20, **json.loads(out.stdout.strip().splitlines()[-1])}
                results.append(r)
                print(f"  {r['seconds']:7.1f} s  peak RSS {r['peak_rss_mib']:6.0f} MiB  {r['counted_rows']:12,.0f} rows counted  {sql}", flush=True)
    doc = {"batch_rows": args.batch_rows, "load_before": load_before, "load_after": os.getloadavg(), "results": results}
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
