"""Accounting, bijection, unboundedness and the change-of-variables DP check of the corrected mechanism."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from mpdp.dp.mechanisms import solver_slack
from mpdp.lmgc.estimator import LargeMarginGaussianClassifier
from mpdp.lmgc.objective import Problem, gradient_bound
from mpdp.lmgc.params import augment, theta_to_vec
from mpdp.lmgc.privacy import SOLVER_SHARE, SOLVER_TOL, CorrectedCalibration, PrivacyError, jacobian_epsilon, ridge_for_jacobian_budget
from mpdp.lmgc.solver import UnboundedObjectiveError, common_direction_slope, solve_psd, solve_unconstrained
from mpdp.math.drbg import Drbg

from .helpers import three_gaussians

R2 = math.sqrt(2.0)


# -- accounting ---------------------------------------------------------------------------------
@pytest.mark.parametrize("eps", [0.05, 0.5, 1.0, 5.0, 50.0])
@pytest.mark.parametrize("C", [2, 3, 10])
@pytest.mark.parametrize("n", [20, 1000])
def test_accounting_adds_up_to_epsilon(eps: float, C: int, n: int) -> None:
    cal = CorrectedCalibration.create(eps, n, C, dim_x=3, h=0.5, R=R2)
    c = 1.0
    eps_j = (C - 1) * math.log(1 + 2 * c * R2**4 / (n * cal.ridge))
    assert cal.eps_jacobian == pytest.approx(eps_j, rel=1e-12)
    assert cal.eps_solver == SOLVER_SHARE * eps and cal.solver_tol == SOLVER_TOL  # the output noise for the solver's tolerance
    assert cal.eps_noise + eps_j + cal.eps_solver <= eps * (1 + 1e-12)
    assert cal.eps_noise + eps_j + cal.eps_solver == pytest.approx(eps, rel=1e-9)
    assert eps_j == pytest.approx(eps / 2, rel=1e-9)  # default split: half of ε to the Jacobian term
    assert cal.ridge == pytest.approx(2 * c * R2**4 / (n * (math.exp(eps / (2 * (C - 1))) - 1)), rel=1e-12)
    assert cal.sensitivity == pytest.approx(2 * R2**2 * math.sqrt(C * (C - 1)))
    assert cal.guarantee().epsilon == eps


def test_ridge_floor_lowers_jacobian_share_and_keeps_total() -> None:
    cal = CorrectedCalibration.create(100.0, 1000, 10, dim_x=5, h=0.5, R=R2, ridge_floor=1e-2)
    assert cal.ridge == 1e-2
    assert cal.eps_jacobian < 50.0
    assert cal.eps_noise + cal.eps_jacobian + cal.eps_solver == pytest.approx(100.0)
    assert jacobian_epsilon(cal.ridge, 1000, 10, 0.5, R2) == cal.eps_jacobian
    assert ridge_for_jacobian_budget(cal.eps_jacobian, 1000, 10, 0.5, R2) == pytest.approx(cal.ridge, rel=1e-9)


def test_inconsistent_calibration_is_refused() -> None:
    cal = CorrectedCalibration.create(1.0, 50, 3, dim_x=2, h=0.5, R=R2)
    overspent = CorrectedCalibration(1.0, 50, 3, 2, 0.5, R2, cal.ridge, cal.eps_jacobian, 1.0)  # ε_b too large
    with pytest.raises(PrivacyError):
        overspent.check()
    with pytest.raises(PrivacyError):
        overspent.sample(Drbg.from_seed(0))
    broke = CorrectedCalibration(1.0, 50, 3, 2, 0.5, R2, cal.ridge / 100, cal.eps_jacobian, 0.5)  # Δ too small
    with pytest.raises(PrivacyError):
        broke.check()
    with pytest.raises(ValueError):
        CorrectedCalibration.create(1.0, 50, 3, dim_x=2, h=0.5, R=0.5)  # R must cover the appended 1


# -- bijection ------------------------------------------------------------------------------------
def _instance(n: int, seed: int, eps: float = 1.0, d: int = 2, lam: float = 0.05):
    X, y = three_gaussians(n, seed, d=d, spread=0.3)
    Xt = augment(X)
    cal = CorrectedCalibration.create(eps, n, 3, d, 0.5, R2)
    b = cal.sample(Drbg.from_seed(f"instance/{seed}"))
    return Problem(Xt, y, 3, 0.5, lam, cal.ridge, b), cal


def _stationary_b(prob: Problem, theta: np.ndarray) -> np.ndarray:
    """b = −n·∇(J_p without the b term)(θ) (stationarity)."""
    g = prob.loss_value_grad(theta)[1] + prob.regulariser_value_grad(theta)[1]
    return -prob.n * g


def test_bijection_b_recovered_from_minimiser() -> None:
    prob, _ = _instance(60, seed=1)
    sol = solve_unconstrained(prob, tol=1e-12)
    b_rec = _stationary_b(prob, sol.theta)
    assert np.allclose(b_rec, prob.b, atol=1e-8 * prob.n)
    again = solve_unconstrained(prob.with_b(b_rec), tol=1e-12)
    assert np.allclose(again.theta, sol.theta, atol=1e-8)
    # a different b gives a different minimiser (injective)
    other = solve_unconstrained(prob.with_b(prob.b + 0.1), tol=1e-12)
    assert not np.allclose(other.theta, sol.theta, atol=1e-4)


# -- unboundedness (J_p without a ridge) -------------------------------------------------------------
def test_unbounded_without_ridge_bounded_with_ridge() -> None:
    X, y = three_gaussians(30, seed=2)
    Xt = augment(X)
    C, D = 3, 3
    b = np.zeros((C, D, D))
    b[:, -1, -1] = [-1.0, 0.2, 0.3]  # Σ_c b_c[d+1, d+1] = −0.5 < 0
    flat = Problem(Xt, y, C, h=0.5, lam=0.1, ridge=0.0, b=b)
    E = np.zeros((C, D, D))
    E[:, -1, -1] = 1.0  # t·e_{d+1}e_{d+1}ᵀ added to every Φ_c: PSD, margins and traces unchanged
    gen = np.random.default_rng(0)
    A = gen.normal(size=(C, D, D))
    theta0 = A @ A.transpose(0, 2, 1)  # a feasible (PSD) point
    f0 = flat.value(theta0)
    slope = float(b[:, -1, -1].sum()) / flat.n
    values = [flat.value(theta0 + t * E) for t in (1e2, 1e4, 1e6)]
    assert values[0] > values[1] > values[2]
    for t, v in zip((1e2, 1e4, 1e6), values):
        assert v - f0 == pytest.approx(t * slope, rel=1e-6)
    assert values[-1] < -1e4
    assert common_direction_slope(flat)[0] < 0
    with pytest.raises(UnboundedObjectiveError):
        solve_unconstrained(flat)
    with pytest.raises(UnboundedObjectiveError):
        solve_psd(flat)
    # with Δ > 0 a finite minimiser exists and the solver certifies it
    ridged = Problem(Xt, y, C, h=0.5, lam=0.1, ridge=0.05, b=b)
    sol = solve_unconstrained(ridged, tol=1e-10)
    assert np.all(np.isfinite(sol.theta)) and np.linalg.norm(sol.theta) < 1e3
    assert sol.optimality <= sol.tolerance
    for t in (1.0, -1.0):  # and it is a minimum along the bad direction too
        assert ridged.value(sol.theta + t * E) > sol.objective


# -- change of variables on a tiny instance --------------------------------------------------------
def _adjacent_pairs(gen: np.random.Generator, X: np.ndarray, y: np.ndarray):
    """Replacements of the last record: random ones plus extreme ones on the norm bound."""
    out = []
    for _ in range(4):
        out.append((np.array([gen.uniform(-1, 1)]), int(gen.integers(3))))
    out += [(np.array([1.0]), (int(y[-1]) + 1) % 3), (np.array([-1.0]), (int(y[-1]) + 2) % 3), (-X[-1], int(y[-1]))]
    return out


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_change_of_variables_density_ratio_bounded_by_epsilon() -> None:
    """d=1, C=3, n=20: θ* is reachable under D′ with b′ = b + ∇ℓ(θ*; z_n) − ∇ℓ(θ*; z′_n), and
    log p_D(θ*) − log p_D′(θ*) = [log P(b) − log P(b′)] + [log det H_D − log det H_D′] ≤ ε."""
    eps = 1.0
    n, C, d = 20, 3, 1
    gen = np.random.default_rng(7)
    X = gen.uniform(-1, 1, size=(n, d))
    y = gen.integers(0, C, size=n)
    cal = CorrectedCalibration.create(eps, n, C, d, 0.5, R2)
    G = gradient_bound(R2, C)
    rng = Drbg.from_seed("cov-check")
    worst_total, worst_density_paper = -np.inf, -np.inf
    checked = 0
    for _ in range(6):
        b = cal.sample(rng)
        prob = Problem(augment(X), y, C, 0.5, 0.05, cal.ridge, b)
        theta = solve_unconstrained(prob, tol=1e-13).theta
        H_D = prob.hessian_iso(theta)
        for x_new, y_new in _adjacent_pairs(gen, X, y):
            Xp, yp = X.copy(), y.copy()
            Xp[-1], yp[-1] = x_new, y_new
            b_new = b + prob.sample_grad(theta, np.r_[X[-1], 1.0], int(y[-1])) - prob.sample_grad(theta, np.r_[x_new, 1.0], y_new)
            prob_new = Problem(augment(Xp), yp, C, 0.5, 0.05, cal.ridge, b_new)
            theta_new = solve_unconstrained(prob_new, tol=1e-13).theta
            assert np.allclose(theta_new, theta, atol=1e-7)  # same θ* under (D′, b′)
            nb, nb_new = np.linalg.norm(theta_to_vec(b)), np.linalg.norm(theta_to_vec(b_new))
            log_density = (cal.eps_noise / (2 * G)) * (nb_new - nb)
            assert abs(log_density) <= cal.eps_noise * (1 + 1e-9)
            sign_d, logdet_D = np.linalg.slogdet(H_D)
            sign_p, logdet_P = np.linalg.slogdet(prob_new.hessian_iso(theta))
            assert sign_d > 0 and sign_p > 0
            log_jac = logdet_D - logdet_P
            assert abs(log_jac) <= cal.eps_jacobian * (1 + 1e-9)
            total = log_density + log_jac
            assert abs(total) <= eps * (1 + 1e-9)
            worst_total = max(worst_total, abs(total))
            # the paper's calibration, density ∝ exp(−(ε/2)‖b‖), on the same pair
            worst_density_paper = max(worst_density_paper, abs((eps / 2) * (nb_new - nb)))
            checked += 1
    assert checked == 42
    assert worst_total > 0.05 * eps  # the check is not vacuous
    assert worst_density_paper > eps  # and the paper's sensitivity 2 is violated on these pairs


# -- a shared b cannot work --------------------------------------------------------------------------
def test_shared_b_leaves_the_decision_relevant_part_untouched() -> None:
    """With one b for every class (the paper's reading), Σ_c⟨b, Φ_c⟩ = C⟨b, Φ̄⟩ touches only the class
    mean Φ̄, which rule (3) ignores; without binding PSD constraints the released differences Φ_c − Φ_1
    are exactly the non-private ones, so adjacent datasets are told apart with certainty."""
    X, y = three_gaussians(50, seed=8, spread=0.3)
    Xt = augment(X)
    gen = np.random.default_rng(1)
    shared = np.broadcast_to(gen.normal(size=(3, 3)) * 5.0, (3, 3, 3)).copy()
    per_class = gen.normal(size=(3, 3, 3)) * 5.0
    ridge, lam = 0.05, 0.01
    base = solve_unconstrained(Problem(Xt, y, 3, 0.5, lam, ridge), tol=1e-12).theta
    with_shared = solve_unconstrained(Problem(Xt, y, 3, 0.5, lam, ridge, shared), tol=1e-12).theta
    with_own = solve_unconstrained(Problem(Xt, y, 3, 0.5, lam, ridge, per_class), tol=1e-12).theta
    diffs = lambda th: th[1:] - th[:1]  # noqa: E731
    assert np.allclose(diffs(with_shared), diffs(base), atol=1e-8)  # noise had no effect on decisions
    assert not np.allclose(diffs(with_own), diffs(base), atol=1e-3)  # per-class noise does perturb them
    assert not np.allclose(with_shared, base, atol=1e-3)  # (the mean did move)


# -- the solver's tolerance (mpdp.dp.mechanisms.solver_slack) ----------------------------------------
def test_a_computed_minimiser_is_within_tol_over_ridge_of_the_exact_one() -> None:
    """The corrected solver stops at ‖∇J_p‖_F ≤ tol (absolute); J_p is Δ-strongly convex, so ‖θ̂ − θ*‖_F ≤ tol/Δ."""
    prob, cal = _instance(60, seed=3)
    exact = solve_unconstrained(prob, tol=1e-13, relative=False).theta
    for tol in (1e-3, 1e-5):
        sol = solve_unconstrained(prob, tol=tol, relative=False)
        assert sol.optimality <= tol == sol.tolerance
        assert np.linalg.norm(theta_to_vec(sol.theta - exact)) <= tol / cal.ridge


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_the_output_noise_pays_for_the_tolerance_with_eps_s() -> None:
    """η_s has scale β_s = (2·tol/Δ)/ε_s: moving θ* by at most tol/Δ on either side changes the output density by at
    most e^{(2·tol/Δ)/β_s} ≤ e^{ε_s}, so ε_b + ε_J + ε_s ≤ ε is the whole guarantee."""
    for n, eps in ((20, 0.1), (1000, 1.0), (10**6, 5.0)):
        cal = CorrectedCalibration.create(eps, n, 3, dim_x=4, h=0.5, R=R2, ridge_floor=1e-3)
        assert cal.solver_noise_scale >= solver_slack(SOLVER_TOL, cal.ridge) / cal.eps_solver
        assert solver_slack(SOLVER_TOL, cal.ridge) / cal.solver_noise_scale <= cal.eps_solver
        assert cal.eps_noise + cal.eps_jacobian + cal.eps_solver <= eps * (1 + 1e-12) and cal.guarantee().epsilon == eps
        draws = np.stack([theta_to_vec(cal.sample_output(Drbg.from_seed(f"s/{n}/{i}"))) for i in range(400)])
        norms = np.linalg.norm(draws, axis=1)  # ‖η_s‖ ~ Gamma(p, β_s) in isometric coordinates
        assert stats.kstest(norms, stats.gamma(a=cal.dim, scale=cal.solver_noise_scale).cdf).pvalue > 1e-3
    cal = CorrectedCalibration.create(1.0, 50, 3, dim_x=2, h=0.5, R=R2)
    exact = CorrectedCalibration(1.0, 50, 3, 2, 0.5, R2, cal.ridge, cal.eps_jacobian, 0.5)  # no tolerance: no η_s
    assert exact.solver_noise_scale == 0.0 and not np.any(exact.sample_output(Drbg.from_seed(0)))
    unpaid = CorrectedCalibration(1.0, 50, 3, 2, 0.5, R2, cal.ridge, cal.eps_jacobian, 0.4, solver_tol=1e-8)  # a tolerance without ε_s
    with pytest.raises(PrivacyError):
        unpaid.check()


def test_the_estimator_releases_the_computed_minimiser_plus_the_output_noise() -> None:
    X, y = three_gaussians(80, seed=5)
    est = LargeMarginGaussianClassifier(mode="corrected", epsilon=2.0, psd="none", rng=Drbg.from_seed("est"))
    est.fit(X, y)
    acc = est.accounting_
    assert acc["solver_tol"] == SOLVER_TOL and acc["eps_solver"] == SOLVER_SHARE * 2.0 and acc["solver_noise_scale"] > 0
    assert acc["eps_noise"] + acc["eps_jacobian"] + acc["eps_solver"] <= 2.0 * (1 + 1e-12)
    assert est.solution_ == {"method": "L-BFGS + Newton-CG", "tolerance": SOLVER_TOL, "tolerance_met": True}
    assert "eps_s" in est.guarantee_.statement and f"{est.accounting_['ridge']:.6g}" not in est.guarantee_.statement
