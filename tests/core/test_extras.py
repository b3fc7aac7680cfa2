"""Optional dependencies stay optional: `pip install mpdp` for a CSV-only party brings neither pyarrow, psycopg nor
Dask, so importing mpdp (every module of it and of its services) and a CSV party's start-up path must not import
them; and a dataset that needs one says which extra to install, as a dataset problem, never an ImportError."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from mpdp import extras

REPO = Path(__file__).resolve().parents[2]
OPTIONAL = ("pyarrow", "psycopg", "dask", "distributed")

# 1. `import mpdp` as it is (nothing blocked): none of the optional libraries may be in sys.modules afterwards.
# 2. Then the optional libraries made absent, as in a core-only install (a finder that answers ModuleNotFoundError),
#    recording every attempt whose importer is a file of mpdp or of the services: every module of both imported (a
#    top-level import anywhere is caught), then a CSV party's start-up steps on its datasets (the schema check, then a
#    job's read of each). A third-party library may try them on its own (pandas tries pyarrow when it is installed):
#    that is not ours, and in a core-only install it finds nothing.
PROBE = """
import importlib, json, os, pkgutil, sys
from pathlib import Path
import mpdp
first = sorted(m for m in sys.modules if m.split('.')[0] in {optional})
ours = [os.path.realpath(p) + os.sep for p in sys.argv[2:]]
attempts = []

class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] not in {optional}:
            return None
        f = sys._getframe(1)
        while f is not None and (f.f_code.co_filename.startswith('<frozen') or 'importlib' in f.f_code.co_filename):
            f = f.f_back
        where = os.path.realpath(f.f_code.co_filename) if f is not None else ''
        if where.startswith(tuple(ours)):
            attempts.append(name + ' from ' + where)
        raise ModuleNotFoundError(name)

sys.meta_path.insert(0, Absent())
import mpdp_services
for pkg in (mpdp, mpdp_services):
    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):
        importlib.import_module(info.name)
from mpdp.data.dataset import load_dataset
from mpdp_services.common.config import DatasetConfig
from mpdp_services.party.datasets import check
folder = Path(sys.argv[1])
datasets = {{"plain": DatasetConfig(path=folder / "plain.csv"), "described": DatasetConfig(path=folder / "d.csv", schema=folder / "s.yaml", format="csv")}}
problems, unavailable = check(datasets)
rows = {{name: int(load_dataset(ds, name=name).X.shape[0]) for name, ds in datasets.items()}}
print(json.dumps({{"after_import_mpdp": first, "attempts": attempts, "problems": problems, "unavailable": unavailable, "rows": rows,
                  "loaded": sorted(m for m in sys.modules if m.split('.')[0] in {optional} and sys.modules[m] is not None)}}))
"""

SCHEMA = """\
mpdp_schema: 1
features:
  - {name: a, type: numeric, bounds: [-3, 3]}
label: {column: t, positive: ["1"], negative: ["0"]}
"""


@pytest.mark.process  # a fresh interpreter: this one has imported the optional libraries already (other tests)
def test_mpdp_and_a_csv_party_start_import_no_optional_library(tmp_path):
    (tmp_path / "plain.csv").write_text("0.5,1\n-0.25,-1\n1.0,1\n")
    (tmp_path / "d.csv").write_text("a,t\n0.5,1\n-1.5,0\n")
    (tmp_path / "s.yaml").write_text(SCHEMA)
    ours = [str(REPO / "mpdp"), str(REPO / "services")]
    r = subprocess.run([sys.executable, "-c", PROBE.format(optional=set(OPTIONAL)), str(tmp_path), *ours], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["problems"] == [] and got["unavailable"] == {} and got["rows"] == {"plain": 3, "described": 2}  # the path was really taken
    assert got["after_import_mpdp"] == [] and got["attempts"] == [] and got["loaded"] == [], got


def test_pyproject_keeps_them_in_extras():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"]).lower()
    assert not [lib for lib in ("pyarrow", "psycopg", "dask", "distributed") if lib in core]
    opt = project["optional-dependencies"]
    for module, extra in extras.EXTRAS.items():
        assert any(r.lower().startswith(module) for r in opt[extra]), (module, extra, opt[extra])


def test_a_parquet_dataset_without_pyarrow_is_unavailable_naming_the_extra(tmp_path, monkeypatch):
    from mpdp.data.loaders import DatasetUnreadable
    from mpdp.data.sources import ParquetSource
    from mpdp_services.common.config import DatasetConfig
    from mpdp_services.party.datasets import check

    (tmp_path / "s.yaml").write_text(SCHEMA)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if not installed: importing it fails, find_spec says absent
    with pytest.raises(DatasetUnreadable, match=r"a Parquet dataset needs pyarrow, which is not installed here: pip install 'mpdp\[parquet\]'"):
        ParquetSource(tmp_path / "x.parquet").columns()
    problems, unavailable = check({"p": DatasetConfig(format="parquet", path=tmp_path / "x.parquet", schema=tmp_path / "s.yaml")})
    assert problems == [] and "pip install 'mpdp[parquet]'" in unavailable["p"]  # the party serves its other datasets


def test_an_sql_dataset_without_psycopg_names_the_extra(monkeypatch):
    from mpdp.data.loaders import DatasetUnreadable
    from mpdp.data.sources import SqlSource

    monkeypatch.setitem(sys.modules, "psycopg", None)
    src = SqlSource("host=db.invalid password=hunter2", table="claims")
    for read in (src.columns, lambda: next(src.batches())):
        with pytest.raises(DatasetUnreadable, match=r"pip install 'mpdp\[postgres\]'") as e:
            read()
        assert "hunter2" not in str(e.value)


def test_a_dask_dataset_without_distributed_names_the_extra(monkeypatch):
    from mpdp.data import engine

    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(extras.MissingExtra, match=r"pip install 'mpdp\[dask\]'"):
        engine.dask_client("local")


def test_require_refuses_a_library_that_is_not_an_extra():
    with pytest.raises(KeyError):
        extras.require("numpy", "anything")
    assert extras.installed("json") and not extras.installed("mpdp_no_such_module")
