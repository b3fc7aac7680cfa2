"""A party's cache of local models ŵ_j, so that a job does not re-train on data it has trained on before.

ŵ_j is a deterministic function of the party's records and the learner's parameters (the exact argmin of
:func:`mpdp.learn.logreg.fit`), so a cached ŵ_j is the very value a fresh fit would give: every protocol
message, and therefore the DP guarantee, is unchanged (docs/protocols/pathak2010.md, "Local-model cache").
The key is a sha256 over everything that can change ŵ_j: the bytes of the data file and of its schema file,
how the file is read (format, n_features, label column), the schema's canonical digest, λ, the regulariser
convention, the row-clipping bound, the solver's tolerance and iteration cap, and :data:`LEARNER_VERSION`
(raised whenever the learner or the encoding changes what it returns).

Bounded (LRU, a few entries) in memory; optionally durable in a directory of 0600 files, each written to a
temporary file, fsync'd and renamed (the directory is fsync'd too). A cached ŵ_j is as private as the data
file it came from: it never leaves the party, and a durable copy sits beside the data with the same care.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

LEARNER_VERSION = 2  # raise when logreg.fit, clip_rows or the label/feature encoding change what ŵ is (2: batched Newton; numeric cells read with all their digits)
DEFAULT_CAPACITY = 4
_KEY = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class LocalModel:
    """ŵ_j with what the protocol needs of the data besides it: the row count n and the dimension d."""

    w: np.ndarray
    n: int

    @property
    def d(self) -> int:
        return int(self.w.shape[0])


def file_digest(path: Path | str, chunk: int = 1 << 20) -> str:
    """sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def cache_key(**parts: Any) -> str:
    """sha256 of the canonical JSON of ``parts`` (floats as exact hex, so 1e-3 and 0.001 agree and
    nearby λ never collide), plus :data:`LEARNER_VERSION`."""

    def canon(v: Any) -> Any:
        if isinstance(v, float):
            return {"float": float(v).hex()}
        if isinstance(v, (list, tuple)):
            return [canon(x) for x in v]
        if isinstance(v, dict):
            return {str(k): canon(x) for k, x in v.items()}
        if isinstance(v, Path):
            return str(v)
        return v

    body = json.dumps({"learner_version": LEARNER_VERSION, **{k: canon(v) for k, v in parts.items()}}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()


class ModelCache:
    """LRU of :class:`LocalModel` by :func:`cache_key`, optionally backed by ``directory`` (0600, fsync'd)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY, directory: Path | str | None = None) -> None:
        if capacity < 1:
            raise ValueError("a model cache holds at least one entry")
        self.capacity = capacity
        self.directory = Path(directory) if directory is not None else None
        self._items: collections.OrderedDict[str, LocalModel] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(self.directory, 0o700)  # one that already existed (umask 022) holds the models too

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: str) -> LocalModel | None:
        with self._lock:
            model = self._items.get(key)
            if model is not None:
                self._items.move_to_end(key)
        if model is None:
            model = self._read(key)
            if model is not None:
                self._remember(key, model)
        with self._lock:
            if model is None:
                self.misses += 1
            else:
                self.hits += 1
        return model

    def put(self, key: str, model: LocalModel) -> None:
        model = LocalModel(np.array(model.w, dtype=np.float64, copy=True), int(model.n))
        model.w.setflags(write=False)
        self._remember(key, model)
        self._write(key, model)

    def _remember(self, key: str, model: LocalModel) -> None:
        with self._lock:
            self._items[key] = model
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                old, _ = self._items.popitem(last=False)
                self._unlink(old)

    # -- durable copies ------------------------------------------------------------------------
    def _path(self, key: str) -> Path | None:
        if self.directory is None or not _KEY.match(key):
            return None
        return self.directory / f"{key}.json"

    def _read(self, key: str) -> LocalModel | None:
        path = self._path(key)
        if path is None:
            return None
        try:
            raw = json.loads(path.read_text())
            w = np.array([float.fromhex(x) for x in raw["w"]], dtype=np.float64)
            n = raw["n"]
            ok = raw["key"] == key and type(n) is int and n >= 1 and w.ndim == 1 and w.size >= 1 and bool(np.all(np.isfinite(w)))
        except (OSError, ValueError, KeyError, TypeError):
            return None  # absent or unreadable: a miss, and the fit writes a fresh copy
        if not ok:
            return None  # damaged (no coefficients, n not a positive integer, non-finite ŵ): a miss
        model = LocalModel(w, n)
        model.w.setflags(write=False)
        return model

    def _write(self, key: str, model: LocalModel) -> None:
        path = self._path(key)
        if path is None:
            return
        body = json.dumps({"key": key, "n": model.n, "w": [float(x).hex() for x in model.w]}).encode()
        tmp = path.with_suffix(f".tmp{os.getpid()}.{threading.get_ident()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def _unlink(self, key: str) -> None:
        path = self._path(key)
        if path is not None:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
