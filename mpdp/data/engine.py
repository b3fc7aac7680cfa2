"""Sums over a party's rows, batch by batch: in this process, or as Dask tasks over the source's parts.

Every party computation that is a sum over rows (regression's sufficient statistics, a DP-GD round's clipped
gradient sum, the Newton terms of Pathak's local training) is a *kernel* ``kernel(X, y) -> tuple`` applied to each
batch of encoded rows (:class:`mpdp.data.dataset.Rows`), its results added up coordinate by coordinate. Memory is
bounded by the batch size, whatever the row count.

With a Dask cluster (the dataset's ``dask`` setting: ``"local"`` starts a local cluster of worker processes behind
mutual TLS, anything else is the address of the party's own ``tls://`` scheduler), each part of the source (a file of a Parquet folder) is one task that reduces its own
batches and returns its partial sums; this process adds the parts' sums in order. Only those sums leave a worker,
and only the finished aggregate leaves the party, as without Dask. Dask is optional (``pip install 'mpdp[dask]'``).

The kernels live with their protocols, which call down here (never the other way): regression's
``mpdp.regression.statistics.statistics_contribution``, DP-GD's ``mpdp.dpgd.plan.dpgd_contribution`` and Pathak's
local model ``mpdp.learn.logreg.local_logreg`` open the configured dataset, check its fit against the job's public
bounds (:class:`mpdp.data.dataset.DoesNotFit`), and reduce with :func:`reducer`.
"""

from __future__ import annotations

import atexit
import logging
import shutil
import threading
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from mpdp.data.dataset import DatasetSource, Rows
from mpdp.extras import MissingExtra, require

log = logging.getLogger("mpdp.data")

Kernel = Callable[[np.ndarray, np.ndarray], tuple]


def add_up(batches: Iterable[tuple[np.ndarray, np.ndarray]], kernel: Kernel) -> list:
    """Σ over batches of ``kernel(X, y)``, coordinate by coordinate, in batch order."""
    total = _sum(batches, kernel)
    if total is None:  # pragma: no cover (Rows yields at least one row or raises)
        raise ValueError("the dataset has no batch")
    return total


def _sum(batches: Iterable[tuple[np.ndarray, np.ndarray]], kernel: Kernel) -> list | None:
    total: list | None = None
    for X, y in batches:
        terms = kernel(X, y)
        total = list(terms) if total is None else [a + b for a, b in zip(total, terms)]
    return total


def _part_sum(rows: Rows, kernel: Kernel) -> list | None:
    """A Dask task: one part's batches reduced on a worker (None for a part left with no row)."""
    return _sum(rows.batches(), kernel)


# -- Dask clusters, one per setting per process ---------------------------------------------------------------------
_clients: dict[tuple[str, int], Any] = {}
_folders: list[Path] = []  # the private folders of the local clusters this process started
_lock = threading.Lock()


def dask_client(address: str, workers: int = 2, tls: Any = None):
    """The Dask client for ``address``, created on first use: "local" is a local cluster of ``workers``
    single-threaded worker processes on loopback, mutual TLS on every connection (:mod:`mpdp.data.dask_security`),
    started once and closed when this process exits; anything else is the party's own scheduler, ``tls://`` with
    ``tls`` (its ``ca``, ``cert`` and ``key`` paths: the dataset's ``dask_tls``)."""
    key = (address, workers if address == "local" else 0)
    with _lock:
        client = _clients.get(key)
        if client is not None and client.status == "running":
            return client
        require("distributed", "a dataset computed on Dask")  # MissingExtra naming the extra
        from distributed import Client, LocalCluster

        from mpdp.data import dask_security

        if address == "local":
            folder = dask_security.new_folder()
            _folders.append(folder)
            security = dask_security.local_security(folder)
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, host="127.0.0.1", protocol="tls://",
                                   security=security, local_directory=str(folder / "work"), preload=["mpdp.data.dask_security"])
            client = Client(cluster, security=security)
        else:
            if tls is None:
                raise RuntimeError("a Dask scheduler address needs the dataset's dask_tls (ca, cert, key) and a tls:// address")
            client = Client(address, timeout="30s", security=dask_security.external_security(address, tls.ca, tls.cert, tls.key))
        _clients[key] = client
        return client


def close_clients() -> None:
    """Close every Dask client (and local cluster) this process started, and remove the local clusters' folders."""
    with _lock:
        for client in _clients.values():
            cluster = client.cluster
            client.close()
            if cluster is not None:
                cluster.close()
        _clients.clear()
        for folder in _folders:
            shutil.rmtree(folder, ignore_errors=True)
        _folders.clear()


atexit.register(close_clients)


def reduce_rows(rows: Rows, kernel: Kernel, *, dask: str = "", workers: int = 2, tls: Any = None) -> list:
    """Σ of ``kernel`` over every batch of ``rows``: here, or (``dask`` set) as one Dask task per part of the source."""
    parts = rows.parts()
    if not dask:
        return add_up(rows.batches(), kernel)
    try:
        client = dask_client(dask, workers, tls)
    except MissingExtra as e:
        from mpdp.data.loaders import DatasetUnreadable

        raise DatasetUnreadable(str(e)) from None  # this dataset is unavailable; the party serves its others
    futures = [client.submit(_part_sum, part, kernel, pure=False) for part in parts]
    sums = [s for s in client.gather(futures) if s is not None]
    if not sums:
        from mpdp.data.loaders import DatasetError

        raise DatasetError(f"{rows.name}: no row is left after encoding by the schema")
    total = list(sums[0])
    for s in sums[1:]:
        total = [a + b for a, b in zip(total, s)]
    rows.report = None  # the parts' reports stay on the workers (their logs)
    return total


def reducer(src: DatasetSource, rows: Rows) -> Callable[[Kernel], list]:
    """``reduce_rows`` over ``rows`` with the dataset's Dask setting (none: here, in order)."""
    return partial(reduce_rows, rows, dask=getattr(src, "dask", ""), workers=int(getattr(src, "dask_workers", 2)), tls=getattr(src, "dask_tls", None))
