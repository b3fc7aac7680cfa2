"""SQL sources against a real PostgreSQL server (tests/postgres.py): a table and a query read in batches encode to
the rows of a CSV file of the same values, bit for bit; a missing table, a connection lost mid-read, a text column
under a numeric feature, NULLs under ``missing: error`` and a refused login are each a DatasetError that never
quotes the connection string or its password."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from mpdp.data.dataset import load_dataset, open_rows
from mpdp.regression.statistics import statistics_contribution
from mpdp.data.loaders import DatasetError
from mpdp.data.sources import SqlSource
from tests.postgres import Postgres

pytestmark = pytest.mark.integration

SCHEMA = """\
mpdp_schema: 1
features:
  - {name: age, type: numeric, bounds: [0, 100]}
  - {name: amount, type: numeric, bounds: [0, 1000], transform: log1p}
  - {name: region, type: categorical, vocabulary: [north, south, east, west]}
  - {name: smoker, type: binary, positive: "yes", negative: "no"}
label: {column: outcome, positive: [sick], negative: [well]}
missing: %s
"""
N = 3000


def _rows(n: int = N, seed: int = 5):
    g = np.random.default_rng(seed)
    out = []
    for i in range(n):
        age = float(g.uniform(18, 95))
        out.append((i, age, float(g.exponential(120)), str(g.choice(["north", "south", "east", "west"])), str(g.choice(["yes", "no"])),
                    "sick" if age + g.normal(0, 15) > 60 else "well"))
    return out


@pytest.fixture(scope="module")
def pg():
    server = Postgres().start()
    server.execute("CREATE TABLE claims (id int PRIMARY KEY, age double precision, amount double precision, region text, smoker varchar(3), outcome text)",
                   "CREATE TABLE wrong (id int, age text, amount float8, region text, smoker text, outcome text)",
                   "CREATE TABLE holes (id int, age float8, amount float8, region text, smoker text, outcome text)",
                   rows=_rows(), insert="INSERT INTO claims VALUES (%s, %s, %s, %s, %s, %s)")
    server.execute("INSERT INTO wrong SELECT id, age::text, amount, region, smoker, outcome FROM claims",
                   "INSERT INTO holes SELECT id, CASE WHEN id % 10 = 3 THEN NULL ELSE age END, amount, region, smoker, outcome FROM claims")
    yield server
    server.stop()


def _ds(tmp_path, pg, missing: str = "drop", **kw):
    (tmp_path / f"s-{missing}.yaml").write_text(SCHEMA % missing)
    base = dict(path=tmp_path, format="sql", n_features=None, label_column=-1, schema_file=tmp_path / f"s-{missing}.yaml", batch_rows=700,
                table="claims", query=None, dask="", dask_workers=2)
    base.update(kw)
    ns = SimpleNamespace(**base)
    ns.connection_string = lambda: pg.dsn
    return ns


def _csv(tmp_path, rows) -> SimpleNamespace:
    p = tmp_path / "same.csv"
    p.write_text("id,age,amount,region,smoker,outcome\n" + "".join(f"{i},{a!r},{m!r},{r},{s},{o}\n" for i, a, m, r, s, o in rows))
    return SimpleNamespace(path=p, format="csv", n_features=None, label_column=-1, schema_file=tmp_path / "s-drop.yaml", batch_rows=700)


def test_a_table_and_a_query_equal_a_csv_of_the_same_rows(tmp_path, pg):
    sql = load_dataset(_ds(tmp_path, pg))
    csv = load_dataset(_csv(tmp_path, _rows()))
    assert sql.X.shape == (N, 7) and np.array_equal(sql.X, csv.X) and np.array_equal(sql.y, csv.y)
    q = load_dataset(_ds(tmp_path, pg, table=None, query="SELECT * FROM claims WHERE id < 1000 ORDER BY id"))
    assert np.array_equal(q.X, csv.X[:1000])
    bounds = [0.5] * 8
    assert np.array_equal(statistics_contribution(_ds(tmp_path, pg), "c", "std", bounds, N), statistics_contribution(_csv(tmp_path, _rows()), "c", "std", bounds, N))
    sizes = [len(y) for _, y in open_rows(_ds(tmp_path, pg)).batches()]
    assert max(sizes) <= 700 and sum(sizes) == N


def _refused(ds, pg, match: str) -> str:
    with pytest.raises(DatasetError, match=match) as e:
        load_dataset(ds)
    assert pg.password not in str(e.value) and "password" not in str(e.value) and str(pg.port) not in str(e.value)
    return str(e.value)


def test_bad_tables_and_connections_are_clear_refusals_without_the_connection_string(tmp_path, pg):
    _refused(_ds(tmp_path, pg, table="no_such_table"), pg, "table 'no_such_table' does not exist")
    _refused(_ds(tmp_path, pg, table="wrong"), pg, "column 'age' holds text, and the schema's feature age is numeric")
    _refused(_ds(tmp_path, pg, "error", table="holes"), pg, "feature age: .* missing values, and the schema forbids them")
    assert load_dataset(_ds(tmp_path, pg, table="holes")).report.dropped == {"missing": N // 10}  # missing: drop
    # the server ends this connection itself once the cursor reaches row 1500, after the first batches arrived
    drop = _ds(tmp_path, pg, table=None, query="SELECT * FROM claims WHERE CASE WHEN id = 1500 THEN pg_terminate_backend(pg_backend_pid()) ELSE true END")
    got = []
    with pytest.raises(DatasetError, match="connection was lost while reading the configured query") as e:
        for _, y in open_rows(drop).batches():
            got.append(len(y))
    assert sum(got) >= 700 and pg.password not in str(e.value)  # mid-read: batches had arrived
    _refused(drop, pg, "connection was lost while reading")
    wrong_pw = _ds(tmp_path, pg)
    wrong_pw.connection_string = lambda: pg.dsn.replace(pg.password, "not-the-password")
    _refused(wrong_pw, pg, "the database refused the connection")


def test_the_source_never_shows_its_connection_string(pg):
    src = SqlSource(pg.dsn, table="claims")
    assert pg.password not in repr(src) and pg.password not in str(vars(src).get("table"))
