"""Optional dependencies: which extra of ``pip install 'mpdp[EXTRA]'`` brings each library, and the one error that says so.

A party that reads only CSV or LIBSVM files needs none of them; each is imported only where a dataset or a feature
asks for it, after :func:`require` has checked that it is installed:

==================  =========  ==================================================================
library             extra      needed by
==================  =========  ==================================================================
pyarrow             parquet    a Parquet dataset (``format: parquet``)
psycopg             postgres   a PostgreSQL dataset (``format: sql``), and a DP query pushed down to it
distributed, dask   dask       a dataset whose batch computations run on Dask (``dask:``)
==================  =========  ==================================================================
"""

from __future__ import annotations

import importlib.util

EXTRAS = {"pyarrow": "parquet", "psycopg": "postgres", "distributed": "dask", "dask": "dask"}  # top-level module → its extra


class MissingExtra(ImportError):
    """An optional library is not installed; the message names the extra that brings it."""


def installed(module: str) -> bool:
    """Whether ``module`` can be imported here (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a broken entry in sys.modules
        return False


def message(module: str, what: str) -> str:
    """The one sentence for a missing optional library: what needs it and what to install."""
    top = module.split(".")[0]
    return f"{what} needs {top}, which is not installed here: pip install 'mpdp[{EXTRAS[top]}]'"


def require(module: str, what: str) -> None:
    """Raise :class:`MissingExtra` naming the extra unless ``module`` (a key of :data:`EXTRAS`) is installed."""
    if module.split(".")[0] not in EXTRAS:
        raise KeyError(f"{module} is not an optional dependency of mpdp")
    if not installed(module):
        raise MissingExtra(message(module, what))
