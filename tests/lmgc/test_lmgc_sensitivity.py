"""Per-sample gradient bound G = R²·√(C(C−1)) (the paper's Lemma 1 bounds one class block only)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mpdp.lmgc.objective import Problem, gradient_bound
from mpdp.lmgc.params import augment


@pytest.mark.parametrize("C", [2, 3, 5, 10])
def test_random_per_sample_gradients_respect_bound(C: int) -> None:
    gen = np.random.default_rng(C)
    d, r = 3, 1.0
    R = math.sqrt(r * r + 1)
    G = gradient_bound(R, C)
    prob = Problem(augment(np.zeros((1, d))), np.array([0]), C)
    worst = 0.0
    for _ in range(300):
        A = gen.normal(size=(C, d + 1, d + 1)) * gen.uniform(0.01, 20)
        theta = A + A.transpose(0, 2, 1)
        x = gen.normal(size=d)
        x *= gen.uniform(0, r) / np.linalg.norm(x)
        g = prob.sample_grad(theta, np.r_[x, 1.0], int(gen.integers(C)))
        worst = max(worst, float(np.linalg.norm(g)))
    assert worst <= G * (1 + 1e-12)
    assert worst > 0.3 * G  # random draws get a good part of the way


@pytest.mark.parametrize("C", [2, 3, 6])
def test_all_active_construction_attains_bound(C: int) -> None:
    """Φ_y large, other blocks 0, ‖x̃‖ = R: every margin has H′ = 1 and ‖∇ℓ‖_F = R²√(C(C−1))."""
    d = 4
    x = np.ones(d) / math.sqrt(d)  # ‖x‖ = 1, so ‖x̃‖² = 2 = R²
    xt = np.r_[x, 1.0]
    R = float(np.linalg.norm(xt))
    theta = np.zeros((C, d + 1, d + 1))
    theta[0] = 10.0 * np.eye(d + 1)
    prob = Problem(augment(np.zeros((1, d))), np.array([0]), C)
    g = prob.sample_grad(theta, xt, 0)
    assert np.linalg.norm(g) == pytest.approx(gradient_bound(R, C), rel=1e-12)
    # and the paper's Lemma 1 constant (2, for one block with ‖x̃‖ ≤ 1) is exceeded for C ≥ 2
    assert np.linalg.norm(g) > 1.0


def test_adjacent_gradient_difference_reaches_beyond_paper_sensitivity() -> None:
    """‖∇ℓ(z) − ∇ℓ(z′)‖ can be far above the paper's 2 (here close to 2G)."""
    d, C = 2, 4
    x = np.array([1.0, 0.0])
    theta = np.zeros((C, d + 1, d + 1))
    theta[0] = 10.0 * np.eye(d + 1)
    theta[1] = 10.0 * np.eye(d + 1)
    prob = Problem(augment(np.zeros((1, d))), np.array([0]), C)
    xt = np.r_[x, 1.0]
    diff = prob.sample_grad(theta, xt, 0) - prob.sample_grad(theta, xt, 1)
    assert np.linalg.norm(diff) > 2.0 * 2
    assert np.linalg.norm(diff) <= 2 * gradient_bound(math.sqrt(2), C)
