"""The LMGC evaluation runner, the KDD-99 loader and the `mpdp experiment lmgc` command."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from mpdp.experiments.lmgc import LMGCExperimentConfig, run_lmgc_experiment, write_outputs
from mpdp.lmgc.datasets import KDD_CATEGORIES, _read_kdd, load_digits_split, load_kdd99_split, load_wine_split
from mpdp.math.drbg import Drbg

from .helpers import SHARED_DATA, shared_path


pytestmark = pytest.mark.slow  # runs the experiment end to end (minutes): not in `make test-fast`


def test_sklearn_datasets_are_scaled_into_unit_ball() -> None:
    for split in (load_digits_split(0), load_wine_split(0)):
        for X in (split.X_train, split.X_test):
            assert np.linalg.norm(X, axis=1).max() <= 1.0 + 1e-12
        assert set(np.unique(split.y_train)) == set(np.unique(split.y_test))
    a, b = load_wine_split(0), load_wine_split(1)
    assert not np.array_equal(a.y_train, b.y_train)  # runs use different public splits


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_kdd99_loader_five_categories() -> None:
    shared_path("kddcup99", "kddcup.data_10_percent.gz")
    shared_path("kddcup99", "training_attack_types.txt")
    split = load_kdd99_split(SHARED_DATA, seed=0, per_class=40, public_rows=300)
    assert split.class_names == KDD_CATEGORIES
    assert split.n_features == 52
    y = np.concatenate([split.y_train, split.y_test])
    assert np.bincount(y, minlength=5).tolist() == [40, 40, 40, 40, 40]
    assert np.linalg.norm(split.X_train, axis=1).max() <= 1.0 + 1e-12
    assert split.extra["sampled_per_class"]["u2r"] == 40
    # the categories carry signal: a nearest-centroid rule beats chance by far
    cents = np.stack([split.X_train[split.y_train == c].mean(axis=0) for c in range(5)])
    pred = np.argmin(((split.X_test[:, None, :] - cents[None]) ** 2).sum(-1), axis=1)
    assert np.mean(pred == split.y_test) > 0.5
    _read_kdd.cache_clear()  # the cached file is ~100 MB of strings; free it for the rest of the session


def test_missing_kdd_folder_is_a_clear_error(tmp_path) -> None:
    from mpdp.data.loaders import DatasetError

    with pytest.raises(DatasetError, match="--data"):
        load_kdd99_split(tmp_path, seed=0)


@pytest.fixture(scope="module")
def wine_result() -> dict:
    config = LMGCExperimentConfig(dataset="wine", epsilons=(1.0, 1e4), runs=2, seed=5)
    steps: list[tuple[int, int]] = []
    result = run_lmgc_experiment(config, progress=lambda d, t: steps.append((d, t)))
    result["_steps"] = steps
    return result


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_experiment_result_structure_and_accounting(wine_result: dict) -> None:
    r = wine_result
    assert r["seeded_noise"] and "NOT a private release" in r["noise_note"]
    rows = {(x["method"], x["epsilon"]): x for x in r["results"]}
    assert set(rows) == {("lmgc", None), ("logreg", None)} | {(m, e) for m in ("lmgc_corrected", "lmgc_paper", "logreg_dp") for e in (1.0, 1e4)}
    assert rows[("lmgc", None)]["accuracy_mean"] > 0.9 and rows[("logreg", None)]["accuracy_mean"] > 0.9
    for eps in (1.0, 1e4):
        c = rows[("lmgc_corrected", eps)]
        assert c["runs_released"] == 2
        acc = c["privacy"]
        assert acc["eps_noise"] + acc["eps_jacobian"] <= eps * (1 + 1e-12) and acc["proven"]
        p = rows[("lmgc_paper", eps)]
        assert p["runs_released"] + p["runs_unbounded"] + p["runs_failed"] == 2
        d = rows[("logreg_dp", eps)]
        assert d["privacy"]["guarantee"]["norm"].startswith("Frobenius")
    assert rows[("lmgc_corrected", 1e4)]["accuracy_mean"] > rows[("lmgc_corrected", 1.0)]["accuracy_mean"]
    assert r["_steps"][-1][0] == r["_steps"][-1][1] == 2 * (2 + 3 * 2)


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_experiment_writes_json_csv_png(wine_result: dict, tmp_path) -> None:
    result = {k: v for k, v in wine_result.items() if not k.startswith("_")}
    files = write_outputs(result, tmp_path)
    assert json.loads(files["json"].read_text())["dataset"] == "wine"
    lines = files["csv"].read_text().strip().splitlines()
    assert lines[0].startswith("method,epsilon,accuracy_mean") and len(lines) == 1 + len(result["results"])
    assert files["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_seeded_runs_reproduce() -> None:
    config = LMGCExperimentConfig(dataset="wine", epsilons=(10.0,), runs=1, methods=("lmgc_corrected", "logreg_dp"))
    a = run_lmgc_experiment(config, rng=Drbg.from_seed("r"))
    b = run_lmgc_experiment(config, rng=Drbg.from_seed("r"))
    c = run_lmgc_experiment(config, rng=Drbg.from_seed("s"))
    acc = lambda res: [x["accuracies"] for x in res["results"]]  # noqa: E731
    assert acc(a) == acc(b)
    assert a["seeded_noise"]
    assert c["results"][0]["privacy"]["ridge"] == a["results"][0]["privacy"]["ridge"]
    assert not math.isnan(c["results"][0]["accuracy_mean"])


def _cli():
    from mpdp_services.cli.main import cli

    return cli


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_cli_prints_one_json_object(tmp_path) -> None:
    res = CliRunner().invoke(_cli(), ["experiment", "lmgc", "--dataset", "wine", "--epsilons", "0.5,1000", "--runs", "1",
                                      "--seed", "9", "--out", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)
    assert obj["dataset"] == "wine" and obj["config"]["epsilons"] == [0.5, 1000.0]
    methods = {x["method"] for x in obj["results"]}
    assert methods == {"lmgc", "lmgc_corrected", "lmgc_paper", "logreg", "logreg_dp"}
    for x in obj["results"]:
        assert "accuracy_mean" in x and "privacy" in x
    assert (tmp_path / "lmgc_wine.png").exists()


def test_cli_help_documents_every_option() -> None:
    from mpdp_services.cli.experiment_lmgc import command

    for p in command.params:
        assert getattr(p, "help", None), f"option {p.name} has no --help text"
    res = CliRunner().invoke(_cli(), ["experiment", "lmgc", "--help"])
    assert res.exit_code == 0 and "--epsilons" in res.output and "--data" in res.output


def test_cli_rejects_bad_epsilons(tmp_path) -> None:
    res = CliRunner().invoke(_cli(), ["experiment", "lmgc", "--dataset", "wine", "--epsilons", "1,-2", "--out", str(tmp_path), "--json"])
    assert res.exit_code != 0
