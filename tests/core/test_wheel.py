"""The built wheel is fit for a shared environment: only mpdp and mpdp_services at the top level (never a generic
name such as ``services``), type information shipped (py.typed, stubs of the generated messages), no exact pins."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(out), str(REPO)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    (path,) = out.glob("mpdp-*.whl")
    return zipfile.ZipFile(path)


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_only_mpdp_names_at_the_top_level(wheel):
    names = wheel.namelist()
    top = {n.split("/")[0] for n in names if "/" in n and not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {"mpdp", "mpdp_services"}, top
    assert "mpdp_services/curator/server.py" in names and "mpdp_services/cli/main.py" in names


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_type_information_ships(wheel):
    names = set(wheel.namelist())
    assert "mpdp/py.typed" in names
    assert "mpdp/messages/dca_pb2.pyi" in names and "mpdp/messages/pathak2010_pb2_grpc.pyi" in names


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_metadata_has_ranges_and_extras(wheel):
    meta = next(wheel.read(n).decode() for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    requires = [line for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    assert requires and not [r for r in requires if "==" in r.split(";")[0]], requires
    assert "Provides-Extra: experiments" in meta and "Provides-Extra: dev" in meta
    entry = next(wheel.read(n).decode() for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt"))
    assert "mpdp = mpdp_services.cli.main:main" in entry
