"""Parameterisation Φ_c (Pathak & Raj 2010, eqs. (1)–(3)) and isometric coordinates."""

from __future__ import annotations

import numpy as np
import pytest

from mpdp.lmgc.params import (augment, common_psd_shift, gaussian_from_phi, iso_to_sym, phi_from_gaussian,
                              predict_gaussian, predict_phi, psd_project, sym_dim, sym_to_iso, theta_to_vec,
                              trace_selector, vec_to_theta)


def _random_gaussian(gen: np.random.Generator, d: int):
    A = gen.normal(size=(d, d))
    return gen.normal(size=d), A @ A.T + 0.1 * np.eye(d), float(gen.uniform(0, 2))


@pytest.mark.parametrize("d", [1, 3, 6])
def test_quadratic_form_matches_mahalanobis(d: int) -> None:
    gen = np.random.default_rng(d)
    for _ in range(20):
        mu, psi, off = _random_gaussian(gen, d)
        phi = phi_from_gaussian(mu, psi, off)
        x = gen.normal(size=d)
        xt = np.r_[x, 1.0]
        assert xt @ phi @ xt == pytest.approx((x - mu) @ psi @ (x - mu) + off, rel=1e-10, abs=1e-10)


def test_phi_is_psd_symmetric_and_invertible_map() -> None:
    gen = np.random.default_rng(1)
    for d in (1, 2, 5):
        mu, psi, off = _random_gaussian(gen, d)
        phi = phi_from_gaussian(mu, psi, off)
        assert np.allclose(phi, phi.T)
        assert np.linalg.eigvalsh(phi).min() >= -1e-10
        g = gaussian_from_phi(phi)
        assert np.allclose(g.mu, mu) and np.allclose(g.psi, psi) and g.offset == pytest.approx(off, abs=1e-9)
    # θ < 0 breaks PSD: the map really encodes the offset
    mu, psi, _ = _random_gaussian(gen, 3)
    assert np.linalg.eigvalsh(phi_from_gaussian(mu, psi, -0.5)).min() < 0


def test_decision_rules_1_and_3_agree() -> None:
    gen = np.random.default_rng(2)
    d, C = 4, 5
    classes = [gaussian_from_phi(phi_from_gaussian(*_random_gaussian(gen, d))) for _ in range(C)]
    theta = np.stack([phi_from_gaussian(g.mu, g.psi, g.offset) for g in classes])
    X = 2.0 * gen.normal(size=(500, d))
    y1 = predict_gaussian(classes, X)
    y3 = predict_phi(theta, augment(X))
    assert np.array_equal(y1, y3)
    assert len(np.unique(y3)) > 1  # a non-degenerate check


def test_isometric_coordinates_are_an_isometry() -> None:
    gen = np.random.default_rng(3)
    D = 5
    A = gen.normal(size=(D, D)); S = A + A.T
    B = gen.normal(size=(D, D)); T = B + B.T
    v, w = sym_to_iso(S), sym_to_iso(T)
    assert v.shape == (sym_dim(D),)
    assert np.linalg.norm(v) == pytest.approx(np.linalg.norm(S), rel=1e-12)
    assert v @ w == pytest.approx(np.sum(S * T), rel=1e-12)
    assert np.allclose(iso_to_sym(v, D), S)
    theta = np.stack([S, T])
    assert np.allclose(vec_to_theta(theta_to_vec(theta), 2, D), theta)


def test_trace_selector_reads_psi_trace() -> None:
    gen = np.random.default_rng(4)
    mu, psi, off = _random_gaussian(gen, 3)
    phi = phi_from_gaussian(mu, psi, off)
    I = trace_selector(4)
    assert np.trace(I @ phi @ I) == pytest.approx(np.trace(psi))


def test_common_shift_keeps_decisions_and_makes_psd() -> None:
    gen = np.random.default_rng(5)
    A = gen.normal(size=(3, 4, 4))
    theta = A + A.transpose(0, 2, 1)
    X = augment(gen.normal(size=(300, 3)))
    shifted = common_psd_shift(theta)
    assert np.linalg.eigvalsh(shifted).min() >= -1e-9
    assert np.array_equal(predict_phi(theta, X), predict_phi(shifted, X))
    proj = psd_project(theta)
    assert np.linalg.eigvalsh(proj).min() >= -1e-9
