"""Configuration constants exactly as the authors' code has them (DPBayes/dca-nips2017)."""

from __future__ import annotations

import numpy as np
import pytest

from mpdp.regression import config as cfg


def test_algorithm_constants():
    assert cfg.STD_SHARE == 0.3 and cfg.MAIN_SHARE == pytest.approx(0.7)
    assert cfg.LAMBDA == 1.0 and cfg.LAMBDA0 == 1.0
    assert cfg.VARIANCE_FLOOR == 0.5
    assert cfg.RANDOM_SEED == 1
    assert cfg.GRID == tuple(round(0.1 * k, 1) for k in range(1, 21))
    assert len(cfg.GRID) == 20 and cfg.GRID[0] == 0.1 and cfg.GRID[-1] == 2.0


def test_uci_setup():
    np.testing.assert_allclose(cfg.UCI_EPSILONS, [1.0, 10**0.25, 10**0.5, 10**0.75, 10.0, 10**1.5], rtol=1e-15)
    assert [round(e, 2) for e in cfg.UCI_EPSILONS] == [1.0, 1.78, 3.16, 5.62, 10.0, 31.62]
    assert cfg.UCI_EPSILON_LABELS == ("1", "1.78", "3.16", "5.62", "10", "31.62")
    assert cfg.UCI_DELTA == 1e-4
    assert cfg.UCI_REPEATS == 25
    assert cfg.UCI_GRID_REPEATS == (20, 20)
    assert cfg.SCALE_TO_RANGE == 5.0 and cfg.ASSUMED_BOUND == 7.5 and cfg.PAPER_SENSITIVITY_BOUND == 5.0
    sizes = {k: (v.n_train, v.n_test, v.d) for k, v in cfg.UCI_DATASETS.items()}
    assert sizes == {"red": (1000, 500, 11), "white": (3000, 1000, 11), "abalone": (3000, 1000, 8)}
    assert cfg.ABALONE_SEX_CODE == {"M": 0.0, "F": 1.0, "I": 1.0}


def test_gdsc_setup_and_explicit_delta_choice():
    with pytest.raises(TypeError):
        cfg.GdscConfig()  # type: ignore[call-arg]  # the δ discrepancy has no default
    with pytest.raises(ValueError, match="delta_source"):
        cfg.GdscConfig("whatever")  # type: ignore[arg-type]
    code, fig = cfg.GdscConfig("code"), cfg.GdscConfig("figure")
    assert code.delta == 1e-3 and fig.delta == 1e-4
    for g in (code, fig):
        assert (g.d, g.n_train, g.n_test) == (10, 840, 100)
        assert g.epsilons == (1.0, 3.0, 5.0, 7.5, 10.0)
        assert (g.x_bound, g.y_bound) == (1.0, 7.5)
        assert g.grid_repeats == (10, 10) and g.grid_n == 400
        assert (g.drugs, g.cv_folds) == (264, 25)
