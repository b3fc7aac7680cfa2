"""The UCI reproduction (Heikkilä et al. 2017, Fig. 2): loaders, preprocessing, a reduced-grid reproduction check on red wine,
and the CLI. The data must be present: a missing ../shared/data file fails these tests, it never skips."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from scipy.stats import mannwhitneyu

from mpdp.data.loaders import DatasetError
from mpdp.experiments import heikkila2017 as exp
from mpdp_services.cli.experiment_heikkila import command

from tests.conftest import SHARED_DATA, shared_file

pytestmark = pytest.mark.slow  # runs the experiment end to end (minutes): not in `make test-fast`


FILES = {"red": ("wine_quality", "winequality-red.csv"), "white": ("wine_quality", "winequality-white.csv"), "abalone": ("abalone", "abalone.data")}
ROWS = {"red": 1599, "white": 4898, "abalone": 4177}


@pytest.fixture(scope="module", autouse=True)
def _data_present():
    for parts in FILES.values():
        shared_file(*parts)


@pytest.mark.parametrize("key", ["red", "white", "abalone"])
def test_loaders_and_preprocessing(key):
    d = exp.load_uci(SHARED_DATA, key)
    ds = exp.UCI_DATASETS[key]
    assert d.X.shape == (ROWS[key], ds.d) and d.y.shape == (ROWS[key],)
    D = np.hstack([d.X, d.y[:, None]])
    np.testing.assert_allclose(D.mean(axis=0), 0.0, atol=1e-10)
    np.testing.assert_allclose(np.ptp(D, axis=0), 10.0, rtol=1e-12)
    assert d.max_abs < 10.0
    tr, te = exp.split(d, 1, 0)
    assert len(tr) == ds.n_train and len(te) == ds.n_test and not set(tr) & set(te)
    assert np.array_equal(exp.split(d, 1, 0)[0], tr) and not np.array_equal(exp.split(d, 1, 1)[0], tr)


def test_abalone_sex_coding():
    raw = exp.read_uci(SHARED_DATA, "abalone")
    assert set(np.unique(raw[:, 0])) == {0.0, 1.0}
    assert int((raw[:, 0] == 0).sum()) == 1528  # M = 0; F (1307) and I (1342) = 1


def test_paper_reader_reproduces_the_zero_row():
    raw = exp.read_uci(SHARED_DATA, "red")
    bug = exp.load_uci(SHARED_DATA, "red", paper_reader=True)
    assert bug.paper_reader and bug.X.shape == (1599, 11)
    # the zero row sets the target's range: quality 3..8 becomes 0..8
    zero = np.argmin(np.abs(bug.y - (0 - np.r_[raw[:-1, -1], 0.0].mean()) / 8 * 10))
    assert np.allclose(bug.y[zero], (0 - np.r_[raw[:-1, -1], 0.0].mean()) * 10 / 8)
    assert not exp.load_uci(SHARED_DATA, "abalone", paper_reader=True).paper_reader


def test_missing_dataset_fails(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        exp.load_uci(tmp_path, "red")


@pytest.fixture(scope="module")
def red_reduced():
    cfg = exp.Heikkila2017Config(dataset="red", epsilons=(1.0, 10.0), epsilon_labels=("1", "10"), repeats=40, grid_repeats=(3, 3))  # 40: power for the one-sided proj < no-proj test
    return exp.run_heikkila2017(exp.load_uci(SHARED_DATA, "red"), cfg)


@pytest.mark.parametrize("mode", ["corrected", "paper"])
@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_reduced_reproduction_red_wine(red_reduced, mode):
    """The paper's findings on a reduced grid: DDP ≈ TA (with and without projection), proj < no-proj at small ε."""
    r = red_reduced
    for i in range(2):
        assert mannwhitneyu(r.mae[(mode, "ddp")][:, i], r.mae[(mode, "ta")][:, i]).pvalue > 0.01
        assert mannwhitneyu(r.mae[(mode, "proj_ddp")][:, i], r.mae[(mode, "proj_ta")][:, i]).pvalue > 0.01
    med = {k: np.median(r.mae[(mode, k)], axis=0) for k in exp.METHODS}
    assert med["proj_ddp"][0] < 0.8 * med["ddp"][0] and med["proj_ta"][0] < 0.8 * med["ta"][0]
    assert mannwhitneyu(r.mae[(mode, "proj_ddp")][:, 0], r.mae[(mode, "ddp")][:, 0], alternative="less").pvalue < 0.01
    assert med["np"][0] <= med["proj_np"][0] <= med["proj_ddp"][0]
    assert med["proj_ddp"][1] < med["proj_ddp"][0]  # more budget, less error


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_summary_has_every_method_and_epsilon(red_reduced, tmp_path):
    s = red_reduced.summary()
    assert s["epsilons"] == ["1", "10"]
    for mode in ("corrected", "paper"):
        assert list(s["results"][mode]) == ["NP", "proj NP", "TA", "proj TA", "DDP", "proj DDP", "input perturbed"]
        for cells in s["results"][mode].values():
            for q in cells.values():
                assert q["q25"] <= q["median"] <= q["q75"] and q["iqr"] == pytest.approx(q["q75"] - q["q25"])
    g = s["settings"]["guarantees"]
    assert g["paper"]["1"]["std_round"]["actual"] > 5 * g["paper"]["1"]["std_round"]["nominal"]
    assert g["corrected"]["1"]["std_round"]["actual"] == pytest.approx(0.3, rel=1e-6)
    for mode in ("corrected", "paper"):
        for cmp in s["comparisons"][mode].values():
            assert cmp["ddp_vs_ta_p"] > 0.01 and 0 <= cmp["proj_ddp_below_ddp_p"] <= 1
    files = red_reduced.write(tmp_path)
    assert all(p.exists() and p.stat().st_size > 0 for p in files.values())
    assert "proj DDP" in exp.summary_markdown(s)


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_cli_json(tmp_path):
    res = CliRunner().invoke(command, ["--data", str(SHARED_DATA), "--dataset", "red", "--repeats", "2", "--epsilons", "1",
                                       "--grid-repeats", "2,2", "--modes", "corrected", "--out", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["experiment"] == "heikkila2017" and out["dataset"] == "red"
    assert set(out["results"]) == {"corrected"}
    assert out["results"]["corrected"]["DDP"]["1"]["median"] > 0
    assert out["settings"]["repeats"] == 2 and out["settings"]["delta"] == 1e-4
    for p in out["files"].values():
        assert (tmp_path / p.split("/")[-1]).exists()


def test_cli_help_and_errors(tmp_path):
    h = CliRunner().invoke(command, ["--help"])
    assert h.exit_code == 0
    for opt in ("--data", "--dataset", "--repeats", "--epsilons", "--delta", "--modes", "--grid-repeats", "--grid-per-repeat",
                "--paper-reader", "--seed", "--workers", "--out", "--json"):
        assert opt in h.output
    bad = CliRunner().invoke(command, ["--data", str(tmp_path), "--dataset", "red", "--repeats", "1", "--out", str(tmp_path)])
    assert bad.exit_code != 0 and "does not exist" in bad.output
    bad = CliRunner().invoke(command, ["--modes", "wrong", "--out", str(tmp_path)])
    assert bad.exit_code != 0 and "modes" in bad.output
