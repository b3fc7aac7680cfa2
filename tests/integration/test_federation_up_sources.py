"""`mpdp federation up` (the real command, a separate process) with each party's dataset given by its description, as a
provisioned party's config gives it: party-1 a Parquet folder of two parts, party-2 a PostgreSQL table (a real server,
tests/postgres.py; the connection string only in an environment variable the party inherits), party-3 a CSV file with
its schema. A seeded Pathak job over those sources releases exactly the model of the same rows read from three CSV
files (a plain ``NAME=PARTY:PATH`` with ``--schema NAME=PATH``), and every party wrote the description into its config.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from mpdp.messages import operations_pb2
from mpdp.pathak2010 import tester
from mpdp_services.common import processes
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.operator.jobs import run
from mpdp_services.operator.pathak2010 import make_spec
from tests.postgres import Postgres

pytestmark = pytest.mark.integration
PARTIES = ["party-1", "party-2", "party-3"]
DSN_ENV = "FEDERATION_UP_SOURCES_TEST_DSN"
COLUMNS = ["id", "a", "b", "c", "t"]
SCHEMA = """\
mpdp_schema: 1
features:
  - {name: a, type: numeric, bounds: [-3, 3]}
  - {name: b, type: numeric, bounds: [-3, 3]}
  - {name: c, type: numeric, bounds: [-3, 3]}
label: {column: t, positive: ["1"], negative: ["0"]}
scale: symmetric
missing: drop
"""


def _rows(g: np.random.Generator, n: int) -> list[tuple]:
    X = g.normal(size=(n, 3))
    t = (X @ np.array([1.5, -1.0, 0.5]) + 0.5 * g.normal(size=n) > 0).astype(int)
    return [(i, *map(float, X[i]), int(t[i])) for i in range(n)]


def _csv(path, rows) -> str:
    path.write_text("id,a,b,c,t\n" + "".join(f"{i},{a!r},{b!r},{c!r},{t}\n" for i, a, b, c, t in rows))
    return str(path)


def _ready(proc: subprocess.Popen, timeout: float = 300.0) -> dict:
    """The JSON object `federation up --json` prints once every role is up (its other output goes to stderr)."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            assert left > 0 and sel.select(left), f"federation up printed nothing in {timeout:g} s"
            line = proc.stdout.readline().decode()  # type: ignore[union-attr]
            assert line, f"federation up exited with {proc.wait()}: {proc.stderr.read().decode()[-3000:]}"  # type: ignore[union-attr]
            if line.startswith("{"):
                return json.loads(line)
    finally:
        sel.close()


@pytest.fixture(scope="module")
def up(tmp_path_factory):
    root = tmp_path_factory.mktemp("up-sources")
    (root / "schema.yaml").write_text(SCHEMA)
    g = np.random.default_rng(5)
    rows = {p: _rows(g, n) for p, n in zip(PARTIES, (60, 45, 52))}
    pg = Postgres().start()
    proc = None
    try:
        pg.execute("CREATE TABLE p2 (id int, a float8, b float8, c float8, t int)", rows=rows["party-2"], insert="INSERT INTO p2 VALUES (%s, %s, %s, %s, %s)")
        (root / "p1").mkdir()
        half = len(rows["party-1"]) // 2
        for k, part in enumerate((rows["party-1"][:half], rows["party-1"][half:])):  # a folder of two parts, read in order
            pq.write_table(pa.table({c: [r[j] for r in part] for j, c in enumerate(COLUMNS)}), root / "p1" / f"part-{k}.parquet")
        described = {
            "party-1": "{format: parquet, path: p1, schema: schema.yaml}",  # relative to the folder the command runs in
            "party-2": f"{{format: sql, table: p2, dsn_env: {DSN_ENV}, schema: schema.yaml}}",
            "party-3": f"{{format: csv, path: {_csv(root / 'p3.csv', rows['party-3'])}, schema: schema.yaml}}",
        }
        args = [a for p in PARTIES for a in ("--dataset", f"mixed={p}:{described[p]}", "--dataset", f"csv={p}:{_csv(root / f'{p}.csv', rows[p])}")]
        proc = processes.spawn([sys.executable, "-m", "mpdp_services.cli.main", "federation", "up", "--workdir", str(root / "fed"), "--parties", "3",
                                "--test-mode", "--key-bits", "1024", *args, "--schema", f"csv={root / 'schema.yaml'}", "--json"],
                               cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, **{DSN_ENV: pg.dsn}), start_new_session=True)
        info = _ready(proc)
        yield root, info, pg.dsn
    finally:
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # the command stops every role it started
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            for f in (proc.stdout, proc.stderr):
                if f:
                    f.close()
        pg.stop()


def test_each_party_config_holds_its_dataset_description(up):
    root, _, dsn = up
    cfg = {p: yaml.safe_load((root / "fed" / p / "party.yaml").read_text())["datasets"] for p in PARTIES}
    schema = str(root / "schema.yaml")
    assert cfg["party-1"]["mixed"] == {"format": "parquet", "path": str(root / "p1"), "schema": schema}
    assert cfg["party-2"]["mixed"] == {"format": "sql", "table": "p2", "dsn_env": DSN_ENV, "schema": schema}
    assert cfg["party-3"]["mixed"] == {"format": "csv", "path": str(root / "p3.csv"), "schema": schema}
    assert all(cfg[p]["csv"] == {"path": str(root / f"{p}.csv"), "schema": schema} for p in PARTIES)
    written = "".join(f.read_text(errors="replace") for f in (root / "fed").rglob("*") if f.is_file() and f.suffix in (".yaml", ".json", ".log"))
    assert dsn not in written  # the connection string stays in the environment


def test_a_job_over_parquet_sql_and_csv_releases_the_model_of_the_same_rows_in_csv(up):
    root, info, _ = up
    ep = Endpoints.load(info["endpoints"])
    models = {}
    for dataset in ("mixed", "csv"):
        spec = make_spec(dataset, PARTIES, 0.9, 0.05, "corrected", 120.0)
        spec.simulation_seed = b"described-vs-csv"  # test mode: the same noise both times, so the models must agree bit for bit
        summary, release = run(ep, operations_pb2.JobSubmission(pathak2010=spec), timeout=300)
        assert summary["released"], summary
        models[dataset] = tester.rebuild(release.pathak2010)
        for p in PARTIES:
            assert any(e["job_id"] == summary["job_id"] for e in json.loads((root / "fed" / p / "state" / "ledger.json").read_text())["entries"])
    assert models["mixed"].shape == (3,) and np.array_equal(models["mixed"], models["csv"])
