"""`mpdp train MODEL`: one subcommand per model of the registry, each with only its own options; an unknown model is an
error that names it and lists the known ones, never a job of another protocol."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from mpdp.registry import models
from mpdp_services.cli.main import main
from mpdp_services.cli.train import TRAINERS, train


@pytest.fixture(autouse=True)
def _nowhere(tmp_path, monkeypatch):
    monkeypatch.delenv("MPDP_PROFILE", raising=False)
    monkeypatch.setenv("MPDP_ENDPOINTS", str(tmp_path / "nowhere"))
    monkeypatch.setenv("HOME", str(tmp_path))


def run(capsys, *argv: str) -> tuple[int, dict | None]:
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--json"])
    out, _ = capsys.readouterr()
    return int(exc.value.code or 0), (json.loads(out) if out.strip() else None)


def test_every_registered_model_is_one_subcommand_with_a_trainer():
    assert set(TRAINERS) == set(models())  # a model without a trainer would be listed but refuse to run
    out = CliRunner().invoke(train, ["--help"]).output
    listed = [line.split()[0] for line in out.split("Commands:", 1)[1].splitlines() if line.startswith("  ") and not line.startswith("   ")]
    assert listed == list(models())


@pytest.mark.parametrize("argv", [["no-such-model", "--dataset", "d"], ["--model", "lmgc", "--dataset", "d"], ["logreg2"]])
def test_an_unknown_model_is_an_error_naming_the_known_ones(capsys, argv):
    code, doc = run(capsys, "train", *argv)
    assert code == 2 and doc is not None and doc["error"]["code"] == "usage"
    message = doc["error"]["message"]
    assert all(m in message for m in models()), message
    assert argv[0] in message or "is now `mpdp train M`" in message


def test_each_model_takes_only_its_own_options(capsys):
    def options(model: str) -> set[str]:
        cmd = train.get_command(None, model)  # type: ignore[arg-type]
        return {o for p in cmd.params for o in p.opts}

    assert "--auxiliary" in options("hamm2016") and "--auxiliary" not in options("lmgc") and "--auxiliary" not in options("logreg")
    assert "--ridge" in options("lmgc") and "--ridge" not in options("dp-gd")
    assert "--dimension" in options("dp-gd") and "--dimension" not in options("logreg")
    assert "--colluders" in options("logreg") and "--colluders" not in options("hamm2016")
    code, doc = run(capsys, "train", "lmgc", "--dataset", "d", "--parties", "a,b", "--epsilon", "1", "--lam", "0.1", "--auxiliary", "aux")
    assert code == 2 and "--auxiliary" in doc["error"]["message"]  # another model's option is a usage error, not ignored


def test_a_model_without_a_trainer_refuses_and_submits_nothing(capsys, monkeypatch):
    monkeypatch.delitem(TRAINERS, "lmgc")
    code, doc = run(capsys, "train", "lmgc", "--dataset", "d")
    assert code == 2 and "no trainer" in doc["error"]["message"] and "lmgc" in doc["error"]["message"]
