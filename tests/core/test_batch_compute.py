"""A party's sums over rows computed batch by batch (mpdp.data.engine) against the same computations on the whole
dataset in memory: regression statistics bit for bit; DP-GD round vectors up to the order of floating-point additions;
Pathak's local model within 2·tol/c (both stopped at ‖∇J‖ < tol; docs/data-sources.md, "Bounded memory")."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mpdp.data.dataset import DoesNotFit, load_dataset, open_rows
from mpdp.dpgd.plan import dpgd_contribution
from mpdp.learn.logreg import local_logreg
from mpdp.regression.statistics import statistics_contribution
from mpdp.dpgd.model import Task, party_rows
from mpdp.dpgd.plan import ADD_REMOVE, DpgdPlan, party_vector
from mpdp.learn import logreg
from mpdp.regression.statistics import party_statistics

SCHEMA = """\
mpdp_schema: 1
features:
%s  - {name: kind, type: categorical, vocabulary: [a, b, c]}
label: {column: t, positive: ["1"], negative: ["0"]}
row_norm: 1.0
"""
D_NUM = 5


def _dataset(tmp_path, n: int = 6000, batch_rows: int = 512, seed: int = 7, fmt: str = "parquet"):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D_NUM))
    t = (X @ rng.normal(size=D_NUM) + 0.5 * rng.normal(size=n) > 0).astype(int)
    cols = {f"x{i}": X[:, i] for i in range(D_NUM)}
    cols["kind"] = rng.choice(["a", "b", "c"], size=n).tolist()
    cols["t"] = t
    (tmp_path / "s.yaml").write_text(SCHEMA % "".join(f"  - {{name: x{i}, type: numeric, bounds: [-3, 3]}}\n" for i in range(D_NUM)))
    if fmt == "parquet":
        path = tmp_path / "d.parquet"
        pq.write_table(pa.table(cols), path, row_group_size=1000)
    else:
        path = tmp_path / "d.csv"
        names = list(cols)
        path.write_text(",".join(names) + "\n" + "".join(",".join(repr(float(cols[k][i])) if k.startswith("x") else str(cols[k][i]) for k in names) + "\n" for i in range(n)))
    return SimpleNamespace(path=path, format=fmt, n_features=None, label_column=-1, schema_file=tmp_path / "s.yaml", batch_rows=batch_rows, dask="", dask_workers=2)


def test_regression_statistics_in_batches_equal_the_whole_bit_for_bit(tmp_path):
    ds = _dataset(tmp_path)
    data = load_dataset(ds)
    d = data.X.shape[1]
    for round, bounds in (("std", [0.7] * (d + 1)), ("main", [0.3] * d + [0.9])):
        whole = party_statistics(data.X, data.y, round, bounds)
        assert np.array_equal(statistics_contribution(ds, "t", round, bounds, 10**6), whole)
    with pytest.raises(DoesNotFit, match="records_per_client"):
        statistics_contribution(ds, "t", "std", [0.7] * (d + 1), 100)
    with pytest.raises(DoesNotFit, match="bounds"):
        statistics_contribution(ds, "t", "std", [0.7] * d, 10**6)


@pytest.mark.parametrize("adjacency", ["replace", ADD_REMOVE])
def test_dpgd_round_vectors_in_batches_equal_the_whole(tmp_path, adjacency):
    ds = _dataset(tmp_path)
    data = load_dataset(ds)
    n, d = data.X.shape
    plan = DpgdPlan(Task("binary"), d, 1.0, 1e-6, lam=1e-2, rounds=2, adjacency=adjacency, total_records=None if adjacency == ADD_REMOVE else n)
    X, y = party_rows(plan.task, data.X, data.y)
    W = np.random.default_rng(1).normal(size=(d, 1))
    for r in (0, 1):
        whole = party_vector(plan, r, W, X, y)
        batched = dpgd_contribution(ds, "t", plan, r, W, 10**6)
        assert batched.shape == whole.shape
        # Σ of n terms of norm ≤ clip, added in another order: |Δ| ≤ 2·n·u·Σ|terms| (Higham, Thm 4.3); far below it here
        assert np.max(np.abs(batched - whole)) <= 1e-11 * n
        if adjacency == ADD_REMOVE and r == 0:
            assert batched[-1] == whole[-1]  # the count coordinate is exact


def test_pathak_local_training_in_batches_is_the_same_minimiser(tmp_path):
    from mpdp.pathak2010.party import CLIP_BOUND, FIT_TOL

    ds = _dataset(tmp_path, batch_rows=700)
    data = load_dataset(ds)
    lam = 1e-2
    whole = logreg.fit(logreg.clip_rows(data.X, CLIP_BOUND), data.y, lam, "half", tol=FIT_TOL)
    w, n = local_logreg(ds, "t", lam, "half", clip=CLIP_BOUND, tol=FIT_TOL, max_iter=100)
    assert n == len(data.y)
    c = logreg.reg_coefficient(lam, "half")
    assert np.linalg.norm(w - whole) <= 2 * FIT_TOL / c  # both within tol/c of the exact minimiser
    assert np.linalg.norm(logreg.gradient(w, logreg.clip_rows(data.X), data.y, c)) < 1e-9


def test_a_file_without_a_schema_is_reduced_alike(tmp_path):
    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, size=(900, 3)) / 2
    y = np.where(X.sum(axis=1) > 0, 2.0, 5.0)  # labels mapped to ±1 over the whole file (5 is +1)
    p = tmp_path / "d.csv"
    p.write_text("".join(",".join(repr(float(v)) for v in row) + f",{lab}\n" for row, lab in zip(X, y)))
    ds = SimpleNamespace(path=p, format="csv", n_features=None, label_column=-1, schema_file=None, batch_rows=100, dask="", dask_workers=2)
    plan = DpgdPlan(Task("binary"), 3, 1.0, 1e-6, lam=1e-2, rounds=1, total_records=900)
    Xp, yp = party_rows(plan.task, X, y)
    assert np.max(np.abs(dpgd_contribution(ds, "t", plan, 0, np.zeros((3, 1)), 10**6) - party_vector(plan, 0, np.zeros((3, 1)), Xp, yp))) < 1e-10
    w, _ = local_logreg(ds, "t", 0.1, "half", clip=1.0, tol=1e-10, max_iter=100)
    assert np.linalg.norm(w - logreg.fit(X, np.where(y == 5.0, 1.0, -1.0), 0.1)) <= 2e-10 / 0.1


def test_batches_bound_what_is_held_at_once(tmp_path):
    ds = _dataset(tmp_path, n=5000, batch_rows=300, fmt="csv")
    sizes = [len(y) for _, y in open_rows(ds).batches()]
    assert max(sizes) <= 300 and sum(sizes) == 5000


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_any_source_of_the_same_rows_gives_the_same_sums_bit_for_bit(tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "c").mkdir()
    parquet = _dataset(tmp_path / "p", n=3000, batch_rows=512)  # row groups of 1000: not the batches' boundaries
    csv = _dataset(tmp_path / "c", n=3000, batch_rows=512, fmt="csv")
    plan = DpgdPlan(Task("binary"), 8, 1.0, 1e-6, lam=1e-2, rounds=1, total_records=3000)
    W = np.full((8, 1), 0.1)
    for r in (0, 1):
        assert np.array_equal(dpgd_contribution(parquet, "t", plan, r, W, 10**6), dpgd_contribution(csv, "t", plan, r, W, 10**6))
    assert np.array_equal(local_logreg(parquet, "t", 1e-2, "half", clip=1.0, tol=1e-10, max_iter=100)[0],
                          local_logreg(csv, "t", 1e-2, "half", clip=1.0, tol=1e-10, max_iter=100)[0])
