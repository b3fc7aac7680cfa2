"""mpdp: multiparty differential privacy. The network-free protocol core, and its public Python API.

>>> import mpdp
>>> fed = mpdp.Federation.in_process(parties=[(X1, y1), (X2, y2), (X3, y3)])   # doctest: +SKIP
>>> result = fed.logistic_regression(epsilon=1.0, lam=0.01)                    # doctest: +SKIP
>>> result.model.predict(X_test), result.guarantee.statement                   # doctest: +SKIP

Public names (imported on first use, so ``import mpdp`` stays cheap):

* :class:`Federation` — one object per federation; ``in_process(...)`` or ``connect(endpoints)``; methods
  ``logistic_regression``, ``dp_gd``, ``dca_sum`` (alias ``sum``), ``linear_regression``, ``ensemble``, ``lmgc``.
* :class:`Result` — what every method returns: ``model``, ``guarantee``, ``noise``, ``trust_model``,
  ``timings``, ``operations``, ``to_json()``.
* :class:`Guarantee`, :class:`JobFailed`; the models :class:`LinearClassifier`, :class:`LmgcClassifier`,
  :class:`LinearRegressor`, :class:`DpSumRelease`.
* :class:`FederatedLogisticRegression` — a scikit-learn classifier whose every ``fit`` is one Pathak job.
* :class:`FederatedDPGDClassifier` — a scikit-learn classifier over any number of classes; every ``fit`` is one DP-GD job.
* :mod:`mpdp.baselines` — non-private baselines, only by name.

See docs/api.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Federation": "mpdp.federation",
    "JobFailed": "mpdp.results",
    "Result": "mpdp.results",
    "Guarantee": "mpdp.results",
    "LinearClassifier": "mpdp.results",
    "LmgcClassifier": "mpdp.results",
    "LinearRegressor": "mpdp.results",
    "DpSumRelease": "mpdp.results",
    "FederatedLogisticRegression": "mpdp.estimator",
    "FederatedDPGDClassifier": "mpdp.estimator",
}
_MODULES = ("baselines",)

__all__ = sorted([*_EXPORTS, *_MODULES, "__version__"])

if TYPE_CHECKING:  # pragma: no cover
    from mpdp import baselines  # noqa: F401 - re-exported lazily (__all__)
    from mpdp.estimator import FederatedDPGDClassifier, FederatedLogisticRegression  # noqa: F401
    from mpdp.federation import Federation  # noqa: F401
    from mpdp.results import DpSumRelease, Guarantee, JobFailed, LinearClassifier, LinearRegressor, LmgcClassifier, Result  # noqa: F401


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif name in _MODULES:
        value = importlib.import_module(f"mpdp.{name}")
    else:
        raise AttributeError(f"module 'mpdp' has no attribute {name!r}")
    globals()[name] = value  # imported once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
