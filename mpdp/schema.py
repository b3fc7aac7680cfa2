"""The federation's data schema: one public YAML file every party validates and encodes its own file with.

A schema names the features and their types (numeric with public bounds, categorical with a vocabulary,
binary), the label and its positive class, what to do with missing or unknown values, and the row-norm clip
bound. Every party encodes identically: categoricals one-hot, numerics scaled onto [0, 1] (or [−1, 1]) by
the schema's PUBLIC bounds with clipping, binaries 0/1, then each row clipped to ``row_norm``; labels ±1.

The schema is public and shared; its :meth:`Schema.sha256` (a hash of its canonical JSON, so comments and
layout do not matter) travels in every job spec, and a party whose dataset has another schema refuses the job.
The :class:`Report` of an encoding (rows dropped, values clipped) is the party's own and never leaves it.

Pure: no network. ``mpdp schema check`` and ``mpdp schema draft`` are the command-line faces (docs/schema.md).

Example::

    mpdp_schema: 1
    version: 1
    columns: [age, workclass, sex, income]      # files without a header row
    features:
      - {name: age, type: numeric, bounds: [17, 90]}
      - {name: workclass, type: categorical, vocabulary: [Private, State-gov]}
      - {name: sex, type: binary, positive: Male, negative: Female}
    label: {column: income, positive: [">50K"], negative: ["<=50K"]}
    missing: drop
    row_norm: 1.0
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Iterator, Literal, Sequence

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from mpdp.data.loaders import DatasetError, read_rows

if TYPE_CHECKING:
    from mpdp.data.sources import Batch, Source

FORMAT = 1  # the schema file format this module reads (``mpdp_schema:``)
DRAFT_WARNING = (
    "WARNING: this draft was computed from YOUR PRIVATE FILE. Its numeric bounds are that file's minimum and "
    "maximum and its vocabularies are the values that occur in it: both reveal facts about individual records "
    "(the oldest patient, a rare category). They are NOT public bounds. Replace every bound with one from public "
    "knowledge (a standard, a data dictionary, a physical limit) and every vocabulary with the documented list "
    "before you share this schema with the federation."
)
DRAFT_MAX_CATEGORIES = 64  # draft: a text column with more distinct values is left out (an id, a free-text field)


class SchemaError(ValueError):
    """The schema file is missing or invalid; the message names the file and the field."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _as_text(v: object) -> object:
    """Numbers in a vocabulary or a class list are text (``[1, 2]`` means the cells "1" and "2")."""
    if isinstance(v, list):
        return [_as_text(x) for x in v]
    return str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v


class _Loader(yaml.SafeLoader):
    """YAML without implicit booleans: ``yes``, ``no``, ``on`` stay the words a file contains."""


class _Dumper(yaml.SafeDumper):
    """Lists of scalars in flow style (``bounds: [17, 90]``), everything else in block style."""


def _represent_list(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
    flow = all(not isinstance(x, (dict, list)) for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _represent_list)
_Loader.yaml_implicit_resolvers = {k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:bool"] for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}


class Numeric(_Model):
    """A number, scaled onto [0, 1] (or [−1, 1]) by public ``bounds``; values outside are clipped to them."""

    name: str = Field(min_length=1)
    type: Literal["numeric"]
    bounds: tuple[float, float] = Field(description="public [lo, hi]: never the minimum and maximum of private data")
    transform: Literal["none", "log1p"] = Field("none", description="log1p: scale log(1 + v) between log(1 + lo) and log(1 + hi) (long-tailed amounts)")
    impute: float | None = Field(None, description="missing: impute uses this value (default: the middle of the bounds)")

    @model_validator(mode="after")
    def _bounds(self) -> "Numeric":
        lo, hi = self.bounds
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"feature {self.name}: bounds must be finite with lo < hi")
        if self.transform == "log1p" and lo <= -1:
            raise ValueError(f"feature {self.name}: log1p needs bounds above -1")
        if self.impute is not None and not lo <= self.impute <= hi:
            raise ValueError(f"feature {self.name}: impute must lie within the bounds")
        return self


class Categorical(_Model):
    """One of a public ``vocabulary``, one-hot encoded (one column per entry)."""

    name: str = Field(min_length=1)
    type: Literal["categorical"]
    vocabulary: list[str] = Field(min_length=1)

    _text = field_validator("vocabulary", mode="before")(_as_text)

    @field_validator("vocabulary")
    @classmethod
    def _distinct(cls, v: list[str]) -> list[str]:
        canon = [_canon(s) for s in v]
        if len(set(canon)) != len(canon) or "" in canon:
            raise ValueError("vocabulary entries must be non-empty and distinct")
        return v


class Binary(_Model):
    """Two values: ``positive`` encodes as 1, ``negative`` (or, if unset, anything else) as 0."""

    name: str = Field(min_length=1)
    type: Literal["binary"]
    positive: str = Field(min_length=1)
    negative: str | None = None

    _text = field_validator("positive", "negative", mode="before")(_as_text)


Feature = Annotated[Numeric | Categorical | Binary, Field(discriminator="type")]


class Label(_Model):
    """The label column; values in ``positive`` become +1, those in ``negative`` (or any other, if empty) −1."""

    column: str = Field(min_length=1)
    positive: list[str] = Field(min_length=1)
    negative: list[str] = []

    @field_validator("positive", "negative", mode="before")
    @classmethod
    def _listed(cls, v: object) -> object:
        return _as_text([v] if isinstance(v, (str, int, float)) else v)


@dataclass
class Report:
    """What encoding did to one file. Private to the party: it is printed locally and never sent."""

    rows: int = 0  # data rows read (blank lines and a header row not counted)
    used: int = 0
    dropped: dict[str, int] = field(default_factory=dict)  # reason → rows: malformed, missing, unknown, label
    imputed: dict[str, int] = field(default_factory=dict)  # feature → values imputed (missing: impute; unknown: impute)
    clipped: dict[str, int] = field(default_factory=dict)  # numeric feature → values outside the public bounds
    clipped_rows: int = 0  # rows scaled onto the row-norm ball
    positive: int = 0
    negative: int = 0
    examples: dict[str, list[str]] = field(default_factory=dict)  # feature → a few values that were unknown (local only)

    def to_json(self) -> dict:
        return {"rows": self.rows, "used": self.used, "dropped": dict(self.dropped), "imputed": dict(self.imputed), "clipped": dict(self.clipped),
                "clipped_rows": self.clipped_rows, "labels": {"positive": self.positive, "negative": self.negative},
                "unknown_examples": {k: list(v) for k, v in self.examples.items()}}

    def _drop(self, reason: str, n: int) -> None:
        if n:
            self.dropped[reason] = self.dropped.get(reason, 0) + n

    def merge(self, other: "Report") -> None:
        """Add ``other`` (the next batch's report): the sum is the report of both batches read as one table."""
        self.rows += other.rows
        self.used += other.used
        self.clipped_rows += other.clipped_rows
        self.positive += other.positive
        self.negative += other.negative
        for mine, theirs in ((self.dropped, other.dropped), (self.imputed, other.imputed), (self.clipped, other.clipped)):
            for k, v in theirs.items():
                mine[k] = mine.get(k, 0) + v
        for k, vals in other.examples.items():  # the five smallest of the union are among each batch's five smallest
            self.examples[k] = sorted(set(self.examples.get(k, [])) | set(vals))[:5]


@dataclass(frozen=True)
class Encoded:
    """A file encoded by a schema: ``X`` (n × d, rows with ‖x‖ ≤ row_norm), ``y`` in ±1, and the private report."""

    X: np.ndarray
    y: np.ndarray
    report: Report


class Schema(_Model):
    """A federation data schema (see the module docstring); load with :meth:`load`, hash with :meth:`sha256`."""

    mpdp_schema: Literal[1] = Field(1, description="the schema file format")
    version: int = Field(1, ge=1, description="the federation's version of this schema; bump it on every change")
    name: str = ""
    columns: list[str] | None = Field(None, description="the file's columns in order, for files without a header row")
    features: list[Feature] = Field(min_length=1)
    label: Label
    missing: Literal["drop", "impute", "error"] = Field("drop", description="a missing value: drop its row, impute it, or refuse the dataset (error)")
    missing_values: list[str] = Field(["", "?", "NA"], description="cells that mean missing (after stripping spaces)")
    _text = field_validator("columns", "missing_values", mode="before")(_as_text)
    unknown: Literal["error", "drop", "impute"] = Field("error", description="a category outside the vocabulary, or a non-number in a numeric column")
    scale: Literal["unit", "symmetric"] = Field("unit", description="numeric features onto [0, 1] (unit) or [-1, 1] (symmetric)")
    row_norm: float = Field(1.0, gt=0, allow_inf_nan=False, description="every encoded row is clipped to this L2 norm")

    @model_validator(mode="after")
    def _names(self) -> "Schema":
        names = [f.name for f in self.features]
        if len(set(names)) != len(names):
            raise ValueError("feature names must be distinct")
        if self.label.column in names:
            raise ValueError("the label column cannot also be a feature")
        if self.columns is not None:
            if len(set(self.columns)) != len(self.columns):
                raise ValueError("columns must be distinct")
            missing = [n for n in [*names, self.label.column] if n not in self.columns]
            if missing:
                raise ValueError(f"columns lacks {missing}")
        return self

    # -- files and identity ----------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path) -> "Schema":
        p = Path(path)
        if not p.exists():
            raise SchemaError(f"schema file {p} does not exist")
        try:
            raw = yaml.load(p.read_text(), Loader=_Loader)  # noqa: S506 (a SafeLoader)
        except yaml.YAMLError as e:
            raise SchemaError(f"{p} is not valid YAML: {e}") from e
        if not isinstance(raw, dict):
            raise SchemaError(f"{p} is not a schema (expected a mapping with features and label)")
        try:
            return cls.model_validate(raw)
        except ValidationError as e:
            raise SchemaError(f"{p}: {e}") from e

    def canonical(self) -> bytes:
        """The schema as canonical JSON (sorted keys, no spaces, defaults filled in): what :meth:`sha256` hashes."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()

    def sha256(self) -> str:
        """64 hex characters; equal for equal schemas whatever their comments, key order or layout."""
        return hashlib.sha256(self.canonical()).hexdigest()

    def to_yaml(self) -> str:
        """The schema as YAML (defaults left out, short lists on one line); loads back to an equal schema."""
        body = self.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
        head = {"mpdp_schema": self.mpdp_schema, "version": self.version}
        return yaml.dump({**head, **body}, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=200)

    @property
    def dimension(self) -> int:
        """d of the encoded rows."""
        return len(self.encoded_names())

    def encoded_names(self) -> list[str]:
        """One name per encoded column: the feature, or ``feature=value`` for a one-hot column."""
        out: list[str] = []
        for f in self.features:
            out += [f"{f.name}={v}" for v in f.vocabulary] if isinstance(f, Categorical) else [f.name]
        return out

    # -- encoding -----------------------------------------------------------------------------------
    def encode_file(self, path: str | Path, fmt: str = "auto") -> Encoded:
        """Read a party's file (CSV/TSV, optionally .gz, LIBSVM, or Parquet) and encode it, batch by batch
        (:meth:`encode_source`); the rows equal those of :meth:`encode_rows` over the whole file."""
        return self.encode_source(self.source(path, fmt))

    def source(self, path: str | Path, fmt: str = "auto") -> "Source":
        """The source of a party's file, its columns named by this schema (:func:`mpdp.data.sources.file_source`)."""
        from mpdp.data.sources import file_source

        return file_source(path, fmt, self.columns, [f.name for f in self.features], self.label.column)

    def needed(self) -> list[str]:
        """The columns an encoding reads: the features, then the label."""
        return [f.name for f in self.features] + [self.label.column]

    def check_types(self, source: "Source") -> None:
        """Refuse (DatasetError) a typed source (Parquet, SQL) whose columns are missing or whose type cannot hold
        the schema's feature: a numeric feature needs a numeric column. Text files carry no types (every cell is text)."""
        kinds = source.types()
        if not kinds:
            return
        absent = [n for n in self.needed() if n not in kinds]
        if absent:
            raise DatasetError(f"the table has no column {absent[0]!r}")
        for f in self.features:
            if isinstance(f, Numeric) and kinds[f.name] != "numeric":
                raise DatasetError(f"column {f.name!r} holds text, and the schema's feature {f.name} is numeric")

    def encode_batches(self, source: "Source", rows: int | None = None) -> Iterator[Encoded]:
        """Each batch of ``source`` encoded (:meth:`encode_batch`); the column types are checked first."""
        from mpdp.data.sources import DEFAULT_BATCH_ROWS

        self.check_types(source)
        for batch in source.batches(rows or DEFAULT_BATCH_ROWS, self.needed()):
            yield self.encode_batch(batch)

    def check_file(self, path: str | Path, fmt: str = "auto", rows: int | None = None) -> Report:
        """Validate a party's file batch by batch and return the encoding's report only (bounded memory: the encoded
        rows are dropped as each batch is counted); DatasetError as :meth:`encode_file` would raise."""
        report = Report()
        for enc in self.encode_batches(self.source(path, fmt), rows):
            report.merge(enc.report)
        return report

    def encode_source(self, source: "Source", rows: int | None = None) -> Encoded:
        """The whole source encoded: its batches' rows concatenated and their reports merged."""
        Xs, ys, report = [], [], Report()
        for enc in self.encode_batches(source, rows):
            Xs.append(enc.X)
            ys.append(enc.y)
            report.merge(enc.report)
        return Encoded(np.vstack(Xs) if Xs else np.zeros((0, self.dimension)), np.concatenate(ys) if ys else np.zeros(0), report)

    def encode_batch(self, batch: "Batch") -> Encoded:
        """Encode one batch of a source. Text cells are compared in their canonical spelling (:func:`_canon`), except
        that a numeric feature's number is read from the cell as written (all its digits); typed numbers are used as they are."""
        numeric = {f.name for f in self.features if isinstance(f, Numeric)}
        cols = {n: (c if c.dtype.kind == "f" or n in numeric else np.array([_canon(v) for v in c], dtype=object)) for n, c in batch.columns.items()}
        for n in (x.name for x in self.features if not isinstance(x, Numeric)):
            if cols[n].dtype.kind == "f":  # an integer or float column under a categorical/binary feature: its cells as text
                cols[n] = _text_column(cols[n])
        if cols[self.label.column].dtype.kind == "f":
            cols[self.label.column] = _text_column(cols[self.label.column])
        report = Report(rows=batch.rows)
        report._drop("malformed", batch.malformed)
        return self._encode(cols, batch.good, report)

    def encode_rows(self, rows: Sequence[Sequence[str]]) -> Encoded:
        """Encode text rows: a header row first unless the schema lists ``columns`` (then a header equal to them is skipped).

        Rows with the wrong number of cells are dropped as malformed (e.g. a file's junk first line)."""
        rows = [[c.strip() for c in r] for r in rows if any(c.strip() for c in r)]
        if self.columns is None:
            if not rows:
                raise DatasetError("the file is empty (expected a header row naming the columns)")
            header, body = rows[0], rows[1:]
        else:
            header = list(self.columns)
            body = rows[1:] if rows and rows[0] == header else rows
        needed = [f.name for f in self.features] + [self.label.column]
        absent = [n for n in needed if n not in header]
        if absent:
            raise DatasetError(f"the file has no column {absent[0]!r} (columns: {header[:20]})")
        from mpdp.data.sources import Batch

        good = [r for r in body if len(r) == len(header)]
        index = {n: header.index(n) for n in needed}
        return self.encode_batch(Batch({n: np.array([r[i] for r in good], dtype=object) for n, i in index.items()}, len(body), len(body) - len(good)))

    def _encode(self, cols: dict[str, np.ndarray], n: int, report: Report) -> Encoded:
        missing_tokens = {_canon(m) for m in self.missing_values}
        keep = np.ones(n, dtype=bool)
        drop_missing = np.zeros(n, dtype=bool)
        drop_unknown = np.zeros(n, dtype=bool)
        blocks: list[np.ndarray] = []
        for f in self.features:
            col = cols[f.name]
            miss = np.isnan(col) if col.dtype.kind == "f" else np.isin(np.array([_canon(v) for v in col], dtype=object), list(missing_tokens))
            if self.missing == "error" and miss.any():
                raise DatasetError(f"feature {f.name}: {int(miss.sum())} missing values, and the schema forbids them (missing: error)")
            block, unknown = self._feature(f, col, miss)
            if unknown.any():
                report.examples[f.name] = sorted({str(v) for v in col[unknown]})[:5]
                if self.unknown == "error":
                    raise DatasetError(f"feature {f.name}: {int(unknown.sum())} values outside the schema ({_what(f)}), e.g. {report.examples[f.name][:3]}; "
                                       "fix the file, or set unknown: drop or impute in the schema")
            if self.missing == "drop":
                drop_missing |= miss
            if self.unknown == "drop":
                drop_unknown |= unknown
            imputed = int(np.sum(miss)) * (self.missing == "impute") + int(np.sum(unknown)) * (self.unknown == "impute")
            if imputed:
                report.imputed[f.name] = imputed
            if isinstance(f, Numeric):
                lo, hi = f.bounds
                raw = block[:, 0]
                out = ~(miss | unknown) & ((raw < lo) | (raw > hi))
                if out.any():
                    report.clipped[f.name] = int(out.sum())
                block = self._scale(f, raw, miss | unknown)[:, None]
            blocks.append(block)
        y, label_missing, label_unknown = self._labels(cols[self.label.column], missing_tokens)
        if self.missing == "error" and label_missing.any():
            raise DatasetError(f"label {self.label.column}: {int(label_missing.sum())} missing values, and the schema forbids them (missing: error)")
        if label_unknown.any() and self.unknown == "error":
            vals = sorted({str(v) for v in cols[self.label.column][label_unknown]})[:3]
            raise DatasetError(f"label {self.label.column}: {int(label_unknown.sum())} values are neither positive {self.label.positive} nor negative "
                               f"{self.label.negative}, e.g. {vals}")
        report._drop("missing", int(np.sum(drop_missing)))
        report._drop("unknown", int(np.sum(drop_unknown & ~drop_missing)))
        label_drop = (label_missing | label_unknown) & ~drop_missing & ~drop_unknown
        report._drop("label", int(np.sum(label_drop)))
        keep &= ~(drop_missing | drop_unknown | label_missing | label_unknown)
        X = np.hstack(blocks)[keep] if blocks else np.zeros((int(keep.sum()), 0))
        y = y[keep]
        norms = np.linalg.norm(X, axis=1)
        over = norms > self.row_norm
        report.clipped_rows = int(over.sum())
        X[over] *= (self.row_norm / norms[over])[:, None]
        report.used = int(len(y))
        report.positive, report.negative = int(np.sum(y > 0)), int(np.sum(y < 0))
        return Encoded(X, y, report)

    def _feature(self, f: Numeric | Categorical | Binary, col: np.ndarray, miss: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(raw block, unknown mask): numeric values (nan where missing or unknown), one-hot columns, or 0/1."""
        n = len(col)
        if isinstance(f, Numeric) and col.dtype.kind == "f":  # a typed numeric column (Parquet, SQL): NaN is missing
            return np.where(miss, np.nan, col)[:, None], ~np.isfinite(col) & ~miss
        if isinstance(f, Numeric):
            vals = np.full(n, np.nan)
            unknown = np.zeros(n, dtype=bool)
            for i, v in enumerate(col):
                if miss[i]:
                    continue
                try:
                    vals[i] = float(v)
                except ValueError:
                    unknown[i] = True
                if not math.isfinite(vals[i]):
                    unknown[i] = True
            return vals[:, None], unknown
        if isinstance(f, Categorical):
            where = {_canon(v): j for j, v in enumerate(f.vocabulary)}
            idx = np.array([where.get(v, -1) for v in col], dtype=np.int64)
            unknown = (idx < 0) & ~miss
            onehot = np.zeros((n, len(f.vocabulary)))
            hit = idx >= 0
            onehot[np.nonzero(hit)[0], idx[hit]] = 1.0
            return onehot, unknown
        pos = col == _canon(f.positive)
        neg = (col == _canon(f.negative)) if f.negative is not None else ~pos
        return pos.astype(np.float64)[:, None], ~(pos | neg | miss)

    def _scale(self, f: Numeric, raw: np.ndarray, absent: np.ndarray) -> np.ndarray:
        lo, hi = f.bounds
        fill = f.impute if f.impute is not None else (lo + hi) / 2
        v = np.clip(np.where(absent, fill, raw), lo, hi)
        if f.transform == "log1p":
            v, lo, hi = np.log1p(v), math.log1p(lo), math.log1p(hi)
        z = (v - lo) / (hi - lo)
        return 2 * z - 1 if self.scale == "symmetric" else z

    def _labels(self, col: np.ndarray, missing_tokens: set[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pos = np.isin(col, [_canon(v) for v in self.label.positive])
        miss = np.isin(col, list(missing_tokens)) & ~pos
        neg = np.isin(col, [_canon(v) for v in self.label.negative]) if self.label.negative else ~pos & ~miss
        unknown = ~(pos | neg | miss)
        return np.where(pos, 1.0, -1.0), miss, unknown


def load(path: str | Path) -> Schema:
    """:meth:`Schema.load`."""
    return Schema.load(path)


@dataclass(frozen=True)
class Draft:
    """A proposed schema and the warning that must accompany it (its bounds and vocabularies are private)."""

    schema: Schema
    warning: str = DRAFT_WARNING
    skipped: tuple[str, ...] = ()  # columns left out (too many distinct text values: ids or free text)


def draft(path: str | Path, label: str | None = None, header: bool | None = None) -> Draft:
    """Propose a schema from a party's CSV file: bounds and vocabularies FROM THE PRIVATE FILE (see :data:`DRAFT_WARNING`).

    ``label``: the label column's name (default: the last column); ``header``: whether the first row names the
    columns (default: guessed: a first row with no number in a file that has numeric columns)."""
    rows = [[c.strip() for c in r] for r in read_rows(Path(path)) if any(c.strip() for c in r)]
    if not rows:
        raise DatasetError(f"{path} is empty")
    width = Counter(len(r) for r in rows).most_common(1)[0][0]
    if header is None:
        header = not any(_is_number(c) for c in rows[0]) and any(_is_number(c) for r in rows[1:4] for c in r)
    names = rows[0] if header else [f"c{i + 1}" for i in range(width)]
    body = [r for r in (rows[1:] if header else rows) if len(r) == width]
    if len(names) != width:
        raise DatasetError(f"{path}: the header has {len(names)} columns, most rows {width}")
    label = label if label is not None else names[-1]
    if label not in names:
        raise DatasetError(f"{path} has no column {label!r} (columns: {names})")
    missing = ["", "?", "NA"]
    features: list[dict] = []
    skipped: list[str] = []
    label_values: Counter[str] = Counter()
    for i, name in enumerate(names):
        vals = [r[i] for r in body if r[i] not in missing]
        if name == label:
            label_values = Counter(vals)
            continue
        distinct = sorted(set(vals))
        if vals and all(_is_number(v) for v in distinct) and len(distinct) > 2:
            nums = [float(v) for v in distinct]
            lo, hi = min(nums), max(nums)
            features.append({"name": name, "type": "numeric", "bounds": [_tidy(lo), _tidy(hi if hi > lo else lo + 1)]})
        elif len(distinct) == 2:
            features.append({"name": name, "type": "binary", "positive": distinct[1], "negative": distinct[0]})
        elif 0 < len(distinct) <= DRAFT_MAX_CATEGORIES:
            features.append({"name": name, "type": "categorical", "vocabulary": [v for v, _ in Counter(vals).most_common()]})
        else:
            skipped.append(name)
    if len(label_values) < 2:
        raise DatasetError(f"{path}: the label column {label!r} has fewer than two values")
    common = [v for v, _ in label_values.most_common()]
    spec = {"mpdp_schema": FORMAT, "version": 1, "name": Path(path).name.split(".")[0], "features": features,
            "label": {"column": label, "positive": [common[-1]], "negative": common[:-1]}, "missing": "drop", "row_norm": 1.0}
    if not header:
        spec["columns"] = names
    return Draft(Schema.model_validate(spec), skipped=tuple(skipped))


# -- helpers -------------------------------------------------------------------------------------------


def _canon(v: object) -> str:
    """A cell as the encoder compares it: stripped, and numbers in one spelling ("+1", "1.0" and "1" are "1")."""
    s = str(v).strip()
    try:
        f = float(s)
    except ValueError:
        return s
    return format(f, "g") if math.isfinite(f) and s.lower() not in ("nan", "inf", "-inf", "infinity") else s


def _text_column(values: np.ndarray) -> np.ndarray:
    return np.array(["" if math.isnan(v) else format(float(v), "g") for v in values], dtype=object)


def _is_number(s: str) -> bool:
    try:
        return math.isfinite(float(s))
    except ValueError:
        return False


def _tidy(v: float) -> float | int:
    return int(v) if float(v).is_integer() else v


def _what(f: Numeric | Categorical | Binary) -> str:
    if isinstance(f, Numeric):
        return "not a number"
    if isinstance(f, Categorical):
        return f"vocabulary of {len(f.vocabulary)}"
    return f"binary {f.positive!r}/{f.negative!r}"

