"""benchmarks/peers: the script's interface and its tables (no installs, no network, no timing assertions)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

PEERS = Path(__file__).resolve().parents[2] / "benchmarks" / "peers"


@pytest.fixture(scope="module")
def run():
    spec = importlib.util.spec_from_file_location("peers_run", PEERS / "run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.process  # starts a process or opens a socket: not in `make test-fast`
def test_help() -> None:
    out = subprocess.run([sys.executable, str(PEERS / "run.py"), "--help"], capture_output=True, text=True, timeout=60, check=True).stdout
    for opt in ("--json", "--quick", "--repeats", "--clients", "--dims", "--markdown"):
        assert opt in out


def test_requirements_are_pinned_and_not_project_dependencies() -> None:
    pyproject = (PEERS.parents[1] / "pyproject.toml").read_text().lower()
    for name in ("flower", "diffprivlib"):
        lines = [x.strip() for x in (PEERS / f"requirements-{name}.txt").read_text().splitlines() if x.strip() and not x.startswith("#")]
        assert lines and all("==" in x for x in lines), lines
    assert "flwr" not in pyproject and "diffprivlib" not in pyproject
    # the scripts that run inside the peers' virtualenvs must not need mpdp
    for f in ("flower_secagg.py", "diffprivlib_lr.py"):
        assert "import mpdp" not in (PEERS / f).read_text() and "from mpdp" not in (PEERS / f).read_text()


RESULT = {
    "sum": [
        {"engine": "simulation", "N": 10, "d": 1000,
         "flower": [{"seconds": 0.5, "first_round_seconds": 5.0}, {"seconds": 0.7, "first_round_seconds": 6.0}],
         "mpdp": [{"seconds": 0.05}, {"seconds": 0.15}]},
        {"engine": "deployment (TLS)", "N": 5, "d": 1000, "flower": [{"error": "RuntimeError: boom"}], "mpdp": [{"seconds": 0.03}]},
    ],
    "lr": [{"epsilon": 0.1, "diffprivlib": [{"test_error": 0.2}, {"test_error": 0.3}], "pathak": [{"test_error": 0.5}, {"test_error": 0.5}]}],
    "nonprivate_error": 0.158,
}


def test_ratio_per_cell(run) -> None:
    rows = run.sum_rows(RESULT)
    assert rows[0]["flower_s"] == pytest.approx(0.6) and rows[0]["mpdp_s"] == pytest.approx(0.1)
    assert rows[0]["ratio"] == pytest.approx(6.0)
    assert rows[1]["ratio"] is None and rows[1]["flower_error"].startswith("RuntimeError")
    lr = run.lr_rows(RESULT)
    assert lr[0]["ratio"] == pytest.approx(0.5 / 0.25)


def test_tables(run, capsys) -> None:
    md = run.markdown(RESULT)
    assert "| simulation | 10 | 1,000 | 0.600 | 5.50 | 0.100 | 6.0× |" in md
    assert "failed: RuntimeError: boom" in md
    assert "| 0.1 | 0.2500 | 0.5000 | 2.00× | – | –× |" in md
    run.print_tables(RESULT)
    out = capsys.readouterr().out
    assert "6.0×" in out and "2.00×" in out


def test_tagged_json(run) -> None:
    assert run.tagged_json("noise\nFLOWER_RESULT {\"a\": 1}\nmore", "FLOWER_RESULT") == {"a": 1}
    with pytest.raises(ValueError):
        run.tagged_json("nothing", "FLOWER_RESULT")


@pytest.mark.process  # starts a process or opens a socket: not in `make test-fast`
def test_prio3_peer_is_pinned_exactly_and_its_script_answers_help() -> None:
    """The Prio3 peer (divviup-ts on Node.js) is pinned by version and lock file, and is no project dependency."""
    import json

    package = json.loads((PEERS / "prio3" / "package.json").read_text())
    assert package["dependencies"] == {"@divviup/prio3": "0.8.0"}
    lock = json.loads((PEERS / "prio3" / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/@divviup/prio3"]["version"] == "0.8.0"
    assert all("integrity" in p for name, p in lock["packages"].items() if name)
    out = subprocess.run([sys.executable, str(PEERS / "prio3_vdaf.py"), "--help"], capture_output=True, text=True, timeout=60, check=True).stdout
    for opt in ("--dims", "--reports", "--clients", "--nodes", "--json", "--cache"):
        assert opt in out
