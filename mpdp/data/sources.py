"""Where a party's rows come from: one interface over CSV, LIBSVM, Parquet and SQL (PostgreSQL), read in bounded batches.

A :class:`Source` knows its column names (:meth:`Source.columns`) and yields :class:`Batch` es of at most ``rows``
rows: a column name → array mapping, where an array is either ``float64`` (a typed numeric column; NaN for SQL NULL
or a Parquet null) or ``object`` text (stripped cells; ``""`` for a NULL). The federation's schema
(:meth:`mpdp.schema.Schema.encode_batch`) turns each batch into encoded rows; every encoding is per row, so the
batches' rows concatenated equal the rows of the whole table read at once, bit for bit.

Typed sources (Parquet, SQL) check column types against the schema before reading (:meth:`Source.check_types`):
a numeric feature needs a numeric column; a wrong type is refused before any row is read.

A source may split into :meth:`Source.parts` (the files of a Parquet folder, one per part) that a Dask cluster reads
in parallel (:mod:`mpdp.data.engine`). Connection strings are never part of an error message or a log line.
Pure apart from reading the party's own files and database: nothing here sends anything anywhere.
"""

from __future__ import annotations

import csv
import gzip
import io
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from mpdp.data.loaders import DatasetError, DatasetUnreadable, first_lines, sniff_dialect
from mpdp.extras import MissingExtra, require

DEFAULT_BATCH_ROWS = 65_536  # rows per batch: 65,536 × 20 float64 features is 10 MiB
NUMERIC, TEXT = "numeric", "text"
PARQUET, SQL = "a Parquet dataset", "an SQL dataset"  # what needs the optional library (mpdp.extras)


@dataclass(frozen=True)
class Batch:
    """Raw rows of one batch, column-wise. ``rows``: data rows read (``malformed`` of them had the wrong cell count
    and are absent from ``columns``)."""

    columns: dict[str, np.ndarray]
    rows: int
    malformed: int = 0

    @property
    def good(self) -> int:
        return self.rows - self.malformed


class Source(ABC):
    """A party's table: its column names, and its rows in batches of bounded size."""

    @abstractmethod
    def columns(self) -> list[str]:
        """The table's column names in order (DatasetError if the table cannot be opened)."""

    @abstractmethod
    def batches(self, rows: int = DEFAULT_BATCH_ROWS, names: Sequence[str] | None = None) -> Iterator[Batch]:
        """The table's rows, ``rows`` at most per batch; only the columns ``names`` when given."""

    def types(self) -> dict[str, str]:
        """Column name → NUMERIC or TEXT for a typed source; empty for text files (every cell is text)."""
        return {}

    def parts(self) -> list["Source"]:
        """Pieces that together hold the rows in order (one part unless the source is a folder of files)."""
        return [self]

    def fingerprint(self) -> list[Path]:
        """The files whose bytes are the whole table (a cache key digests them); empty when unknown (a database)."""
        return []


def _need(module: str, what: str) -> None:
    """An optional library this source reads with (pyarrow, psycopg): if it is not installed, the dataset is
    unavailable (the party serves its others) and the message names the extra to install."""
    try:
        require(module, what)
    except MissingExtra as e:
        raise DatasetUnreadable(str(e)) from None


def _require_file(p: Path) -> None:
    if not p.exists():
        raise DatasetUnreadable(f"dataset file {p} does not exist; check the path in your party config")


def _opener(p: Path):
    return gzip.open if p.suffix == ".gz" else open


class CsvSource(Source):
    """A delimited text file (comma, semicolon or tab, sniffed; ``.gz`` decompressed).

    ``header``: the column names when the file has no header row (a schema's ``columns``; a first row equal to them
    is skipped); else the first non-blank row names the columns. Blank rows are skipped; a row with another cell count
    than the header is malformed (counted, not returned)."""

    def __init__(self, path: str | Path, header: Sequence[str] | None = None) -> None:
        self.path = Path(path)
        self.header = list(header) if header is not None else None

    def _reader(self, fh) -> Iterator[list[str]]:
        for r in csv.reader(fh, sniff_dialect(fh)):
            cells = [c.strip() for c in r]
            if any(cells):
                yield cells

    def _rows(self) -> Iterator[tuple[list[str], Iterator[list[str]]]]:
        _require_file(self.path)
        try:
            with _opener(self.path)(self.path, "rt", newline="") as fh:
                rows = self._reader(fh)
                first = next(rows, None)
                if self.header is None:
                    if first is None:
                        raise DatasetError("the file is empty (expected a header row naming the columns)")
                    yield first, rows
                else:
                    yield self.header, (rows if first is None or first == self.header else _chain(first, rows))
        except (OSError, UnicodeDecodeError, csv.Error) as e:
            raise DatasetUnreadable(f"{self.path} is not readable delimited text: {e}") from e

    def columns(self) -> list[str]:
        for header, _ in self._rows():
            return list(header)
        return []  # pragma: no cover (the generator always yields)

    def batches(self, rows: int = DEFAULT_BATCH_ROWS, names: Sequence[str] | None = None) -> Iterator[Batch]:
        for header, body in self._rows():
            wanted = list(names) if names is not None else list(header)
            absent = [n for n in wanted if n not in header]
            if absent:
                raise DatasetError(f"the file has no column {absent[0]!r} (columns: {header[:20]})")
            index = [header.index(n) for n in wanted]
            chunk: list[list[str]] = []
            seen, emitted = 0, False
            for r in body:
                seen += 1
                if len(r) == len(header):
                    chunk.append(r)
                if seen == rows:
                    yield _text_batch(wanted, index, chunk, seen)
                    chunk, seen, emitted = [], 0, True
            if seen or not emitted:
                yield _text_batch(wanted, index, chunk, seen)


def _chain(first: list[str], rest: Iterator[list[str]]) -> Iterator[list[str]]:
    yield first
    yield from rest


def _text_batch(names: list[str], index: list[int], good: list[list[str]], seen: int) -> Batch:
    cols = {n: np.array([r[i] for r in good], dtype=object) for n, i in zip(names, index)}
    return Batch(cols, seen, seen - len(good))


class LibsvmSource(Source):
    """A LIBSVM/svmlight file read ``rows`` lines at a time, its d features named by ``names`` and its label ``label``.

    Values come out as float64 columns (absent entries are 0); whether indices are zero-based is decided once for
    the whole file (a first pass looks for an index 0, as sklearn's ``zero_based="auto"`` does), so every batch parses alike."""

    def __init__(self, path: str | Path, names: Sequence[str], label: str) -> None:
        self.path = Path(path)
        self.names = list(names)
        self.label = label

    def columns(self) -> list[str]:
        return [*self.names, self.label]

    def _zero_based(self) -> bool:
        pattern = re.compile(rb"(^|\s)0+:")
        with _opener(self.path)(self.path, "rb") as fh:
            return any(pattern.search(line.split(b"#", 1)[0]) for line in fh)

    def batches(self, rows: int = DEFAULT_BATCH_ROWS, names: Sequence[str] | None = None) -> Iterator[Batch]:
        from sklearn.datasets import load_svmlight_file

        _require_file(self.path)
        zero = self._zero_based()
        d = len(self.names)
        wanted = list(names) if names is not None else self.columns()

        def parse(lines: list[bytes]) -> Batch:
            if not lines:
                return Batch({n: np.array([], dtype=np.float64) for n in wanted}, 0)
            try:
                X, y = load_svmlight_file(io.BytesIO(b"".join(lines)), n_features=d, zero_based=zero)
            except ValueError as e:
                raise DatasetUnreadable(f"{self.path} is not valid LIBSVM/svmlight text: {e}") from e
            dense = np.asarray(X.todense(), dtype=np.float64)
            cols = {n: np.ascontiguousarray(dense[:, i]) for i, n in enumerate(self.names) if n in wanted}
            if self.label in wanted:
                cols[self.label] = np.asarray(y, dtype=np.float64)
            return Batch(cols, len(y))

        chunk: list[bytes] = []
        emitted = False
        with _opener(self.path)(self.path, "rb") as fh:
            for line in fh:
                if not line.split(b"#", 1)[0].strip():
                    continue
                chunk.append(line if line.endswith(b"\n") else line + b"\n")
                if len(chunk) == rows:
                    yield parse(chunk)
                    chunk, emitted = [], True
        if chunk or not emitted:
            yield parse(chunk)

    def fingerprint(self) -> list[Path]:
        return [self.path]


def looks_libsvm(p: Path) -> bool:
    """The first non-blank line is ``label index:value ...``."""
    for line in first_lines(p, 5):
        if line.strip():
            return bool(re.match(r"^\s*\S+(\s+\d+:\S+)+\s*$", line))
    return False


# -- typed sources ------------------------------------------------------------------------------------------
def _numeric_or_text(values: list[Any], kind: str) -> np.ndarray:
    if kind == NUMERIC:
        return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)
    return np.array(["" if v is None else str(v).strip() for v in values], dtype=object)


class ParquetSource(Source):
    """A Parquet file, or a folder of Parquet files (its parts, read in name order), through pyarrow."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def _files(self) -> list[Path]:
        _require_file(self.path)
        if self.path.is_dir():
            files = sorted(p for p in self.path.iterdir() if p.suffix == ".parquet")
            if not files:
                raise DatasetError(f"the folder {self.path} holds no .parquet file")
            return files
        return [self.path]

    def _schema(self):
        _need("pyarrow", PARQUET)
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            return pq.read_schema(self._files()[0])
        except (OSError, ValueError, pa.ArrowException) as e:  # a truncated or corrupt file (ArrowInvalid is a ValueError)
            raise DatasetUnreadable(f"{self.path} is not a readable Parquet file ({type(e).__name__})") from e

    def columns(self) -> list[str]:
        return list(self._schema().names)

    def types(self) -> dict[str, str]:
        _need("pyarrow", PARQUET)
        import pyarrow as pa

        out = {}
        for f in self._schema():
            t = f.type
            if pa.types.is_dictionary(t):
                t = t.value_type
            out[f.name] = NUMERIC if (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)) else TEXT
        return out

    def parts(self) -> list[Source]:
        files = self._files()
        return [self] if len(files) == 1 else [ParquetSource(f) for f in files]

    def fingerprint(self) -> list[Path]:
        return self._files()

    def batches(self, rows: int = DEFAULT_BATCH_ROWS, names: Sequence[str] | None = None) -> Iterator[Batch]:
        _need("pyarrow", PARQUET)
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        kinds = self.types()
        wanted = list(names) if names is not None else list(kinds)
        absent = [n for n in wanted if n not in kinds]
        if absent:
            raise DatasetError(f"the Parquet table has no column {absent[0]!r}")
        emitted = False
        for f in self._files():
            try:
                pf = pq.ParquetFile(f)
                for rb in pf.iter_batches(batch_size=rows, columns=wanted):
                    cols: dict[str, np.ndarray] = {}
                    for n in wanted:
                        col = rb.column(n)
                        if kinds[n] == NUMERIC:
                            cols[n] = pc.cast(col, pa.float64()).to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
                        else:
                            cols[n] = _numeric_or_text(col.to_pylist(), TEXT)
                    emitted = True
                    yield Batch(cols, rb.num_rows)
            except (OSError, ValueError, pa.ArrowException) as e:
                raise DatasetUnreadable(f"{f.name} is not a readable Parquet file ({type(e).__name__})") from e
        if not emitted:
            yield Batch({n: np.array([], dtype=np.float64 if kinds[n] == NUMERIC else object) for n in wanted}, 0)


# PostgreSQL type OIDs (pg_type.h): integers, floats and numeric are numbers; everything else is read as text
_PG_NUMERIC = {20, 21, 23, 26, 700, 701, 1700}


class SqlSource(Source):
    """A table or a query over PostgreSQL through psycopg 3, read through a server-side cursor ``rows`` rows at a time.

    ``dsn``: the connection string (from the party's config or the environment variable it names). It is never
    logged, never part of an exception's message: a database error says what failed (no such table, connection
    lost), not where."""

    def __init__(self, dsn: str, *, table: str | None = None, query: str | None = None, connect_timeout: float = 10.0) -> None:
        if (table is None) == (query is None):
            raise DatasetError("an SQL dataset names exactly one of table and query")
        self._dsn = dsn
        self.table = table
        self.query = query
        self.connect_timeout = connect_timeout
        self._kinds: dict[str, str] | None = None  # the result's column types, asked once

    def __repr__(self) -> str:  # never the connection string
        return f"SqlSource(table={self.table!r})" if self.table else "SqlSource(query=…)"

    def _from(self):
        _need("psycopg", SQL)
        from psycopg import sql

        if self.table is not None:
            return sql.Identifier(*self.table.split("."))
        return sql.SQL("({}) AS mpdp_query").format(sql.SQL(self.query or ""))  # the party's own config, trusted as its SQL

    def _connect(self):
        _need("psycopg", SQL)
        import psycopg

        try:
            return psycopg.connect(self._dsn, connect_timeout=max(1, int(self.connect_timeout)), autocommit=False)
        except psycopg.Error as e:
            raise DatasetError(f"the database refused the connection ({type(e).__name__})") from None

    def _fail(self, e: Exception) -> DatasetError:
        import psycopg.errors as pe

        what = f"table {self.table!r}" if self.table else "the configured query"
        if isinstance(e, pe.UndefinedTable):
            return DatasetError(f"{what} does not exist in the database")
        if isinstance(e, pe.UndefinedColumn):
            return DatasetError(f"{what} lacks a column the schema needs")
        if isinstance(e, (pe.OperationalError, pe.InterfaceError)):
            return DatasetError(f"the database connection was lost while reading {what} ({type(e).__name__})")
        return DatasetError(f"the database could not read {what} ({type(e).__name__})")

    def _describe(self) -> list[tuple[str, int]]:
        _need("psycopg", SQL)
        import psycopg
        from psycopg import sql

        with self._connect() as conn:
            try:
                cur = conn.execute(sql.SQL("SELECT * FROM {} LIMIT 0").format(self._from()))
            except psycopg.Error as e:
                raise self._fail(e) from None
            return [(c.name, c.type_code) for c in (cur.description or [])]

    def columns(self) -> list[str]:
        return [n for n, _ in self._describe()]

    def types(self) -> dict[str, str]:
        if self._kinds is None:
            self._kinds = {n: NUMERIC if oid in _PG_NUMERIC else TEXT for n, oid in self._describe()}
        return dict(self._kinds)

    def batches(self, rows: int = DEFAULT_BATCH_ROWS, names: Sequence[str] | None = None) -> Iterator[Batch]:
        _need("psycopg", SQL)
        import psycopg
        from psycopg import sql

        kinds = self.types()
        wanted = list(names) if names is not None else list(kinds)
        absent = [n for n in wanted if n not in kinds]
        if absent:
            raise DatasetError(f"the SQL table has no column {absent[0]!r}")
        stmt = sql.SQL("SELECT {} FROM {}").format(sql.SQL(", ").join(sql.Identifier(n) for n in wanted), self._from())
        emitted = False
        with self._connect() as conn:
            try:
                with conn.cursor(name="mpdp_rows") as cur:  # server-side: the server holds the result, we fetch `rows` at a time
                    cur.itersize = rows
                    cur.execute(stmt)
                    while True:
                        chunk = cur.fetchmany(rows)
                        if not chunk:
                            break
                        emitted = True
                        yield Batch({n: _numeric_or_text([r[i] for r in chunk], kinds[n]) for i, n in enumerate(wanted)}, len(chunk))
            except psycopg.Error as e:
                raise self._fail(e) from None
        if not emitted:
            yield Batch({n: np.array([], dtype=np.float64 if kinds[n] == NUMERIC else object) for n in wanted}, 0)


def file_source(path: str | Path, fmt: str, columns: Sequence[str] | None, features: Sequence[str], label: str) -> Source:
    """The source of a party's file: ``fmt`` is csv, libsvm, parquet or auto (a ``.parquet`` file or a folder is
    Parquet, a file whose first line is ``label index:value …`` LIBSVM, anything else CSV). ``columns`` names a
    headerless CSV's columns (None: the file has a header row), ``features`` and ``label`` LIBSVM's (a schema's :meth:`~mpdp.schema.Schema.source`
    passes its own; this module knows no schema)."""
    p = Path(path)
    if fmt == "auto":
        fmt = "parquet" if p.suffix == ".parquet" or p.is_dir() else "libsvm" if looks_libsvm(p) else "csv"
    if fmt == "csv":
        return CsvSource(p, list(columns) if columns is not None else None)
    if fmt == "libsvm":
        return LibsvmSource(p, list(features), label)
    if fmt == "parquet":
        return ParquetSource(p)
    raise DatasetError(f"unknown dataset format {fmt!r}; use 'csv', 'libsvm' or 'parquet'")
