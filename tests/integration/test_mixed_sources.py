"""Parties whose rows live in different places, over sockets and mutual TLS: party-1 reads a PostgreSQL table (a real
server, tests/postgres.py; its connection string from an environment variable), party-2 a Parquet folder, party-3 a
CSV file, all under one schema. A Pathak job and a DP-GD job release the same models as the same rows in three CSV
files. Bad input at party-1 — a missing table, a connection lost mid-read, a text column under a numeric feature,
NULLs its schema forbids — is each a clear refusal before any spend, and the party goes on serving."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mpdp.data.dataset import load_dataset
from mpdp.dpgd.model import Task, party_rows
from mpdp.dpgd.plan import DpgdPlan
from mpdp.dpgd.role import run_inmemory
from mpdp.pathak2010 import tester
from mpdp_services.common.config import DatasetConfig
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.launcher.federation import LocalFederation
from mpdp_services.operator.dpgd import RoundFailed, run_dpgd
from mpdp_services.operator.pathak2010 import OperatorClient, make_spec
from tests.postgres import Postgres

pytestmark = pytest.mark.integration
PARTIES = ["party-1", "party-2", "party-3"]
NODES = ["node-1", "node-2", "node-3"]
SIZES, BOUND = (60, 45, 52), 60
DSN_ENV = "MIXED_SOURCES_TEST_DSN"
SCHEMA = """\
mpdp_schema: 1
features:
  - {name: a, type: numeric, bounds: [-3, 3]}
  - {name: b, type: numeric, bounds: [-3, 3]}
  - {name: c, type: numeric, bounds: [-3, 3]}
label: {column: t, positive: ["1"], negative: ["0"]}
scale: symmetric
missing: %s
"""
D = 3


def _rows(g: np.random.Generator, n: int) -> list[tuple]:
    X = g.normal(size=(n, D))
    t = (X @ np.array([1.5, -1.0, 0.5]) + 0.5 * g.normal(size=n) > 0).astype(int)
    return [(i, *map(float, X[i]), int(t[i])) for i in range(n)]


def _csv(path, rows) -> str:
    path.write_text("id,a,b,c,t\n" + "".join(f"{i},{a!r},{b!r},{c!r},{t}\n" for i, a, b, c, t in rows))
    return str(path)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixed")
    (root / "schema.yaml").write_text(SCHEMA % "drop")
    (root / "strict.yaml").write_text(SCHEMA % "error")
    g = np.random.default_rng(21)
    rows = {p: _rows(g, n) for p, n in zip(PARTIES, SIZES)}
    pg = Postgres().start()
    try:
        pg.execute("CREATE TABLE p1 (id int, a float8, b float8, c float8, t int)",
                   rows=rows["party-1"], insert="INSERT INTO p1 VALUES (%s, %s, %s, %s, %s)")
        pg.execute("CREATE TABLE p1_text (id int, a text, b float8, c float8, t int)", "INSERT INTO p1_text SELECT id, a::text, b, c, t FROM p1",
                   "CREATE TABLE p1_holes (id int, a float8, b float8, c float8, t int)",
                   "INSERT INTO p1_holes SELECT id, CASE WHEN id = 7 THEN NULL ELSE a END, b, c, t FROM p1")
        os.environ[DSN_ENV] = pg.dsn  # the party processes inherit it; their configs name only the variable
        pq.write_table(pa.table({k: [r[j] for r in rows["party-2"]] for j, k in enumerate(["id", "a", "b", "c", "t"])}), root / "p2.parquet")
        schema, strict = str(root / "schema.yaml"), str(root / "strict.yaml")
        sql = {"format": "sql", "dsn_env": DSN_ENV, "schema": schema}
        ds: dict[str, dict[str, dict]] = {}
        for p in PARTIES:
            csv = {"path": _csv(root / f"{p}.csv", rows[p]), "format": "csv", "schema": schema}
            ds[p] = {"csv": csv, "missing": csv, "dropped": csv, "wrongtype": csv, "nulls": csv}
        ds["party-1"] = {**ds["party-1"], "mixed": {**sql, "table": "p1"}, "missing": {**sql, "table": "no_such_table"},
                         # the server ends the connection itself when the cursor reaches row 30
                         "dropped": {**sql, "query": "SELECT * FROM p1 WHERE CASE WHEN id = 30 THEN pg_terminate_backend(pg_backend_pid()) ELSE true END"},
                         "wrongtype": {**sql, "table": "p1_text"}, "nulls": {**sql, "table": "p1_holes", "schema": strict}}
        ds["party-2"]["mixed"] = {"path": str(root / "p2.parquet"), "format": "parquet", "schema": schema}
        ds["party-3"]["mixed"] = ds["party-3"]["csv"]
        fed = LocalFederation(root / "fed", PARTIES, ds, test_mode=True, paillier_bits=768, dgk_bits=768, compute_nodes=NODES, budget_epsilon=1e6)
        fed.start()
        fed.ds = ds  # type: ignore[attr-defined]
        yield fed
        fed.stop()
    finally:
        pg.stop()
        os.environ.pop(DSN_ENV, None)


def _ledger(fed, p) -> list[dict]:
    f = fed.workdir / p / "state" / "ledger.json"
    return json.loads(f.read_text())["entries"] if f.exists() else []


def _plan() -> DpgdPlan:
    return DpgdPlan(Task("binary"), D, 1.0, 1e-6, lam=1e-2, rounds=2, total_records=sum(SIZES))


def test_bad_input_is_refused_before_any_spend_and_the_party_keeps_serving(mixed):
    ep = Endpoints.load(mixed.workdir)
    for i, name in enumerate(["missing", "dropped", "wrongtype", "nulls"]):
        job = f"dp-bad{i:09d}"
        with pytest.raises(RoundFailed) as e:
            run_dpgd(ep, name, PARTIES, NODES, _plan(), BOUND, job_id=job, seed=b"bad")
        assert "party-1" in str(e.value) and "cannot read its dataset" in str(e.value), str(e.value)
        assert DSN_ENV not in str(e.value) and "password" not in str(e.value)
        assert not [x for x in _ledger(mixed, "party-1") if x.get("job_id", "").startswith(job) or x.get("dpgd_job_id") == job]
    log = (mixed.workdir / "party-1").glob("*.log")
    text = "".join(f.read_text(errors="replace") for f in log)
    assert os.environ[DSN_ENV] not in text and "does not exist" in text and "connection was lost" in text


def test_pathak_job_releases_the_model_of_three_csv_files(mixed):
    models = {}
    with OperatorClient(Endpoints.load(mixed.workdir)) as client:
        for dataset in ("mixed", "csv"):
            spec = make_spec(dataset, PARTIES, 0.9, 0.05, "corrected", 120.0)
            spec.simulation_seed = b"mixed-vs-csv"
            status = client.wait(client.submit(spec), timeout=180)
            assert status.state == "PUBLISHED", status.detail
            models[dataset] = tester.rebuild(client.model(status.job_id))
    assert np.array_equal(models["mixed"], models["csv"])


def test_dpgd_job_releases_the_model_of_three_csv_files(mixed):
    ep = Endpoints.load(mixed.workdir)
    plan, seed, job = _plan(), b"mixed-dpgd", "dp-mixed0000001"
    run = run_dpgd(ep, "mixed", PARTIES, NODES, plan, BOUND, job_id=job, seed=seed)
    # the same rows read from the three CSV files, in memory, with the socket run's DCA job ids and seed
    parts = {}
    for p in PARTIES:
        data = load_dataset(DatasetConfig.model_validate(mixed.ds[p]["csv"]), name="csv")
        parts[p] = party_rows(plan.task, data.X, data.y)
    mem = run_inmemory(plan, parts, NODES, BOUND, job_id=job, dca_job_ids=run.dca_jobs, seed=seed)
    assert mem.releases == run.releases and np.array_equal(mem.model, run.model)
