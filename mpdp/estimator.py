"""scikit-learn estimators over a federation: :class:`FederatedLogisticRegression` (binary, one Pathak 2010 job per
fit) and :class:`FederatedDPGDClassifier` (any number of classes, one DP-GD job per fit).

Every ``fit`` is **one job** (:meth:`mpdp.Federation.logistic_regression` or :meth:`mpdp.Federation.dp_gd`) and
spends (ε, δ) of the parties' privacy budget. Where the rows come from depends on ``federation``:

* a number of parties K (simulation): ``fit(X, y)`` splits your rows round-robin over K in-process parties and runs
  the job on them (real keys, OS randomness unless ``random_state`` is set). This is the mode that drops into a
  :class:`~sklearn.pipeline.Pipeline` or a :class:`~sklearn.model_selection.GridSearchCV`.
* a :class:`mpdp.Federation` (``connect(...)`` or ``in_process(...)``): the parties already hold the rows, so
  ``fit()`` takes none; it trains on the federation's dataset and the model scores your rows like any classifier.

A grid search fits once per candidate and fold (and once more to refit), and every fit spends ε on overlapping
rows: under basic composition the search costs the sum. :func:`epsilon_per_fit` divides a total budget by the
number of fits (docs/api.md "The scikit-learn estimator").

>>> import numpy as np, mpdp
>>> g = np.random.default_rng(0)                                        # public simulation data
>>> X = g.normal(size=(90, 3)); y = np.where(X[:, 0] + 0.5 > 0, "yes", "no")
>>> clf = mpdp.FederatedLogisticRegression(3, epsilon=5.0, lam=0.05, key_bits=512, random_state=1)  # seeded: not private
>>> clf.fit(X, y).classes_.tolist(), clf.coef_.shape, clf.guarantee_.epsilon
(['no', 'yes'], (1, 3), 5.0)
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils.validation import check_is_fitted, validate_data

from mpdp.federation import PATHAK_NOISE, Federation

__all__ = ["FederatedDPGDClassifier", "FederatedLogisticRegression", "epsilon_per_fit"]


def epsilon_per_fit(total_epsilon: float, n_candidates: int, n_folds: int, *, refit: bool = True) -> float:
    """The ε of each fit so that a grid search of ``n_candidates`` × ``n_folds`` fits (plus one refit) spends at most
    ``total_epsilon`` under basic composition (ε's add up; δ's too, so divide a δ budget the same way).

    >>> epsilon_per_fit(3.0, n_candidates=3, n_folds=3)   # 9 fits + 1 refit
    0.3
    """
    if not (math.isfinite(total_epsilon) and total_epsilon > 0):
        raise ValueError(f"total_epsilon must be finite and > 0, got {total_epsilon!r}")
    if n_candidates < 1 or n_folds < 1:
        raise ValueError("n_candidates and n_folds must be at least 1")
    return total_epsilon / (n_candidates * n_folds + (1 if refit else 0))


class _FederatedClassifier(ClassifierMixin, BaseEstimator):
    """What both classifiers share once fitted: the released model adopted as sklearn's attributes, and the rows
    scored as the parties trained (the intercept column, if any, then onto the unit ball, by the model itself)."""

    intercept_scaling: float

    def _adopt(self, result: Any, *, intercept: bool) -> None:
        W = np.atleast_2d(np.asarray(result.model.coef, dtype=np.float64))  # (1, d) binary, (C, d) softmax
        self.job_ = result.to_dict()  # plain data (guarantee, noise, trust model, timings, details): pickles with the estimator
        self.model_ = result.model
        self.guarantee_ = result.guarantee
        self.classes_ = np.asarray(result.model.classes)
        self.coef_ = W[:, :-1] if intercept else W
        self.intercept_ = W[:, -1] * float(self.intercept_scaling) if intercept else np.zeros(W.shape[0])
        self._intercept_column = intercept

    def _rows(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "model_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return _with_intercept(X, self._intercept_column, self.intercept_scaling)

    def decision_function(self, X: Any) -> np.ndarray:
        """The model's scores on each row (with the intercept column, if any) scaled onto the unit ball, as the
        parties trained: shape (n,) for two classes (the sign of ``coef_ @ x + intercept_``, larger means
        ``classes_[1]``), else (n, C)."""
        rows = self._rows(X)
        return self.model_.decision_function(rows)

    def predict_proba(self, X: Any) -> np.ndarray:
        """σ (two classes) or the softmax of the scores; columns in the order of ``classes_``."""
        rows = self._rows(X)
        return self.model_.predict_proba(rows)


class FederatedLogisticRegression(_FederatedClassifier):
    """Binary L2-regularised logistic regression trained by the Pathak, Rane & Raj (2010) protocol.

    Parameters
    ----------
    federation : int or mpdp.Federation
        K ≥ 2: ``fit(X, y)`` simulates K parties holding your rows (round-robin). A Federation: the parties hold the
        rows and ``fit()`` takes none.
    epsilon, lam, noise, delta, colluders
        As :meth:`mpdp.Federation.logistic_regression`: the privacy parameter ε each fit spends, the regulariser λ,
        the noise scheme, δ (gaussian-distributed only; default 1e-6), colluding parties tolerated.
    fit_intercept : bool
        Simulation only: append a constant column ``intercept_scaling`` to the rows so the model learns an offset
        (the protocol itself publishes no intercept; with a Federation the parties' features are used as they are).
    dataset, parties, classes
        Federation only: the dataset name the parties map to their files, the parties in the job, and the two labels
        (negative, positive) the parties' ±1 mean (live default (−1, +1)).
    key_bits : int
        Simulation only: Paillier and DGK modulus size (below 2048 only for tests).
    random_state : int or None
        Simulation only: fix every random choice. A seeded fit is reproducible and **not private**.

    Attributes
    ----------
    classes_, coef_ (1, d), intercept_ (1,), n_features_in_, guarantee_ (the fit's :class:`mpdp.Guarantee`), job_ (the job's
    :class:`mpdp.Result` as a dict: noise, trust model, timings, details), model_ (the released model).
    """

    def __init__(self, federation: int | Federation = 3, *, epsilon: float = 1.0, lam: float = 0.01, noise: str = PATHAK_NOISE[0],
                 delta: float | None = None, colluders: int | None = None, fit_intercept: bool = True, intercept_scaling: float = 1.0,
                 dataset: str | None = None, parties: tuple[str, ...] | None = None, classes: tuple[Any, ...] | None = None,
                 key_bits: int = 2048, random_state: int | None = None) -> None:
        self.federation = federation
        self.epsilon = epsilon
        self.lam = lam
        self.noise = noise
        self.delta = delta
        self.colluders = colluders
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.dataset = dataset
        self.parties = parties
        self.classes = classes
        self.key_bits = key_bits
        self.random_state = random_state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False  # the protocol is binary
        tags.non_deterministic = True  # every fit draws fresh DP noise
        return tags

    # -- fitting ------------------------------------------------------------------------------------
    def fit(self, X: Any = None, y: Any = None) -> "FederatedLogisticRegression":
        """Run one job (spends ε, δ). Simulation: ``X`` (n, d) and ``y`` (two classes); a Federation: no rows."""
        if isinstance(self.federation, Federation):
            _no_rows(X, y)
            result = self.federation.logistic_regression(**self._job_args(), classes=self.classes, dataset=self.dataset, parties=self.parties)
            self._adopt(result, intercept=False)
            self.n_features_in_ = int(result.model.n_features_in_)
            return self
        k, X, y, labels = _simulated(self, X, y)
        if len(labels) > 2:
            raise ValueError(f"Only binary classification is supported. The type of the target is {type_of_target(y)}: y has {len(labels)} classes")
        if len(labels) < 2:
            raise ValueError("y has one class; the protocol needs two")
        if X.shape[0] < 2 * k:
            raise ValueError(f"{k} parties need at least {2 * k} samples (two each), got n_samples = {X.shape[0]}")
        rows = self._augment(X)
        shares = [(rows[i::k], y[i::k]) for i in range(k)]
        seed = None if self.random_state is None else int(self.random_state)
        with Federation.in_process(parties=shares, key_bits=int(self.key_bits), seed=seed) as fed:
            result = fed.logistic_regression(**self._job_args(), classes=tuple(labels.tolist()))
        self._adopt(result, intercept=self.fit_intercept)
        return self

    def _job_args(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon, "lam": self.lam, "noise": self.noise, "delta": self.delta, "colluders": self.colluders}

    def _augment(self, X: np.ndarray) -> np.ndarray:
        return _with_intercept(X, self.fit_intercept, self.intercept_scaling)

    def predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "model_")
        return self.classes_[(self.decision_function(X) > 0).astype(np.int64)]


class FederatedDPGDClassifier(_FederatedClassifier):
    """L2-regularised logistic regression over any number of classes, trained by the federation's DP gradient
    descent (:meth:`mpdp.Federation.dp_gd`, docs/protocols/dpgd.md): binary for two classes, softmax for more.

    Parameters
    ----------
    federation : int or mpdp.Federation
        K ≥ 2: ``fit(X, y)`` simulates K parties holding your rows (round-robin) and ``compute_nodes`` DCA nodes in
        this process. A Federation: the parties hold the rows and ``fit()`` takes none.
    epsilon, delta, lam, rounds, validate
        As :meth:`mpdp.Federation.dp_gd`: each fit is (ε, δ)-DP per record; λ the regulariser; R the rounds
        (default from N·ε); ``validate`` (default) proves every party's round vector in its ℓ2 ball.
    fit_intercept, intercept_scaling
        Simulation only: append a constant column so the model learns an offset per class (the rows, with that
        column, are scaled onto the unit ball as the protocol trains).
    dataset, parties, classes, total_records, records_per_party, dimension
        Federation only: as :meth:`mpdp.Federation.dp_gd` (the public bounds are required live).
    compute_nodes : int
        Simulation only: M DCA compute nodes.
    random_state : int or None
        Simulation only: fix every random choice. A seeded fit is reproducible and **not private**.

    Attributes
    ----------
    classes_, coef_ (1, d) for two classes or (C, d), intercept_ (1,) or (C,), n_features_in_, guarantee_, job_, model_.
    """

    def __init__(self, federation: int | Federation = 3, *, epsilon: float = 1.0, delta: float = 1e-6, lam: float = 0.01,
                 rounds: int | None = None, validate: bool = True, fit_intercept: bool = True, intercept_scaling: float = 1.0,
                 dataset: str | None = None, parties: tuple[str, ...] | None = None, classes: tuple[Any, ...] | None = None,
                 total_records: int | None = None, records_per_party: int | None = None, dimension: int | None = None,
                 compute_nodes: int = 3, random_state: int | None = None) -> None:
        self.federation = federation
        self.epsilon = epsilon
        self.delta = delta
        self.lam = lam
        self.rounds = rounds
        self.validate = validate
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.dataset = dataset
        self.parties = parties
        self.classes = classes
        self.total_records = total_records
        self.records_per_party = records_per_party
        self.dimension = dimension
        self.compute_nodes = compute_nodes
        self.random_state = random_state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = True  # softmax over every class
        tags.non_deterministic = True  # every fit draws fresh DP noise
        return tags

    def fit(self, X: Any = None, y: Any = None) -> "FederatedDPGDClassifier":
        """Run one DP-GD job (spends ε, δ). Simulation: ``X`` (n, d) and ``y`` (two or more classes); a Federation: no rows."""
        job: dict[str, Any] = {"epsilon": self.epsilon, "delta": self.delta, "lam": self.lam, "rounds": self.rounds, "validate": self.validate}
        if isinstance(self.federation, Federation):
            _no_rows(X, y)
            result = self.federation.dp_gd(**job, classes=self.classes, dataset=self.dataset, parties=self.parties,
                                           total_records=self.total_records, records_per_party=self.records_per_party, dimension=self.dimension)
            self._adopt(result, intercept=False)
            self.n_features_in_ = int(result.model.n_features_in_)
            return self
        k, X, y, labels = _simulated(self, X, y)
        if len(labels) < 2:
            raise ValueError("y has one class; a classifier needs at least two")
        if X.shape[0] < k:
            raise ValueError(f"{k} parties need at least {k} samples (one each), got n_samples = {X.shape[0]}")
        rows = _with_intercept(X, self.fit_intercept, self.intercept_scaling)
        shares = [(rows[i::k], y[i::k]) for i in range(k)]
        seed = None if self.random_state is None else int(self.random_state)
        with Federation.in_process(parties=shares, compute_nodes=int(self.compute_nodes), seed=seed) as fed:
            result = fed.dp_gd(**job, classes=tuple(labels.tolist()))
        self._adopt(result, intercept=self.fit_intercept)
        return self

    def predict(self, X: Any) -> np.ndarray:
        rows = self._rows(X)
        return np.asarray(self.model_.predict(rows))


def _no_rows(X: Any, y: Any) -> None:
    if X is not None or y is not None:
        raise ValueError("the federation's parties hold the training rows: call fit() without X and y "
                         "(or pass a number of parties as federation to simulate them on your rows)")


def _simulated(est: BaseEstimator, X: Any, y: Any) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """Simulation mode's checks: K ≥ 2 parties (``est.federation``), rows and labels as sklearn validates them.
    Returns (K, X, y, the sorted labels)."""
    k = est.federation
    if not isinstance(k, numbers.Integral) or isinstance(k, bool) or k < 2:
        raise ValueError(f"federation must be a number of parties K ≥ 2 or an mpdp.Federation, got {k!r}")
    if y is None:
        raise ValueError(f"{type(est).__name__} requires y to be passed, but the target y is None: simulating parties needs fit(X, y)")
    X, y = validate_data(est, X, y, dtype=np.float64)
    check_classification_targets(y)
    return int(k), X, y, np.unique(y)


def _with_intercept(X: np.ndarray, intercept: bool, scaling: float) -> np.ndarray:
    return np.hstack([X, np.full((X.shape[0], 1), float(scaling))]) if intercept else X
