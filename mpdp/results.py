"""What every protocol run through :class:`mpdp.Federation` returns: one typed :class:`Result`.

A result carries the released **model** (a scikit-learn-style predictor, or the released sum), the
**guarantee** the release really gives (:class:`mpdp.dp.mechanisms.Guarantee`: mechanism, ε, δ, sensitivity,
norm, statement) with its **noise** mode, the **trust model** in words, per-stage **timings** (seconds) and
**operation counts** (what the core counts: Paillier/DGK operations, messages, DCA shares). The same type comes
back in-process and against a live federation.

Models keep the feature map the parties trained with: rows are scaled onto the unit ball (‖x‖ ≤ 1) before
scoring, exactly as the parties did, and labels are the caller's own (binary: the larger label is the positive
class, as the parties map them).

>>> import numpy as np
>>> from mpdp.results import LinearClassifier
>>> m = LinearClassifier(coef=np.array([1.0, -1.0]), classes=("no", "yes"))
>>> m.predict(np.array([[2.0, 0.0], [0.0, 3.0]])).tolist()
['yes', 'no']
>>> m.score(np.array([[2.0, 0.0]]), np.array(["yes"]))
1.0
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import numpy as np

from mpdp.dp.mechanisms import Guarantee

__all__ = ["DpSumRelease", "Guarantee", "JobFailed", "LinearClassifier", "LinearRegressor", "LmgcClassifier", "Result", "against_majority",
           "majority_rate", "majority_warning"]

IN_PROCESS, LIVE = "in-process", "live"


class JobFailed(RuntimeError):
    """A job released nothing (a party refused, the budget was exhausted, too few clients, …); the message says why."""


def unit_rows(X: Any) -> np.ndarray:
    """Rows with ‖x‖ > 1 scaled onto the unit sphere: the parties' feature map before training
    (:func:`mpdp.learn.logreg.clip_rows`, the one row map a federation's curator and parties use too)."""
    from mpdp.learn.logreg import clip_rows

    return clip_rows(np.atleast_2d(np.asarray(X, dtype=np.float64)))


def _labels(classes: Sequence[Any]) -> np.ndarray:
    """The labels as an array: numbers stay numbers, strings stay strings; mixed kinds become objects."""
    kinds = {isinstance(c, str) for c in classes}
    if len(kinds) == 1:
        return np.asarray(list(classes))
    out = np.empty(len(classes), dtype=object)
    out[:] = list(classes)
    return out


def label_text(v: Any) -> str:
    """A label's text form, as the protocols put labels on the wire: integral numbers without a point (3.0 → "3")."""
    if isinstance(v, (bytes, np.bytes_)):
        return v.decode()
    if isinstance(v, (bool, np.bool_)):
        return str(int(v))
    if isinstance(v, (int, float, np.integer, np.floating)):
        f = float(v)
        return str(int(f)) if f.is_integer() else repr(f)
    return str(v)


def majority_rate(y: Any) -> float:
    """The accuracy of always predicting the most common of the labels ``y`` (labels compared as text, as :func:`label_text`)."""
    texts = [label_text(v) for v in np.asarray(y, dtype=object).ravel()]
    if not texts:
        raise ValueError("no labels")
    return max(texts.count(t) for t in set(texts)) / len(texts)


def against_majority(accuracy: float, majority: float) -> dict[str, Any]:
    """``majority_rate`` and ``beats_majority`` (strictly above it) of a classifier's ``accuracy`` on rows whose most
    common label has the share ``majority``: a classifier that does not beat it has learnt nothing a constant would not."""
    return {"majority_rate": float(majority), "beats_majority": bool(accuracy > majority)}


def majority_warning(report: Mapping[str, Any]) -> str | None:
    """The one warning line of a classifier's accuracy that is no better than a constant (None when it beats one)."""
    if report.get("beats_majority", True):
        return None
    return f"(no better than always predicting the majority class, {report['majority_rate']:.4g})"


class _Classifier:
    """sklearn-style helpers shared by the classifiers: ``classes_``, ``score`` (accuracy)."""

    classes: tuple[Any, ...]

    @property
    def classes_(self) -> np.ndarray:
        return _labels(self.classes)

    def predict(self, X: Any) -> np.ndarray:  # pragma: no cover - overridden
        raise NotImplementedError

    def score(self, X: Any, y: Any) -> float:
        """Mean accuracy of :meth:`predict` on ``X`` against the labels ``y`` (the caller's label set)."""
        pred = self.predict(X)
        y = np.asarray(y)
        if len(pred) != len(y):
            raise ValueError(f"X has {len(pred)} rows, y has {len(y)} labels")
        return float(np.mean([label_text(a) == label_text(b) for a, b in zip(pred, y)]))

    def evaluate(self, X: Any, y: Any) -> dict[str, Any]:
        """``accuracy`` on (X, y), with ``majority_rate`` (always predicting y's most common label) and ``beats_majority``."""
        acc = self.score(X, y)
        return {"accuracy": acc, **against_majority(acc, majority_rate(y))}


@dataclass(frozen=True, eq=False)
class LinearClassifier(_Classifier):
    """A released linear classifier without intercept on rows scaled onto the unit ball.

    Binary (``coef`` of shape (d,)): the positive class ``classes[1]`` when wᵀx > 0 (ties go to ``classes[0]``);
    :meth:`predict_proba` is the logistic σ(wᵀx). Multiclass (``coef`` of shape (C, d)): argmax_c w_cᵀx and
    the softmax for probabilities.
    """

    coef: np.ndarray
    classes: tuple[Any, ...]

    def __post_init__(self) -> None:
        coef = np.asarray(self.coef, dtype=np.float64)
        coef.setflags(write=False)
        object.__setattr__(self, "coef", coef)
        object.__setattr__(self, "classes", tuple(self.classes))
        want = 2 if coef.ndim == 1 else coef.shape[0]
        if coef.ndim not in (1, 2) or len(self.classes) != want:
            raise ValueError(f"coef of shape {coef.shape} needs {want} classes, got {len(self.classes)}")

    @property
    def n_features_in_(self) -> int:
        return int(self.coef.shape[-1])

    def decision_function(self, X: Any) -> np.ndarray:
        X = unit_rows(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, the model has {self.n_features_in_}")
        return X @ self.coef if self.coef.ndim == 1 else X @ self.coef.T

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities, columns in the order of ``classes_``."""
        s = self.decision_function(X)
        if self.coef.ndim == 1:
            p = 1.0 / (1.0 + np.exp(-s))
            return np.column_stack([1.0 - p, p])
        e = np.exp(s - s.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def predict(self, X: Any) -> np.ndarray:
        s = self.decision_function(X)
        idx = (s > 0).astype(np.int64) if self.coef.ndim == 1 else np.argmax(s, axis=1)
        return self.classes_[idx]

    def to_dict(self) -> dict:
        return {"type": "linear_classifier", "coef": self.coef.tolist(), "classes": [_jsonable(c) for c in self.classes]}


@dataclass(frozen=True, eq=False)
class LmgcClassifier(_Classifier):
    """A released large-margin Gaussian classifier (Pathak & Raj): θ = (Φ_1..Φ_C), the class with the smallest
    x̃ᵀΦ_c x̃ on rows clipped to ``data_norm`` (:func:`mpdp.local_release.predict`)."""

    theta: np.ndarray  # (C, D, D), D = d + 1
    classes: tuple[Any, ...]
    data_norm: float = 1.0

    def __post_init__(self) -> None:
        theta = np.asarray(self.theta, dtype=np.float64)
        theta.setflags(write=False)
        object.__setattr__(self, "theta", theta)
        object.__setattr__(self, "classes", tuple(self.classes))
        if theta.ndim != 3 or theta.shape[0] != len(self.classes) or theta.shape[1] != theta.shape[2]:
            raise ValueError(f"θ of shape {theta.shape} does not match {len(self.classes)} classes")

    @property
    def n_features_in_(self) -> int:
        return int(self.theta.shape[1] - 1)

    def decision_function(self, X: Any) -> np.ndarray:
        """Negated quadratic scores −x̃ᵀΦ_c x̃ (larger is more likely), columns in the order of ``classes_``."""
        from mpdp.lmgc.estimator import clip_rows
        from mpdp.lmgc.params import augment, quadratic_scores

        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, the model has {self.n_features_in_}")
        return -quadratic_scores(self.theta, augment(clip_rows(X, self.data_norm)))

    def predict(self, X: Any) -> np.ndarray:
        return self.classes_[np.argmax(self.decision_function(X), axis=1)]

    def to_dict(self) -> dict:
        return {"type": "lmgc_classifier", "theta": self.theta.tolist(), "classes": [_jsonable(c) for c in self.classes], "data_norm": self.data_norm}


@dataclass(frozen=True, eq=False)
class LinearRegressor:
    """The posterior mean β of DP Bayesian linear regression (Heikkilä et al. 2017): ŷ = xᵀβ; ``precision`` is Λ
    of the Gaussian posterior N(β, Λ⁻¹), so :meth:`predict_std` gives the predictive standard deviation."""

    coef: np.ndarray
    precision: np.ndarray
    noise_precision: float

    def __post_init__(self) -> None:
        for name in ("coef", "precision"):
            a = np.asarray(getattr(self, name), dtype=np.float64)
            a.setflags(write=False)
            object.__setattr__(self, name, a)

    @property
    def n_features_in_(self) -> int:
        return int(self.coef.size)

    def predict(self, X: Any) -> np.ndarray:
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        if X.shape[1] != self.coef.size:
            raise ValueError(f"X has {X.shape[1]} features, the model has {self.coef.size}")
        return X @ self.coef

    def predict_std(self, X: Any) -> np.ndarray:
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        sol = np.linalg.solve(self.precision, X.T)
        return np.sqrt(1.0 / self.noise_precision + np.einsum("ij,ji->i", X, sol))

    def score(self, X: Any, y: Any) -> float:
        """R² of the point predictions (as scikit-learn's regressors)."""
        y = np.asarray(y, dtype=np.float64)
        resid = y - self.predict(X)
        total = np.sum((y - y.mean()) ** 2)
        return float(1.0 - np.sum(resid**2) / total) if total > 0 else float("nan")

    def to_dict(self) -> dict:
        return {"type": "linear_regressor", "coef": self.coef.tolist(), "precision": self.precision.tolist(), "noise_precision": self.noise_precision}


@dataclass(frozen=True, eq=False)
class DpSumRelease:
    """A DCA release: the DP sum of the included clients' (clipped) vectors and the variance of its noise."""

    values: np.ndarray
    clients_included: int
    clients_expected: int
    noise_variance: float

    def __post_init__(self) -> None:
        v = np.asarray(self.values, dtype=np.float64)
        v.setflags(write=False)
        object.__setattr__(self, "values", v)

    def to_dict(self) -> dict:
        return {"type": "dp_sum", "values": self.values.tolist(), "clients_included": self.clients_included,
                "clients_expected": self.clients_expected, "noise_variance": self.noise_variance}


@dataclass(frozen=True)
class Result:
    """One protocol run: the release and everything needed to judge it.

    ``protocol``: ``pathak2010`` | ``dca-sum`` | ``heikkila2017`` | ``hamm2016`` | ``lmgc`` | ``dp-gd``;
    ``mode``: ``in-process`` or ``live``; ``model``: a classifier or regressor with ``predict``/``score``, or a
    :class:`DpSumRelease`; ``guarantee``: what the release really guarantees; ``noise``: the noise mode;
    ``trust_model``: who must not collude or cheat for the guarantee to hold; ``timings``: seconds per stage
    (``total`` is the wall time of the call); ``operations``: counts the core keeps; ``seeded``: True when a
    simulation seed fixed the randomness (reproducible, **not private**); ``details``: protocol-specific public
    facts (dataset, parties, λ, DCA job ids, …).
    """

    protocol: str
    mode: str
    job_id: str
    model: Any
    guarantee: Guarantee
    noise: str
    trust_model: str
    timings: Mapping[str, float] = field(default_factory=dict)
    operations: Mapping[str, int] = field(default_factory=dict)
    seeded: bool = False
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("timings", "operations", "details"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    def predict(self, X: Any) -> np.ndarray:
        """Shortcut for ``result.model.predict(X)``."""
        if not hasattr(self.model, "predict"):
            raise TypeError(f"a {self.protocol} release is not a predictor")
        return self.model.predict(X)

    def score(self, X: Any, y: Any) -> float:
        """Shortcut for ``result.model.score(X, y)``: accuracy (classifiers) or R² (regression)."""
        if not hasattr(self.model, "score"):
            raise TypeError(f"a {self.protocol} release is not a predictor")
        return self.model.score(X, y)

    def evaluate(self, X: Any, y: Any) -> dict[str, Any]:
        """A classifier's ``accuracy`` on (X, y) against the majority rate of y (``majority_rate``, ``beats_majority``);
        :func:`majority_warning` words a failure to beat it."""
        if not hasattr(self.model, "evaluate"):
            raise TypeError(f"a {self.protocol} release is not a classifier")
        return self.model.evaluate(X, y)

    @property
    def backend(self) -> str:
        """Where it ran: ``in-process`` or ``live`` (``mode`` is this field's old name, kept for one release)."""
        return self.mode

    def to_dict(self) -> dict:
        g = self.guarantee
        return {
            "protocol": self.protocol,
            "backend": self.mode,
            "mode": self.mode,  # deprecated spelling of "backend", kept for one release
            "job_id": self.job_id,
            "guarantee": {**g.as_dict(), "noise": self.noise},
            "trust_model": self.trust_model,
            "timings": dict(self.timings),
            "operations": dict(self.operations),
            "seeded": self.seeded,
            "details": _jsonable(dict(self.details)),
            "model": self.model.to_dict(),
        }

    def to_json(self, **kwargs: Any) -> str:
        """The whole result as one JSON object (model parameters included)."""
        return json.dumps(self.to_dict(), **kwargs)


def _jsonable(v: Any) -> Any:
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.ndarray):
        return _jsonable(v.tolist())
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        f = float(v)
        return f if math.isfinite(f) else str(f)
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, (str, int, bool)) or v is None:
        return v
    return str(v)


# ---------------------------------------------------------------- from the core's releases (both modes)
# The in-process and live backends get the same core objects (a PublishedModel, a DpSum, a RegressionRun, …)
# and turn them into a Result here, so both modes report the same fields the same way.

PATHAK, DCA_SUM, REGRESSION, ENSEMBLE, LMGC, DPGD = "pathak2010", "dca-sum", "heikkila2017", "hamm2016", "lmgc", "dp-gd"
LMGC_TRUST_MODEL = (
    "each party trains on its own records and releases only its ε-DP model (objective perturbation, corrected mode): "
    "no party and not the curator sees another party's records; the curator publishes every release and their average, "
    "which is post-processing (parallel composition over disjoint data)"
)


def guarantee_of(g: Any) -> Guarantee:
    """A Guarantee message (common.proto) as the core's :class:`~mpdp.dp.mechanisms.Guarantee`."""
    return Guarantee(g.mechanism, float(g.epsilon), float(g.delta), float(g.sensitivity), g.norm, g.statement)


def _total(timings: Mapping[str, float], total: float) -> dict:
    return {**{k: float(v) for k, v in timings.items()}, "total": float(total)}


def pathak_result(model: Any, *, mode: str, classes: Sequence[Any], noise: str, total: float, operations: Mapping[str, int] = MappingProxyType({}),
                  timings: Mapping[str, float] = MappingProxyType({})) -> Result:
    """A published Pathak model (pathak2010.proto PublishedModel): Dave's rebuild ŵ_s = Σ shares / K."""
    from mpdp.pathak2010 import tester

    w = tester.rebuild(model)
    return Result(
        protocol=PATHAK, mode=mode, job_id=model.job_id, model=LinearClassifier(w, tuple(classes)), guarantee=guarantee_of(model.guarantee),
        noise=noise, trust_model=model.trust_model, timings=_total({**timings, **dict(model.stage_seconds)}, total),
        operations={**{k: int(v) for k, v in model.paillier_ops.items()}, **operations}, seeded=model.seeded,
        details={"dataset": model.dataset, "parties": model.parties, "dimension": model.dimension, "lam": getattr(model, "lambda"), "lambda": getattr(model, "lambda"),
                 **({"colluders": model.colluders} if noise == "gaussian-distributed" else {})},
    )


def dca_sum_result(release: Any, *, mode: str, total: float, timings: Mapping[str, float], operations: Mapping[str, int]) -> Result:
    """A DCA release (dca.proto DpSum)."""
    from mpdp.dca.params import NOISE_NAMES

    noise = NOISE_NAMES.get(release.noise, "unknown")
    return Result(
        protocol=DCA_SUM, mode=mode, job_id=release.job_id,
        model=DpSumRelease(np.asarray(release.values), int(release.clients_included), int(release.clients_expected), float(release.noise_variance)),
        guarantee=guarantee_of(release.guarantee), noise=noise, trust_model=release.trust_model, timings=_total(timings, total),
        operations=operations, seeded=release.seeded,
        details={"sigma_std": release.sigma_std, "sigma_client": release.sigma_client, "max_missing": release.max_missing,
                 **({"rho": release.rho} if noise == "discrete-gaussian" else {})},
    )


def _composed(gs: Sequence[Guarantee], mechanism: str, what: str) -> Guarantee:
    """Basic composition: ε and δ add up over the releases (each a DP release of the same records)."""
    eps, delta = sum(g.epsilon for g in gs), sum(g.delta for g in gs)
    statement = f"({eps:.6g}, {delta:.3g})-DP by basic composition of {what}: " + "; ".join(g.statement for g in gs)
    return Guarantee(mechanism, eps, delta, max(g.sensitivity for g in gs), gs[0].norm, statement)


def regression_result(run: Any, *, mode: str, total: float, operations: Mapping[str, int]) -> Result:
    """A finished regression (:class:`mpdp.regression.role.RegressionRun`): the posterior, both rounds composed."""
    p = run.posterior
    rel = (run.std_release, run.main_release)
    g = _composed([guarantee_of(r.guarantee) for r in rel], "DCA Gaussian sums, Heikkilä et al. 2017 Algorithm 2 (std and main rounds)",
                  "the std round and the main round")
    from mpdp.dca.params import NOISE_NAMES
    from mpdp.regression.role import validity_note

    g = dataclasses.replace(g, statement=g.statement + validity_note(rel))

    return Result(
        protocol=REGRESSION, mode=mode, job_id=run.job_id or run.main_job, model=LinearRegressor(p.mean, p.precision, p.lam), guarantee=g,
        noise=NOISE_NAMES.get(run.main_release.noise, "unknown"), trust_model=run.main_release.trust_model, timings=_total(run.seconds, total),
        operations=operations, seeded=bool(run.main_release.seeded),
        details={"dca_jobs": [run.std_job, run.main_job], "bounds": list(run.plan.bounds), "thresholds": np.asarray(run.thresholds).tolist(),
                 "multipliers": list(run.multipliers)},
    )


def dpgd_result(run: Any, *, mode: str, classes: Sequence[Any], total: float, operations: Mapping[str, int]) -> Result:
    """A finished dp-gd job (:class:`mpdp.dpgd.role.DpgdRun`): W of shape (d, m), m = 1 (binary) or C."""
    W = np.asarray(run.model, dtype=np.float64)
    coef = W[:, 0] if run.plan.task.kind == "binary" else W.T
    s = run.summary()
    return Result(
        protocol=DPGD, mode=mode, job_id=run.job_id, model=LinearClassifier(coef, tuple(classes)), guarantee=run.plan.guarantee,
        noise="discrete-gaussian" if run.plan.validated else "gaussian", trust_model=run.plan.trust_model, timings=_total(run.seconds, total),
        operations=operations, seeded=run.seeded, details={"task": s["task"], "parties": s["parties"], "dca_jobs": s["dca_jobs"], "plan": s["plan"]},
    )


def ensemble_result(release: Any, *, mode: str, classes: Sequence[Any], total: float, operations: Mapping[str, int]) -> Result:
    """A published HCB16 ensemble (hamm2016.proto EnsembleRelease): w (binary) or W (C, d)."""
    from mpdp.hamm2016.job import weights_of

    return Result(
        protocol=ENSEMBLE, mode=mode, job_id=release.job_id, model=LinearClassifier(weights_of(release), tuple(classes)),
        guarantee=guarantee_of(release.guarantee), noise="output perturbation", trust_model=release.trust_model,
        timings=_total(dict(release.stage_seconds), total), operations=operations, seeded=release.seeded,
        details={"method": release.method, "parties_included": release.parties_included, "auxiliary_rows": release.auxiliary_rows,
                 "lam": release.lam, "lambda": release.lam, "sensitivity": release.sensitivity, "vote_sum_job": release.dca_job_id},
    )


def lmgc_result(models: Any, *, mode: str, release: str, classes: Mapping[str, Any], data_norm: float, total: float,
                operations: Mapping[str, int]) -> Result:
    """A published set of local LMGC releases (local_release.proto LocalModelSet); ``release``: ``average`` or a party.
    ``classes`` maps the released label texts back to the caller's labels (unknown texts stay text)."""
    from mpdp.local_release import theta_of

    rel = models.aggregate if release == "average" else next((r for r in models.releases if r.party == release), None)
    if rel is None or not rel.theta:
        raise JobFailed(f"job {models.job_id} has no release {release!r}: " + (models.aggregate_statement if release == "average" else "not a party of the job"))
    return Result(
        protocol=LMGC, mode=mode, job_id=models.job_id,
        model=LmgcClassifier(theta_of(rel), tuple(classes.get(c, c) for c in rel.classes), data_norm), guarantee=guarantee_of(rel.guarantee),
        noise="objective perturbation (corrected)", trust_model=LMGC_TRUST_MODEL, timings=_total({}, total), operations=operations,
        seeded=models.seeded,
        details={"release": release, "parties": [r.party for r in models.releases], "aggregate": models.aggregate_statement,
                 "releases": {r.party: {"epsilon": r.guarantee.epsilon, "statement": r.guarantee.statement} for r in models.releases}},
    )
