"""Non-private baselines, only by name: what the DP protocols are compared against. Nothing here is private.

Each fits on the pooled rows (as if one trusted party held every record) with the parties' feature map (rows
scaled onto ‖x‖ ≤ 1) and returns the same model types as :class:`mpdp.Federation`'s releases, so
``model.score(X, y)`` compares directly.

>>> import numpy as np
>>> from mpdp.baselines import nonprivate_logistic_regression
>>> g = np.random.default_rng(0)
>>> X = g.normal(size=(200, 3)); y = np.where(X[:, 0] > 0, "yes", "no")
>>> nonprivate_logistic_regression(X, y, lam=0.01).score(X, y) > 0.9
True
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from mpdp.results import LinearClassifier, LmgcClassifier, label_text, unit_rows

__all__ = ["nonprivate_lmgc", "nonprivate_logistic_regression"]


def _binary(y: Any, classes: Sequence[Any] | None) -> tuple[np.ndarray, tuple[Any, ...]]:
    y = np.asarray(y)
    found = sorted({label_text(v): v for v in np.unique(y)}.items(), key=lambda kv: kv[1])
    classes = tuple(classes) if classes is not None else tuple(v.item() if isinstance(v, np.generic) else v for _, v in found)
    if len(classes) != 2:
        raise ValueError(f"binary logistic regression needs two labels, got {len(classes)}")
    pos = label_text(classes[1])
    return np.where(np.array([label_text(v) for v in y]) == pos, 1.0, -1.0), classes


def nonprivate_logistic_regression(X: Any, y: Any, *, lam: float = 0.01, classes: Sequence[Any] | None = None) -> LinearClassifier:
    """argmin (1/n)·Σ log(1 + exp(−y_i wᵀx_i)) + (λ/2)‖w‖² on rows scaled onto the unit ball, **no privacy** (the
    objective each Pathak party minimises locally, here on all rows)."""
    from mpdp.learn import logreg

    pm1, classes = _binary(y, classes)
    return LinearClassifier(logreg.fit(unit_rows(X), pm1, lam, "half"), classes)


def nonprivate_lmgc(X: Any, y: Any, *, lam: float = 1e-3, ridge: float = 1e-3, data_norm: float = 1.0) -> LmgcClassifier:
    """Sha & Saul's large-margin Gaussian classifier on the pooled rows, **no privacy** (LMGC ``mode="nonprivate"``)."""
    from mpdp.lmgc.estimator import LargeMarginGaussianClassifier

    est = LargeMarginGaussianClassifier(mode="nonprivate", lam=lam, ridge=ridge, data_norm=data_norm).fit(np.asarray(X, dtype=np.float64), np.asarray(y))
    return LmgcClassifier(est.theta_, tuple(v.item() if isinstance(v, np.generic) else v for v in est.classes_), data_norm)
