"""diffprivlib's central DP logistic regression on a9a — runs INSIDE the diffprivlib virtualenv (never imports mpdp).

    python diffprivlib_lr.py --data DIR --epsilons 0.1,0.5,1 --seeds 0,1,2 [--lam 1e-3]

Loads ``DIR/a9a.gz`` and ``DIR/a9a.t.gz`` (123 features, labels ±1) and scales every row with norm above 1 to norm 1,
as mpdp's ``load_a9a`` does (every a9a row has norm √13 or √14, so every row ends on the unit sphere). Fits
``diffprivlib.models.LogisticRegression(epsilon=ε, data_norm=1, C=1/(λ·n), fit_intercept=False)`` — diffprivlib's
objective is C·Σ loss + ½‖w‖², which is n·C times ours, (1/n)·Σ loss + (λ/2)‖w‖², so C = 1/(λ·n) is the same
minimiser — once per (ε, seed). Prints one JSON line: test error and fit seconds per (ε, seed), and the versions.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np


def load(path: Path) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_svmlight_file

    X, y = load_svmlight_file(str(path), n_features=123)
    X = np.asarray(X.todense(), dtype=np.float64)
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    return X, np.where(y > 0, 1.0, -1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="folder with a9a.gz and a9a.t.gz")
    ap.add_argument("--epsilons", default="0.1,0.5,1")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--lam", type=float, default=1e-3)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    import diffprivlib
    import sklearn
    from diffprivlib.models import LogisticRegression

    base = Path(args.data)
    X, y = load(base / "a9a.gz")
    Xt, yt = load(base / "a9a.t.gz")
    n = len(y)
    rows = []
    for eps in (float(e) for e in args.epsilons.split(",") if e):
        for seed in (int(s) for s in args.seeds.split(",") if s):
            m = LogisticRegression(epsilon=eps, data_norm=1.0, C=1.0 / (args.lam * n), fit_intercept=False, max_iter=1000,
                                   random_state=seed * 100003 + int(round(eps * 1e6)) % 997)
            t = time.perf_counter()
            m.fit(X, y)
            sec = time.perf_counter() - t
            rows.append({"epsilon": eps, "seed": seed, "test_error": float(np.mean(m.predict(Xt) != yt)), "fit_seconds": sec})
    print("DIFFPRIVLIB_RESULT " + json.dumps({"train_rows": n, "test_rows": len(yt), "lambda": args.lam, "C": 1.0 / (args.lam * n), "rows": rows,
                                              "diffprivlib": diffprivlib.__version__, "sklearn": sklearn.__version__, "numpy": np.__version__,
                                              "python": sys.version.split()[0]}), flush=True)


if __name__ == "__main__":
    main()
