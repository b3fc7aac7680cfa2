"""Convex solvers for J_p over symmetric blocks (the paper's SDP by projected gradient,
ours; the corrected objective).

* :func:`solve_unconstrained` — for the strongly convex corrected objective (Δ > 0, no PSD
  constraint): L-BFGS (two-loop recursion) in isometric coordinates, then Newton–CG polishing with exact
  Hessian-vector products until ‖∇J_p‖_F ≤ tol·scale (``relative``) or ≤ tol. The privacy proof
  (b = −n·∇(J_p − b-term)(θ*)) is for the exact minimiser; the corrected mechanism covers the gap with a small
  output noise calibrated to the absolute tolerance (tol/Δ from θ*, :class:`mpdp.lmgc.privacy.CorrectedCalibration`),
  and a run that cannot reach the tolerance raises :class:`ConvergenceError` instead of returning a model.
* :func:`solve_psd` — the paper's SDP (Φ_c ⪰ 0): accelerated projected gradient (FISTA with
  curvature backtracking and gradient-based adaptive restart), projection by eigenvalue clipping.
  Optimality is measured by the gradient-mapping norm. A certificate of unboundedness (a PSD
  direction of negative slope) or divergence of the iterates raises
  :class:`UnboundedObjectiveError`. Used for the non-private model and for paper mode, where the
  minimiser carries no privacy claim, so the default tolerance is looser (1e-4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mpdp.lmgc.objective import Problem
from mpdp.lmgc.params import psd_project, theta_to_vec, vec_to_theta


class ConvergenceError(RuntimeError):
    """The solver did not reach the requested optimality; no model is returned."""


class UnboundedObjectiveError(RuntimeError):
    """J_p has no minimiser: it decreases without bound along a feasible direction."""

    def __init__(self, message: str, direction: np.ndarray | None = None, slope: float | None = None) -> None:
        super().__init__(message)
        self.direction = direction
        self.slope = slope


@dataclass(frozen=True)
class Solution:
    theta: np.ndarray
    objective: float
    optimality: float  # ‖∇J_p‖_F (unconstrained) or gradient-mapping norm (PSD)
    tolerance: float
    iterations: int
    method: str


def gradient_scale(problem: Problem) -> float:
    """max(1, ‖∇J_p(0)‖_F): the scale the relative tolerances refer to."""
    _, g = problem.value_grad(np.zeros(problem.shape))
    return max(1.0, float(np.linalg.norm(g)))


def common_direction_slope(problem: Problem) -> tuple[float, np.ndarray]:
    """Least slope of J_p along V_c = uuᵀ (the same PSD direction for every class), and its u.

    Along such a direction no margin changes (the terms cancel in Φ_y − Φ_c), so with Δ = 0
    J_p(θ + sV) = J_p(θ) + s·uᵀMu with M = Σ_c (λ·I_Φ + sym(b_c)/n). If λ_min(M) < 0 the objective
    is unbounded below even on the PSD cone; u = e_{d+1} with Σ_c b_c[d+1, d+1] < 0 is the case
    named in docs/experiments/lmgc.md, "What the paper got wrong", 4.
    """
    C, D, _ = problem.shape
    M = C * problem.lam * np.diag(np.r_[np.ones(D - 1), 0.0])
    if problem.b is not None:
        bs = 0.5 * (problem.b + np.swapaxes(problem.b, 1, 2))
        M = M + bs.sum(axis=0) / problem.n
    w, V = np.linalg.eigh(M)
    return float(w[0]), V[:, 0]


def solve_unconstrained(problem: Problem, *, tol: float = 1e-9, max_iter: int = 5000, theta0: np.ndarray | None = None,
                        relative: bool = True) -> Solution:
    """argmin J_p over symmetric blocks (requires Δ > 0 so that the minimiser exists and is unique), to
    ‖∇J_p‖_F ≤ tol·max(1, ‖∇J_p(0)‖_F), or ≤ tol with ``relative=False`` (a bound that depends on nothing but tol:
    what a privacy calibration may rely on)."""
    if problem.ridge <= 0:
        raise UnboundedObjectiveError(
            "the unconstrained objective needs a ridge Δ > 0: without it J_p is not strongly convex and can be "
            "unbounded below (docs/experiments/lmgc.md)"
        )
    C, D, _ = problem.shape
    target = tol * gradient_scale(problem) if relative else tol

    def fg(v: np.ndarray) -> tuple[float, np.ndarray]:
        f, g = problem.value_grad(vec_to_theta(v, C, D))
        return f, theta_to_vec(g)

    v0 = np.zeros(problem.dim) if theta0 is None else theta_to_vec(theta0)
    v, f, g, iters = _lbfgs(fg, v0, target, max_iter)
    gnorm = float(np.linalg.norm(g))
    # Newton–CG polishing (J_p is piecewise quadratic, so Newton steps finish the job).
    for _ in range(min(50, max_iter)):
        if gnorm <= target:
            break
        theta_v = vec_to_theta(v, C, D)
        step = _cg(lambda w: theta_to_vec(problem.hessp(theta_v, vec_to_theta(w, C, D))), -g, tol=0.01 * gnorm, max_iter=500)
        t, slope = 1.0, float(g @ step)
        while True:
            v_new = v + t * step
            f_new, g_new = fg(v_new)
            if f_new <= f + 1e-4 * t * slope or np.linalg.norm(g_new) < gnorm or t < 1e-8:
                break
            t *= 0.5
        v, f, g = v_new, f_new, g_new
        gnorm = float(np.linalg.norm(g))
        iters += 1
    if not (gnorm <= target and np.all(np.isfinite(v))):
        raise ConvergenceError(f"corrected LMGC solver stopped at ‖∇J_p‖_F = {gnorm:.3g} > {target:.3g}; "
                               "refusing to release an inexact minimiser (the DP proof needs the exact argmin)")
    return Solution(vec_to_theta(v, C, D), float(f), gnorm, target, iters, "L-BFGS + Newton-CG")


def _lbfgs(fg, x: np.ndarray, target: float, max_iter: int, memory: int = 10) -> tuple[np.ndarray, float, np.ndarray, int]:
    """Limited-memory BFGS (two-loop recursion) with Armijo backtracking, O(m·p) per step.

    Stops when ‖g‖ ≤ target, after max_iter steps, or when the line search cannot make progress
    in floating point (the caller then polishes with Newton–CG). Armijo is relaxed to the
    approximate-Wolfe test near the optimum, where J_p differences fall below rounding (‖θ*‖ is
    large at small ε, so J_p is large while its changes are tiny).
    """
    f, g = fg(x)
    S: list[np.ndarray] = []
    Y: list[np.ndarray] = []
    it = 0
    for it in range(1, max_iter + 1):
        gn = float(np.linalg.norm(g))
        if gn <= target:
            break
        q = g.copy()
        alphas = []
        for s_, y_ in zip(reversed(S), reversed(Y)):
            a = float(s_ @ q) / float(y_ @ s_)
            alphas.append(a)
            q -= a * y_
        gamma = float(S[-1] @ Y[-1]) / float(Y[-1] @ Y[-1]) if S else 1.0 / max(gn, 1.0)
        q *= gamma
        for (s_, y_), a in zip(zip(S, Y), reversed(alphas)):
            q += (a - float(y_ @ q) / float(y_ @ s_)) * s_
        d = -q
        slope = float(g @ d)
        if slope >= 0:  # not a descent direction: drop the memory
            S.clear()
            Y.clear()
            d = -g / max(gn, 1.0)
            slope = float(g @ d)
        t = 1.0
        f_noise = 1e-12 * max(1.0, abs(f))
        while True:
            x_new = x + t * d
            f_new, g_new = fg(x_new)
            if f_new <= f + 1e-4 * t * slope:  # Armijo
                break
            # Approximate Wolfe (Hager & Zhang 2005): once f-differences drop below rounding, accept a
            # step whose directional derivative shows we did not overshoot the 1-D minimum.
            if f_new <= f + f_noise and float(g_new @ d) <= (1.0 - 2e-4) * -slope:
                break
            t *= 0.5
            if t < 1e-10:
                return x, f, g, it
        s_, y_ = x_new - x, g_new - g
        if float(s_ @ y_) > 1e-12 * float(np.linalg.norm(s_) * np.linalg.norm(y_)):
            S.append(s_)
            Y.append(y_)
            if len(S) > memory:
                S.pop(0)
                Y.pop(0)
        x, f, g = x_new, f_new, g_new
    return x, f, g, it


def _cg(hv, rhs: np.ndarray, *, tol: float, max_iter: int) -> np.ndarray:
    """Conjugate gradients for H·s = rhs with H positive definite (H ⪰ Δ·I here)."""
    s = np.zeros_like(rhs)
    r = rhs.copy()
    p = r.copy()
    rr = float(r @ r)
    for _ in range(max_iter):
        if math.sqrt(rr) <= tol:
            break
        Hp = hv(p)
        alpha = rr / float(p @ Hp)
        s += alpha * p
        r -= alpha * Hp
        rr_new = float(r @ r)
        p = r + (rr_new / rr) * p
        rr = rr_new
    return s


def solve_psd(problem: Problem, *, tol: float = 1e-6, max_iter: int = 3000, theta0: np.ndarray | None = None,
              divergence_norm: float = 1e9) -> Solution:
    """argmin J_p subject to Φ_c ⪰ 0 for every c (the paper's SDP) by FISTA with backtracking.

    Raises :class:`UnboundedObjectiveError` if ‖θ‖_F exceeds ``divergence_norm`` (no minimiser),
    :class:`ConvergenceError` if the gradient-mapping norm stays above tol·scale.
    """
    if problem.ridge == 0:
        slope, u = common_direction_slope(problem)
        if slope < 0:
            raise UnboundedObjectiveError(
                f"J_p is unbounded below on the PSD cone: along Φ_c += s·uuᵀ (every c) it changes by s·{slope:.4g} "
                "(docs/experiments/lmgc.md); no minimiser exists", direction=u, slope=slope)
    target = tol * gradient_scale(problem)
    x = psd_project(np.zeros(problem.shape) if theta0 is None else theta0)
    fx, _ = problem.value_grad(x)
    yk, tk = x.copy(), 1.0
    fy, gy = problem.value_grad(yk)
    L = 1.0
    it = 0
    gm = math.inf
    for it in range(1, max_iter + 1):
        while True:
            x_new = psd_project(yk - gy / L)
            f_new, g_new = problem.value_grad(x_new)
            d = x_new - yk
            dd = float(np.sum(d * d))
            # Backtracking on local curvature: for convex J_p the directional derivative is
            # non-decreasing, so ⟨∇J(x⁺) − ∇J(y), d⟩ ≤ (L/2)‖d‖² implies the descent lemma
            # J(x⁺) ≤ J(y) + ⟨∇J(y), d⟩ + (L/2)‖d‖² without comparing (rounding-limited) values of J.
            if float(np.sum((g_new - gy) * d)) <= 0.5 * L * dd or dd == 0.0:
                break
            L *= 2.0
        gm = L * math.sqrt(dd)
        if not np.isfinite(f_new) or float(np.linalg.norm(x_new)) > divergence_norm:
            raise UnboundedObjectiveError(f"PSD-constrained LMGC iterates diverged (‖θ‖_F > {divergence_norm:g}); "
                                          "the objective has no minimiser (docs/experiments/lmgc.md)")
        if gm <= target:
            x, fx = x_new, f_new
            break
        if float(np.sum((yk - x_new) * (x_new - x))) > 0:  # gradient-based adaptive restart (O'Donoghue & Candès)
            tk = 1.0
            yk = x_new.copy()
            x, fx = x_new, f_new
            fy, gy = f_new, g_new
            L *= 0.9
            continue
        t_next = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * tk * tk))
        yk = x_new + ((tk - 1.0) / t_next) * (x_new - x)
        x, fx, tk = x_new, f_new, t_next
        fy, gy = problem.value_grad(yk)
        L *= 0.9
    if gm > target:
        raise ConvergenceError(f"PSD LMGC solver stopped at gradient-mapping norm {gm:.3g} > {target:.3g} after {it} iterations")
    return Solution(x, float(fx), gm, target, it, "FISTA (PSD projection)")
