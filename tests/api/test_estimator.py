"""mpdp.FederatedLogisticRegression as a scikit-learn user meets it: sklearn's own check_estimator (the applicable
checks), a Pipeline, a budgeted grid search, and the in-process federation's ledger growing by one job per fit.
Every fit here is a real Pathak job (Paillier, DGK, secret shares) with 512-bit test keys to stay fast."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import check_estimator

import mpdp
from mpdp.estimator import FederatedLogisticRegression, epsilon_per_fit

# Checks sklearn skips for this estimator, and why (none is a failure: each is reported "skipped" by sklearn itself).
SKIPPED = {
    "check_pipeline_consistency": "two fits give different models by design: every fit draws fresh DP noise (non_deterministic tag)",
    "check_array_api_input": "needs SCIPY_ARRAY_API=1 and an array-API library; the protocol encodes numpy float64 rows",
    "check_classifier_data_not_an_array": "needs pandas, which mpdp does not depend on",
}


def _data():
    X, y = load_breast_cancer(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))  # public simulation split
    return X[order[:400]], y[order[:400]], X[order[400:]], y[order[400:]]


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_check_estimator_passes_every_applicable_check():
    est = FederatedLogisticRegression(3, epsilon=50.0, lam=1e-3, key_bits=512)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(est, on_fail=None)
    failed = [(r["check_name"], str(r["exception"])[:200]) for r in results if r["status"] == "failed"]
    assert not failed, failed
    skipped = {r["check_name"] for r in results if r["status"] == "skipped"}
    assert skipped <= set(SKIPPED), skipped - set(SKIPPED)
    assert len({r["check_name"] for r in results if r["status"] == "passed"}) >= 45  # fit, predict, proba, tags, pickling, errors, …


def test_pipeline_fit_predict_proba_score_and_the_fitted_attributes():
    Xtr, ytr, Xte, yte = _data()
    pipe = make_pipeline(StandardScaler(), FederatedLogisticRegression(3, epsilon=1.0, lam=0.05, key_bits=512))
    pipe.fit(Xtr, ytr)  # StandardScaler here stands for public preprocessing: fitted on the rows, it is not itself private
    clf = pipe[-1]
    assert clf.classes_.tolist() == [0, 1] and clf.coef_.shape == (1, 30) and clf.intercept_.shape == (1,) and clf.n_features_in_ == 30
    assert clf.guarantee_.epsilon == 1.0 and clf.guarantee_.delta == 1e-6 and clf.job_["protocol"] == "pathak2010" and not clf.job_["seeded"]
    proba = pipe.predict_proba(Xte)
    assert proba.shape == (len(yte), 2) and np.allclose(proba.sum(axis=1), 1.0)
    assert np.array_equal(pipe.predict(Xte), clf.classes_[(proba[:, 1] > 0.5).astype(int)])
    assert pipe.score(Xte, yte) > 0.8  # non-private ≈ 0.97; ε = 1 over three parties of ≈ 133 rows
    # sign of the decision function = sign of coef_·x + intercept_ (the rows are scaled onto the unit ball)
    Z = pipe[0].transform(Xte)
    assert np.array_equal(clf.decision_function(Z) > 0, (Z @ clf.coef_[0] + clf.intercept_[0]) > 0)
    again = pickle.loads(pickle.dumps(pipe))
    assert np.array_equal(again.predict(Xte), pipe.predict(Xte))


def test_get_set_params_and_clone():
    est = FederatedLogisticRegression(4, epsilon=0.5, lam=0.1)
    assert est.get_params()["federation"] == 4 and est.get_params()["epsilon"] == 0.5
    est.set_params(epsilon=2.0, noise="corrected")
    c = clone(est)
    assert c.epsilon == 2.0 and c.noise == "corrected" and c is not est


def test_grid_search_spends_epsilon_per_fit_and_the_budget_divides_it():
    Xtr, ytr, Xte, yte = _data()
    grid = {"lam": [0.01, 0.1]}
    eps = epsilon_per_fit(2.0, n_candidates=2, n_folds=2)  # 4 fits + 1 refit
    assert eps == pytest.approx(0.4)
    spent: list[float] = []

    class Counting(FederatedLogisticRegression):
        def fit(self, X=None, y=None):
            super().fit(X, y)
            spent.append(self.guarantee_.epsilon)
            return self

    search = GridSearchCV(Counting(3, epsilon=eps, key_bits=512, noise="corrected"), grid, cv=2).fit(StandardScaler().fit_transform(Xtr), ytr)
    assert len(spent) == 5 and sum(spent) == pytest.approx(2.0)  # basic composition: the search spent the whole budget
    assert search.best_params_["lam"] in grid["lam"]


def test_a_federation_fits_on_its_parties_rows_one_job_per_fit():
    Xtr, ytr, Xte, yte = _data()
    Xtr = StandardScaler().fit(Xtr).transform(Xtr)
    parties = [(Xtr[i::3], ytr[i::3]) for i in range(3)]
    with mpdp.Federation.in_process(parties=parties, key_bits=512) as fed:
        clf = mpdp.FederatedLogisticRegression(fed, epsilon=1.0, lam=0.05)
        clf.fit()
        clf.fit()
        ledger = fed._backend.ledger  # what each party would spend in its privacy ledger
        assert all(len(entries) == 2 for entries in ledger.values()), ledger
        assert clf.intercept_.tolist() == [0.0] and clf.coef_.shape == (1, 30) and clf.classes_.tolist() == [0, 1]
        with pytest.raises(ValueError, match="call fit\\(\\) without X and y"):
            clf.fit(Xtr, ytr)


@pytest.mark.parametrize("bad, match", [
    (dict(federation=1), "K ≥ 2"),
    (dict(federation="3"), "K ≥ 2"),
    (dict(epsilon=-1.0), "epsilon must be finite and > 0"),
    (dict(noise="laplace"), "noise must be one of"),
])
def test_bad_parameters_fail_at_fit_naming_them(bad, match):
    X = np.random.default_rng(3).normal(size=(30, 2))  # public simulation data
    y = (X[:, 0] > 0).astype(int)
    with pytest.raises(ValueError, match=match):
        FederatedLogisticRegression(**{"key_bits": 512, **bad}).fit(X, y)
