"""The price of distrust: test error of multiparty DP learners against central DP at the same (ε, δ).

Data: a9a (rows scaled to unit norm, λ = 1e-3, K = 5 even parties, test on a9a.t) and a multiclass set, the
handwritten digits bundled with scikit-learn (64 features, 10 classes; rows scaled to unit norm; a fixed public
75/25 split). Methods, all at the same ε (and δ = 1e-6 where the mechanism needs one):

* ``dpgd`` — the multiparty DP-GD job (mpdp.dpgd), R chosen by the public rule :func:`mpdp.dpgd.plan.auto_rounds`;
  ``dpgd_r4`` (R = 4) and ``functional`` (R = 0, the one-round functional mechanism) are both reported, every
  round through the real DCA core (T = 0, three compute nodes);
* ``pathak_corrected`` / ``pathak_paper`` — the Pathak et al. 2010 protocol on its mechanism fast path
  (:func:`mpdp.pathak2010.mechanism.draw_aggregate`, proved equal to the protocol), binary only;
* ``central_output`` — mpdp's central output perturbation (CM08, one trusted curator, K = 1), binary only;
* ``objective`` — our Chaudhuri et al. objective perturbation (:mod:`mpdp.dpgd.reference`), one trusted curator;
* ``diffprivlib`` — diffprivlib 0.6.6's ``LogisticRegression`` (same objective, its own code), run in a virtualenv
  the experiment creates on demand (scikit-learn 1.6.1); skipped, with the reason in the output, if that fails.

Seeded simulation: reproducible, not a private release.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mpdp.dp.pathak_noise import Mode, PathakCalibration
from mpdp.dpgd import learner, reference
from mpdp.dpgd.model import BINARY, SOFTMAX, Task, fit_nonprivate, prepare
from mpdp.dpgd.plan import DpgdPlan, auto_rounds
from mpdp.experiments.common import environment, mean_sem
from mpdp.experiments.pathak2010 import load_a9a
from mpdp.learn import logreg
from mpdp.math.drbg import Drbg
from mpdp.pathak2010.mechanism import draw_aggregate, party_rng

LAMBDA = 1e-3
DELTA = 1e-6
PARTIES = 5
DIFFPRIVLIB = ("diffprivlib==0.6.6", "scikit-learn==1.6.1")
TRUST = {
    "dpgd": "no trusted curator: the compute nodes do not all collude (DCA); the curator sees only noisy sums",
    "pathak": "the curator does not collude with any party (it holds the decryption key; a party holds the noise)",
    "central": "one trusted curator sees every row (diffprivlib, objective and output perturbation)",
}


@dataclass(frozen=True)
class Dataset:
    name: str
    task: Task
    X: np.ndarray
    y: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray


def load_datasets(data_dir: str | Path) -> list[Dataset]:
    base = Path(data_dir)
    a = load_a9a(base / "a9a" if (base / "a9a").is_dir() else base)
    out = [Dataset("a9a", Task(BINARY), a.X, a.y, a.X_test, a.y_test)]
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    perm = np.random.default_rng(2017).permutation(len(y))  # public split, fixed
    X, y = prepare(X[perm].astype(np.float64)), y[perm].astype(np.int64)
    cut = int(0.75 * len(y))
    out.append(Dataset("digits", Task(SOFTMAX, 10), X[:cut], y[:cut], X[cut:], y[cut:]))
    return out


def _split(n: int, run: int, seed: int) -> list[np.ndarray]:
    return np.array_split(np.random.default_rng([seed, run]).permutation(n), PARTIES)  # public simulation: the even split


def run_dataset(ds: Dataset, epsilons: list[float], runs: int, seed: int) -> dict[str, Any]:
    n, d = ds.X.shape
    task = ds.task
    binary = task.kind == BINARY
    methods = ["dpgd", "dpgd_r4", "functional", "objective"] + (["pathak_corrected", "pathak_paper", "central_output"] if binary else [])
    errs = {m: np.zeros((runs, len(epsilons))) for m in methods}
    W_np = fit_nonprivate(task, ds.X, ds.y, LAMBDA)
    pathak_modes: tuple[Mode, ...] = ("corrected", "paper")
    full = {m: logreg.fit(ds.X, ds.y, LAMBDA, PathakCalibration(m, 1.0, LAMBDA, 1).convention) for m in pathak_modes} if binary else {}
    rng_ref = Drbg.from_seed(f"price-of-distrust/{seed}/objective")  # the central reference's noise: CSPRNG like every mechanism
    for run in range(runs):
        idx = _split(n, run, seed)
        parts = [(ds.X[i], ds.y[i]) for i in idx]
        local = {m: [logreg.fit(X, y, LAMBDA, PathakCalibration(m, 1.0, LAMBDA, PARTIES).convention) for X, y in parts] for m in full}
        for j, eps in enumerate(epsilons):
            tag = f"{ds.name}/{run}/{eps:g}"
            for name, R in (("dpgd", auto_rounds(eps, n)), ("dpgd_r4", 4), ("functional", 0)):
                if name == "dpgd":
                    continue
                plan = DpgdPlan(task, d, eps, DELTA, lam=LAMBDA, rounds=R, total_records=n)
                fit = learner.fit(plan, parts, seed=f"{tag}/{name}".encode(), job_id="pod")
                errs[name][run, j] = task.error(fit.model, ds.X_test, ds.y_test)
            errs["dpgd"][run, j] = errs["functional" if auto_rounds(eps, n) == 0 else "dpgd_r4"][run, j]
            W = reference.fit(ds.X, ds.y, eps, LAMBDA, rng_ref, classes=task.classes)
            errs["objective"][run, j] = task.error(W, ds.X_test, ds.y_test)
            for mode in full:
                cal = PathakCalibration(mode, eps, LAMBDA, PARTIES)
                root = Drbg.from_seed(f"{tag}/pathak/{mode}")
                agg = draw_aggregate(local[mode], [len(i) for i in idx], cal, [party_rng(root, f"P{k}") for k in range(PARTIES)])
                errs[f"pathak_{mode}"][run, j] = np.mean(np.where(ds.X_test @ agg.weights >= 0, 1.0, -1.0) != ds.y_test)
            if full:
                cal1 = PathakCalibration("corrected", eps, LAMBDA, 1)
                w = full["corrected"] + cal1.draw(Drbg.from_seed(f"{tag}/central"), n, d)
                errs["central_output"][run, j] = np.mean(np.where(ds.X_test @ w >= 0, 1.0, -1.0) != ds.y_test)
    labels = [f"{e:g}" for e in epsilons]
    summary = {m: {lab: dict(zip(("error_rate_mean", "error_rate_sem"), mean_sem(a[:, j]))) for j, lab in enumerate(labels)} for m, a in errs.items()}
    majority = float(np.mean(ds.y_test != np.bincount(((ds.y + 1) // 2 if binary else ds.y).astype(int)).argmax() * (2 if binary else 1) + (-1 if binary else 0)))
    return {
        "dataset": ds.name,
        "task": task.kind,
        "classes": task.classes,
        "train_rows": n,
        "test_rows": len(ds.y_test),
        "features": d,
        "nonprivate": task.error(W_np, ds.X_test, ds.y_test),
        "majority": majority,
        "rounds_rule": {lab: auto_rounds(e, n) for lab, e in zip(labels, epsilons)},
        "guarantees": {lab: DpgdPlan(task, d, e, DELTA, lam=LAMBDA, rounds=auto_rounds(e, n), total_records=n).guarantee.as_dict() for lab, e in zip(labels, epsilons)},
        "errors": summary,
        "per_run": {m: a.tolist() for m, a in errs.items()},
    }


# -- diffprivlib in its own virtualenv ----------------------------------------------------------
_RUNNER = r"""
import json, sys, numpy as np, warnings
warnings.simplefilter("ignore")
from diffprivlib.models import LogisticRegression
a = np.load(sys.argv[1]); cfg = json.loads(sys.argv[2])
X, y, Xt, yt = a["X"], a["y"], a["Xt"], a["yt"]
out = []
for run in range(cfg["runs"]):
    row = []
    for eps in cfg["epsilons"]:
        m = LogisticRegression(epsilon=eps, data_norm=1.0, C=1.0 / (cfg["lam"] * len(y)), fit_intercept=False, random_state=cfg["seed"] * 100003 + run * 101 + int(eps * 1e6) % 997, max_iter=1000)
        m.fit(X, y)
        row.append(float(np.mean(m.predict(Xt) != yt)))
    out.append(row)
print(json.dumps(out))
"""


def diffprivlib_python(venv: Path) -> tuple[Path | None, str]:
    """The virtualenv's python with diffprivlib 0.6.6 (created on demand), or None and the reason."""
    py = venv / "bin" / "python"
    try:
        if not py.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
        ok = subprocess.run([str(py), "-c", "import diffprivlib, sklearn; assert diffprivlib.__version__ == '0.6.6'"], capture_output=True, timeout=120)
        if ok.returncode != 0:
            subprocess.run([str(py), "-m", "pip", "install", "-q", *DIFFPRIVLIB], check=True, capture_output=True, timeout=900)
        return py, "ok"
    except (subprocess.SubprocessError, OSError) as e:
        return None, f"could not set up diffprivlib 0.6.6 in {venv.name}: {type(e).__name__}"


def run_diffprivlib(py: Path, ds: Dataset, epsilons: list[float], runs: int, seed: int, work: Path) -> np.ndarray:
    f = work / f"{ds.name}.npz"
    np.savez(f, X=ds.X, y=ds.y, Xt=ds.X_test, yt=ds.y_test)
    cfg = json.dumps({"epsilons": epsilons, "runs": runs, "lam": LAMBDA, "seed": seed})
    res = subprocess.run([str(py), "-c", _RUNNER, str(f), cfg], check=True, capture_output=True, text=True, timeout=3600, env={**os.environ, "PYTHONPATH": ""})
    return np.asarray(json.loads(res.stdout.strip().splitlines()[-1]))


def run(data_dir: str | Path, epsilons: list[float], runs: int, *, seed: int = 0, diffprivlib: bool = True, work: str | Path | None = None,
        datasets: tuple[str, ...] = ("a9a", "digits")) -> dict[str, Any]:
    t0 = time.perf_counter()
    work = Path(work or Path.home() / ".cache" / "mpdp-price-of-distrust")
    work.mkdir(parents=True, exist_ok=True)
    py, why = diffprivlib_python(work / "diffprivlib-venv") if diffprivlib else (None, "disabled (--no-diffprivlib)")
    results = []
    for ds in load_datasets(data_dir):
        if ds.name not in datasets:
            continue
        res = run_dataset(ds, epsilons, runs, seed)
        if py is not None:
            a = run_diffprivlib(py, ds, epsilons, runs, seed, work)
            res["errors"]["diffprivlib"] = {f"{e:g}": dict(zip(("error_rate_mean", "error_rate_sem"), mean_sem(a[:, j]))) for j, e in enumerate(epsilons)}
            res["per_run"]["diffprivlib"] = a.tolist()
        results.append(res)
    return {
        "experiment": "price-of-distrust",
        "epsilons": epsilons,
        "delta": DELTA,
        "lambda": LAMBDA,
        "parties": PARTIES,
        "runs": runs,
        "seed": seed,
        "diffprivlib": why,
        "trust_models": TRUST,
        "results": results,
        "seeded": True,
        "wall_seconds": time.perf_counter() - t0,
        "environment": environment(),
    }


def plot(out: dict[str, Any], path: str | Path) -> Path:
    from mpdp.experiments.common import agg_figure

    Figure, FigureCanvasAgg = agg_figure()
    res = out["results"]
    fig = Figure(figsize=(6 * len(res), 4.2))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(res), squeeze=False)
    for ax, r in zip(axes[0], res):
        for m, blk in r["errors"].items():
            xs = [float(k) for k in blk]
            ax.errorbar(xs, [v["error_rate_mean"] for v in blk.values()], yerr=[v["error_rate_sem"] for v in blk.values()], marker="o", capsize=2, label=m)
        ax.axhline(r["nonprivate"], color="k", ls=":", label="non-private")
        ax.set_xscale("log")
        ax.set_xlabel("ε (δ = 1e-6 where needed)")
        ax.set_ylabel("test error")
        ax.set_title(f"{r['dataset']} ({r['task']}, K = {out['parties']})")
        ax.legend(fontsize=7)
    fig.tight_layout()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=120)
    return p
