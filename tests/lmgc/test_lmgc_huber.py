"""Huber surrogate (Pathak & Raj 2010, eq. (6)) and the finite-difference gradient check of L_H."""

from __future__ import annotations

import numpy as np
import pytest

from mpdp.lmgc import huber
from mpdp.lmgc.objective import Problem
from mpdp.lmgc.params import augment, theta_to_vec, vec_to_theta

H_VALUES = (0.1, 0.5, 2.0)


@pytest.mark.parametrize("h", H_VALUES)
def test_value_and_derivative_continuous_at_pm_h(h: float) -> None:
    for knot in (-h, h):
        left, right = knot - 1e-9, knot + 1e-9
        assert huber.value(left, h) == pytest.approx(huber.value(right, h), abs=1e-8)
        assert huber.derivative(left, h) == pytest.approx(huber.derivative(right, h), abs=1e-8)
    assert huber.value(-h, h) == 0.0 and huber.value(h, h) == pytest.approx(h)


@pytest.mark.parametrize("h", H_VALUES)
def test_derivative_range_curvature_and_hinge_gap(h: float) -> None:
    t = np.linspace(-3 * h - 1, 3 * h + 1, 20001)
    d1 = huber.derivative(t, h)
    assert d1.min() >= 0.0 and d1.max() <= 1.0
    assert huber.second_derivative(t, h).max() == pytest.approx(1.0 / (2 * h)) == pytest.approx(huber.curvature(h))
    step = t[1] - t[0]
    assert np.max(np.diff(d1)) <= step / (2 * h) * (1 + 1e-9)  # H″ ≤ 1/(2h) from H′ itself
    gap = huber.value(t, h) - np.maximum(t, 0.0)
    assert gap.min() >= -1e-15
    assert gap.max() <= h / 4 + 1e-12
    assert gap.max() == pytest.approx(h / 4, rel=1e-3)  # attained at t = 0


@pytest.mark.parametrize("h", H_VALUES)
def test_derivative_matches_finite_differences(h: float) -> None:
    t = np.linspace(-2.5 * h, 2.5 * h, 101)
    eps = 1e-6
    fd = (huber.value(t + eps, h) - huber.value(t - eps, h)) / (2 * eps)
    assert np.allclose(fd, huber.derivative(t, h), atol=1e-5)


def test_loss_gradient_finite_differences_in_isometric_coordinates() -> None:
    gen = np.random.default_rng(11)
    n, d, C = 40, 3, 4
    X = gen.normal(size=(n, d)) / 2
    y = gen.integers(0, C, size=n)
    b = gen.normal(size=(C, d + 1, d + 1))
    prob = Problem(augment(X), y, C, h=0.5, lam=0.3, ridge=0.2, b=b)
    A = gen.normal(size=(C, d + 1, d + 1))
    theta = 0.5 * (A + A.transpose(0, 2, 1))
    f, g = prob.value_grad(theta)
    assert np.allclose(g, g.transpose(0, 2, 1))
    v, gv = theta_to_vec(theta), theta_to_vec(g)
    eps = 1e-6
    for _ in range(15):
        u = gen.normal(size=v.shape)
        u /= np.linalg.norm(u)
        fp = prob.value(vec_to_theta(v + eps * u, C, d + 1))
        fm = prob.value(vec_to_theta(v - eps * u, C, d + 1))
        assert (fp - fm) / (2 * eps) == pytest.approx(gv @ u, rel=1e-5, abs=1e-7)
    # the Huber loss alone, checked coordinate by coordinate
    lv, lg = prob.loss_value_grad(theta)
    lgv = theta_to_vec(lg)
    for i in gen.choice(v.size, size=10, replace=False):
        e = np.zeros_like(v); e[i] = eps
        fd = (prob.loss_value_grad(vec_to_theta(v + e, C, d + 1))[0] - prob.loss_value_grad(vec_to_theta(v - e, C, d + 1))[0]) / (2 * eps)
        assert fd == pytest.approx(lgv[i], rel=1e-5, abs=1e-7)


def test_hessian_vector_product_matches_gradient_differences() -> None:
    gen = np.random.default_rng(12)
    n, d, C = 30, 2, 3
    prob = Problem(augment(gen.normal(size=(n, d)) / 2), gen.integers(0, C, size=n), C, h=0.5, lam=0.1, ridge=0.05)
    A = gen.normal(size=(C, d + 1, d + 1))
    theta = 0.5 * (A + A.transpose(0, 2, 1))
    B = gen.normal(size=(C, d + 1, d + 1))
    V = 0.5 * (B + B.transpose(0, 2, 1))
    eps = 1e-7  # small enough that no margin crosses a Huber knot (piecewise quadratic)
    g1 = prob.value_grad(theta + eps * V)[1]
    g0 = prob.value_grad(theta - eps * V)[1]
    assert np.allclose((g1 - g0) / (2 * eps), prob.hessp(theta, V), rtol=1e-4, atol=1e-6)
    # and the dense per-sample Hessians sum to the same operator
    Hd = prob.hessian_iso(theta) / n
    assert np.allclose(Hd @ theta_to_vec(V), theta_to_vec(prob.hessp(theta, V)), atol=1e-10)
