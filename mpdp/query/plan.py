"""A DP query's public plan: the SQL subset mpdp answers, compiled against the federation's schema.

:func:`compile_query` parses one ``SELECT`` with sqlglot and refuses (:class:`QueryError`, naming what is allowed)
anything outside this subset, before any job exists:

* aggregates ``COUNT(*)``, ``SUM(col)``, ``AVG(col)``, ``QUANTILE(col, q)``, ``MEDIAN(col)`` and
  ``PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY col)`` over numeric schema columns;
* ``FROM dataset`` — one table, the dataset's name;
* ``WHERE`` over schema columns: comparisons with literals (=, <>, <, <=, >, >=), ``BETWEEN``, ``IN``, AND/OR/NOT;
* ``GROUP BY`` schema columns whose categories the schema lists (categorical, binary, the label) or
  ``BIN(col, k)``: k equal-width bins over the numeric column's public schema bounds.

Every category and bin edge comes from the schema, never from the data, so the plan — the vector's layout, its
dimension and its sensitivity — is a function of public inputs only; curator and parties compile the same plan.

The party's vector (:mod:`mpdp.query.evaluate`) is a concatenation of *parts*, one per distinct statistic the
aggregates need, each with one block per group (the cartesian product of the GROUP BY columns, in order):

* ``count``: rows per group;
* ``sum col``: Σ clamp(v, lo, hi)/B per group, B = max(|lo|, |hi|) (every row's term in [−1, 1]);
* ``hist col``: rows per (group, bin) over :data:`QUANTILE_BINS` equal-width bins of [lo, hi].

ℓ2-sensitivity of one record's change (replace one record by any other, or add/remove one; docs/protocols/query.md):
a record puts a value of magnitude ≤ 1 into one coordinate of each part, so changing it moves at most two coordinates
of a part: Δ_count = Δ_hist = √2, Δ_sum = max(√2, (hi − lo)/B) ≤ 2, and Δ₂ = √(Σ_parts Δ_p²) for the whole vector.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mpdp.query.evaluation import Evaluation
    from mpdp.schema import Schema

QUANTILE_BINS = 32  # a quantile's histogram: equal-width bins over the column's public bounds
MAX_BINS = 100  # k of BIN(col, k)
MAX_DIMENSION = 4096  # of the party's vector (every part, every group)
MAX_AGGREGATES = 16

ALLOWED = ("allowed: SELECT of COUNT(*), SUM(col), AVG(col), QUANTILE(col, q), MEDIAN(col) or PERCENTILE_CONT(q) WITHIN GROUP "
           "(ORDER BY col) FROM <dataset> [WHERE comparisons of schema columns with literals, BETWEEN, IN, AND/OR/NOT] "
           "[GROUP BY schema columns with listed categories, or BIN(col, k): k equal-width bins over the schema's bounds]")


class QueryError(ValueError):
    """A query outside the subset, or naming what the schema does not hold; the message says what is allowed."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what}; {ALLOWED}")
        self.what = what


@dataclass(frozen=True)
class Column:
    """A schema column as a query sees it. ``kind``: numeric, categorical, binary or label; ``categories``: the
    groups of a non-numeric column (its vocabulary; binary and label: positive, then negative); ``matches``: the
    canonical cell values of each category (a label's positive class lists several)."""

    name: str
    kind: str
    lo: float = 0.0
    hi: float = 0.0
    categories: tuple[str, ...] = ()
    matches: tuple[tuple[str, ...], ...] = ()
    rest: bool = False  # binary/label without a negative list: the second category is every other value

    @property
    def scale(self) -> float:
        """B = max(|lo|, |hi|): a clamped value divided by B lies in [−1, 1]."""
        return max(abs(self.lo), abs(self.hi))


@dataclass(frozen=True)
class Group:
    column: Column
    bins: int = 0  # 0: the column's categories; k: BIN(col, k)
    label: str = ""  # its name in the result

    @property
    def size(self) -> int:
        return self.bins or len(self.column.categories)

    def keys(self) -> list[str]:
        """Each group's public label: a category, or a bin "[a, b)" (the last bin closed)."""
        if not self.bins:
            return list(self.column.categories)
        edges = bin_edges(self.column.lo, self.column.hi, self.bins)
        return [f"[{_num(edges[i])}, {_num(edges[i + 1])}{']' if i == self.bins - 1 else ')'}" for i in range(self.bins)]


@dataclass(frozen=True)
class Aggregate:
    kind: str  # count, sum, avg, quantile
    column: str = ""
    q: float = 0.0
    name: str = ""


@dataclass(frozen=True)
class Part:
    kind: str  # count, sum, hist
    column: str
    offset: int
    size: int
    sensitivity: float


Predicate = tuple  # ("and", p, q) | ("or", p, q) | ("not", p) | ("cmp", op, column, value) | ("in", column, values) | ("true",)


@dataclass(frozen=True)
class QueryPlan:
    sql: str
    dataset: str
    aggregates: tuple[Aggregate, ...]
    groups: tuple[Group, ...]
    where: Predicate
    columns: dict[str, Column] = field(repr=False)  # every column the query reads
    parts: tuple[Part, ...] = ()
    evaluation: "Evaluation | None" = None  # set: the plan evaluates a released model (mpdp.query.evaluation), no SQL

    @property
    def cells(self) -> int:
        """G: the groups (the product of the GROUP BY columns' sizes; 1 without GROUP BY)."""
        return math.prod(g.size for g in self.groups) if self.groups else 1

    @property
    def dimension(self) -> int:
        return sum(p.size for p in self.parts)

    @property
    def sensitivity(self) -> float:
        """Δ₂ of the whole vector: √(Σ Δ_p²) (the parts are moved by the same record at once)."""
        return math.sqrt(sum(p.sensitivity ** 2 for p in self.parts))

    def part(self, kind: str, column: str = "") -> Part:
        return next(p for p in self.parts if p.kind == kind and p.column == column)

    def group_keys(self) -> list[tuple[str, ...]]:
        """Each group's labels, in the vector's order (the last GROUP BY column varies fastest)."""
        return [tuple(k) for k in itertools.product(*(g.keys() for g in self.groups))] if self.groups else [()]

    def split(self) -> str:
        """The budget split the release states: each part's Δ_p, and its share ρ_p = ρ·Δ_p²/Δ₂² of the job's ρ-zCDP."""
        total = self.sensitivity ** 2
        return "; ".join(f"{p.kind}{' ' + p.column if p.column else ''}: Δ₂ = {p.sensitivity:.4g}, ρ share {p.sensitivity ** 2 / total:.3g}"
                         for p in self.parts)


def bin_edges(lo: float, hi: float, k: int) -> list[float]:
    return [lo + (hi - lo) * i / k for i in range(k)] + [hi]


def _num(v: float) -> str:
    return format(v, "g")


# -- schema → columns -------------------------------------------------------------------------------------------
def schema_columns(schema: "Schema | None") -> dict[str, Column]:
    """Every column of ``schema`` a query may name (none without a schema: COUNT(*) only)."""
    from mpdp.schema import Binary, Categorical, Numeric, _canon

    if schema is None:
        return {}
    out: dict[str, Column] = {}
    for f in schema.features:
        if isinstance(f, Numeric):
            out[f.name] = Column(f.name, "numeric", float(f.bounds[0]), float(f.bounds[1]))
        elif isinstance(f, Categorical):
            out[f.name] = Column(f.name, "categorical", categories=tuple(f.vocabulary), matches=tuple((_canon(v),) for v in f.vocabulary))
        elif isinstance(f, Binary):
            neg = f.negative if f.negative is not None else f"not {f.positive}"
            out[f.name] = Column(f.name, "binary", categories=(f.positive, neg),
                                 matches=((_canon(f.positive),), (_canon(f.negative),) if f.negative is not None else ()), rest=f.negative is None)
    lab = schema.label
    neg = lab.negative[0] if lab.negative else f"not {lab.positive[0]}"
    out[lab.column] = Column(lab.column, "label", categories=(lab.positive[0], neg),
                             matches=(tuple(_canon(v) for v in lab.positive), tuple(_canon(v) for v in lab.negative)), rest=not lab.negative)
    return out


# -- the compiler -------------------------------------------------------------------------------------------------
def compile_query(sql: str, schema: "Schema | None", dataset: str | None = None) -> QueryPlan:
    """The plan of ``sql`` over ``schema`` (None: a dataset without a schema, COUNT(*) only); ``dataset``: the name
    the FROM must give (None: any one table). Raises :class:`QueryError`."""
    try:
        return _compile(sql, schema, dataset)
    except RecursionError:  # a query nested deeper than the parser's stack (at most 8192 characters reach it)
        raise QueryError("the query nests too deeply") from None


def _compile(sql: str, schema: "Schema | None", dataset: str | None) -> QueryPlan:
    import sqlglot
    from sqlglot import exp

    if not isinstance(sql, str) or not sql.strip():
        raise QueryError("the query is empty")
    if len(sql) > 8192:
        raise QueryError("the query is longer than 8192 characters")
    try:
        trees = sqlglot.parse(sql)
    except sqlglot.errors.SqlglotError:
        raise QueryError("the query does not parse as SQL") from None
    trees = [t for t in trees if t is not None]
    if len(trees) != 1 or not isinstance(trees[0], exp.Select):
        raise QueryError("the query must be exactly one SELECT")
    tree = trees[0]
    columns = schema_columns(schema)
    extra = sorted(k for k, v in tree.args.items() if v and k not in ("expressions", "from", "from_", "where", "group"))
    if extra:
        raise QueryError(f"the query uses {extra[0].upper()}, which is not allowed")
    frm = tree.args.get("from") or tree.args.get("from_")
    if frm is None or not isinstance(frm.this, exp.Table) or frm.this.args.get("db") or frm.this.args.get("catalog") or frm.expressions:
        raise QueryError("FROM must name one dataset (no subquery, join or schema prefix)")
    name = frm.this.name
    if dataset is not None and name != dataset:
        raise QueryError(f"FROM names {name!r}, and the job's dataset is {dataset!r}")
    seen: set[str] = set()

    def column(node: Any, need: str | None = None) -> Column:
        if not isinstance(node, exp.Column) or node.table:
            raise QueryError(f"expected a column name, got {node.sql()[:40]!r}")
        col = columns.get(node.name)
        if col is None:
            raise QueryError(f"column {node.name!r} is not in the federation's schema" if columns else
                             "the dataset has no schema: only COUNT(*) without WHERE or GROUP BY")
        if need is not None and col.kind != need:
            raise QueryError(f"column {col.name!r} is {col.kind}; {need} needed here")
        seen.add(col.name)
        return col

    def literal(node: Any) -> float | str:
        if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
            return -float(node.this.this)
        if not isinstance(node, exp.Literal):
            raise QueryError(f"expected a literal, got {node.sql()[:40]!r} (predicates compare columns with literals)")
        if node.is_string:
            return str(node.this)
        return float(node.this)

    def value_for(col: Column, v: float | str) -> float | str:
        if col.kind == "numeric":
            if not isinstance(v, float) or not math.isfinite(v):
                raise QueryError(f"column {col.name!r} is numeric: compare it with a number")
            return v
        from mpdp.schema import _canon

        return _canon(v if isinstance(v, str) else _num(v))

    ops = {exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
    flipped = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "<>": "<>"}

    def predicate(node: Any, depth: int = 0) -> Predicate:
        if depth > 64:
            raise QueryError("the WHERE clause nests too deeply")
        if isinstance(node, exp.Paren):
            return predicate(node.this, depth + 1)
        if isinstance(node, exp.And):
            return ("and", predicate(node.this, depth + 1), predicate(node.expression, depth + 1))
        if isinstance(node, exp.Or):
            return ("or", predicate(node.this, depth + 1), predicate(node.expression, depth + 1))
        if isinstance(node, exp.Not):
            return ("not", predicate(node.this, depth + 1))
        if type(node) in ops:
            op = ops[type(node)]
            a, b = node.this, node.expression
            if isinstance(a, exp.Column):
                col, v = column(a), literal(b)
            elif isinstance(b, exp.Column):
                col, v, op = column(b), literal(a), flipped[op]
            else:
                raise QueryError("a comparison needs a schema column on one side and a literal on the other")
            if col.kind != "numeric" and op not in ("=", "<>"):
                raise QueryError(f"column {col.name!r} is {col.kind}: compare it with = or <> only")
            return ("cmp", op, col.name, value_for(col, v))
        if isinstance(node, exp.Between):
            col = column(node.this, "numeric")
            lo, hi = value_for(col, literal(node.args["low"])), value_for(col, literal(node.args["high"]))
            return ("and", ("cmp", ">=", col.name, lo), ("cmp", "<=", col.name, hi))
        if isinstance(node, exp.In):
            if node.args.get("query") or node.args.get("unnest") or not node.expressions:
                raise QueryError("IN takes a list of literals")
            col = column(node.this)
            return ("in", col.name, tuple(value_for(col, literal(e)) for e in node.expressions))
        if isinstance(node, exp.Boolean):
            return ("true",) if node.this else ("not", ("true",))
        raise QueryError(f"WHERE does not allow {type(node).__name__.upper()} ({node.sql()[:40]!r})")

    def grouping(node: Any) -> Group:
        if isinstance(node, exp.Column):
            col = column(node)
            if col.kind == "numeric":
                raise QueryError(f"numeric column {col.name!r} is grouped by BIN({col.name}, k): k equal-width bins over its schema bounds")
            return Group(col, 0, col.name)
        if isinstance(node, exp.Anonymous) and str(node.this).upper() == "BIN":
            args = node.expressions
            if len(args) != 2:
                raise QueryError("BIN takes a numeric column and a number of bins: BIN(col, k)")
            col = column(args[0], "numeric")
            k = literal(args[1])
            if not isinstance(k, float) or not k.is_integer() or not 1 <= k <= MAX_BINS:
                raise QueryError(f"BIN's k must be a whole number of bins in 1..{MAX_BINS}")
            return Group(col, int(k), f"{col.name}_bin")
        raise QueryError(f"GROUP BY takes schema columns with listed categories or BIN(col, k), not {node.sql()[:40]!r} "
                         "(bins come from the schema's public bounds, never from the data)")

    where: Predicate = ("true",)
    if tree.args.get("where") is not None:
        where = predicate(tree.args["where"].this)
    groups: list[Group] = []
    group_sql: list[str] = []
    if tree.args.get("group") is not None:
        for g in tree.args["group"].expressions:
            groups.append(grouping(g))
            group_sql.append(g.sql())
        if len({g.column.name for g in groups}) != len(groups):
            raise QueryError("GROUP BY names a column twice")

    def quantile(q: Any) -> float:
        v = literal(q)
        if not isinstance(v, float) or not 0.0 < v < 1.0:
            raise QueryError("a quantile's q is a number strictly between 0 and 1")
        return v

    aggregates: list[Aggregate] = []
    for item in tree.expressions:
        alias = item.alias if isinstance(item, exp.Alias) else ""
        node = item.this if isinstance(item, exp.Alias) else item
        if node.sql() in group_sql:
            continue  # a grouping column in the SELECT list: every result row carries its group's labels anyway
        if isinstance(node, exp.Count):
            if not isinstance(node.this, exp.Star) or node.args.get("distinct"):
                raise QueryError("COUNT takes * only (each row counts once in its group)")
            agg = Aggregate("count", "", 0.0, alias or "count")
        elif isinstance(node, (exp.Sum, exp.Avg)):
            kind = "sum" if isinstance(node, exp.Sum) else "avg"
            if isinstance(node.this, exp.Distinct):
                raise QueryError(f"{kind.upper()}(DISTINCT …) is not allowed")
            col = column(node.this, "numeric")
            agg = Aggregate(kind, col.name, 0.0, alias or f"{kind}_{col.name}")
        elif isinstance(node, exp.Quantile):
            col = column(node.this, "numeric")
            q = quantile(node.args.get("quantile"))
            agg = Aggregate("quantile", col.name, q, alias or f"q{_num(q * 100)}_{col.name}")
        elif isinstance(node, exp.Median):
            col = column(node.this, "numeric")
            agg = Aggregate("quantile", col.name, 0.5, alias or f"median_{col.name}")
        elif isinstance(node, exp.WithinGroup) and isinstance(node.this, exp.PercentileCont):
            order = node.expression
            if not isinstance(order, exp.Order) or len(order.expressions) != 1 or order.expressions[0].args.get("desc"):
                raise QueryError("PERCENTILE_CONT(q) WITHIN GROUP takes ORDER BY one column, ascending")
            col = column(order.expressions[0].this, "numeric")
            q = quantile(node.this.this)
            agg = Aggregate("quantile", col.name, q, alias or f"q{_num(q * 100)}_{col.name}")
        elif isinstance(node, exp.Column):
            raise QueryError(f"column {node.name!r} is selected but not grouped by")
        else:
            raise QueryError(f"SELECT does not allow {node.sql()[:40]!r}")
        aggregates.append(agg)
    if not aggregates:
        raise QueryError("the query selects no aggregate")
    if len(aggregates) > MAX_AGGREGATES:
        raise QueryError(f"at most {MAX_AGGREGATES} aggregates in one query")
    names = [a.name for a in aggregates] + [g.label for g in groups]
    if len(set(names)) != len(names):
        raise QueryError("two result columns have the same name: give them distinct aliases")

    plan = QueryPlan(sql, name, tuple(aggregates), tuple(groups), where, {c: columns[c] for c in sorted(seen)})
    parts: list[Part] = []
    G = plan.cells

    def add(kind: str, col: str, size: int, sens: float) -> None:
        if not any(p.kind == kind and p.column == col for p in parts):
            parts.append(Part(kind, col, sum(p.size for p in parts), size, sens))

    for a in aggregates:
        if a.kind in ("count", "avg"):
            add("count", "", G, math.sqrt(2.0))
        if a.kind in ("sum", "avg"):
            c = columns[a.column]
            if c.scale <= 0:
                raise QueryError(f"column {c.name!r} has bounds [0, 0]: its sum is 0")
            add("sum", a.column, G, max(math.sqrt(2.0), (c.hi - c.lo) / c.scale))
        if a.kind == "quantile":
            add("hist", a.column, G * QUANTILE_BINS, math.sqrt(2.0))
    plan = QueryPlan(sql, name, tuple(aggregates), tuple(groups), where, plan.columns, tuple(parts))
    if plan.dimension > MAX_DIMENSION:
        raise QueryError(f"the query needs {plan.dimension} values a party (groups × statistics); at most {MAX_DIMENSION}")
    return plan
