"""A party's sums on a Dask local cluster of two worker processes (mpdp.data.engine): one task per Parquet part
(one of them left with no row), the parts' sums added here; the results equal the single-process ones up to the
order of additions, and the worker processes are gone once the cluster is closed."""

from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mpdp.data import engine
from mpdp.dpgd.plan import dpgd_contribution
from mpdp.learn.logreg import local_logreg
from mpdp.regression.statistics import statistics_contribution
from mpdp.dpgd.model import Task
from mpdp.dpgd.plan import DpgdPlan

SCHEMA = """\
mpdp_schema: 1
features:
  - {name: a, type: numeric, bounds: [-3, 3]}
  - {name: b, type: numeric, bounds: [-3, 3]}
  - {name: c, type: numeric, bounds: [-3, 3]}
label: {column: t, positive: ["1"], negative: ["0"]}
"""


@pytest.fixture
def cluster_closed():
    yield
    engine.close_clients()  # also when the test failed: no worker process outlives it


def _folder(tmp_path, n: int = 4000):
    rng = np.random.default_rng(11)
    X = rng.normal(size=(n, 3))
    t = (X @ np.array([1.0, -2.0, 0.5]) + rng.normal(size=n) > 0).astype(int)
    table = pa.table({"a": X[:, 0], "b": X[:, 1], "c": X[:, 2], "t": t})
    folder = tmp_path / "parts"
    folder.mkdir()
    for i, start in enumerate(range(0, n, 1500)):
        pq.write_table(table.slice(start, 1500), folder / f"part-{i}.parquet")
    empty = table.slice(0, 10).set_column(0, "a", pa.array([None] * 10, type=pa.float64()))
    pq.write_table(empty, folder / "part-9.parquet")  # a part every row of which is dropped (missing a)
    (tmp_path / "s.yaml").write_text(SCHEMA)
    return folder


def _ds(tmp_path, folder, dask: str):
    return SimpleNamespace(path=folder, format="parquet", n_features=None, label_column=-1, schema_file=tmp_path / "s.yaml",
                           batch_rows=500, dask=dask, dask_workers=2)


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_two_worker_processes_compute_what_one_process_does(tmp_path, cluster_closed):
    folder = _folder(tmp_path)
    here, there = _ds(tmp_path, folder, ""), _ds(tmp_path, folder, "local")
    bounds = [0.8, 0.8, 0.8, 1.0]
    a = statistics_contribution(here, "t", "std", bounds, 10**6)
    b = statistics_contribution(there, "t", "std", bounds, 10**6)
    assert np.max(np.abs(a - b)) <= 1e-11 * 4000
    plan = DpgdPlan(Task("binary"), 3, 1.0, 1e-6, lam=1e-2, rounds=1, total_records=4000)
    W = np.array([[0.3], [-0.2], [0.1]])
    assert np.max(np.abs(dpgd_contribution(here, "t", plan, 1, W, 10**6) - dpgd_contribution(there, "t", plan, 1, W, 10**6))) <= 1e-11 * 4000
    w1, n1 = local_logreg(here, "t", 1e-2, "half", clip=1.0, tol=1e-10, max_iter=100)
    w2, n2 = local_logreg(there, "t", 1e-2, "half", clip=1.0, tol=1e-10, max_iter=100)
    assert n1 == n2 == 4000 and np.linalg.norm(w1 - w2) <= 2 * 1e-10 / 1e-2
    client = engine._clients[("local", 2)]
    pids = list(client.run(os.getpid).values())  # each worker's process id
    assert len(set(pids)) == 2 and os.getpid() not in pids
    engine.close_clients()
    for pid in pids:  # the worker processes (and their nannies) are gone with the cluster
        with pytest.raises(ProcessLookupError):
            _wait_gone(pid)


def _wait_gone(pid: int) -> None:
    import time

    for _ in range(200):  # polls the process table for up to 20 s; not a timing assertion
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            raise
        time.sleep(0.1)
