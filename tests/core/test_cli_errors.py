"""Every `mpdp` command fails the same way: no traceback, a message and a hint, and with --json exactly one JSON
object ``{"error": {"code", "message", "hint"}}`` on stdout and a non-zero exit.

The sweep runs every command in-process through the CLI's ``main`` with bad arguments (an unknown option, a
missing required one, a malformed number, an endpoints file that does not exist) and a few known failures
(small keys without --test-mode, a vector that is not one, an ε beyond what the fixed point holds)."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest

from mpdp_services.cli import main as cli_main


def _leaves(cmd: click.Command, path: list[str]):
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            assert sub is not None, name
            yield from _leaves(sub, [*path, name])
    else:
        yield path, cmd


LEAVES = {" ".join(p): c for p, c in _leaves(cli_main.cli, [])}


@pytest.fixture(autouse=True)
def _no_federation(tmp_path, monkeypatch):
    """No endpoints or profile from the environment: every command that needs a federation finds none."""
    for var in ("MPDP_ENDPOINTS", "MPDP_PROFILE", "MPDP_LOG_FORMAT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / ".config"))
    monkeypatch.chdir(tmp_path)


def run(capsys, argv: list[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        cli_main.main(argv)
    out, err = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 1), out, err


def assert_failed(capsys, argv: list[str]) -> dict | None:
    """Run ``argv``; it must fail without a traceback; with --json, stdout is one error object (returned)."""
    code, out, err = run(capsys, argv)
    assert code != 0, (argv, out, err)
    assert "Traceback" not in out + err, (argv, err)
    if "--json" not in argv:
        assert "Error:" in err, (argv, err)
        return None
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) == 1, (argv, out)
    doc = json.loads(lines[0])
    assert set(doc) == {"error"} or argv[0] in ("health", "schema", "provision"), doc  # a check's report keeps its fields beside the error
    assert set(doc["error"]) == {"code", "message", "hint"}, doc
    assert doc["error"]["code"] and doc["error"]["message"], doc
    return doc["error"]


def _dummy(p: click.Parameter, tmp: Path) -> str:
    t = p.type
    if isinstance(t, click.Choice):
        return str(t.choices[0])
    if isinstance(t, (click.types.IntParamType, click.IntRange)):
        return "3"
    if isinstance(t, (click.types.FloatParamType, click.FloatRange)):
        return "0.5"
    if isinstance(t, click.Path):
        return str(tmp / "missing")
    return "x"


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("name", sorted(LEAVES))
def test_unknown_option_and_missing_values(capsys, name, as_json):
    cmd = LEAVES[name]
    extra = ["--json"] if as_json else []
    err = assert_failed(capsys, [*name.split(), "--no-such-option", *extra])
    if err is not None:
        assert err["code"] == "usage" and "--no-such-option" in err["message"] and name.split()[0] in err["hint"]
    if any(p.required for p in cmd.params):
        err = assert_failed(capsys, [*name.split(), *extra])
        assert err is None or err["code"] == "usage"
    for p in cmd.params:  # a malformed number for every numeric option
        if isinstance(p, click.Option) and not p.is_flag and isinstance(p.type, (click.types.IntParamType, click.types.FloatParamType)):
            err = assert_failed(capsys, [*name.split(), p.opts[0], "not-a-number", *extra])
            assert err is None or err["code"] == "usage"


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("name", sorted(n for n, c in LEAVES.items() if any(p.name == "endpoints" for p in c.params) and n != "profile add"))
def test_no_federation_is_one_clear_error(capsys, tmp_path, name, as_json):
    """Required values filled in, --endpoints naming nothing: the command says where it looked and what to do."""
    cmd = LEAVES[name]
    argv = name.split()
    for p in cmd.params:
        if p.required and isinstance(p, click.Option):
            argv += [p.opts[0], _dummy(p, tmp_path)]
        elif p.required:
            argv.append("dca-000000000000")
    argv += ["--endpoints", str(tmp_path / "nowhere")]
    if as_json and any(p.name == "as_json" for p in cmd.params):
        argv.append("--json")
    err = assert_failed(capsys, argv)
    if err is not None:
        assert err["code"] in {"endpoints", "usage"}, err
        if err["code"] == "endpoints":
            assert str(tmp_path / "nowhere") in err["message"] and "mpdp federation up" in err["message"]


@pytest.mark.parametrize("argv, code, words", [
    (["federation", "up", "--key-bits", "512"], "usage", ["--test-mode", "2048"]),
    (["demo", "--key-bits", "512"], "usage", ["--test-mode", "2048"]),
    (["federation", "up", "--parties", "0"], "usage", ["at least one party"]),
    (["dca", "submit", "--site", ".", "--job", "j", "--values", "1,abc", "--ledger", "l.json", "--budget-epsilon", "1"], "usage", ["--values"]),
    (["dca", "submit", "--site", ".", "--job", "j", "--values", "1,2"], "usage", ["not a site folder", "site.crt"]),
    (["ledger", "show"], "usage", ["--site"]),
    (["health", "--address", "127.0.0.1:1", "--tls-dir", "."], "unhealthy", ["TLS files missing"]),
    (["serve", "curator", "--config", "nowhere.yaml"], "failed", ["nowhere.yaml"]),
    (["provision", "check", "."], "invalid", ["site.crt", "provision sites"]),
])
def test_known_failures_say_what_to_do(capsys, argv, code, words):
    has_json = any(p.name == "as_json" for p in LEAVES[" ".join(argv[:2]) if " ".join(argv[:2]) in LEAVES else argv[0]].params)
    for extra in ([], ["--json"] if has_json else []):
        err = assert_failed(capsys, [*argv, *extra])
        if err is not None:
            assert err["code"] == code, err
            assert all(w in err["message"] + err["hint"] for w in words), err


def test_a_bug_is_still_one_json_object_with_its_traceback_on_stderr(capsys, monkeypatch):
    def boom(*_a, **_k):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(cli_main.cli, "main", boom)
    code, out, err = run(capsys, ["jobs", "ls", "--json"])
    assert code == 1 and json.loads(out)["error"]["code"] == "internal" and "Traceback" in err


def test_a_refusal_and_an_unreachable_service_read_differently():
    import grpc

    from mpdp_services.cli.errors import from_rpc

    class Err(grpc.RpcError):
        def __init__(self, code, details):
            self._c, self._d = code, details

        def code(self):
            return self._c

        def details(self):
            return self._d

    down = from_rpc(Err(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses"), "the curator", "127.0.0.1:9")
    assert down.code == "unreachable" and "the curator is not reachable at 127.0.0.1:9" in down.message and "mpdp federation up" in down.hint
    busy = from_rpc(Err(grpc.StatusCode.UNAVAILABLE, "NOT_READY: party-2 is starting"), "the curator", "127.0.0.1:9", "the job")
    assert busy.code == "unavailable" and busy.message.startswith("the curator refused the job: UNAVAILABLE: NOT_READY")
    denied = from_rpc(Err(grpc.StatusCode.PERMISSION_DENIED, "WRONG_ROLE: x"), "the curator")
    assert denied.code == "permission_denied" and "operator's certificate" in denied.hint


def test_the_largest_epsilon_is_named_and_is_the_largest():
    from mpdp.dp.pathak_noise import GAUSSIAN, PathakCalibration, largest_epsilon

    top = largest_epsilon(1e-6, 3)
    PathakCalibration(GAUSSIAN, top, 1.0, 3, delta=1e-6)
    with pytest.raises(ValueError, match=f"the largest allowed is {top:.4g}"):
        PathakCalibration(GAUSSIAN, top * 1.001, 1.0, 3, delta=1e-6)
    with pytest.raises(ValueError, match="lower epsilon"):
        PathakCalibration(GAUSSIAN, 150.0, 1.0, 3, delta=1e-6)


def test_jobs_are_listed_whole_when_piped_and_stages_come_in_order():
    from mpdp_services.operator.jobs import ordered_stages

    assert list(ordered_stages({"stage3": 1.0, "setup": 2.0, "stage2": 3.0, "stage1": 4.0, "stage10": 5.0}, [])) == \
        ["setup", "stage1", "stage2", "stage3", "stage10"]
    assert list(ordered_stages({"round 2": 1.0, "round 1": 1.0, "released": 1.0}, ["ROUND 1", "ROUND 2", "RELEASED"])) == ["round 1", "round 2", "released"]
