"""A party's dataset as its config names it: the one function every protocol's party loads its records with.

A dataset entry names a file, its format and, optionally, the federation's schema (:mod:`mpdp.schema`). With a
schema the file is validated and encoded by it (one-hot, public bounds, row-norm clip, labels ±1), and LIBSVM
files are read with the schema's d, so every party's rows agree on d. Without one the file is read as it is
(:func:`mpdp.data.loaders.load`). A job spec may carry the schema's hash; :func:`require_schema` is the check a
party runs before it spends or trains: a dataset without that schema refuses the job.

The encoding report (rows dropped, values clipped) stays with the party: it goes to the party's log only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from mpdp.data.loaders import DatasetError, load
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


def load_dataset(src: DatasetSource, *, name: str = "") -> Dataset:
    """Load a configured dataset, through its schema when it has one (the report goes to this process's log only)."""
    try:
        schema = schema_of(src)
    except SchemaError as e:
        raise DatasetError(str(e)) from e
    if schema is None:
        X, y = load(src.path, src.format, src.n_features, src.label_column)
        return Dataset(X, y)
    if src.n_features is not None and src.format == "libsvm" and src.n_features != len(schema.features):
        raise DatasetError(f"n_features {src.n_features} differs from the schema's {len(schema.features)} features")
    enc = schema.encode_file(src.path, src.format)
    if enc.report.used == 0:
        raise DatasetError(f"{src.path}: no row is left after encoding by the schema ({enc.report.to_json()})")
    log.info("dataset %s encoded by schema %s: %s", name or src.path, schema.sha256()[:12], enc.report.to_json())
    return Dataset(enc.X, enc.y, schema.sha256(), enc.report)
