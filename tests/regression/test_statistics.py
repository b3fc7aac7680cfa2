"""Contributions, sensitivities, clipping and release decoding of Algorithm 2 (Heikkilä et al. 2017,
steps 1–4)."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from mpdp.regression import statistics as st
from mpdp.regression.config import VARIANCE_FLOOR


def _grid_points(bounds: np.ndarray) -> np.ndarray:
    """Every point of {−b, 0, b}^(d+1): the corners of the clipped box and the points where a square is 0."""
    return np.array(list(itertools.product(*[(-b, 0.0, b) for b in bounds])))


@pytest.mark.parametrize("d", [1, 2, 3])
def test_main_round_sensitivity_brute_force(d):
    B = np.random.default_rng(d).uniform(0.3, 3.0, d + 1)
    P = _grid_points(B)
    Z = st.record_statistics(P[:, :-1], P[:, -1], "main", B)
    diff = Z[:, None, :] - Z[None, :, :]
    delta = st.main_sensitivity(B)
    assert np.sqrt((diff**2).sum(-1)).max() <= delta * (1 + 1e-12)
    # factor 1 on the diagonal, 2 off the diagonal, 2 on x·y: each coordinate's range is attained exactly
    rng_per_coord = np.abs(diff).max(axis=(0, 1))
    j, k = st.pair_indices(d)
    m = j.size
    expect = np.concatenate([np.where(j == k, 1.0, 2.0) * B[j] * B[k], 2.0 * B[:-1] * B[-1]])
    np.testing.assert_allclose(rng_per_coord, expect, rtol=1e-12)
    assert delta**2 == pytest.approx(np.sum(expect[:m] ** 2) + np.sum(expect[m:] ** 2), rel=1e-12)
    # and random points inside the box never exceed it either
    R = (np.random.default_rng(99).uniform(-1, 1, (400, d + 1))) * B
    ZR = st.record_statistics(R[:, :-1], R[:, -1], "main", B)
    assert np.sqrt(((ZR[:, None] - ZR[None]) ** 2).sum(-1)).max() <= delta


def test_main_sensitivity_formula_by_hand():
    # d = 2, B = (1, 2, 3): Σ B_j⁴ = 1 + 16, (2·1·2)² = 16, (2·1·3)² + (2·2·3)² = 36 + 144
    assert st.main_sensitivity([1.0, 2.0, 3.0]) == pytest.approx(math.sqrt(17 + 16 + 180), rel=1e-15)


@pytest.mark.parametrize("d", [1, 2, 4])
def test_std_round_uses_squares_and_fourth_powers(d):
    c = np.random.default_rng(10 + d).uniform(1.5, 8.0, d + 1)
    P = _grid_points(c)
    Z = st.record_statistics(P[:, :-1], P[:, -1], "std", c)
    np.testing.assert_array_equal(Z, P**2)
    brute = np.sqrt(((Z[:, None] - Z[None]) ** 2).sum(-1)).max()
    assert brute == pytest.approx(math.sqrt(np.sum(c**4)), rel=1e-12)  # attained: x = c against x' = 0
    assert st.std_sensitivity(c, "corrected") == pytest.approx(brute, rel=1e-12)
    # paper mode reproduces the code's sqrt(d·c_x² + c_y²) = sqrt(Σ c²), which the brute force exceeds
    assert st.std_sensitivity(c, "paper") == pytest.approx(math.sqrt(np.sum(c**2)), rel=1e-15)
    assert brute > st.std_sensitivity(c, "paper")
    assert st.std_true_sensitivity(c) == st.std_sensitivity(c, "corrected")


def test_uci_std_round_noise_ratio_is_7_5():
    """The authors' slip: with c = 7.5 on every coordinate the code's std-round noise is 7.5 times too small."""
    c = [7.5] * 12
    assert st.std_sensitivity(c, "corrected") / st.std_sensitivity(c, "paper") == pytest.approx(7.5, rel=1e-12)


def test_layout_and_party_sums():
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(50, 4)) * 3, rng.normal(size=50) * 3
    B = [2.0, 1.0, 3.0, 0.5, 2.5]
    Z = st.record_statistics(X, y, "main", B)
    assert Z.shape == (50, st.round_dimension("main", 4)) == (50, 14)
    Xc, yc = st.clip_records(X, y, B)
    s = st.suff_stats(Z.sum(axis=0), 4)
    np.testing.assert_allclose(s.A, Xc.T @ Xc, rtol=1e-12)
    np.testing.assert_allclose(s.b, Xc.T @ yc, rtol=1e-12)
    assert np.array_equal(s.A, s.A.T)
    # parties' sums add up to the sum over all records (one vector per party)
    parts = np.array_split(np.arange(50), 3)
    total = sum(st.party_statistics(X[p], y[p], "main", B) for p in parts)
    np.testing.assert_allclose(total, Z.sum(axis=0), rtol=1e-12)
    # every record's vector stays inside the DCA clip box of the round; a party's inside records× that box
    assert np.all(np.abs(Z) <= st.record_value_bounds("main", B) * (1 + 1e-12))
    spec = st.main_round_spec(B, 1.0, 1e-5, "corrected")
    assert spec.clip_bounds(17) == tuple(st.record_value_bounds("main", B) * 17)


def test_clipping_bounds_and_thresholds():
    """Clipping: after step 3 every |x_ij| ≤ B_j, |y_i| ≤ B_y, and every B ≤ c."""
    rng = np.random.default_rng(5)
    c = np.array([7.5, 7.5, 2.0, 7.5])
    std = np.array([1.0, 9.0, 3.0, 20.0])
    for p_x, p_y in [(0.1, 0.1), (1.0, 2.0), (2.0, 0.3)]:
        B = st.thresholds(std, c, p_x, p_y)
        assert np.all(B <= c) and np.all(B > 0)
        np.testing.assert_allclose(B, np.minimum(std * [p_x, p_x, p_x, p_y], c))
        X, y = rng.normal(size=(200, 3)) * 10, rng.normal(size=200) * 10
        Xc, yc = st.clip_records(X, y, B)
        assert np.all(np.abs(Xc) <= B[:-1]) and np.all(np.abs(yc) <= B[-1])
    assert np.any(st.thresholds(std, c, 2.0, 2.0, cap=False) > c)  # the code's proj TA: uncapped


def test_std_estimate_and_variance_floor():
    n = 10
    est = st.std_estimate([20.0, -3.0, 0.0, 5.0], n)
    np.testing.assert_allclose(est.variance, [2.0, VARIANCE_FLOOR, VARIANCE_FLOOR, 0.5])
    assert est.floored.tolist() == [False, True, True, False]
    np.testing.assert_allclose(est.std, np.sqrt([2.0, 0.5, 0.5, 0.5]))
    assert VARIANCE_FLOOR == 0.5


def test_validation_names_the_problem():
    with pytest.raises(ValueError, match="d \\+ 1"):
        st.record_statistics(np.zeros((3, 2)), np.zeros(3), "main", [1.0, 1.0])
    with pytest.raises(ValueError, match="round"):
        st.record_statistics(np.zeros((3, 2)), np.zeros(3), "other", [1.0] * 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="positive"):
        st.main_sensitivity([1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="paper mode only"):
        st.main_round_spec([1.0] * 3, 1.0, 1e-5, "corrected", declared_bounds=[0.5] * 3)
    with pytest.raises(ValueError, match="finite"):
        st.suff_stats([np.nan] * 5, 2)


@pytest.mark.parametrize("mode", ["corrected", "paper"])
def test_a_party_takes_a_round_only_if_the_dca_job_is_calibrated_to_the_statistics_sensitivity(mode):
    """check_round_job: the round's own DCA job passes; one declaring a smaller Δ₂ than the statistic has over the
    request's clip box (less noise than the ε charged), or summing another number of values, is refused."""
    c = (1.0, 2.0, 0.5, 1.5)
    for spec in (st.std_round_spec(c, 0.3, 1e-5, mode), st.main_round_spec(c, 0.7, 1e-5, mode)):
        params = spec.dca_params("dca-1", 3, ("n1", "n2", "n3"))
        st.check_round_job(spec.round, c, params)
        low = dataclasses.replace(params, sensitivity=spec.sensitivity * 0.99)
        with pytest.raises(ValueError, match="sensitivity"):
            st.check_round_job(spec.round, c, low)
        with pytest.raises(ValueError, match="sensitivity"):  # the same job, a wider clip box in the request
            st.check_round_job(spec.round, tuple(2 * b for b in c), params)
        other = "main" if spec.round == "std" else "std"
        with pytest.raises(ValueError, match="sums"):
            st.check_round_job(other, c, params)
