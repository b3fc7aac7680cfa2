"""A party's data files as an attacker (or an accident) can leave them.

- One truncated Parquet file does not take the party offline: the party starts, that dataset's jobs are refused
  INVALID_JOB ("dataset … is unavailable; see the party's log", its log says why) and its other datasets serve jobs.
- A table with columns its schema does not read is not taken silently: the party's log says how many (never their
  names or values) once; a dataset's ``columns:`` (the columns to read) that disagrees with its schema refuses it.
"""

from __future__ import annotations

import logging

import grpc
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mpdp.data.dataset import load_dataset
from mpdp.data.loaders import DatasetError, DatasetUnreadable
from mpdp_services.common.config import DatasetConfig
from mpdp_services.operator.local import local_spec

from .conftest import assert_clean, assert_serving, host_run, refused, start_federation

SCHEMA = """\
mpdp_schema: 1
features:
  - {name: a, type: numeric, bounds: [-3, 3]}
  - {name: b, type: numeric, bounds: [-3, 3]}
label: {column: t, positive: ["1"], negative: ["0"]}
missing: drop
"""
SECRET = "ssn"  # a column no schema reads, named in no log line


def _table(n: int = 40, seed: int = 5) -> pa.Table:
    g = np.random.default_rng(seed)
    return pa.table({"a": g.normal(size=n), "b": g.normal(size=n), "t": g.integers(0, 2, size=n), SECRET: [f"999-{i:04d}" for i in range(n)]})


def _truncated(path) -> str:
    pq.write_table(_table(), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # a copy cut short: the footer is gone
    return str(path)


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    root = tmp_path_factory.mktemp("datasets")
    schema = root / "schema.yaml"
    schema.write_text(SCHEMA)
    good = root / "good.parquet"
    pq.write_table(_table(), good)
    extra = {"party-1": {"broken": {"path": _truncated(root / "broken.parquet"), "format": "parquet", "schema": str(schema)},
                         "tabular": {"path": str(good), "format": "parquet", "schema": str(schema)}}}
    f = start_federation(root, extra_datasets=extra)
    yield f
    f.stop()


def _local(fed, dataset: str):
    spec = local_spec(dataset, ["party-1"], 10.0, 1e-2, "corrected", 1e-3, 1.0, seed=b"datasets")
    return host_run(fed, timeout=300, lmgc=spec).lmgc


def test_one_corrupt_parquet_file_leaves_the_party_serving_its_other_datasets(fed):
    assert_serving(fed, "party-1")
    e = refused(lambda: _local(fed, "broken"))
    assert e.code() == grpc.StatusCode.ABORTED, e
    assert "party-1" in e.details() and "dataset 'broken' is unavailable; see the party's log" in e.details(), e.details()
    assert_clean(e)
    log = (fed.workdir / "party-1" / "service.log").read_text()
    assert "dataset broken is unavailable" in log and "not a readable Parquet file" in log
    assert _local(fed, "tabular").job_id  # the same party's other datasets still serve jobs
    assert _local(fed, "synthetic").job_id
    log = (fed.workdir / "party-1" / "service.log").read_text()
    assert "1 column(s) of its table are not in its schema" in log and SECRET not in log and "999-" not in log


def test_unreadable_and_misconfigured_datasets_are_told_apart(tmp_path, caplog):
    """The start-up check's two outcomes: a file that cannot be read is unavailable (DatasetUnreadable); a columns
    list that disagrees with the schema is a configuration error (DatasetError, the party does not start)."""
    from mpdp_services.party.datasets import check

    schema = tmp_path / "schema.yaml"
    schema.write_text(SCHEMA)
    good = tmp_path / "good.parquet"
    pq.write_table(_table(), good)
    with pytest.raises(DatasetUnreadable):
        load_dataset(DatasetConfig(path=_truncated(tmp_path / "cut.parquet"), format="parquet", schema=schema), name="cut")
    with caplog.at_level(logging.WARNING, logger="mpdp.data"):
        load_dataset(DatasetConfig(path=good, format="parquet", schema=schema), name="warned")
        load_dataset(DatasetConfig(path=good, format="parquet", schema=schema), name="warned")
    said = [r.getMessage() for r in caplog.records if "warned" in r.getMessage()]
    assert len(said) == 1 and "1 column(s)" in said[0] and SECRET not in said[0], said  # once, a count
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mpdp.data"):
        data = load_dataset(DatasetConfig(path=good, format="parquet", schema=schema, columns=["t", "a", "b"]), name="listed")
    assert data.X.shape == (40, 2) and not [r for r in caplog.records if "listed" in r.getMessage()]
    for wrong in (["a", "t"], ["a", "b", "t", SECRET]):
        with pytest.raises(DatasetError) as e:
            load_dataset(DatasetConfig(path=good, format="parquet", schema=schema, columns=wrong), name="wrong")
        assert not isinstance(e.value, DatasetUnreadable)
    problems, unavailable = check({"cut": DatasetConfig(path=tmp_path / "cut.parquet", format="parquet", schema=schema),
                                   "wrong": DatasetConfig(path=good, format="parquet", schema=schema, columns=["a", "t"]),
                                   "fine": DatasetConfig(path=good, format="parquet", schema=schema)})
    assert list(unavailable) == ["cut"] and len(problems) == 1 and "'wrong'" in problems[0]
