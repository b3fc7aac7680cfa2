"""A DP query's party vector computed inside PostgreSQL (a party whose dataset is a SQL source).

The plan (:mod:`mpdp.query.plan`) becomes a few aggregate statements over the party's table — the same row rules as
:mod:`mpdp.query.evaluate` (a row counts when every named column holds a value the schema knows and WHERE holds; one
group per row; values clamped to the public bounds; equal-width bins) — so only one row per group (and bin) leaves
the database, not the table. Literals and categories travel as parameters, never spliced into the statement.

Pushed down only where SQL compares exactly as the batch path does: the query's categorical columns are text
columns and none of their categories, nor the literals compared with them, is spelled as a number (the batch path
compares numbers by value, "1.0" = "1"); otherwise :func:`vector` returns None and the caller reads batches. A sum may
differ from the batch path's in its last bits (the database adds in its own order).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from mpdp.data.dataset import require_rows
from mpdp.data.sources import NUMERIC, SqlSource
from mpdp.extras import require
from mpdp.query.plan import QUANTILE_BINS, Column, Predicate, QueryPlan

if TYPE_CHECKING:
    from mpdp.schema import Schema

_WS = " \t\n\r\x0b\x0c"  # the whitespace str.strip() removes from an ASCII cell


def _plain(v: str) -> bool:
    """A text value SQL compares as the batch path does: stripped already and not a number's spelling."""
    try:
        float(v)
        return False  # a number's spelling: the batch path compares it by value ("1.0" = "1"), SQL by its text
    except ValueError:
        return v == v.strip(_WS)


def pushable(plan: QueryPlan, source: SqlSource) -> bool:
    kinds = source.types()
    for name, col in plan.columns.items():
        if col.kind == "numeric":
            if kinds.get(name) != NUMERIC:
                return False
        elif kinds.get(name) == NUMERIC or not all(_plain(v) for m in col.matches for v in m):
            return False
    return _plain_literals(plan.where, plan)


def _plain_literals(p: Predicate, plan: QueryPlan) -> bool:
    if p[0] in ("and", "or"):
        return _plain_literals(p[1], plan) and _plain_literals(p[2], plan)
    if p[0] == "not":
        return _plain_literals(p[1], plan)
    if p[0] == "in":
        return plan.columns[p[1]].kind == "numeric" or all(_plain(str(v)) for v in p[2])
    if p[0] == "cmp":
        return plan.columns[p[2]].kind == "numeric" or _plain(str(p[3]))
    return True


class _Sql:
    """Builds one statement's SQL text and its parameters."""

    def __init__(self) -> None:
        self.params: dict[str, Any] = {}

    def lit(self, v: Any) -> str:
        name = f"p{len(self.params)}"
        self.params[name] = v
        return f"%({name})s"

    def col(self, c: Column) -> str:
        from psycopg import sql

        ident = sql.Identifier(c.name).as_string(None)
        return f"({ident})::float8" if c.kind == "numeric" else f"btrim(({ident})::text, {self.lit(_WS)})"

    def valid(self, c: Column, missing: list[str]) -> str:
        x = self.col(c)
        if c.kind == "numeric":
            return f"({x} IS NOT NULL AND {x} NOT IN ('NaN'::float8, 'Infinity'::float8, '-Infinity'::float8))"
        listed = [v for m in c.matches for v in m]
        if c.rest:  # every value but a missing one is a category
            return f"({x} IS NOT NULL AND NOT ({x} = ANY({self.lit(missing)})))"
        return f"({x} = ANY({self.lit(listed)}))"

    def clamp(self, c: Column) -> str:
        return f"LEAST(GREATEST({self.col(c)}, {self.lit(c.lo)}::float8), {self.lit(c.hi)}::float8)"

    def bin(self, c: Column, k: int) -> str:
        if c.hi <= c.lo:
            return "0"
        return (f"LEAST(FLOOR(({self.clamp(c)} - {self.lit(c.lo)}::float8) / {self.lit(c.hi - c.lo)}::float8 * {self.lit(float(k))}::float8), "
                f"{self.lit(k - 1)})::int")

    def code(self, c: Column) -> str:
        x = self.col(c)
        whens = " ".join(f"WHEN {x} = ANY({self.lit(list(m))}) THEN {j}" for j, m in enumerate(c.matches) if m)
        return f"(CASE {whens} ELSE {1 if c.rest else -1} END)"

    def pred(self, p: Predicate, plan: QueryPlan) -> str:
        kind = p[0]
        if kind == "true":
            return "TRUE"
        if kind in ("and", "or"):
            return f"({self.pred(p[1], plan)} {kind.upper()} {self.pred(p[2], plan)})"
        if kind == "not":
            return f"(NOT {self.pred(p[1], plan)})"
        if kind == "in":
            c = plan.columns[p[1]]
            return f"({self.col(c)} = ANY({self.lit([float(v) if c.kind == 'numeric' else v for v in p[2]])}))"
        _, op, name, v = p
        return f"({self.col(plan.columns[name])} {op} {self.lit(v)})"


def vector(plan: QueryPlan, source: SqlSource, schema: "Schema", records_limit: int) -> np.ndarray | None:
    """The party's vector computed by the database, or None when the query cannot be pushed down exactly."""
    require("psycopg", "a DP query over an SQL dataset")
    import psycopg
    from psycopg import sql

    if not pushable(plan, source):
        return None
    frm = source._from().as_string(None).replace("%", "%%")  # the party's own table or query; % is not a placeholder
    missing = list(schema.missing_values)
    z = np.zeros(plan.dimension)

    def rows_of(q: _Sql, select: str, group: str) -> str:
        where = " AND ".join([q.valid(c, missing) for c in plan.columns.values()] + [q.pred(plan.where, plan)])
        gexpr = "0"
        for g in plan.groups:
            gexpr = f"(({gexpr}) * {g.size} + {q.bin(g.column, g.bins) if g.bins else q.code(g.column)})"
        return f"SELECT {gexpr} AS g{group}, {select} FROM {frm} WHERE {where} GROUP BY 1{', 2' if group else ''}"

    with source._connect() as conn:
        try:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")  # every statement sees the same rows
            (total,) = conn.execute(sql.SQL("SELECT COUNT(*) FROM {}").format(source._from())).fetchone() or (0,)
            require_rows(int(total), records_limit, "records_per_party")
            flat = [p for p in plan.parts if p.kind != "hist"]
            if flat:
                q = _Sql()
                sums = [p for p in flat if p.kind == "sum"]
                select = ", ".join(["COUNT(*)"] + [f"SUM({q.clamp(plan.columns[p.column])} / {q.lit(plan.columns[p.column].scale)}::float8)" for p in sums])
                stmt = rows_of(q, select, "")
                for g, n, *s in conn.execute(stmt, q.params).fetchall():
                    for p in flat:
                        z[p.offset + g] = float(n) if p.kind == "count" else float(s[sums.index(p)])
            for p in (p for p in plan.parts if p.kind == "hist"):
                q = _Sql()
                b = q.bin(plan.columns[p.column], QUANTILE_BINS)
                stmt = rows_of(q, "COUNT(*)", f", {b} AS b")
                for g, hb, n in conn.execute(stmt, q.params).fetchall():
                    z[p.offset + g * QUANTILE_BINS + hb] = float(n)
        except psycopg.Error as e:
            raise source._fail(e) from None
    return z
