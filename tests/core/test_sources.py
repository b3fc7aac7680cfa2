"""mpdp.data.sources: CSV, LIBSVM and Parquet read in batches give the rows of the whole file, bit for bit; the
schema checks a typed source's column types and refuses NULLs it forbids; the report of the batches is the report
of the whole file."""

from __future__ import annotations

import gzip

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mpdp.data.dataset import load_dataset, open_rows
from mpdp.data.loaders import DatasetError, read_rows
from mpdp.data.sources import CsvSource, LibsvmSource, ParquetSource
from mpdp.schema import Schema
from tests.conftest import REPO, shared_file
from types import SimpleNamespace

ADULT = REPO / "examples" / "adult" / "schema.yaml"

NUMS = """\
mpdp_schema: 1
version: 1
features:
  - {name: a, type: numeric, bounds: [-3, 3]}
  - {name: b, type: numeric, bounds: [0, 10]}
  - {name: c, type: categorical, vocabulary: [x, y, z]}
label: {column: t, positive: ["1"], negative: ["0"]}
missing: %s
row_norm: 1.0
"""


def _nums(tmp_path, missing: str = "drop") -> Schema:
    p = tmp_path / f"nums-{missing}.yaml"
    p.write_text(NUMS % missing)
    return Schema.load(p)


def _table(n: int, seed: int = 3, nulls: bool = False) -> pa.Table:
    rng = np.random.default_rng(seed)
    a = rng.normal(size=n)
    b = rng.uniform(0, 12, size=n)
    c = rng.choice(["x", "y", "z"], size=n).tolist()
    t = rng.integers(0, 2, size=n)
    a_col = pa.array([None if nulls and i % 7 == 3 else v for i, v in enumerate(a)], type=pa.float64())
    return pa.table({"a": a_col, "b": b, "c": c, "t": t})


def _csv_of(table: pa.Table, path) -> None:
    cols = table.to_pydict()
    lines = [",".join(cols)]
    for i in range(table.num_rows):
        lines.append(",".join("" if cols[k][i] is None else (repr(cols[k][i]) if isinstance(cols[k][i], float) else str(cols[k][i])) for k in cols))
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_adult_csv_batches_equal_the_whole_file(tmp_path):
    s = Schema.load(ADULT)
    f = shared_file("adult", "adult.test.gz")
    whole = s.encode_rows(read_rows(f))
    for rows in (1000, 4096, 100_000):
        batched = s.encode_source(CsvSource(f, s.columns), rows)
        assert np.array_equal(batched.X, whole.X) and np.array_equal(batched.y, whole.y)
        assert batched.report.to_json() == whole.report.to_json()


def test_libsvm_batches_equal_the_whole_file(tmp_path):
    from sklearn.datasets import load_svmlight_file

    p = tmp_path / "d.libsvm"
    p.write_text("+1 1:0.5 3:2\n-1 2:1.25\n\n+1 1:-3 2:4 3:0.125\n-1 3:7\n+1 1:1\n")
    schema = tmp_path / "s.yaml"
    schema.write_text("mpdp_schema: 1\nfeatures:\n" + "".join(f"  - {{name: f{i}, type: numeric, bounds: [-5, 5]}}\n" for i in range(3))
                      + "label: {column: y, positive: ['1'], negative: ['-1']}\n")
    s = Schema.load(schema)
    X, y = load_svmlight_file(str(p), n_features=3)
    X = np.asarray(X.todense())
    for rows in (1, 2, 5, 100):
        batched = s.encode_source(LibsvmSource(p, [f"f{i}" for i in range(3)], "y"), rows)
        assert np.array_equal(batched.y, y)
        z = (np.clip(X, -5, 5) + 5) / 10  # the public bounds [-5, 5] onto [0, 1], then each row onto the unit ball
        assert np.allclose(batched.X, z / np.maximum(1.0, np.linalg.norm(z, axis=1))[:, None], rtol=0, atol=1e-15)
        assert batched.X[0, 0] == (0.5 + 5) / 10 / max(1.0, np.linalg.norm(z[0]))  # all the digits of 0.5, not a rounded text


def test_parquet_folder_equals_csv_of_the_same_rows(tmp_path):
    s = _nums(tmp_path)
    table = _table(5000)
    _csv_of(table, tmp_path / "all.csv")
    parts = tmp_path / "parts"
    parts.mkdir()
    for i, start in enumerate(range(0, 5000, 1700)):
        pq.write_table(table.slice(start, 1700), parts / f"part-{i:03d}.parquet", row_group_size=500)
    from_csv = s.encode_source(CsvSource(tmp_path / "all.csv"))
    for rows in (333, 65_536):
        from_parquet = s.encode_source(ParquetSource(parts), rows)
        assert np.array_equal(from_parquet.X, from_csv.X) and np.array_equal(from_parquet.y, from_csv.y)
        assert from_parquet.report.to_json() == from_csv.report.to_json()
    assert len(ParquetSource(parts).parts()) == 3


def test_a_typed_column_of_the_wrong_type_is_refused_before_reading(tmp_path):
    s = _nums(tmp_path)
    table = _table(10).set_column(0, "a", pa.array(["1.0"] * 10))
    pq.write_table(table, tmp_path / "bad.parquet")
    with pytest.raises(DatasetError, match="column 'a' holds text"):
        next(s.encode_batches(ParquetSource(tmp_path / "bad.parquet")))
    pq.write_table(_table(10).drop_columns(["b"]), tmp_path / "short.parquet")
    with pytest.raises(DatasetError, match="no column 'b'"):
        next(s.encode_batches(ParquetSource(tmp_path / "short.parquet")))


def test_nulls_drop_or_refuse_as_the_schema_says(tmp_path):
    pq.write_table(_table(700, nulls=True), tmp_path / "nulls.parquet")
    dropped = _nums(tmp_path).encode_source(ParquetSource(tmp_path / "nulls.parquet"), 64)
    assert dropped.report.dropped == {"missing": 100} and dropped.report.used == 600
    with pytest.raises(DatasetError, match="missing values, and the schema forbids them"):
        _nums(tmp_path, "error").encode_source(ParquetSource(tmp_path / "nulls.parquet"))


def test_open_rows_and_load_dataset_read_the_same_rows(tmp_path):
    (tmp_path / "s.yaml").write_text(NUMS % "drop")
    pq.write_table(_table(3000), tmp_path / "d.parquet", row_group_size=1000)
    ds = SimpleNamespace(path=tmp_path / "d.parquet", format="parquet", n_features=None, label_column=-1, schema_file=tmp_path / "s.yaml", batch_rows=256)
    data = load_dataset(ds)
    rows = open_rows(ds)
    got = list(rows.batches())
    assert max(len(y) for _, y in got) <= 256
    assert np.array_equal(np.vstack([X for X, _ in got]), data.X) and rows.report is not None and rows.report.used == 3000
    assert data.schema_sha256 == rows.schema_sha256 and rows.dimension == 5


def test_a_gzip_csv_is_read_in_batches(tmp_path):
    s = _nums(tmp_path)
    _csv_of(_table(50), tmp_path / "d.csv")
    with gzip.open(tmp_path / "d.csv.gz", "wt") as fh:
        fh.write((tmp_path / "d.csv").read_text())
    a = s.encode_source(CsvSource(tmp_path / "d.csv.gz"), 7)
    b = s.encode_rows(read_rows(tmp_path / "d.csv"))
    assert np.array_equal(a.X, b.X) and a.report.to_json() == b.report.to_json()


def test_dataset_config_of_sql_and_parquet_sources(tmp_path, monkeypatch):
    from pydantic import ValidationError

    from mpdp_services.common.config import DatasetConfig

    ok = DatasetConfig.model_validate({"format": "sql", "table": "t", "dsn_env": "PARTY_DSN", "schema": "s.yaml"})
    monkeypatch.setenv("PARTY_DSN", "host=db password=hunter2")
    assert ok.connection_string() == "host=db password=hunter2" and "hunter2" not in repr(ok)
    monkeypatch.delenv("PARTY_DSN")
    with pytest.raises(ValueError, match="PARTY_DSN") as e:
        ok.connection_string()
    assert "hunter2" not in str(e.value)
    inline = DatasetConfig.model_validate({"format": "sql", "query": "SELECT 1", "dsn": "password=hunter2", "schema": "s.yaml"})
    assert "hunter2" not in repr(inline) and "hunter2" not in str(inline.model_dump())
    for bad in ({"format": "sql", "table": "t", "query": "q", "dsn_env": "X", "schema": "s"}, {"format": "sql", "table": "t", "schema": "s"},
                {"format": "sql", "table": "t", "dsn_env": "X"}, {"format": "parquet", "path": "p"}, {"format": "csv"}):
        with pytest.raises(ValidationError):
            DatasetConfig.model_validate(bad)
