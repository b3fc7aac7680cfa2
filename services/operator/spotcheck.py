"""Real-protocol spot checks for the Pathak 2010 experiment: a few (split, mode, ε) points through the
actual services — curator and K = 5 parties as separate processes, mutual TLS, 2048-bit keys — instead of
the plaintext mechanism. Each party gets its share of a random split as its own LIBSVM file; Dave rebuilds
ŵ_s from the published shares and classifies the test set.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

from mpdp.experiments import pathak2010 as exp
from mpdp.pathak2010 import tester
from mpdp_services.operator.pathak2010 import make_spec
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.operator.pathak2010 import OperatorClient
from mpdp_services.launcher.federation import LocalFederation

Point = tuple[str, str, str, float]  # split, mode, ε label, ε (results are keyed by the float ε, as the plot needs)


def write_libsvm(path: Path, X: np.ndarray, y: np.ndarray) -> None:
    with open(path, "w") as fh:
        for row, label in zip(X, y):
            nz = np.flatnonzero(row)
            fh.write(f"{int(label):+d} " + " ".join(f"{j + 1}:{row[j]:.17g}" for j in nz) + "\n")


def protocol_points(
    data: exp.A9a,
    config: exp.Pathak2010Config,
    points: list[Point],
    runs: int = 2,
    key_bits: int = 2048,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[dict[tuple[str, str, float], tuple[float, float, str]], dict]:
    """Mean test error (and s.e.) per point over ``runs`` real jobs; the splits are those of the mechanism runs 0..runs−1."""
    parties = [f"P{j + 1}" for j in range(exp.PARTIES)]
    splits = sorted({p[0] for p in points})
    errors: dict[tuple[str, str, float], list[float]] = {}
    timing: list[float] = []
    with tempfile.TemporaryDirectory(prefix="mpdp-spotcheck-") as tmp:
        root = Path(tmp)
        datasets: dict[str, dict[str, dict]] = {p: {} for p in parties}
        for split in splits:
            for r in range(runs):
                idx = exp.random_split(exp.split_generator(config.seed, r, split), exp.SPLITS[split], len(data.y))
                for p, rows in zip(parties, idx):
                    f = root / "data" / p / f"{split}-{r}.libsvm"
                    f.parent.mkdir(parents=True, exist_ok=True)
                    write_libsvm(f, data.X[rows], data.y[rows])
                    datasets[p][f"{split}-{r}"] = {"path": str(f), "format": "libsvm", "n_features": data.d}
        fed = LocalFederation(root / "fed", parties, datasets, test_mode=key_bits < 2048, paillier_bits=key_bits, dgk_bits=key_bits, budget_epsilon=1e9)
        total, done = len(points) * runs, 0
        with fed, OperatorClient(Endpoints.load(fed.workdir)) as client:
            for split, mode, label, eps in points:
                for r in range(runs):
                    fed.wait_precomputed()
                    t0 = time.perf_counter()
                    job = client.submit(make_spec(f"{split}-{r}", parties, eps, config.lam_for(mode), mode))
                    status = client.wait(job, timeout=600)
                    if status.state != "PUBLISHED":
                        raise RuntimeError(f"protocol job for {split}/{mode}/ε={label} failed: {status.detail}")
                    timing.append(time.perf_counter() - t0)
                    w = tester.rebuild(client.model(job))
                    errors.setdefault((split, mode, eps), []).append(float(np.mean(tester.classify(w, data.X_test) != data.y_test)))
                    done += 1
                    if progress:
                        progress(done, total)
    out = {k: (float(np.mean(v)), float(np.std(v, ddof=1) / np.sqrt(len(v))) if len(v) > 1 else 0.0, "protocol") for k, v in errors.items()}
    return out, {"jobs": len(timing), "mean_job_seconds": float(np.mean(timing)) if timing else 0.0, "key_bits": key_bits, "runs_per_point": runs}
