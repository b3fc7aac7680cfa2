"""A party's datasets checked against their schemas before anything listens: a dataset given a schema it does not
fit (another dataset's, say) stops the party at start-up with what is wrong, not a job refusal later.

Each dataset in a party's config has its own ``schema`` (or none); `mpdp federation up --schema NAME=PATH` gives each
dataset name its own. The check reads and encodes the file exactly as a job would (:func:`mpdp.data.dataset.load_dataset`);
what it says stays on this machine (the party's own terminal or log), never on the wire.
"""

from __future__ import annotations

from typing import Mapping

from mpdp.data.dataset import DatasetSource, load_dataset
from mpdp.data.loaders import DatasetError
from mpdp.schema import SchemaError

HINT = "give each dataset its own schema (party config: datasets: NAME: {schema: FILE}; `mpdp federation up --schema NAME=FILE`)"


def schema_problems(datasets: Mapping[str, DatasetSource]) -> list[str]:
    """One line per dataset that has a schema and does not fit it (unreadable schema, missing column, no row left)."""
    out = []
    for name, ds in datasets.items():
        if ds.schema_file is None:
            continue
        try:
            load_dataset(ds, name=name)
        except (DatasetError, SchemaError, OSError, ValueError) as e:
            out.append(f"dataset {name!r} ({ds.path.name}) does not fit its schema {ds.schema_file.name}: {e}")
    return out
