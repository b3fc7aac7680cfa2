"""LMGC evaluation: accuracy vs ε of (DP) large-margin Gaussian classifiers (Pathak & Raj 2010).

Methods (``METHODS``):

* ``lmgc``            non-private LMGC: the Huber large-margin SDP (Φ_c ⪰ 0, trace weight λ);
* ``lmgc_corrected``  ε-DP LMGC, corrected mechanism, ours (ridge floor Δ₀, per-class symmetric noise);
* ``lmgc_paper``      the paper's mechanism as reconstructed (Sec. 4) — NOT proven private; the run
                      counts the draws for which J_p has no minimiser (docs/experiments/lmgc.md);
* ``logreg``          non-private multinomial logistic regression (scikit-learn), weight Λ;
* ``logreg_dp``       ε-DP multinomial LR by output perturbation (spherical Laplace), weight Λ_dp.

Each run draws a fresh public train/test split (numpy generator, seed + run) and fresh noise from a
:class:`~mpdp.math.drbg.Drbg` (child stream per run, ε and method). With ``seed`` set, the noise
generator is seeded too: reproducible and *not* a private release; the output says so.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from mpdp.experiments.common import environment, mean_sem, write_csv, write_json
from mpdp.lmgc.baselines import dp_multinomial_lr, fit_multinomial_lr
from mpdp.lmgc.datasets import DATASETS, Split, load_split
from mpdp.lmgc.estimator import LargeMarginGaussianClassifier
from mpdp.lmgc.params import augment
from mpdp.lmgc.solver import ConvergenceError, UnboundedObjectiveError
from mpdp.math.drbg import Drbg

METHODS = ("lmgc", "lmgc_corrected", "lmgc_paper", "logreg", "logreg_dp")
PRIVATE_METHODS = ("lmgc_corrected", "lmgc_paper", "logreg_dp")
DEFAULT_EPSILONS = (0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0)
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class LMGCExperimentConfig:
    """Hyperparameters are fixed a priori per run (no tuning on private data)."""

    dataset: str
    epsilons: tuple[float, ...] = DEFAULT_EPSILONS
    runs: int = 3
    data_dir: str | None = None
    seed: int | None = None  # None: OS-keyed noise (private); int: seeded simulation
    split_seed: int = 0
    methods: tuple[str, ...] = METHODS
    lam: float = 1e-3  # trace weight λ (SDP and paper mode)
    huber_h: float = 0.5
    ridge_floor: float = 1e-3  # Δ₀ for corrected mode
    jacobian_share: float = 0.5
    lr_reg: float = 1e-5  # Λ of non-private LR
    lr_reg_dp: float = 1e-3  # Λ of DP LR
    lr_gtol: float = 1e-6
    kdd_per_class: int = 600
    threads: int = 1

    def __post_init__(self) -> None:
        if self.dataset not in DATASETS:
            raise ValueError(f"unknown dataset {self.dataset!r}; use one of {DATASETS}")
        if self.runs < 1:
            raise ValueError("runs must be >= 1")
        if not self.epsilons or any(not (math.isfinite(e) and e > 0) for e in self.epsilons):
            raise ValueError(f"every ε must be finite and positive, got {self.epsilons}")
        bad = [m for m in self.methods if m not in METHODS]
        if bad:
            raise ValueError(f"unknown methods {bad}; use {METHODS}")


@dataclass
class _Cell:
    accuracies: list[float] = field(default_factory=list)
    unbounded: int = 0
    failed: int = 0
    seconds: float = 0.0
    privacy: dict | None = None


def _noise_root(config: LMGCExperimentConfig, rng: Drbg | None) -> Drbg:
    if rng is not None:
        return rng
    return Drbg.from_seed(f"lmgc-experiment/{config.seed}") if config.seed is not None else Drbg.from_os()


def _steps(config: LMGCExperimentConfig) -> int:
    per_eps = sum(m in config.methods for m in PRIVATE_METHODS)
    per_run = sum(m in config.methods for m in ("lmgc", "logreg")) + per_eps * len(config.epsilons)
    return config.runs * per_run


def run_lmgc_experiment(config: LMGCExperimentConfig, *, rng: Drbg | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """Run the evaluation; returns a JSON-ready dict (see :func:`summarise`)."""
    root = _noise_root(config, rng)
    total, done = _steps(config), 0
    report = progress or (lambda d, t: None)
    report(0, total)
    cells: dict[tuple[str, float | None], _Cell] = {}
    first: Split | None = None
    t_start = time.perf_counter()
    with threadpool_limits(limits=config.threads):
        for run in range(config.runs):
            split = load_split(config.dataset, config.split_seed + run, config.data_dir,
                               **({"per_class": config.kdd_per_class} if config.dataset == "kdd99" else {}))
            first = first or split
            for _method, n_steps in _run_once(config, split, root.child(f"run/{run}"), cells):
                done += n_steps
                report(done, total)
    assert first is not None
    return summarise(config, first, cells, time.perf_counter() - t_start, seeded=root.seeded)


def _run_once(config: LMGCExperimentConfig, split: Split, rng: Drbg, cells: dict) -> Iterator[tuple[str, int]]:
    """One run: every method on one split. Yields after each unit of work (for progress)."""
    R = math.sqrt(2.0)  # rows have ‖x‖ ≤ 1, so ‖(x, 1)‖ ≤ √2
    A_tr, A_te = augment(split.X_train), augment(split.X_test)
    common: dict[str, Any] = dict(lam=config.lam, huber_h=config.huber_h, data_norm=1.0)

    def cell(method: str, eps: float | None) -> _Cell:
        return cells.setdefault((method, eps), _Cell())

    base_lmgc = None
    if "lmgc" in config.methods or "lmgc_paper" in config.methods:
        t0 = time.perf_counter()
        base_lmgc = LargeMarginGaussianClassifier(mode="nonprivate", ridge=0.0, **common).fit(split.X_train, split.y_train)
        if "lmgc" in config.methods:
            c = cell("lmgc", None)
            c.seconds += time.perf_counter() - t0
            c.accuracies.append(float(base_lmgc.score(split.X_test, split.y_test)))
            c.privacy = {"mode": "nonprivate", "private": False, "model": "Huber large-margin SDP, Φ_c ⪰ 0",
                         "lam": config.lam, "huber_h": config.huber_h, "solver": base_lmgc.solution_}
            yield "lmgc", 1
    if "logreg" in config.methods:
        t0 = time.perf_counter()
        lr = fit_multinomial_lr(A_tr, split.y_train, config.lr_reg, gtol=config.lr_gtol)
        c = cell("logreg", None)
        c.seconds += time.perf_counter() - t0
        c.accuracies.append(float(np.mean(lr.predict(A_te) == split.y_test)))
        c.privacy = {"mode": "nonprivate", "private": False, "model": "multinomial LR on (x, 1)", "reg": config.lr_reg}
        yield "logreg", 1
    lr_dp_base = None
    if "logreg_dp" in config.methods:
        lr_dp_base = fit_multinomial_lr(A_tr, split.y_train, config.lr_reg_dp, gtol=config.lr_gtol)

    for eps in config.epsilons:
        tag = f"eps/{eps!r}"
        if "lmgc_corrected" in config.methods:
            t0 = time.perf_counter()
            est = LargeMarginGaussianClassifier(mode="corrected", epsilon=eps, ridge=config.ridge_floor,
                                                jacobian_share=config.jacobian_share, rng=rng.child(f"{tag}/corrected"), **common)
            c = cell("lmgc_corrected", eps)
            try:
                est.fit(split.X_train, split.y_train)
                c.accuracies.append(float(est.score(split.X_test, split.y_test)))
                c.privacy = est.accounting_
            except ConvergenceError:
                c.failed += 1  # nothing released
            c.seconds += time.perf_counter() - t0
            yield "lmgc_corrected", 1
        if "lmgc_paper" in config.methods:
            t0 = time.perf_counter()
            if base_lmgc is None:
                raise RuntimeError("lmgc_paper warm-starts from the non-private fit, which did not run")
            est = copy.copy(base_lmgc)  # warm start from the non-private SDP solution (paper mode is not private anyway)
            est.set_params(mode="paper", epsilon=eps, warm_start=True, rng=rng.child(f"{tag}/paper"))
            c = cell("lmgc_paper", eps)
            try:
                est.fit(split.X_train, split.y_train)
                c.accuracies.append(float(est.score(split.X_test, split.y_test)))
                c.privacy = est.accounting_
            except UnboundedObjectiveError:
                c.unbounded += 1
            except ConvergenceError:
                c.failed += 1
            c.seconds += time.perf_counter() - t0
            yield "lmgc_paper", 1
        if "logreg_dp" in config.methods:
            t0 = time.perf_counter()
            model = dp_multinomial_lr(A_tr, split.y_train, config.lr_reg_dp, eps, R, rng.child(f"{tag}/logreg_dp"),
                                      gtol=config.lr_gtol, base=lr_dp_base)
            c = cell("logreg_dp", eps)
            c.accuracies.append(float(np.mean(model.predict(A_te) == split.y_test)))
            c.privacy = {"mode": "output perturbation", "private": True, "reg": config.lr_reg_dp,
                         "guarantee": model.guarantee.as_dict() if model.guarantee else None}
            c.seconds += time.perf_counter() - t0
            yield "logreg_dp", 1


def summarise(config: LMGCExperimentConfig, split: Split, cells: dict, wall: float, *, seeded: bool) -> dict[str, Any]:
    """The result object printed by ``mpdp experiment lmgc --json``."""
    rows = []
    for method in METHODS:
        for eps in ([None] if method not in PRIVATE_METHODS else list(config.epsilons)):
            c = cells.get((method, eps))
            if c is None:
                continue
            attempted = len(c.accuracies) + c.unbounded + c.failed
            mean, sem = mean_sem(c.accuracies) if c.accuracies else (None, None)
            rows.append({
                "method": method,
                "epsilon": eps,
                "accuracy_mean": mean,
                "accuracy_sem": sem,
                "accuracies": c.accuracies,
                "runs_attempted": attempted,
                "runs_released": len(c.accuracies),
                "runs_unbounded": c.unbounded,
                "runs_failed": c.failed,
                "seconds": round(c.seconds, 3),
                "privacy": c.privacy,
            })
    return {
        "experiment": "lmgc",
        "dataset": config.dataset,
        "n_train": int(split.X_train.shape[0]),
        "n_test": int(split.X_test.shape[0]),
        "n_features": split.n_features,
        "n_classes": len(split.class_names),
        "class_names": list(split.class_names),
        "preprocessing": split.preprocessing,
        "data_extra": split.extra,
        "seeded_noise": seeded,
        "noise_note": ("seeded DRBG: reproducible simulation, NOT a private release" if seeded
                       else "OS-keyed DRBG (Drbg.from_os)"),
        "config": asdict(config),
        "results": rows,
        "wall_seconds": round(wall, 2),
        "environment": environment(),
    }


def write_outputs(result: dict[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """lmgc_<dataset>.json, .csv (one row per method and ε) and .png (accuracy vs ε)."""
    out = Path(out_dir)
    stem = f"lmgc_{result['dataset']}"
    rows = [{k: r[k] for k in ("method", "epsilon", "accuracy_mean", "accuracy_sem", "runs_attempted", "runs_released",
                               "runs_unbounded", "runs_failed", "seconds")} for r in result["results"]]
    return {
        "json": write_json(out / f"{stem}.json", result),
        "csv": write_csv(out / f"{stem}.csv", rows),
        "png": plot_accuracy(result, out / f"{stem}.png"),
    }


_STYLE = {
    "lmgc": ("LMGC (non-private SDP)", "tab:blue", "--"),
    "logreg": ("multinomial LR (non-private)", "tab:orange", "--"),
    "lmgc_corrected": ("DP LMGC, corrected (ε-DP)", "tab:blue", "-"),
    "lmgc_paper": ("LMGC, paper mode (NOT private)", "tab:red", ":"),
    "logreg_dp": ("DP multinomial LR, output perturbation", "tab:orange", "-"),
}


def plot_accuracy(result: dict[str, Any], path: str | Path) -> Path:
    """Test accuracy (mean ± s.e.) against ε on a log axis; non-private methods as horizontal lines."""
    from mpdp.experiments.common import agg_figure

    Figure, FigureCanvasAgg = agg_figure()

    fig = Figure(figsize=(7.5, 5.6), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    by_method: dict[str, list[dict]] = {}
    for r in result["results"]:
        by_method.setdefault(r["method"], []).append(r)
    for method, rs in by_method.items():
        label, color, ls = _STYLE[method]
        if method not in PRIVATE_METHODS:
            if rs[0]["accuracy_mean"] is not None:
                ax.axhline(rs[0]["accuracy_mean"], color=color, linestyle=ls, linewidth=1.2, label=label)
            continue
        pts = [r for r in rs if r["accuracy_mean"] is not None]
        if not pts:
            continue
        ax.errorbar([r["epsilon"] for r in pts], [r["accuracy_mean"] for r in pts], yerr=[r["accuracy_sem"] for r in pts],
                    color=color, linestyle=ls, marker="o", markersize=4, capsize=3, label=label)
        if method == "lmgc_paper":
            for r in rs:
                if r["runs_unbounded"]:
                    released = r["accuracy_mean"] is not None
                    y = r["accuracy_mean"] if released else 0.03
                    ax.annotate(f"paper: {r['runs_unbounded']}/{r['runs_attempted']}\nunbounded", (r["epsilon"], y),
                                textcoords="offset points", xytext=(0, -22 if released else 0), ha="center",
                                fontsize=7, color=color)
    ax.axhline(1.0 / result["n_classes"], color="grey", linestyle=":", linewidth=0.8, label="chance (1/C)")
    ax.set_xscale("log")
    ax.set_ylim(0.0, 1.02)
    ax.set_xlabel("ε")
    ax.set_ylabel("test accuracy")
    ax.grid(True, alpha=0.3)
    runs = result["config"]["runs"]
    ax.set_title(f"{result['dataset']}: n_train={result['n_train']}, d={result['n_features']}, C={result['n_classes']}, "
                 f"{runs} runs", fontsize=10)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize=7)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=120)
    return p


def parse_methods(text: str) -> tuple[str, ...]:
    names = tuple(s.strip() for s in text.split(",") if s.strip())
    bad = [s for s in names if s not in METHODS]
    if bad or not names or len(set(names)) != len(names):
        raise ValueError(f"methods must be distinct names from {METHODS}, got {text!r}")
    return names


__all__: Sequence[str] = ("LMGCExperimentConfig", "METHODS", "run_lmgc_experiment", "write_outputs", "plot_accuracy")
