"""scikit-learn estimator: API, modes, fail-loudly behaviour and the utility smoke test."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from mpdp.lmgc import LargeMarginGaussianClassifier, UnboundedObjectiveError
from mpdp.lmgc.objective import Problem
from mpdp.lmgc.params import augment, predict_phi
from mpdp.lmgc.privacy import CorrectedCalibration
from mpdp.lmgc.solver import solve_unconstrained
from mpdp.math.drbg import Drbg

from .helpers import three_gaussians


@pytest.fixture(scope="module")
def data():
    Xtr, ytr = three_gaussians(300, seed=10)
    Xte, yte = three_gaussians(300, seed=11)
    return Xtr, ytr, Xte, yte


def test_sklearn_params_roundtrip_and_clone_shares_rng() -> None:
    rng = Drbg.from_seed(1)
    est = LargeMarginGaussianClassifier(mode="corrected", epsilon=2.0, lam=0.01, rng=rng)
    params = est.get_params()
    assert params["epsilon"] == 2.0 and params["rng"] is rng and params["mode"] == "corrected"
    est.set_params(epsilon=3.0, huber_h=0.25)
    assert est.epsilon == 3.0 and est.huber_h == 0.25
    twin = clone(est)
    assert twin.rng is rng  # never a copy: a copied Drbg would replay the same noise
    assert twin.get_params()["epsilon"] == 3.0


def test_nonprivate_fit_predict_decision_function(data) -> None:
    Xtr, ytr, Xte, yte = data
    labels = np.array(["a", "b", "c"])
    est = LargeMarginGaussianClassifier(mode="nonprivate").fit(Xtr, labels[ytr])
    assert list(est.classes_) == ["a", "b", "c"]
    scores = est.decision_function(Xte)
    assert scores.shape == (len(Xte), 3)
    assert np.array_equal(est.predict(Xte), est.classes_[np.argmax(scores, axis=1)])
    assert est.score(Xte, labels[yte]) > 0.95
    assert est.accounting_ is None and est.guarantee_ is None
    assert np.linalg.eigvalsh(est.theta_).min() >= -1e-9  # the SDP keeps Φ_c ⪰ 0
    with pytest.raises(NotFittedError):
        LargeMarginGaussianClassifier(mode="nonprivate").predict(Xte)
    with pytest.raises(ValueError):
        est.predict(Xte[:, :1])


def test_binary_decision_function_is_one_dimensional(data) -> None:
    Xtr, ytr, Xte, _ = data
    keep = ytr < 2
    est = LargeMarginGaussianClassifier(mode="nonprivate").fit(Xtr[keep], ytr[keep])
    s = est.decision_function(Xte)
    assert s.shape == (len(Xte),)
    assert np.array_equal(est.predict(Xte), np.where(s > 0, 1, 0))


def test_corrected_mode_reports_accounting_and_draws_fresh_noise(data) -> None:
    Xtr, ytr, _, _ = data
    rng = Drbg.from_seed("fresh")
    est = LargeMarginGaussianClassifier(mode="corrected", epsilon=5.0, rng=rng)
    t1 = est.fit(Xtr, ytr).theta_.copy()
    acc = est.accounting_
    assert acc["proven"] and acc["seeded_rng"]
    assert acc["eps_noise"] + acc["eps_jacobian"] <= 5.0 * (1 + 1e-12)
    assert est.guarantee_.epsilon == 5.0 and est.guarantee_.norm.startswith("Frobenius")
    t2 = est.fit(Xtr, ytr).theta_
    assert not np.allclose(t1, t2)  # the generator advanced: independent noise per fit
    again = LargeMarginGaussianClassifier(mode="corrected", epsilon=5.0, rng=Drbg.from_seed("fresh")).fit(Xtr, ytr)
    assert np.allclose(again.theta_, t1)  # same seed, same release (reproducible simulation)
    assert not hasattr(est, "b_") and not any("noise" in k for k in vars(est))  # b is never stored


def test_modes_reject_bad_configuration(data) -> None:
    Xtr, ytr, _, _ = data
    assert LargeMarginGaussianClassifier().mode == "corrected"  # DP by default: the non-private fit only when asked for by name
    with pytest.raises(ValueError):
        LargeMarginGaussianClassifier().fit(Xtr, ytr)  # the default is DP and needs ε
    with pytest.raises(ValueError):
        LargeMarginGaussianClassifier(mode="corrected").fit(Xtr, ytr)  # no ε
    with pytest.raises(ValueError):
        LargeMarginGaussianClassifier(mode="paper", epsilon=1.0, psd="none").fit(Xtr, ytr)
    with pytest.raises(ValueError):
        LargeMarginGaussianClassifier(mode="nonprivate", psd="shift").fit(Xtr, ytr)
    with pytest.raises(ValueError):
        LargeMarginGaussianClassifier(mode="bogus").fit(Xtr, ytr)


def test_corrected_refuses_inexact_minimiser(data) -> None:
    """A solver stopped early would release a model whose noise no longer matches the proof."""
    from mpdp.lmgc import ConvergenceError

    Xtr, ytr, _, _ = data
    with pytest.raises(ConvergenceError):
        LargeMarginGaussianClassifier(mode="corrected", epsilon=50.0, max_iter=2, rng=Drbg.from_seed(0)).fit(Xtr, ytr)


def test_rows_are_clipped_to_public_bound(data) -> None:
    Xtr, ytr, _, _ = data
    big = Xtr * 10.0
    est = LargeMarginGaussianClassifier(mode="corrected", epsilon=10.0, rng=Drbg.from_seed(3)).fit(big, ytr)
    assert est.accounting_["R"] == pytest.approx(math.sqrt(2.0))
    assert np.max(np.linalg.norm(est._features(big), axis=1)) <= math.sqrt(2.0) + 1e-12


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_paper_mode_is_labelled_and_fails_when_unbounded(data) -> None:
    Xtr, ytr, Xte, yte = data
    released, unbounded = 0, 0
    rng = Drbg.from_seed("paper-mode")
    for _ in range(12):
        est = LargeMarginGaussianClassifier(mode="paper", epsilon=1e6, lam=0.01, rng=rng)
        try:
            est.fit(Xtr, ytr)
        except UnboundedObjectiveError as e:
            assert e.slope is not None and e.slope < 0
            unbounded += 1
            continue
        released += 1
        assert not est.accounting_["proven"]
        assert "NO valid DP guarantee" in est.guarantee_.statement
        assert est.score(Xte, yte) > 0.9
    assert unbounded >= 2 and released >= 2  # about half each at large ε (J_p unbounded below)


def test_trace_weight_only_moves_the_class_mean_without_psd(data) -> None:
    """Without PSD constraints λ shifts every Φ_c by the same −(λ/Δ)·I_Φ: decisions cannot depend on it."""
    Xtr, ytr, Xte, _ = data
    cal = CorrectedCalibration.create(3.0, len(Xtr), 3, 2, 0.5, math.sqrt(2))
    b = cal.sample(Drbg.from_seed("lam"))
    sols = [solve_unconstrained(Problem(augment(Xtr), ytr, 3, 0.5, lam, cal.ridge, b), tol=1e-11).theta for lam in (0.0, 0.3)]
    diff = sols[1] - sols[0]
    expected = -(0.3 / cal.ridge) * np.diag([1.0, 1.0, 0.0])
    assert np.allclose(diff, expected[None], atol=1e-6 * (0.3 / cal.ridge))
    assert np.array_equal(predict_phi(sols[0], augment(Xte)), predict_phi(sols[1], augment(Xte)))


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_utility_smoke_large_epsilon_matches_nonprivate(data) -> None:
    Xtr, ytr, Xte, yte = data
    ridge = 1e-3
    nonpriv = LargeMarginGaussianClassifier(mode="nonprivate", ridge=0.0).fit(Xtr, ytr).score(Xte, yte)
    ridge_np = LargeMarginGaussianClassifier(mode="nonprivate", psd="none", ridge=ridge).fit(Xtr, ytr).score(Xte, yte)
    rng = Drbg.from_seed("utility")
    big = np.mean([LargeMarginGaussianClassifier(mode="corrected", epsilon=1e6, ridge=ridge, rng=rng).fit(Xtr, ytr).score(Xte, yte)
                   for _ in range(3)])
    small = np.mean([LargeMarginGaussianClassifier(mode="corrected", epsilon=0.05, ridge=ridge, rng=rng).fit(Xtr, ytr).score(Xte, yte)
                     for _ in range(3)])
    assert nonpriv > 0.95
    assert abs(ridge_np - nonpriv) <= 0.03
    assert big >= nonpriv - 0.03
    assert small < big - 0.2  # noise at small ε really costs accuracy


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_nonprivate_mode_passes_sklearn_estimator_checks() -> None:
    """The DP modes are randomised on purpose (fresh noise per fit, unpicklable Drbg), so only the
    deterministic mode is held to scikit-learn's idempotence and pickling checks."""
    import warnings

    from sklearn.utils.estimator_checks import check_estimator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(LargeMarginGaussianClassifier(mode="nonprivate", psd="none", ridge=1e-2, tol=1e-6), on_fail=None)
    failed = [r["check_name"] for r in results if r["status"] == "failed"]
    assert len(results) > 40 and failed == []


def test_corrected_fit_exposes_no_data_dependent_diagnostics(data) -> None:
    Xtr, ytr, _, _ = data
    est = LargeMarginGaussianClassifier(mode="corrected", epsilon=5.0, rng=Drbg.from_seed(4)).fit(Xtr, ytr)
    assert set(est.solution_) == {"method", "tolerance", "tolerance_met"}
    assert not hasattr(est, "n_iter_")
    released = {k for k in vars(est) if k.endswith("_") and not k.startswith("_")}
    assert released == {"classes_", "n_features_in_", "theta_", "accounting_", "guarantee_", "solution_"}
