"""A party's datasets checked against their schemas before anything listens: a dataset given a schema it does not
fit (another dataset's, say) stops the party at start-up with what is wrong, not a job refusal later. A dataset whose
data cannot be read at all (a missing, truncated or corrupt file: :class:`mpdp.data.loaders.DatasetUnreadable`) does
not stop the party: it is *unavailable* (an ERROR line in the party's log says why), its jobs are refused
``INVALID_JOB`` ("dataset X is unavailable; see the party's log"), and the party serves its other datasets. Fix the
file and restart the party to use it again.

Each dataset in a party's config has its own ``schema`` (or none); `mpdp federation up --schema NAME=PATH` gives each
dataset name its own. The check reads and encodes the file exactly as a job would (:func:`mpdp.data.dataset.load_dataset`);
what it says stays on this machine (the party's own terminal or log), never on the wire. A database (``format: sql``)
is not read at start-up: its tables and rows may change while the party runs, so each job checks it before any spend.
"""

from __future__ import annotations

from typing import Mapping

from mpdp.data.dataset import DatasetSource, load_dataset
from mpdp.data.loaders import DatasetError, DatasetUnreadable
from mpdp.schema import SchemaError

HINT = "give each dataset its own schema (party config: datasets: NAME: {schema: FILE}; `mpdp federation up --schema NAME=FILE`)"


def check(datasets: Mapping[str, DatasetSource]) -> tuple[list[str], dict[str, str]]:
    """The start-up check: (one line per dataset that has a schema and does not fit it — unreadable schema, missing
    column, no row left —, and dataset name → why, for each dataset whose data cannot be read: unavailable)."""
    problems: list[str] = []
    unavailable: dict[str, str] = {}
    for name, ds in datasets.items():
        if ds.schema_file is None or getattr(ds, "format", "") == "sql":
            continue  # a database is checked by each job that reads it: its tables and rows change while the party runs
        try:
            load_dataset(ds, name=name)
        except DatasetUnreadable as e:
            unavailable[name] = str(e)
        except (DatasetError, SchemaError, OSError, ValueError) as e:
            problems.append(f"dataset {name!r} ({ds.path.name}) does not fit its schema {ds.schema_file.name}: {e}")
    return problems, unavailable


def schema_problems(datasets: Mapping[str, DatasetSource]) -> list[str]:
    """Every problem :func:`check` finds, one line each (`mpdp federation up` refuses to start on any)."""
    problems, unavailable = check(datasets)
    return problems + [f"dataset {name!r} ({datasets[name].path.name}) cannot be read: {why}" for name, why in unavailable.items()]
