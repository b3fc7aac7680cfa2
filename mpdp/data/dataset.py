"""A party's dataset as its config names it: the one function every protocol's party loads its records with.

A dataset entry names a file (CSV, LIBSVM, Parquet) or a PostgreSQL table or query (:mod:`mpdp.data.sources`), and,
optionally for files, the federation's schema (:mod:`mpdp.schema`). With a schema the rows are validated and encoded by it (one-hot, public bounds, row-norm clip, labels ±1), and LIBSVM
files are read with the schema's d, so every party's rows agree on d. Without one the file is read as it is
(:func:`mpdp.data.loaders.load`). A job spec may carry the schema's hash; :func:`require_schema` is the check a
party runs before it spends or trains: a dataset without that schema refuses the job.

Every protocol reads through :func:`open_rows`: the encoded rows in batches of ``batch_rows`` (bounded memory), the
same rows :func:`load_dataset` returns at once. Without a schema a file is read whole, as before (LIBSVM's d and the
label mapping need the whole file); Parquet and SQL datasets always have a schema.

The encoding report (rows dropped, values clipped) stays with the party: it goes to the party's log only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Protocol

import numpy as np

from mpdp.data.loaders import DatasetError, load, to_pm1
from mpdp.data.sources import DEFAULT_BATCH_ROWS, SqlSource, Source
from mpdp.schema import Report, Schema, SchemaError

log = logging.getLogger("mpdp.data")


class DatasetSource(Protocol):
    """What a party's config says about one dataset (``mpdp_services.common.config.DatasetConfig``)."""

    @property
    def path(self) -> Path: ...
    @property
    def format(self) -> str: ...
    @property
    def n_features(self) -> int | None: ...
    @property
    def label_column(self) -> str | int: ...
    @property
    def schema_file(self) -> Path | None: ...


class SchemaMismatch(DatasetError):
    """The job names a schema this dataset was not configured with; ``str()`` never quotes the job's hash."""


class DoesNotFit(ValueError):
    """A party's records do not fit a job's public parameters (a bound on its row count, a dimension, the classes).

    ``str()`` is what the party's refusal says on the wire, so it names the public parameter only: never a value
    computed from the records (row count, feature count, a label, a norm), which would tell the curator and the
    operator what the protocol hides. ``private`` says the same with those values, for the party's own log.
    """

    def __init__(self, public: str, private: str = "") -> None:
        super().__init__(public)
        self.private = private or public


def require_rows(n_rows: int, limit: int, bound: str) -> None:
    """Refuse (:class:`DoesNotFit`) a dataset of more than ``limit`` rows; the refusal names ``bound``, not the count."""
    if n_rows > limit:
        raise DoesNotFit(f"the dataset does not fit the job's public bound {bound}", f"{n_rows} rows, {bound} allows {limit}")


@dataclass(frozen=True)
class Dataset:
    """Records ready for a protocol: ``X`` (n × d), ``y`` (±1 with a schema, else the file's labels), the schema's
    hash ("" without one) and the private encoding report (None without a schema)."""

    X: np.ndarray
    y: np.ndarray
    schema_sha256: str = ""
    report: Report | None = None


def schema_of(src: DatasetSource) -> Schema | None:
    """The dataset's configured schema, or None. Raises :class:`SchemaError` if its file is unreadable or invalid."""
    return Schema.load(src.schema_file) if src.schema_file is not None else None


def require_schema(src: DatasetSource, expected: str) -> None:
    """Refuse (:class:`SchemaMismatch`) unless ``expected`` is empty or the dataset's schema hashes to it."""
    if not expected:
        return
    try:
        schema = schema_of(src)
    except SchemaError as e:
        raise SchemaMismatch(f"its schema file cannot be read ({e})") from e
    if schema is None:
        raise SchemaMismatch("the job requires a schema and this dataset has none configured")
    own = schema.sha256()
    if own != expected:
        raise SchemaMismatch(f"its schema (sha256 {own[:12]}…, version {schema.version}) is not the job's")


Batches = Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]]  # a fresh pass over (X, y) row batches per call


def source_of(src: DatasetSource, schema: Schema) -> Source:
    """The :class:`Source` a dataset entry names (its connection string, for SQL, from the entry or its environment variable)."""
    if src.format == "sql":
        try:
            dsn = src.connection_string()  # type: ignore[attr-defined]
        except ValueError as e:
            raise DatasetError(str(e)) from None
        return SqlSource(dsn, table=getattr(src, "table", None), query=getattr(src, "query", None))
    return schema.source(src.path, src.format)


class Rows:
    """A configured dataset's encoded rows, read in batches: :meth:`batches` starts a fresh pass each call.

    ``report`` is the last complete pass's encoding report (private: the party's log only)."""

    def __init__(self, src: DatasetSource, *, name: str = "") -> None:
        try:
            schema = schema_of(src)
        except SchemaError as e:
            raise DatasetError(str(e)) from e
        self.name = name or str(src.path)
        self.batch_rows = int(getattr(src, "batch_rows", DEFAULT_BATCH_ROWS))
        self.schema = schema
        self.report: Report | None = None
        self.part = False  # one part of a source read in parallel: it may be left with no row (the others have them)
        self._whole: tuple[np.ndarray, np.ndarray] | None = None
        if schema is None:  # a file without a schema is read whole (its d and labels need every row)
            self._whole = load(src.path, src.format, src.n_features, src.label_column)
            self.source: Source | None = None
            return
        if src.n_features is not None and src.format == "libsvm" and src.n_features != len(schema.features):
            raise DatasetError(f"n_features {src.n_features} differs from the schema's {len(schema.features)} features")
        self.source = source_of(src, schema)
        _check_columns(self.source, schema, getattr(src, "columns", None), self.name)

    @property
    def schema_sha256(self) -> str:
        return self.schema.sha256() if self.schema is not None else ""

    @property
    def dimension(self) -> int:
        if self.schema is not None:
            return self.schema.dimension
        assert self._whole is not None
        return int(self._whole[0].shape[1])

    def label_values(self) -> np.ndarray:
        """The dataset's distinct labels, as :func:`mpdp.dpgd.model.party_rows` maps them: a file without a schema's own
        (read whole); a schema's labels are ±1 already, and [−1, 1] maps them as their own distinct values would."""
        if self._whole is not None:
            return np.unique(self._whole[1])
        return np.array([-1.0, 1.0])

    def pm1(self) -> "Rows":
        """These rows with labels ±1 (:func:`mpdp.data.loaders.to_pm1` of a file without a schema; a schema's are ±1)."""
        if self._whole is None:
            return self
        r = object.__new__(Rows)
        r.__dict__.update(self.__dict__)
        r._whole = (self._whole[0], to_pm1(self._whole[1]))
        return r

    def parts(self) -> list["Rows"]:
        """One Rows per part of the source (the files of a Parquet folder), for a cluster to read in parallel."""
        if self.source is None or len(self.source.parts()) == 1:
            return [self]
        out = []
        for part in self.source.parts():
            r = object.__new__(Rows)
            r.__dict__.update(self.__dict__)
            r.source = part
            r.part = True
            out.append(r)
        return out

    def batches(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The encoded rows (X, y) in batches of exactly ``batch_rows`` rows (the last one fewer): the same batches from
        any source of the same rows (a CSV file, a Parquet folder, a table), so sums over them agree bit for bit.
        A pass that ends sets :attr:`report`; a pass that leaves no row raises DatasetError."""
        if self._whole is not None:
            X, y = self._whole
            for i in range(0, max(1, len(y)), self.batch_rows):
                yield X[i:i + self.batch_rows], y[i:i + self.batch_rows]
            return
        assert self.schema is not None and self.source is not None
        report = Report()
        held: list[tuple[np.ndarray, np.ndarray]] = []  # encoded rows not yet yielded (fewer than batch_rows)
        count = 0
        for enc in self.schema.encode_batches(self.source, self.batch_rows):
            report.merge(enc.report)
            held.append((enc.X, enc.y))
            count += len(enc.y)
            while count >= self.batch_rows:  # exactly batch_rows encoded rows a batch, whatever the source's own chunks
                X, y = np.vstack([h[0] for h in held]), np.concatenate([h[1] for h in held])
                yield X[:self.batch_rows], y[:self.batch_rows]
                held, count = [(X[self.batch_rows:], y[self.batch_rows:])], count - self.batch_rows
        if report.used == 0 and not self.part:
            raise DatasetError(f"{self.name}: no row is left after encoding by the schema ({report.to_json()})")
        if count:
            yield np.vstack([h[0] for h in held]), np.concatenate([h[1] for h in held])
        self.report = report
        log.info("dataset %s encoded by schema %s: %s", self.name, self.schema_sha256[:12], report.to_json())


_noted: set[str] = set()  # datasets whose unread columns were logged in this process


def _check_columns(source: Source, schema: Schema, listed: list[str] | None, name: str) -> None:
    """The dataset's ``columns`` (the columns to read) against its schema; without it, a WARNING once per dataset when
    the table holds columns its schema does not read (their count only: they are ignored, never read).

    A listed column the schema does not read, or a schema column left out of the list, refuses the dataset
    (DatasetError): the config and the schema disagree about what is read."""
    needed = schema.needed()
    if listed is not None:
        unread = [c for c in listed if c not in needed]
        if unread:
            raise DatasetError(f"{name}: its columns list names {len(unread)} column(s) its schema does not read, e.g. {unread[0]!r}")
        left = [c for c in needed if c not in listed]
        if left:
            raise DatasetError(f"{name}: its columns list leaves out the schema's column {left[0]!r}")
        return  # every other column of the table is ignored, as configured
    if name in _noted:
        return
    declared = set(needed) | set(schema.columns or [])
    extra = [c for c in (list(source.types()) or source.columns()) if c not in declared]
    _noted.add(name)
    if extra:
        log.warning("dataset %s: %d column(s) of its table are not in its schema and are ignored (list the columns to read in "
                    "the dataset's `columns:` to say so)", name, len(extra))


def open_rows(src: DatasetSource, *, name: str = "") -> Rows:
    """A configured dataset as :class:`Rows` (DatasetError if its schema, file, table or connection is wrong)."""
    return Rows(src, name=name)


def load_dataset(src: DatasetSource, *, name: str = "") -> Dataset:
    """Load a configured dataset whole, through its schema when it has one (the report goes to this process's log only).
    The rows are those of :func:`open_rows`' batches, concatenated."""
    rows = open_rows(src, name=name)
    if rows._whole is not None:
        return Dataset(*rows._whole)
    Xs, ys = [], []
    for X, y in rows.batches():
        Xs.append(X)
        ys.append(y)
    return Dataset(np.vstack(Xs), np.concatenate(ys), rows.schema_sha256, rows.report)
