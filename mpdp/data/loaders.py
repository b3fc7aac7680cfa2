"""Load a party's records from a path: LIBSVM/svmlight or CSV (label in a named or last column).

Data never travels: each party calls these on its own files. Labels are mapped to ±1 for
binary tasks.
"""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import numpy as np


class DatasetError(ValueError):
    """A dataset file is missing or malformed; the message says which file and what to fix."""


class DatasetUnreadable(DatasetError):
    """The dataset's data cannot be read at all (a missing, truncated or corrupt file): the dataset is unavailable,
    whatever its configuration or schema says. A party keeps serving its other datasets."""


def load_libsvm(path: str | Path, n_features: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_svmlight_file

    p = Path(path)
    if not p.exists():
        raise DatasetError(f"dataset file {p} does not exist; check the path in your party config")
    try:
        X, y = load_svmlight_file(str(p), n_features=n_features)
    except ValueError as e:
        raise DatasetError(f"{p} is not valid LIBSVM/svmlight text: {e}") from e
    return np.asarray(X.todense(), dtype=np.float64), np.asarray(y, dtype=np.float64)


def read_rows(path: str | Path) -> list[list[str]]:
    """Every row of a delimited text file (comma, semicolon or tab, sniffed; ``.gz`` decompressed), as text cells."""
    p = Path(path)
    if not p.exists():
        raise DatasetError(f"dataset file {p} does not exist; check the path in your party config")
    opener = gzip.open if p.suffix == ".gz" else open
    try:
        with opener(p, "rt", newline="") as fh:
            return list(csv.reader(fh, sniff_dialect(fh)))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise DatasetError(f"{p} is not readable delimited text: {e}") from e


def sniff_dialect(fh) -> type[csv.Dialect] | csv.Dialect:
    """The delimiter (comma, semicolon or tab) of an open text file, from its first 4 KiB; the file is rewound."""
    sample = fh.read(4096)
    fh.seek(0)
    try:
        return csv.Sniffer().sniff(sample, delimiters=",;\t") if sample else csv.excel
    except csv.Error:  # the sniffer gives up on long numeric rows cut by the sample: comma is the default
        return csv.excel


def first_lines(path: str | Path, n: int) -> list[str]:
    """The first ``n`` lines of a text file (``.gz`` decompressed); none if it cannot be read."""
    p = Path(path)
    opener = gzip.open if p.suffix == ".gz" else open
    try:
        with opener(p, "rt", errors="replace") as fh:
            return [line for _, line in zip(range(n), fh)]
    except OSError:
        return []


def load_csv(path: str | Path, label_column: str | int = -1) -> tuple[np.ndarray, np.ndarray]:
    p = Path(path)
    rows = read_rows(p)
    if not rows:
        raise DatasetError(f"{p} is empty")
    header = rows[0]
    has_header = any(not _is_number(c) for c in header)
    body = rows[1:] if has_header else rows
    if isinstance(label_column, str):
        if not has_header or label_column not in header:
            raise DatasetError(f"{p} has no column named {label_column!r}")
        li = header.index(label_column)
    else:
        li = label_column % len(header)
    try:
        data = np.array([[float(v) for v in r] for r in body if r], dtype=np.float64)
    except ValueError as e:
        raise DatasetError(f"{p} has a non-numeric value: {e}") from e
    y = data[:, li]
    X = np.delete(data, li, axis=1)
    return X, y


def load(path: str | Path, fmt: str = "auto", n_features: int | None = None, label_column: str | int = -1) -> tuple[np.ndarray, np.ndarray]:
    """Load by format name ('libsvm', 'csv') or guess from the file name."""
    p = Path(path)
    if fmt == "auto":
        fmt = "csv" if ".csv" in p.name else "libsvm"
    if fmt == "libsvm":
        return load_libsvm(p, n_features)
    if fmt == "csv":
        return load_csv(p, label_column)
    raise DatasetError(f"unknown dataset format {fmt!r}; use 'libsvm' or 'csv'")


def to_pm1(y: np.ndarray) -> np.ndarray:
    """Map a binary label vector to ±1 (the larger value becomes +1)."""
    vals = np.unique(y)
    if len(vals) == 1:
        return np.where(y == vals[0], 1.0, -1.0) if vals[0] > 0 else -np.ones_like(y)
    if len(vals) != 2:
        raise DatasetError(f"binary labels expected, found {len(vals)} distinct values")
    return np.where(y == vals[1], 1.0, -1.0)


def _is_number(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False
