"""How the public defaults of :mod:`mpdp.dpgd.plan` were fixed: a small grid on *simulated* data only.

The simulated set is public by construction (no party's data): n = 30 000 rows of d = 100 binary features,
each row a one-hot choice in 12 groups (the shape of a one-hot-encoded census table, nothing else), labels from a
logistic model with a random weight vector, rows scaled to unit norm, K = 5 even parties, λ = 1e-3, δ = 1e-6,
replace adjacency. For each (rounds R, Hessian share h, clip C, averaging) the mean excess test error over the
non-private model is measured at ε ∈ {0.1, 0.5}; the defaults are the grid point with the smallest sum.
Run ``python -m mpdp.dpgd.tuning`` to reproduce (a few minutes on one core).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import numpy as np

from mpdp.dpgd import learner
from mpdp.dpgd.model import Task, fit_nonprivate, prepare
from mpdp.dpgd.plan import DpgdPlan

GRID = {"rounds": (2, 4, 8), "hessian_share": (0.3, 0.5, 0.7), "clip": (0.5, 1.0), "average_from": (0.0, 0.5)}
EPSILONS = (0.1, 0.5)


def synthetic(seed: int = 0, n: int = 45_000, groups: int = 12, d: int = 100) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(seed)  # public simulation data: the synthetic tuning set
    edges = np.sort(g.choice(np.arange(1, d), groups - 1, replace=False))
    bounds = np.concatenate([[0], edges, [d]])
    X = np.zeros((n, d))
    for a, b in zip(bounds[:-1], bounds[1:]):
        p = g.dirichlet(np.full(b - a, 0.7))
        X[np.arange(n), a + g.choice(b - a, n, p=p)] = 1.0
    w = g.normal(size=d) * 1.5
    s = X @ w
    s = s - np.quantile(s, 0.75)  # about a quarter positive, like many census targets
    y = np.where(g.random(n) < 1 / (1 + np.exp(-s)), 1.0, -1.0)
    return prepare(X), y


def select(runs: int = 3, seed: int = 0) -> dict:
    X, y = synthetic(seed)
    Xtr, ytr, Xte, yte = X[:30_000], y[:30_000], X[30_000:], y[30_000:]
    task = Task("binary")
    base = task.error(fit_nonprivate(task, Xtr, ytr, 1e-3), Xte, yte)
    parts = [(Xtr[i::5], ytr[i::5]) for i in range(5)]
    scores: dict[str, float] = {}
    for values in itertools.product(*GRID.values()):
        hp: dict[str, Any] = dict(zip(GRID, values))  # ints and floats by name
        total = 0.0
        for eps in EPSILONS:
            plan = DpgdPlan(task, X.shape[1], eps, 1e-6, total_records=len(ytr), **hp)
            errs = [task.error(learner.fit(plan, parts, seed=f"tune/{r}/{eps}".encode()).model, Xte, yte) for r in range(runs)]
            total += float(np.mean(errs)) - base
        scores[json.dumps(hp)] = total
    best = min(scores, key=scores.__getitem__)
    return {"nonprivate": base, "best": json.loads(best), "scores": scores}


if __name__ == "__main__":
    out = select()
    print(json.dumps({"nonprivate": out["nonprivate"], "best": out["best"]}))
    for k, v in sorted(out["scores"].items(), key=lambda kv: kv[1])[:10]:
        print(f"{v:.4f} {k}")
