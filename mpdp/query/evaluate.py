"""A party's side of a DP query: its vector (:mod:`mpdp.query.plan`'s layout) over its own rows, in bounded memory.

:func:`party_vector` reads the party's source batch by batch (only the columns the query names) and keeps one
running vector of the plan's dimension: memory is one batch plus the vector, whatever the table's size.

Per row (docs/protocols/query.md, "What a party contributes"):

* a row counts only if every column the query names holds a value the schema knows (a number; a listed category)
  and the WHERE predicate holds on it — SQL's NULL semantics, made total: a missing or unknown cell excludes the row;
* it falls into exactly one group (its categories; a numeric column's bin after clamping to the public bounds), so
  it counts at most once per group and once in the whole vector;
* a summed value is clamped to the column's public bounds [lo, hi] and divided by B = max(|lo|, |hi|); a quantile's
  value is clamped and falls into one of the plan's equal-width bins.

The party's total rows must fit its public row bound (the job's ``records_per_party``): the DCA job proves every
coordinate of the vector within that bound on the shares, and a party with more rows refuses (DoesNotFit) rather
than be clipped silently.
"""

from __future__ import annotations

import math
from typing import Iterable, Iterator

import numpy as np

from mpdp.data.dataset import DoesNotFit, require_rows
from mpdp.query.plan import QUANTILE_BINS, Column, Predicate, QueryPlan


def _canon_all(values: np.ndarray) -> np.ndarray:
    """Every cell canonical as the schema compares it (:func:`mpdp.schema._canon`), each distinct text cell of the
    batch canonicalised once: a column holds few distinct categories, and ``_canon`` costs a failed float parse per
    text cell (memory: at most the batch's distinct cells). Other cells (numbers, None) go through ``_canon`` each."""
    from mpdp.schema import _canon, _text_column

    if values.dtype.kind == "f":
        values = _text_column(values)
    import pandas as pd  # type: ignore[import-untyped]

    if len(values) and pd.api.types.infer_dtype(values, skipna=False) == "string":  # str cells only: hashed in C, compared exactly
        index, distinct = pd.factorize(values, use_na_sentinel=False)
        return np.array([_canon(v) for v in distinct], dtype=object)[index]
    seen: dict[str, str] = {}

    def canon(v: object) -> str:
        if type(v) is not str:
            return _canon(v)
        c = seen.get(v)
        if c is None:
            c = seen[v] = _canon(v)
        return c

    return np.array([canon(v) for v in values], dtype=object)


def _numbers(values: np.ndarray, missing: set[str]) -> np.ndarray:
    """The cells as floats; NaN where missing or not a finite number."""
    if values.dtype.kind in "fiu":
        out = values.astype(np.float64)
        out[~np.isfinite(out)] = np.nan
        return out
    out = np.full(len(values), np.nan)
    for i, v in enumerate(values):
        s = str(v).strip()
        if s in missing:
            continue
        try:
            f = float(s)
        except ValueError:
            continue
        if math.isfinite(f):
            out[i] = f
    return out


def _codes(col: Column, text: np.ndarray) -> np.ndarray:
    """Each cell's category index (−1: missing, or not a category the schema lists)."""
    codes = np.full(len(text), -1, dtype=np.int64)
    for j, m in enumerate(col.matches):
        if m:
            codes[np.isin(text, list(m))] = j
    if col.rest:  # binary/label without a negative list: every other value is the second category
        codes[codes < 0] = 1
    return codes


class _Columns:
    """One batch's cells of the query's columns: numbers, category codes and canonical text."""

    def __init__(self, plan: QueryPlan, columns: dict[str, np.ndarray], n: int, missing: set[str]) -> None:
        self.n = n
        self.num: dict[str, np.ndarray] = {}
        self.code: dict[str, np.ndarray] = {}
        self.text: dict[str, np.ndarray] = {}
        self.valid = np.ones(n, dtype=bool)
        for name, col in plan.columns.items():
            raw = columns[name]
            if col.kind == "numeric":
                self.num[name] = _numbers(raw, missing)
                self.valid &= ~np.isnan(self.num[name])
            else:
                text = _canon_all(raw)
                self.text[name] = text
                self.code[name] = _codes(col, text)
                self.valid &= (self.code[name] >= 0) & ~np.isin(text, list(missing))

    def holds(self, p: Predicate, plan: QueryPlan) -> np.ndarray:
        kind = p[0]
        if kind == "true":
            return np.ones(self.n, dtype=bool)
        if kind == "and":
            return self.holds(p[1], plan) & self.holds(p[2], plan)
        if kind == "or":
            return self.holds(p[1], plan) | self.holds(p[2], plan)
        if kind == "not":
            return ~self.holds(p[1], plan)
        if kind == "in":
            vals = self.num[p[1]] if p[1] in self.num else self.text[p[1]]
            return np.isin(vals, list(p[2]))
        _, op, name, v = p
        x = self.num[name] if name in self.num else self.text[name]
        with np.errstate(invalid="ignore"):
            return {"=": lambda: x == v, "<>": lambda: x != v, "<": lambda: x < v, "<=": lambda: x <= v,
                    ">": lambda: x > v, ">=": lambda: x >= v}[op]()


def _bin(values: np.ndarray, lo: float, hi: float, k: int) -> np.ndarray:
    """The equal-width bin of each value clamped to [lo, hi] (the last bin closed)."""
    if hi <= lo:
        return np.zeros(len(values), dtype=np.int64)
    v = np.clip(np.nan_to_num(values, nan=lo), lo, hi)  # a missing value's row is excluded anyway (its bin is never used)
    b = np.floor((v - lo) / (hi - lo) * k).astype(np.int64)
    return np.minimum(b, k - 1)


def batch_vector(plan: QueryPlan, columns: dict[str, np.ndarray], n: int, missing: Iterable[str] = ("", "?", "NA")) -> np.ndarray:
    """The vector of one batch of ``n`` rows (``columns``: name → cells)."""
    from mpdp.schema import _canon

    cells = _Columns(plan, columns, n, {_canon(m) for m in missing})
    keep = cells.valid & cells.holds(plan.where, plan)
    group = np.zeros(n, dtype=np.int64)
    for g in plan.groups:  # row-major: the last GROUP BY column varies fastest
        idx = _bin(cells.num[g.column.name], g.column.lo, g.column.hi, g.bins) if g.bins else cells.code[g.column.name]
        group = group * g.size + idx
    group = group[keep]
    G = plan.cells
    z = np.zeros(plan.dimension)
    for p in plan.parts:
        if p.kind == "count":
            z[p.offset:p.offset + G] = np.bincount(group, minlength=G)
        elif p.kind == "sum":
            c = plan.columns[p.column]
            v = np.clip(cells.num[p.column][keep], c.lo, c.hi) / c.scale
            z[p.offset:p.offset + G] = np.bincount(group, weights=v, minlength=G)
        else:  # hist
            c = plan.columns[p.column]
            b = _bin(cells.num[p.column][keep], c.lo, c.hi, QUANTILE_BINS)
            z[p.offset:p.offset + G * QUANTILE_BINS] = np.bincount(group * QUANTILE_BINS + b, minlength=G * QUANTILE_BINS)
    return z


def vector(plan: QueryPlan, batches: Iterator[tuple[dict[str, np.ndarray], int]], records_limit: int,
           missing: Iterable[str] = ("", "?", "NA")) -> np.ndarray:
    """The party's vector over ``batches`` ((columns, rows) each); DoesNotFit if it holds more than ``records_limit`` rows."""
    miss = tuple(missing)
    z = np.zeros(plan.dimension)
    rows = 0
    for columns, n in batches:
        rows += n
        require_rows(rows, records_limit, "records_per_party")
        if n:
            z += batch_vector(plan, columns, n, miss)
    return z


def dataset_vector(src, name: str, plan: QueryPlan, records_limit: int) -> np.ndarray:
    """The vector of a configured dataset (``mpdp.data.dataset.DatasetSource``) through its source's batches; a dataset
    without a schema can only be counted (COUNT(*) without WHERE or GROUP BY: its rows as the file loads them)."""
    from mpdp.data.dataset import open_rows, schema_of, source_of
    from mpdp.data.sources import DEFAULT_BATCH_ROWS, SqlSource

    if plan.evaluation is not None:  # a released model's confusion matrix and score histograms (mpdp.query.evaluation)
        from mpdp.query.evaluation import dataset_vector as evaluation_vector

        return evaluation_vector(src, name, plan, records_limit)
    schema = schema_of(src)
    if schema is None:
        if plan.columns or plan.groups or plan.parts != (plan.parts[0],) or plan.parts[0].kind != "count":
            raise DoesNotFit("the dataset has no schema: it answers COUNT(*) only")
        n = sum(len(y) for _, y in open_rows(src, name=name).batches())
        require_rows(n, records_limit, "records_per_party")
        return np.full(plan.dimension, float(n))
    source = source_of(src, schema)
    schema.check_types(source)
    if isinstance(source, SqlSource):  # PostgreSQL: the database aggregates, one row per group leaves it
        from mpdp.query.pushdown import vector as pushed

        z = pushed(plan, source, schema, records_limit)
        if z is not None:
            return z
    names = sorted(plan.columns)
    rows = int(getattr(src, "batch_rows", DEFAULT_BATCH_ROWS))

    def batches() -> Iterator[tuple[dict[str, np.ndarray], int]]:
        for b in source.batches(rows, names or [schema.label.column]):
            yield b.columns, b.good

    return vector(plan, batches(), records_limit, schema.missing_values)
