"""Every command `mpdp --help` lists (and every subcommand of its groups) answers the same way:

- ``--help``: exit 0, the command's usage on stdout, nothing on stderr;
- a usage error (an unknown option): exit 2, ``Error:`` and the option on stderr, nothing on stdout; with ``--json``
  (where the command offers it), exit 2 and exactly one JSON object ``{"error": {"code": "usage", ...}}`` on stdout;
- a usage error exits before any heavy module (numpy, gRPC, scikit-learn, ...) or protocol code is imported: checked
  in a fresh interpreter per command (marked ``process``: it starts them).

No federation is needed: nothing here gets past argument checking."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from mpdp_services.cli import main as cli_main


def _paths(group: click.Group, prefix: list[str]) -> list[list[str]]:
    """Every command under ``group`` (groups and leaves), as the words after ``mpdp``."""
    out: list[list[str]] = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None, name
        out.append([*prefix, name])
        if isinstance(cmd, click.Group):
            out += _paths(cmd, [*prefix, name])
    return out


PATHS = _paths(cli_main.cli, [])
IDS = [" ".join(p) for p in PATHS]


def _command(path: list[str]) -> click.Command:
    cmd: click.Command = cli_main.cli
    for word in path:
        assert isinstance(cmd, click.Group)
        sub = cmd.get_command(click.Context(cmd), word)
        assert sub is not None
        cmd = sub
    return cmd


def _offers_json(cmd: click.Command) -> bool:
    return any(p.name == "as_json" for p in cmd.params)


def run(capsys, argv: list[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        cli_main.main(argv)
    out, err = capsys.readouterr()
    code = exc.value.code
    return (0 if code is None else code if isinstance(code, int) else 1), out, err


@pytest.fixture(autouse=True)
def _no_federation(tmp_path, monkeypatch):
    for var in ("MPDP_ENDPOINTS", "MPDP_PROFILE", "MPDP_LOG_FORMAT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / ".config"))
    monkeypatch.chdir(tmp_path)


def test_the_sweep_covers_what_mpdp_help_lists(capsys):
    code, out, _ = run(capsys, ["--help"])
    assert code == 0
    listed = {line.split()[0] for line in out.split("Commands:", 1)[1].splitlines() if line.startswith("  ") and not line.startswith("   ")}
    assert listed == {p[0] for p in PATHS if len(p) == 1}, listed
    assert len(PATHS) >= 30  # groups and their verbs: dca create/submit/..., jobs ls/show/..., experiment NAME, ...


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_help_exits_0_with_the_usage_on_stdout(capsys, path):
    code, out, err = run(capsys, [*path, "--help"])
    assert code == 0, (path, out, err)
    assert out.startswith(f"Usage: mpdp {' '.join(path)} ") and err == "", (out[:200], err)


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_a_usage_error_exits_2_with_the_message_on_stderr(capsys, path):
    code, out, err = run(capsys, [*path, "--no-such-option"])
    assert code == 2, (path, out, err)
    assert out == "" and "Error:" in err and "--no-such-option" in err and "Traceback" not in err, (out, err)
    cmd = _command(path)
    if _offers_json(cmd):
        code, out, err = run(capsys, [*path, "--no-such-option", "--json"])
        assert code == 2, (path, out, err)
        lines = [ln for ln in out.splitlines() if ln.strip()]
        assert len(lines) == 1, out
        doc = json.loads(lines[0])
        assert doc["error"]["code"] == "usage" and "--no-such-option" in doc["error"]["message"] and doc["error"]["hint"], doc


# Usage errors a command finds itself (not click's parser): each exits 2 too
OWN_USAGE_ERRORS = [
    ["ledger", "show"],
    ["ledger", "show", "--budget-epsilon", "1"],
    ["health", "--address", "127.0.0.1:1"],
    ["federation", "up", "--key-bits", "512"],
    ["federation", "up", "--parties", "0"],
    ["demo", "--key-bits", "512"],
    ["demo", "--parties", "2"],
]


@pytest.mark.parametrize("argv", OWN_USAGE_ERRORS, ids=[" ".join(a) for a in OWN_USAGE_ERRORS])
def test_a_command_s_own_usage_errors_exit_2(capsys, argv):
    code, out, err = run(capsys, argv)
    assert code == 2 and "Error:" in err and out == "", (argv, out, err)


HEAVY = ("numpy", "grpc", "sklearn", "scipy", "phe", "gmpy2", "numba", "dp_accounting", "pyarrow", "pandas", "psycopg",
         "mpdp.pathak2010", "mpdp.dca", "mpdp.lmgc", "mpdp.regression", "mpdp.hamm2016", "mpdp.dpgd", "mpdp.experiments", "mpdp.ledger")
PROBE = """
import json, sys
from mpdp_services.cli import main
argvs = json.loads(sys.argv[1])
heavy = tuple(json.loads(sys.argv[2]))
before = set(sys.modules)
try:
    main.main(argvs)
except SystemExit as e:
    code = e.code
loaded = sorted(m for m in set(sys.modules) - before if m.split('.')[0] in heavy or m.startswith(tuple(h + '.' for h in heavy)) or m in heavy)
print(json.dumps({"code": code, "heavy": loaded}), file=sys.stderr)
"""


@pytest.mark.process
@pytest.mark.parametrize("argv", [[*p, "--no-such-option"] for p in PATHS] + OWN_USAGE_ERRORS, ids=[*IDS, *(" ".join(a) for a in OWN_USAGE_ERRORS)])
def test_a_usage_error_imports_nothing_heavy(argv, tmp_path):
    r = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv), json.dumps(HEAVY)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    got = json.loads(r.stderr.strip().splitlines()[-1])
    assert got["code"] == 2, (argv, r.stderr[-2000:])
    assert got["heavy"] == [], f"`mpdp {' '.join(argv)}` imported {got['heavy'][:8]} before saying it was a usage error"
