"""Evaluation of Hamm, Cao & Belkin (ICML 2016) Figure 3 — private ensembles on KDD-99 (the paper's Sec. 6.2).

For each data trial r (public split seeded by (split_seed, r), numpy generator):

* ``aux_fraction`` (10 %) of ``kddcup.data_10_percent.gz`` becomes the auxiliary unlabeled set — public in
  this setting (the paper's Sec. 3.3), so its statistics standardise the numeric features (:mod:`mpdp.data.kdd99`);
* the other rows go at random to M parties with ``per_party`` rows each, nested over the M grid (a smaller
  M gets a prefix of the same parties), and :func:`mpdp.hamm2016.simulation.run_trial` runs batch, soft, avg,
  avg-tight, pate, vote and indiv for every 1/ε with ``noise_draws`` noise vectors per private point;
* test accuracy on ``corrected.gz`` (binary: all 311,029 rows; multiclass: the 292,300 rows whose attack type
  training_attack_types.txt maps to a category — the 18,729 rows of attack types that occur only in the test
  file are dropped). Accuracy is computed on the distinct test rows weighted by their multiplicity (the same
  number as on all rows).

Reported per M, method and 1/ε: mean and s.d. over all values — ``trials`` for the non-private methods and for
1/ε = 0, ``trials × noise_draws`` for the private ones (the paper: 10 and 100).

Noise: a :class:`~mpdp.math.drbg.Drbg` per (M, trial), child streams per method, ε and draw. With ``seed`` set
it is ``Drbg.from_seed`` — reproducible simulation, NOT a private release; the output says so.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from mpdp.data import kdd99
from mpdp.experiments.common import environment, write_csv, write_json
from mpdp.hamm2016.simulation import (
    DEFAULT_EPSILONS_INV, LOCAL_CHOICES, METHODS, PRIVATE_METHODS, SimulationConfig, TrialData, distinct_rows, epsilon_of,
    run_trial, split_rows, trial_steps,
)
from mpdp.hamm2016.pate import DEFAULT_DELTA, DEFAULT_QUERIES
from mpdp.math.drbg import Drbg

DEFAULT_PARTIES = (5000, 10000, 20000)
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Hamm2016Config:
    """Everything a run depends on (the CLI defaults are the paper's KDD-99 setting)."""

    data_dir: str
    parties: tuple[int, ...] = DEFAULT_PARTIES
    epsilons_inv: tuple[float, ...] = DEFAULT_EPSILONS_INV
    trials: int = 10
    noise_draws: int = 10
    per_party: int = 22
    lam: float = 1e-4
    aux_fraction: float = 0.1
    task: str = "binary"
    local: str = "logreg"
    methods: tuple[str, ...] = METHODS
    protect_aux: bool = False
    indiv_parties: int = 1000
    pate_queries: int = DEFAULT_QUERIES
    pate_delta: float = DEFAULT_DELTA
    max_aux: int | None = None  # keep at most this many auxiliary rows (quick runs / tests)
    max_test: int | None = None  # score on a fixed random subset of this many test rows (quick runs / tests)
    seed: int | None = None  # None: OS-keyed noise; int: seeded simulation (not private)
    split_seed: int = 0
    threads: int = 1

    def __post_init__(self) -> None:
        if not self.parties or len(set(self.parties)) != len(self.parties) or min(self.parties) < 1:
            raise ValueError(f"parties must be distinct positive counts, got {self.parties}")
        if self.trials < 1:
            raise ValueError("trials must be >= 1")
        if self.task not in kdd99.TASKS:
            raise ValueError(f"task must be one of {kdd99.TASKS}, got {self.task!r}")
        if self.local not in LOCAL_CHOICES:
            raise ValueError(f"local must be one of {LOCAL_CHOICES}, got {self.local!r}")
        for v in (self.max_aux, self.max_test):
            if v is not None and v < 2:
                raise ValueError("max_aux and max_test must be >= 2 when set")
        if not 0 < self.aux_fraction < 1:
            raise ValueError(f"aux_fraction must lie in (0, 1), got {self.aux_fraction}")
        self.simulation(self.parties[0])  # validates the remaining fields

    def simulation(self, parties: int) -> SimulationConfig:
        return SimulationConfig(parties=parties, per_party=self.per_party, lam=self.lam, epsilons_inv=self.epsilons_inv,
                                noise_draws=self.noise_draws, methods=self.methods, local=self.local,
                                protect_aux=self.protect_aux, indiv_parties=self.indiv_parties,
                                pate_queries=self.pate_queries, pate_delta=self.pate_delta)


@lru_cache(maxsize=4)
def _test_rows(data_dir: str, task: str, max_test: int | None, split_seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(raw test row of each distinct test example, its multiplicity, its label); fixed for a run."""
    t = kdd99.load_kdd_task(data_dir, task)
    rows, y = t.test_rows, t.y_test
    if max_test is not None and max_test < rows.size:
        pick = np.sort(np.random.default_rng([split_seed, 999]).choice(rows.size, max_test, replace=False))  # public simulation data
        rows, y = rows[pick], y[pick]
    key = np.hstack([t.test.numeric[rows], t.test.symbolic[rows].astype(np.float64), y[:, None].astype(np.float64)])
    _, first, counts = np.unique(key, axis=0, return_index=True, return_counts=True)
    return rows[first], counts.astype(np.float64), y[first]


def _noise_root(config: Hamm2016Config, rng: Drbg | None) -> Drbg:
    if rng is not None:
        return rng
    return Drbg.from_seed(f"hamm2016-experiment/{config.seed}") if config.seed is not None else Drbg.from_os()


def total_steps(config: Hamm2016Config) -> int:
    return config.trials * (1 + len(config.parties) * trial_steps(config.simulation(config.parties[0])))


def run_hamm2016(config: Hamm2016Config, *, rng: Drbg | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """Run the evaluation; returns a JSON-ready dict (see :func:`summarise`)."""
    report = progress or (lambda d, t: None)
    total, done = total_steps(config), 0
    report(0, total)
    t_start = time.perf_counter()
    root = _noise_root(config, rng)
    task = kdd99.load_kdd_task(config.data_dir, config.task)
    t_load = time.perf_counter() - t_start
    test_raw, test_weight, y_test = _test_rows(config.data_dir, config.task, config.max_test, config.split_seed)
    cells: dict[tuple[int, str, float], list[float]] = {}
    per_m: dict[int, dict[str, Any]] = {M: {"seconds": {}, "diagnostics": [], "privacy": {}, "split": None} for M in config.parties}
    prep_seconds = 0.0
    with threadpool_limits(limits=config.threads):
        for r in range(config.trials):
            t0 = time.perf_counter()
            splits = {M: split_rows(len(task.train), M, config.per_party, config.aux_fraction,
                                    np.random.default_rng([config.split_seed, r]),  # public simulation data
                                    max_aux=config.max_aux) for M in config.parties}
            longest = max(splits.values(), key=lambda s: s.parties.size)
            pool = longest.parties.ravel()
            aux = longest.aux
            scaler = kdd99.Standardizer.fit(task.train, aux)  # statistics of the PUBLIC auxiliary rows only
            X_aux = scaler.transform(task.train, aux)
            X_pool = scaler.transform(task.train, pool)
            y_pool = task.y_train[pool]
            X_test = scaler.transform(task.test, test_raw)
            aux_distinct = distinct_rows(X_aux)
            prep_seconds += time.perf_counter() - t0
            done += 1
            report(done, total)
            for M in config.parties:
                sp = splits[M]
                k = M * sp.per_party
                if not (np.array_equal(sp.aux, aux) and np.array_equal(sp.parties.ravel(), pool[:k])):
                    raise AssertionError("splits over the M grid must be nested")
                data = TrialData(X_aux=X_aux, X_parties=X_pool[:k].reshape(M, sp.per_party, -1),
                                 y_parties=y_pool[:k].reshape(M, sp.per_party), X_test=X_test, y_test=y_test,
                                 classes=task.classes, test_weight=test_weight, y_aux=task.y_train[aux],
                                 aux_distinct=aux_distinct)

                def step(_name: str) -> None:
                    nonlocal done
                    done += 1
                    report(done, total)

                res = run_trial(data, config.simulation(M), root.child(f"M={M}/trial={r}"),
                                np.random.default_rng([config.split_seed, r, M]),  # public: which parties indiv scores
                                step)
                for (method, e), accs in res.accuracies.items():
                    cells.setdefault((M, method, e), []).extend(accs)
                info = per_m[M]
                info["split"] = info["split"] or sp.summary()
                info["diagnostics"].append(res.diagnostics)
                for key, s in res.seconds.items():
                    info["seconds"][key] = info["seconds"].get(key, 0.0) + s
                for cell, p in res.privacy.items():
                    info["privacy"].setdefault(cell, []).append(p)
    wall = time.perf_counter() - t_start
    return summarise(config, task, cells, per_m, seeded=root.seeded, wall=wall, load_seconds=t_load, prep_seconds=prep_seconds,
                     n_test_rows=float(test_weight.sum()), n_test_distinct=int(test_raw.size))


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    a = np.asarray(values, dtype=np.float64)
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0


def summarise(config: Hamm2016Config, task: kdd99.KddTask, cells: dict, per_m: dict, *, seeded: bool, wall: float,
              load_seconds: float, prep_seconds: float, n_test_rows: float, n_test_distinct: int) -> dict[str, Any]:
    """The result object printed by ``mpdp experiment hamm2016 --json``."""
    rows = []
    for M in config.parties:
        for method in METHODS:
            for e in config.epsilons_inv:
                accs = cells.get((M, method, e))
                if not accs:
                    continue
                mean, sd = _mean_sd(accs)
                row = {"parties": M, "method": method, "eps_inv": e, "epsilon": epsilon_of(e),
                       "private": method in PRIVATE_METHODS and e > 0, "accuracy_mean": mean, "accuracy_sd": sd,
                       "n": len(accs), "accuracies": accs}
                plist = per_m[M]["privacy"].get((method, e))
                if plist:
                    g = dict(plist[0])
                    for key in ("mean_noise_norm", "label_accuracy_mean"):
                        if all(key in p for p in plist):
                            g[key] = float(np.mean([p[key] for p in plist]))
                    row["privacy"] = g
                rows.append(row)
    settings = {}
    for M in config.parties:
        diags = per_m[M]["diagnostics"]
        avg_diag = {k: float(np.mean([d[k] for d in diags])) for k in diags[0] if isinstance(diags[0][k], (int, float))}
        settings[str(M)] = {"split": per_m[M]["split"], "diagnostics_mean": avg_diag,
                            "seconds": {k: round(v, 2) for k, v in per_m[M]["seconds"].items()}}
    n_train = len(task.train)
    return {
        "experiment": "hamm2016",
        "task": config.task,
        "dataset": "KDD Cup 1999 (kddcup.data_10_percent.gz → corrected.gz)",
        "class_names": list(task.class_names),
        "n_features": kdd99.N_FEATURES,
        "n_train_rows": n_train,
        "n_test_rows": int(n_test_rows),
        "n_test_distinct": n_test_distinct,
        "dropped_test_labels": task.dropped_test_labels,
        "preprocessing": ("log1p of 38 numeric columns standardised with the auxiliary (public) rows' mean/s.d.; "
                          "one-hot protocol_type (3), service (71), flag (11) with fixed vocabularies; d = 123; "
                          f"rows divided by {kdd99.ROW_SCALE:g} and clipped to ‖x‖ ≤ 1"),
        "settings": settings,
        "seeded_noise": seeded,
        "noise_note": ("seeded DRBG (Drbg.from_seed): reproducible simulation, NOT a private release" if seeded
                       else "OS-keyed DRBG (Drbg.from_os)"),
        "config": asdict(config),
        "results": rows,
        "seconds": {"wall": round(wall, 2), "load": round(load_seconds, 2), "prepare": round(prep_seconds, 2)},
        "environment": environment(),
    }


def result_table(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat row per (M, method, 1/ε) for CSV output."""
    keys = ("parties", "method", "eps_inv", "epsilon", "private", "accuracy_mean", "accuracy_sd", "n")
    return [{k: r[k] for k in keys} for r in result["results"]]


def write_outputs(result: dict[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """hamm2016_<task>.json (everything) and .csv (one row per M, method and 1/ε)."""
    out = Path(out_dir)
    stem = f"hamm2016_{result['task']}"
    return {"json": write_json(out / f"{stem}.json", result), "csv": write_csv(out / f"{stem}.csv", result_table(result))}


_STYLE = {  # label, colour, line style, marker
    "batch": ("batch (non-private, pooled)", "black", "--", "s"),
    "soft": ("soft (Alg. 2)", "tab:blue", "-", "o"),
    "avg": ("avg (parameter averaging)", "tab:green", "-", "^"),
    "avg-tight": ("avg-tight (averaging, ‖w‖ ≤ √(2 ln C/λ))", "tab:olive", "-", "D"),
    "pate": ("pate (GNMax labels, (ε, δ))", "tab:purple", "-", "P"),
    "vote": ("vote (Alg. 1)", "tab:red", "-", "v"),
    "indiv": ("indiv (mean local)", "tab:gray", ":", "x"),
}


def plot_figure(result: dict[str, Any], path: str | Path, *, title: str | None = None, ylim: tuple[float, float] | None = None) -> Path:
    """One panel per M like the paper's Figure 3: accuracy (mean ± s.d.) against 1/ε on a categorical axis."""
    from mpdp.experiments.common import agg_figure

    Figure, FigureCanvasAgg = agg_figure()

    Ms = result["config"]["parties"]
    grid = result["config"]["epsilons_inv"]
    fig = Figure(figsize=(4.6 * len(Ms), 4.4), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(Ms), sharey=True, squeeze=False)[0]
    lows = []
    for ax, M in zip(axes, Ms):
        for method in METHODS:
            pts = {r["eps_inv"]: r for r in result["results"] if r["parties"] == M and r["method"] == method}
            if not pts:
                continue
            xs = [i for i, e in enumerate(grid) if e in pts]
            ys = [pts[grid[i]]["accuracy_mean"] for i in xs]
            sd = [pts[grid[i]]["accuracy_sd"] for i in xs]
            lows.append(min(y - s for y, s in zip(ys, sd)))
            label, color, ls, marker = _STYLE[method]
            ax.errorbar(xs, ys, yerr=sd, label=label, color=color, linestyle=ls, marker=marker, markersize=4, capsize=3, linewidth=1.3)
        split = result["settings"][str(M)]["split"]
        ax.set_title(f"M = {M:,} parties × {split['per_party']} rows, N_aux = {split['n_aux']:,}", fontsize=9)
        ax.set_xticks(range(len(grid)), [f"{e:g}" for e in grid])
        ax.set_xlabel("privacy 1/ε")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("test accuracy")
    lo = ylim if ylim is not None else (max(0.0, math.floor(min(lows) * 20) / 20), 1.0)
    axes[0].set_ylim(*lo)
    handles: dict[str, Any] = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncols=len(handles), fontsize=8)
    c = result["config"]
    fig.suptitle(title or (f"KDD-99 {result['task']} (d = {result['n_features']}, C = {len(result['class_names'])}), λ = {c['lam']:g}, "
                           f"local = {c['local']}: mean ± s.d. over {c['trials']} data trials "
                           f"(× {c['noise_draws']} noise draws for private points)"), fontsize=9)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=120)
    return p


__all__: Sequence[str] = ("DEFAULT_PARTIES", "Hamm2016Config", "plot_figure", "result_table", "run_hamm2016", "total_steps",
                          "write_outputs")
