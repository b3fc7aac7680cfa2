"""UCI Adult held three ways by three parties under one schema: party-1 in a PostgreSQL table, party-2 in a Parquet
file, party-3 in a CSV file. A Pathak job and a DP-GD job over those sources release the same models as the same
rows held as three CSV files; both models are scored on adult.test. Prints one JSON object.

    python3 examples/mixed-sources/run.py                   # any python: it re-runs itself with the repository's .venv
    MPDP_DATA=/path/to/data python3 examples/mixed-sources/run.py

The PostgreSQL server is a throwaway one (initdb in a temporary folder; Debian's postgresql package, which
deploy/postgres-setup.sh installs as root when missing). Party-1's config names only the environment variable holding
the connection string. The federation runs in TEST MODE (small keys, seeded noise) so the two runs can be compared
bit for bit: a demonstration, not a deployment. Everything lives in a temporary folder removed at the end.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VENV_PYTHON = REPO / ".venv" / "bin" / "python"
if Path(sys.prefix).resolve() != (REPO / ".venv").resolve():  # find the project's environment by itself
    if not VENV_PYTHON.exists():
        sys.exit(f"run.py: {VENV_PYTHON} is missing; run `make setup` in {REPO} first")
    os.execv(VENV_PYTHON, [str(VENV_PYTHON), __file__, *sys.argv[1:]])

import gzip  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from mpdp.data.dataset import load_dataset  # noqa: E402
from mpdp.dpgd.model import Task, party_rows  # noqa: E402
from mpdp.dpgd.plan import DpgdPlan  # noqa: E402
from mpdp.dpgd.role import run_inmemory  # noqa: E402
from mpdp.learn import logreg  # noqa: E402
from mpdp.pathak2010 import tester  # noqa: E402
from mpdp.schema import Numeric, Schema  # noqa: E402
from mpdp_services.common.config import DatasetConfig  # noqa: E402
from mpdp_services.common.endpoints import Endpoints  # noqa: E402
from mpdp_services.launcher.federation import LocalFederation  # noqa: E402
from mpdp_services.launcher.postgres import LocalPostgres  # noqa: E402
from mpdp_services.operator.dpgd import run_dpgd  # noqa: E402
from mpdp_services.operator.pathak2010 import OperatorClient, make_spec  # noqa: E402

PARTIES = ["party-1", "party-2", "party-3"]
NODES = ["node-1", "node-2", "node-3"]
SCHEMA_FILE = REPO / "examples" / "adult" / "schema.yaml"
DSN_ENV = "MIXED_SOURCES_DSN"
EPSILON, LAMBDA = float(os.environ.get("EPSILON", "1")), float(os.environ.get("LAMBDA", "1.5e-3"))
KEY_BITS = int(os.environ.get("KEY_BITS", "1024"))


def _postgres_bin() -> Path:
    done = subprocess.run(["bash", str(REPO / "deploy" / "postgres-setup.sh")], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"run.py: no PostgreSQL server binaries: {done.stderr.strip()}")
    return Path(done.stdout.strip().splitlines()[-1])


def _split(data: Path) -> list[list[list[str]]]:
    """adult.data's rows dealt three ways, row by row, as stripped cells."""
    parts: list[list[list[str]]] = [[], [], []]
    with gzip.open(data, "rt") as fh:
        for i, line in enumerate(ln for ln in fh if ln.strip()):
            parts[i % 3].append([c.strip() for c in line.rstrip("\n").split(",")])
    return parts


def _typed(schema: Schema, rows: list[list[str]]) -> dict[str, list]:
    """Columns as a database or Parquet file holds them: numeric features as numbers, everything else as text."""
    numeric = {f.name for f in schema.features if isinstance(f, Numeric)}
    cols = schema.columns or []
    return {c: [float(r[j]) if c in numeric else r[j] for r in rows] for j, c in enumerate(cols)}


def main() -> None:
    data = Path(os.environ.get("MPDP_DATA", REPO.parent / "shared" / "data")) / "adult"
    for f in ("adult.data.gz", "adult.test.gz"):
        if not (data / f).exists():
            sys.exit(f"run.py: {data / f} is missing (set MPDP_DATA to the folder holding adult/)")
    schema = Schema.load(SCHEMA_FILE)
    numeric = {f.name for f in schema.features if isinstance(f, Numeric)}
    parts = _split(data / "adult.data.gz")
    with tempfile.TemporaryDirectory(prefix="mpdp-mixed-") as tmp, LocalPostgres(_postgres_bin()) as pg:
        root = Path(tmp)
        cols = schema.columns or []
        # party-1's rows go into a table, party-2's into a Parquet file, party-3's stay a CSV file (as do everyone's, for comparison)
        ddl = ", ".join(f'"{c}" {"double precision" if c in numeric else "text"}' for c in cols)
        pg.execute(f"CREATE TABLE adult_p1 ({ddl})", rows=[tuple(v) for v in zip(*_typed(schema, parts[0]).values())],
                   insert=f"INSERT INTO adult_p1 VALUES ({', '.join(['%s'] * len(cols))})")
        pq.write_table(pa.table(_typed(schema, parts[1])), root / "party-2.parquet")
        os.environ[DSN_ENV] = pg.dsn  # the party processes inherit it; party-1's config names only the variable
        ds: dict[str, dict[str, dict]] = {}
        for p, rows in zip(PARTIES, parts):
            f = root / f"{p}.csv"
            f.write_text("".join(",".join(r) + "\n" for r in rows))
            ds[p] = {"csv": {"path": str(f), "format": "csv", "schema": str(SCHEMA_FILE)}}
        ds["party-1"]["mixed"] = {"format": "sql", "table": "adult_p1", "dsn_env": DSN_ENV, "schema": str(SCHEMA_FILE)}
        ds["party-2"]["mixed"] = {"path": str(root / "party-2.parquet"), "format": "parquet", "schema": str(SCHEMA_FILE)}
        ds["party-3"]["mixed"] = ds["party-3"]["csv"]
        fed = LocalFederation(root / "fed", PARTIES, ds, test_mode=True, paillier_bits=KEY_BITS, dgk_bits=KEY_BITS, compute_nodes=NODES, budget_epsilon=100.0)
        with fed:
            ep = Endpoints.load(fed.workdir)
            # Pathak 2010 on both: the same seed, so the same noise; the models must be equal
            pathak = {}
            with OperatorClient(ep) as client:
                for dataset in ("mixed", "csv"):
                    spec = make_spec(dataset, PARTIES, EPSILON, LAMBDA, "corrected", 600.0, schema_sha256=schema.sha256())
                    spec.simulation_seed = b"mixed-sources-example"
                    status = client.wait(client.submit(spec), timeout=900)
                    if status.state != "PUBLISHED":
                        sys.exit(f"run.py: the Pathak job on {dataset} failed: {status.detail}")
                    pathak[dataset] = tester.rebuild(client.model(status.job_id))
            # DP-GD on the mixed sources; the same rows from the CSV files, in memory, with the run's DCA jobs and seed
            sizes = [len(p) for p in parts]
            plan = DpgdPlan(Task("binary"), schema.dimension, EPSILON, 1e-6, lam=1e-3, rounds=5, total_records=sum(sizes))
            run = run_dpgd(ep, "mixed", PARTIES, NODES, plan, max(sizes), job_id="dp-mixedexample1", seed=b"mixed-sources-dpgd",
                           schema_sha256=schema.sha256())
            rows = {p: party_rows(plan.task, *_xy(load_dataset(DatasetConfig.model_validate(ds[p]["csv"])))) for p in PARTIES}
            mem = run_inmemory(plan, rows, NODES, max(sizes), job_id="dp-mixedexample1", dca_job_ids=run.dca_jobs, seed=b"mixed-sources-dpgd")
        test = schema.encode_file(data / "adult.test.gz")
        print(json.dumps({
            "rows": {"party-1 (PostgreSQL)": sizes[0], "party-2 (Parquet)": sizes[1], "party-3 (CSV)": sizes[2]},
            "pathak_same_model_as_csv": bool(np.array_equal(pathak["mixed"], pathak["csv"])),
            "pathak_accuracy": float(np.mean(logreg.predict(pathak["mixed"], test.X) == test.y)),
            "dpgd_same_model_as_csv": bool(np.array_equal(run.model, mem.model) and run.releases == mem.releases),
            "dpgd_accuracy": float(np.mean(plan.task.predict(run.model, test.X) == test.y)),
            "epsilon": EPSILON, "test_rows": int(len(test.y)), "schema_sha256": schema.sha256(), "key_bits": KEY_BITS, "test_mode": True,
        }, indent=2))


def _xy(data):
    return data.X, data.y


if __name__ == "__main__":
    main()
