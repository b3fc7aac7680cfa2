"""Connection profiles: which endpoints a command uses, and `mpdp profile` itself."""

from __future__ import annotations

import json
import stat

import click
import pytest
from click.testing import CliRunner

from mpdp_services.cli.options import endpoints_option
from mpdp_services.cli.profile import profile


@click.command()
@endpoints_option
def probe(endpoints: str) -> None:
    click.echo(endpoints)


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MPDP_PROFILES", str(tmp_path / "cfg" / "profiles.yaml"))
    for var in ("MPDP_ENDPOINTS", "MPDP_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "endpoints.json").write_text("{}")
    return tmp_path


def _run(cmd, *args, env=None):
    return CliRunner().invoke(cmd, list(args), env=env)


def test_order_endpoints_env_profile_default_fallback(home):
    assert _run(probe).output.strip() == "runs/federation"  # no file: what `mpdp federation up` writes
    assert _run(profile, "add", "a", str(home / "a")).exit_code == 0  # the first profile becomes the default
    assert _run(profile, "add", "b", str(home / "b")).exit_code == 0
    assert _run(probe).output.strip() == str(home / "a")
    assert _run(probe, "--profile", "b").output.strip() == str(home / "b")
    assert _run(probe, env={"MPDP_PROFILE": "b"}).output.strip() == str(home / "b")
    assert _run(probe, "--profile", "b", env={"MPDP_ENDPOINTS": "/x"}).output.strip() == "/x"
    assert _run(probe, "--profile", "b", "--endpoints", "/y", env={"MPDP_ENDPOINTS": "/x"}).output.strip() == "/y"
    assert _run(profile, "default", "b").exit_code == 0
    assert _run(probe).output.strip() == str(home / "b")
    listed = json.loads(_run(profile, "ls", "--json").output)
    assert listed["default"] == "b" and listed["profiles"] == {"a": str(home / "a"), "b": str(home / "b")}
    assert stat.S_IMODE((home / "cfg" / "profiles.yaml").stat().st_mode) == 0o600
    assert _run(profile, "rm", "b").exit_code == 0
    assert _run(probe).output.strip() == "runs/federation"  # the default went with it


def test_unknown_profile_and_bad_input_say_what_to_do(home):
    r = _run(probe, "--profile", "nope")
    assert r.exit_code == 2 and "no profile 'nope'" in r.output and "mpdp profile add" in r.output
    r = _run(profile, "add", "../x", str(home / "a"))
    assert r.exit_code == 1 and "profile name" in r.output
    r = _run(profile, "add", "c", str(home))  # a folder without endpoints.json
    assert r.exit_code == 1 and "no endpoints.json" in r.output
    (home / "cfg").mkdir(exist_ok=True)
    (home / "cfg" / "profiles.yaml").write_text("profiles: [1, 2]\n")
    r = _run(probe)
    assert r.exit_code == 2 and "is not a profiles file" in r.output
