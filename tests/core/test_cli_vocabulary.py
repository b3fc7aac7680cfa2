"""One name per concept: the regulariser is `--lam` (Python `lam=`, JSON "lam"), the noise scheme `--noise`, a
DP calibration `--calibration`, where jobs run the `backend`; δ defaults are explicit. The old spellings still
work for one release, each with a warning on stderr."""

from __future__ import annotations

import json

import pytest

from mpdp_services.cli.main import main

TRAIN = ["train", "logreg", "--dataset", "d", "--parties", "party-1,party-2,party-3", "--epsilon", "1"]


@pytest.fixture(autouse=True)
def _nowhere(tmp_path, monkeypatch):
    monkeypatch.delenv("MPDP_PROFILE", raising=False)
    monkeypatch.setenv("MPDP_ENDPOINTS", str(tmp_path / "nowhere"))
    monkeypatch.setenv("HOME", str(tmp_path))


def run(capsys, *argv: str) -> tuple[int, dict | None, str]:
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--json"])
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), (json.loads(out) if out.strip() else None), err


@pytest.mark.parametrize("old, new", [(["--lambda", "0.1"], ["--lam", "0.1"]), (["--mode", "corrected", "--lam", "0.1"], ["--noise", "corrected", "--lam", "0.1"])])
def test_old_spellings_still_parse_and_warn(capsys, old, new):
    code, doc, err = run(capsys, *TRAIN, *new)
    assert code == 1 and doc["error"]["code"] == "endpoints" and "deprecated" not in err  # parsed; fails for want of a federation
    code, doc, err = run(capsys, *TRAIN, *old)
    assert code == 1 and doc["error"]["code"] == "endpoints"
    assert f"mpdp: {old[0]} is deprecated and goes in the next release; use {new[0]}" in err


def test_the_regulariser_is_still_required(capsys):
    code, doc, _ = run(capsys, *TRAIN)
    assert code == 2 and doc["error"]["code"] == "usage" and "'--lam'" in doc["error"]["message"]


def test_delta_defaults_are_explicit(capsys):
    code, doc, err = run(capsys, *TRAIN, "--lam", "0.1", "--delta", "0")
    assert code == 1 and doc["error"]["code"] == "endpoints" and "--delta 0 is deprecated" in err and "1e-06" in err
    code, doc, _ = run(capsys, *TRAIN, "--lam", "0.1", "--noise", "corrected", "--delta", "1e-5")
    assert code == 2 and "pure ε-DP" in doc["error"]["message"]
    with pytest.raises(SystemExit):
        main(["train", "logreg", "--help"])
    assert "[default: 1e-06" in capsys.readouterr().out.replace("\n", " ").replace("  ", " ")


def test_dca_and_regress_name_the_calibration(capsys):
    code, doc, err = run(capsys, "dca", "create", "-d", "2", "-n", "3", "--epsilon", "1", "--delta", "1e-5", "--sensitivity", "1", "--nodes", "n1",
                         "--mode", "paper")
    assert code == 1 and doc["error"]["code"] == "endpoints" and "--mode is deprecated" in err and "--calibration" in err


def test_the_cli_noise_names_are_the_specs():
    from mpdp.dca.params import NOISE_ENUM
    from mpdp.dp import pathak_noise
    from mpdp.hamm2016 import pate
    from mpdp.limits import DEFAULT_DELTA
    from mpdp_services.cli.dca import NOISES
    from mpdp_services.operator.pathak2010 import MODES

    assert {n: i for i, n in enumerate(NOISES)} == NOISE_ENUM
    assert set(MODES) == set(pathak_noise.MODES)
    assert pathak_noise.DEFAULT_DELTA == pate.DEFAULT_DELTA == DEFAULT_DELTA


def test_provisioning_defaults_take_the_new_names_and_warn_on_the_old():
    from mpdp_services.provisioning.provision import Defaults

    assert Defaults.model_validate({"lam": 0.5, "noise": "paper"}).lam == 0.5
    with pytest.warns(FutureWarning, match="'lambda' is deprecated"):
        d = Defaults.model_validate({"lambda": 0.5, "mode": "paper"})
    assert d.lam == 0.5 and d.noise == "paper"


def test_the_python_api_says_backend():
    import numpy as np

    import mpdp

    rng = np.random.default_rng(0)
    fed = mpdp.Federation.in_process([(rng.normal(size=(20, 2)), rng.integers(0, 2, 20)) for _ in range(3)], key_bits=512)
    with fed:
        assert fed.backend == "in-process"
        with pytest.warns(FutureWarning, match="Federation.backend"):
            assert fed.mode == "in-process"
