"""Reproduction of the UCI experiment of Heikkilä et al., NIPS 2017, Figure 2 (the paper's Sec. 4–5 and the
authors' code, DPBayes/dca-nips2017).

Data sets (``--dataset``): red wine (1000 train / 500 test, d = 11), white wine (3000 / 1000, d = 11) and abalone
(3000 / 1000, d = 8, sex M = 0, F/I = 1). Preprocessing as the authors' code: every column, target included, is
centred and scaled to a range of length 10 **on the whole data set before splitting** (non-private, kept for
comparability); the assumed public bounds are c = ±7.5. Each repeat draws a random train/test split (numpy
Generator seeded with (seed, repeat); fixed across ε and modes). Metric: MAE of the point predictions on the test
set, in the scaled units; median and interquartile range over the repeats.

Lines (the paper's labels; the code's keys in :mod:`mpdp.regression.baselines`): NP, proj NP, TA, proj TA, DDP, proj DDP, input perturbed — see
:mod:`mpdp.regression.baselines` and :mod:`mpdp.regression.algorithm`. DDP and proj DDP run every DP round
through the real DCA core (in-memory driver, 3 compute nodes, every record one client). Both modes:

* ``corrected``: sensitivities as proved (std round sqrt(Σc⁴); unprojected baselines pre-clipped at c = 7.5 with
  Δ₂ from 7.5), analytic Gaussian calibration, grid search with the main round's noise and PD fix.
* ``paper``: the authors' code: std round sqrt(Σc²) (not sqrt(Σc⁴)), grid-search noise ×Δ₂⁴ (not ×Δ₂)
  with the full (ε, δ), unprojected baselines unclipped with Δ₂ from ±5 (the data reach ±10), proj TA thresholds
  uncapped, the TA std estimate of ``get_TA_std_estimates``, classic calibration (proved only for ε < 1).

The grid search (public, no private data) runs once per (mode, ε) with the run's seed — the authors re-ran it
inside every repeat with fresh synthetic data; ``grid_per_repeat`` does that too (25× the grid cost).

Randomness: splits and the grid search's synthetic data are public simulation choices (numpy); all DP noise comes
from children of ``Drbg.from_seed`` (reproducible, so a simulation and not a private release; the output says so).
"""

from __future__ import annotations

import csv
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from mpdp.data.loaders import DatasetError
from mpdp.experiments.common import Curve, Panel, ProgressCallback, environment, plot_error_curves, write_csv, write_json
from mpdp.math.drbg import Drbg
from mpdp.regression import baselines as bl
from mpdp.regression.algorithm import DEFAULT_NODES, fit_ddp
from mpdp.regression.config import (
    ABALONE_SEX_CODE,
    ASSUMED_BOUND,
    PAPER_SENSITIVITY_BOUND,
    SCALE_TO_RANGE,
    UCI_DATASETS,
    UCI_DELTA,
    UCI_EPSILON_LABELS,
    UCI_EPSILONS,
    UCI_GRID_REPEATS,
    UCI_REPEATS,
)
from mpdp.regression.grid import Multipliers, choose_multipliers
from mpdp.regression.posterior import posterior
from mpdp.regression.privacy import budget_split, round_guarantee
from mpdp.regression.statistics import RoundSpec, main_round_spec, std_round_spec, thresholds

MODES: tuple[str, ...] = ("corrected", "paper")
METHODS: tuple[str, ...] = ("np", "proj_np", "ta", "proj_ta", "ddp", "proj_ddp", "input")
LABELS: Mapping[str, str] = {
    "np": "NP", "proj_np": "proj NP", "ta": "TA", "proj_ta": "proj TA", "ddp": "DDP", "proj_ddp": "proj DDP",
    "input": "input perturbed",
}
CODE_KEYS: Mapping[str, str] = {
    "np": "true", "proj_np": "clipped", "ta": "noisy", "proj_ta": "cl_true_TA_DP", "ddp": "noisy_ind",
    "proj_ddp": "cl_noisy_ind", "input": "scaling",
}
COLORS: Mapping[str, str] = {  # the authors' plotting colours (combine_pred_errors.py)
    "np": "blue", "proj_np": "gray", "ta": "lightseagreen", "proj_ta": "green", "ddp": "red", "proj_ddp": "magenta",
    "input": "orange",
}
PAPER_YLIM: Mapping[str, tuple[float, float]] = {"red": (0.59, 4.0), "white": (0.63, 2.5), "abalone": (0.55, 2.5)}
VALUE_RANGE = 2.0 * SCALE_TO_RANGE  # |x| < 10 after centring and scaling to range 10: the paper-mode no-op clip box
_SEED_LABEL = "mpdp/experiments/heikkila2017"


# -- data ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class UciData:
    """A UCI data set after the authors' preprocessing (whole data set centred, each column scaled to range 10)."""

    key: str
    X: np.ndarray
    y: np.ndarray
    n_train: int
    n_test: int
    raw_rows: int
    max_abs: float  # max |value| after scaling (features and target)
    beyond_bound: float  # fraction of values with |v| > 7.5 (cut by the pre-clip)
    paper_reader: bool = False  # the authors' wine reader: last row dropped, an all-zero row added

    @property
    def d(self) -> int:
        return int(self.X.shape[1])

    def summary(self) -> dict[str, Any]:
        ds = UCI_DATASETS[self.key]
        return {"dataset": self.key, "name": ds.name, "rows": self.raw_rows, "d": self.d, "n_train": self.n_train,
                "n_test": self.n_test, "file": f"{ds.folder}/{ds.file}", "max_abs_after_scaling": self.max_abs,
                "fraction_beyond_7.5": self.beyond_bound, "paper_reader": self.paper_reader}


def read_uci(data_dir: str | Path, key: str) -> np.ndarray:
    """Raw rows (features, then target) of one data set; fails loudly when the file is missing or malformed."""
    if key not in UCI_DATASETS:
        raise DatasetError(f"unknown dataset {key!r}; choose from {', '.join(UCI_DATASETS)}")
    ds = UCI_DATASETS[key]
    path = Path(data_dir) / ds.folder / ds.file
    if not path.is_file():
        raise DatasetError(f"dataset file {path} does not exist (expected the offline copy in ../shared/data)")
    rows: list[list[float]] = []
    with path.open(newline="") as fh:
        if key == "abalone":
            for i, r in enumerate(csv.reader(fh)):
                if not r:
                    continue
                if len(r) != 9 or r[0] not in ABALONE_SEX_CODE:
                    raise DatasetError(f"{path}:{i + 1}: expected 9 columns starting with M/F/I, got {r[:3]}")
                rows.append([ABALONE_SEX_CODE[r[0]], *(float(v) for v in r[1:])])
        else:
            reader = csv.reader(fh, delimiter=";")
            header = next(reader, None)
            if header is None or len(header) != 12:
                raise DatasetError(f"{path}: expected a 12-column header, got {header}")
            for i, r in enumerate(reader):
                if r:
                    rows.append([float(v) for v in r])
    data = np.asarray(rows, dtype=np.float64)
    if data.ndim != 2 or data.shape[1] != ds.d + 1:
        raise DatasetError(f"{path}: expected d + 1 = {ds.d + 1} columns, got shape {data.shape}")
    return data


def preprocess(data: np.ndarray, scale_to_range: float = SCALE_TO_RANGE) -> np.ndarray:
    """Centre every column and scale it to a range of length 2·scale_to_range (the code's UCI preprocessing)."""
    centred = data - data.mean(axis=0)
    ptp = np.ptp(centred, axis=0)
    if np.any(ptp <= 0):
        raise DatasetError(f"constant column(s) {np.flatnonzero(ptp <= 0).tolist()} cannot be scaled")
    return centred / ptp * (2.0 * scale_to_range)


def paper_reader_rows(raw: np.ndarray) -> np.ndarray:
    """The authors' wine reader (``UCI_data_getter.get_red_wine``/``get_white_wine``): it allocates one row per
    data line but fills rows from the second data line on, so the last data row is lost and an all-zero row stays.
    After centring and scaling that zero row is an outlier that sets the range of most columns (the
    target's range becomes 0..8 for red wine instead of 3..8), which shrinks every MAE in scaled units."""
    out = raw.copy()
    out[-1] = 0.0
    return out


def load_uci(data_dir: str | Path, key: str, *, paper_reader: bool = False) -> UciData:
    """Read and preprocess one data set; ``paper_reader`` reproduces the authors' wine reader (no effect on abalone)."""
    raw = read_uci(data_dir, key)
    ds = UCI_DATASETS[key]
    if paper_reader and key != "abalone":
        raw = paper_reader_rows(raw)
    if raw.shape[0] < ds.n_train + ds.n_test:
        raise DatasetError(f"{ds.name} has {raw.shape[0]} rows, fewer than {ds.n_train} + {ds.n_test}")
    scaled = preprocess(raw)
    return UciData(key, scaled[:, :-1], scaled[:, -1], ds.n_train, ds.n_test, raw.shape[0],
                   float(np.max(np.abs(scaled))), float(np.mean(np.abs(scaled) > ASSUMED_BOUND)), paper_reader and key != "abalone")


def split(data: UciData, seed: int, repeat: int) -> tuple[np.ndarray, np.ndarray]:
    """Train and test indices of one repeat: n_train + n_test distinct rows, train first (as the code)."""
    # public simulation choice (the train/test split of a repeat); DP noise comes from the Drbg
    idx = np.random.default_rng([seed, repeat]).choice(data.X.shape[0], data.n_train + data.n_test, replace=False)  # public
    return idx[: data.n_train], idx[data.n_train :]


# -- configuration ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Heikkila2017Config:
    dataset: str = "red"
    epsilons: tuple[float, ...] = UCI_EPSILONS
    epsilon_labels: tuple[str, ...] = UCI_EPSILON_LABELS
    delta: float = UCI_DELTA
    repeats: int = UCI_REPEATS
    modes: tuple[str, ...] = MODES
    seed: int = 1
    grid_repeats: tuple[int, int] = UCI_GRID_REPEATS
    grid_per_repeat: bool = False
    workers: int = 1
    bound: float = ASSUMED_BOUND

    def __post_init__(self) -> None:
        if self.dataset not in UCI_DATASETS:
            raise ValueError(f"dataset must be one of {tuple(UCI_DATASETS)}, got {self.dataset!r}")
        if not self.epsilons or any(not (math.isfinite(e) and e > 0) for e in self.epsilons):
            raise ValueError(f"epsilons must be positive, got {self.epsilons}")
        if len(set(self.epsilons)) != len(self.epsilons):
            raise ValueError(f"duplicate epsilons {self.epsilons}")
        if len(self.epsilon_labels) != len(self.epsilons):
            raise ValueError("need one label per epsilon")
        if not 0 < self.delta < 1:
            raise ValueError(f"delta must be in (0, 1), got {self.delta}")
        if self.repeats < 1:
            raise ValueError(f"repeats must be ≥ 1, got {self.repeats}")
        bad = [m for m in self.modes if m not in MODES]
        if bad or not self.modes or len(set(self.modes)) != len(self.modes):
            raise ValueError(f"modes must be distinct values of {MODES}, got {self.modes}")
        if min(self.grid_repeats) < 1 or len(self.grid_repeats) != 2:
            raise ValueError(f"grid_repeats must be two positive counts, got {self.grid_repeats}")
        if self.workers < 1:
            raise ValueError(f"workers must be ≥ 1, got {self.workers}")

    @property
    def bounds(self) -> tuple[float, ...]:
        return (self.bound,) * (UCI_DATASETS[self.dataset].d + 1)

    def grid_seed(self, repeat: int) -> int:
        return self.seed * 100_003 + repeat + 1 if self.grid_per_repeat else self.seed


GridKey = tuple[str, int, int]  # (mode, ε index, repeat or −1)


def grid_key(config: Heikkila2017Config, mode: str, i: int, repeat: int) -> GridKey:
    return (mode, i, repeat if config.grid_per_repeat else -1)


def master_drbg(seed: int) -> Drbg:
    return Drbg.from_seed(f"{_SEED_LABEL}/seed={seed}")


# -- one repeat --------------------------------------------------------------------------------------------
@dataclass
class RepeatOutcome:
    repeat: int
    mae: dict[tuple[str, str], np.ndarray]  # (mode, method) -> MAE per ε
    thresholds: dict[tuple[str, int], np.ndarray]  # (mode, ε index) -> proj-DDP B
    floored: dict[tuple[str, int], int]  # (mode, ε index) -> how many σ̂² hit the floor in the DCA std round
    zero_mae: float  # MAE of predicting 0 (the prior mean): where a noise-swamped posterior ends up
    dca_seconds: float
    seconds: float


def unprojected_spec(mode: str, d: int, epsilon: float, delta: float, bound: float) -> RoundSpec:
    """TA / DDP / input perturbation without projection: corrected pre-clips at c with Δ₂ from c; paper leaves the
    data unclipped (a no-op box of ±10) and takes Δ₂ from ±5."""
    if mode == "corrected":
        return main_round_spec((bound,) * (d + 1), epsilon, delta, mode, purpose="heikkila2017 unprojected")
    return main_round_spec((VALUE_RANGE,) * (d + 1), epsilon, delta, mode, declared_bounds=(PAPER_SENSITIVITY_BOUND,) * (d + 1),
                           purpose="heikkila2017 unprojected")


def run_repeat(data: UciData, config: Heikkila2017Config, repeat: int, multipliers: Mapping[GridKey, tuple[float, float]]) -> RepeatOutcome:
    """Every mode, ε and method of one train/test split."""
    t0 = time.perf_counter()
    tr, te = split(data, config.seed, repeat)
    X, y, Xt, yt = data.X[tr], data.y[tr], data.X[te], data.y[te]
    d = data.d
    c = config.bounds
    master = master_drbg(config.seed)
    n_eps = len(config.epsilons)
    mae = {(m, k): np.full(n_eps, np.nan) for m in config.modes for k in METHODS}
    thr: dict[tuple[str, int], np.ndarray] = {}
    floored: dict[tuple[str, int], int] = {}
    np_mae = posterior(bl.nonprivate(X, y)).mae(Xt, yt)
    dca_s = 0.0
    for mode in config.modes:
        for i, (eps, lab) in enumerate(zip(config.epsilons, config.epsilon_labels)):
            root = master.child(f"{config.dataset}/rep={repeat}/mode={mode}/eps={lab}")
            p = multipliers[grid_key(config, mode, i, repeat)]
            budget = budget_split(eps, config.delta)
            job = f"{config.dataset}-r{repeat}-{mode}-e{lab}"
            # proj DDP: std round + main round through DCA
            fit = fit_ddp(X, y, c, eps, config.delta, mode=mode, rng=root.child("proj_ddp"), multipliers=p, job_prefix=job + "-proj")
            dca_s += fit.seconds["dca"]
            assert fit.thresholds is not None and fit.std is not None
            thr[(mode, i)] = fit.thresholds
            floored[(mode, i)] = int(fit.std.floored.sum())
            mae[(mode, "proj_ddp")][i] = fit.posterior.mae(Xt, yt)
            mae[(mode, "proj_np")][i] = posterior(bl.projected_nonprivate(X, y, fit.thresholds)).mae(Xt, yt)
            # DDP: one main round through DCA on the unprojected data
            spec = unprojected_spec(mode, d, eps, config.delta, config.bound)
            declared = None if mode == "corrected" else (PAPER_SENSITIVITY_BOUND,) * (d + 1)
            ddp = fit_ddp(X, y, spec.bounds, eps, config.delta, mode=mode, rng=root.child("ddp"), project=False,
                          declared_bounds=declared, job_prefix=job + "-ddp")
            dca_s += ddp.seconds["dca"]
            mae[(mode, "ddp")][i] = ddp.posterior.mae(Xt, yt)
            # TA and input perturbation on the same unprojected statistics
            mae[(mode, "ta")][i] = posterior(bl.trusted_aggregator(spec, X, y, root.child("ta"))).mae(Xt, yt)
            mae[(mode, "input")][i] = posterior(bl.input_perturbation(spec, X, y, root.child("input"))).mae(Xt, yt)
            # proj TA: the TA's std round, thresholds from it, then the TA main round
            est = bl.ta_std_estimate(X, y, c, *budget.std, mode, root.child("proj_ta/std"))
            B_ta = thresholds(est.std, c, p[0], p[1], cap=(mode == "corrected"))
            ta_spec = main_round_spec(B_ta, *budget.main, mode)
            mae[(mode, "proj_ta")][i] = posterior(bl.trusted_aggregator(ta_spec, X, y, root.child("proj_ta/main"))).mae(Xt, yt)
            mae[(mode, "np")][i] = np_mae
    return RepeatOutcome(repeat, mae, thr, floored, float(np.mean(np.abs(yt))), dca_s, time.perf_counter() - t0)


# -- worker pool (fork: children share the loaded data) -----------------------------------------------------
_WORKER: dict[str, Any] = {}


def _worker_init() -> None:
    from threadpoolctl import threadpool_limits

    _WORKER["limits"] = threadpool_limits(1)


def _grid_task(task: tuple[str, int, int]) -> tuple[tuple[str, int, int], Multipliers, float]:
    cfg: Heikkila2017Config = _WORKER["config"]
    data: UciData = _WORKER["data"]
    mode, i, repeat = task
    t = time.perf_counter()
    m = choose_multipliers(data.n_train, data.d, cfg.epsilons[i], cfg.delta, mode, cfg.grid_seed(max(repeat, 0)), cfg.grid_repeats)
    return task, m, time.perf_counter() - t


def _repeat_task(repeat: int) -> RepeatOutcome:
    return run_repeat(_WORKER["data"], _WORKER["config"], repeat, _WORKER["multipliers"])


def _pool_map(fn: Callable[[Any], Any], items: Sequence[Any], workers: int, on_done: Callable[[], None]) -> list[Any]:
    if workers == 1:
        out = []
        for it in items:
            out.append(fn(it))
            on_done()
        return out
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    out = []
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("fork"), initializer=_worker_init) as pool:
        for r in pool.map(fn, items, chunksize=1):
            out.append(r)
            on_done()
    return out


# -- results ---------------------------------------------------------------------------------------------------
def quartiles(values: np.ndarray) -> dict[str, float]:
    """Median, 25 % and 75 % quantiles (numpy's linear interpolation) and the IQR."""
    q25, med, q75 = (float(v) for v in np.percentile(values, (25, 50, 75)))
    return {"median": med, "q25": q25, "q75": q75, "iqr": q75 - q25}


@dataclass
class Heikkila2017Result:
    config: Heikkila2017Config
    data_summary: dict[str, Any]
    mae: dict[tuple[str, str], np.ndarray]  # (mode, method) -> (repeats, n_eps)
    multipliers: dict[GridKey, Multipliers]
    thresholds: dict[tuple[str, int], np.ndarray]  # (mode, ε index) -> (repeats, d + 1)
    floored: dict[tuple[str, int], np.ndarray]  # (mode, ε index) -> (repeats,)
    zero_mae: np.ndarray  # (repeats,) MAE of the zero predictor
    seconds: dict[str, float]
    environment: dict[str, str] = field(default_factory=dict)

    def stats(self, mode: str, method: str) -> list[dict[str, float]]:
        a = self.mae[(mode, method)]
        return [quartiles(a[:, i]) for i in range(a.shape[1])]

    def comparisons(self) -> dict[str, Any]:
        """The paper's claims per mode and ε (its Sec. 5): two-sided Mann–Whitney p-values of DDP vs TA and proj DDP vs proj TA
        (DDP ≈ TA means no rejection), and one-sided p-values of proj DDP < DDP (projection helps)."""
        from scipy.stats import mannwhitneyu

        c = self.config
        out: dict[str, Any] = {}
        for mode in c.modes:
            per = {}
            for i, lab in enumerate(c.epsilon_labels):
                col = {k: self.mae[(mode, k)][:, i] for k in METHODS}
                per[lab] = {
                    "ddp_vs_ta_p": float(mannwhitneyu(col["ddp"], col["ta"]).pvalue),
                    "proj_ddp_vs_proj_ta_p": float(mannwhitneyu(col["proj_ddp"], col["proj_ta"]).pvalue),
                    "proj_ddp_below_ddp_p": float(mannwhitneyu(col["proj_ddp"], col["ddp"], alternative="less").pvalue),
                }
            out[mode] = per
        return out

    def guarantees(self) -> dict[str, Any]:
        """What each mode's releases really guarantee at each ε (std round and unprojected release are data-free)."""
        c = self.config
        d = self.data_summary["d"]
        out: dict[str, Any] = {}
        for mode in c.modes:
            per: dict[str, Any] = {}
            for eps, lab in zip(c.epsilons, c.epsilon_labels):
                b = budget_split(eps, c.delta)
                g_std = round_guarantee(std_round_spec(c.bounds, *b.std, mode))
                g_unp = round_guarantee(unprojected_spec(mode, d, eps, c.delta, c.bound))
                g_main = round_guarantee(main_round_spec(c.bounds, *b.main, mode))  # calibration effect only (true Δ = declared)
                per[lab] = {
                    "std_round": {"nominal": g_std.epsilon_nominal, "actual": g_std.epsilon_actual, "declared_sensitivity": g_std.declared_sensitivity,
                                  "true_sensitivity": g_std.true_sensitivity},
                    "main_round": {"nominal": g_main.epsilon_nominal, "actual": g_main.epsilon_actual},
                    "proj_total_actual": g_std.epsilon_actual + g_main.epsilon_actual,
                    "unprojected": {"nominal": g_unp.epsilon_nominal, "actual": g_unp.epsilon_actual, "declared_sensitivity": g_unp.declared_sensitivity,
                                    "true_sensitivity": g_unp.true_sensitivity},
                }
            out[mode] = per
        return out

    def settings(self) -> dict[str, Any]:
        c = self.config
        return {
            "dataset": c.dataset,
            "data": self.data_summary,
            "epsilons": list(c.epsilon_labels),
            "epsilon_values": list(c.epsilons),
            "delta": c.delta,
            "repeats": c.repeats,
            "modes": list(c.modes),
            "bounds": c.bound,
            "preprocessing": "whole data set centred and each column scaled to range 10 before splitting (non-private)",
            "budget_split": "std round 0.3·(ε, δ), main round 0.7·(ε, δ), basic composition",
            "grid": {"values": "0.1..2.0 step 0.1", "repeats": list(c.grid_repeats), "per_repeat": c.grid_per_repeat, "seed": c.seed},
            "dca": {"compute_nodes": len(DEFAULT_NODES), "clients": "one per training record", "T": 0, "path": "mpdp.dca.driver.run_job"},
            "split": "numpy Generator([seed, repeat]).choice(rows, n_train + n_test), train first; fixed across ε and modes",
            "seed": c.seed,
            "randomness": "DP noise from Drbg.from_seed children (AES-CTR, reproducible): a simulation, not a private release",
            "code_keys": dict(CODE_KEYS),
            "guarantees": self.guarantees(),
            "workers": c.workers,
            "seconds": self.seconds,
            "environment": self.environment,
        }

    def summary(self) -> dict[str, Any]:
        """The JSON object of the CLI: per mode, method and ε the median MAE and its IQR, and the settings."""
        c = self.config
        res: dict[str, Any] = {}
        for mode in c.modes:
            res[mode] = {}
            for k in METHODS:
                res[mode][LABELS[k]] = dict(zip(c.epsilon_labels, self.stats(mode, k)))
        mult = {mode: {lab: [self.multipliers[(mode, i, -1)].p_x, self.multipliers[(mode, i, -1)].p_y]
                       for i, lab in enumerate(c.epsilon_labels)} for mode in c.modes} if not c.grid_per_repeat else {
            mode: {lab: [[self.multipliers[(mode, i, r)].p_x, self.multipliers[(mode, i, r)].p_y] for r in range(c.repeats)]
                   for i, lab in enumerate(c.epsilon_labels)} for mode in c.modes}
        thr = {mode: {lab: {"mean_B_x": float(self.thresholds[(mode, i)][:, :-1].mean()), "mean_B_y": float(self.thresholds[(mode, i)][:, -1].mean()),
                            "floored_variances": int(self.floored[(mode, i)].sum())}
                      for i, lab in enumerate(c.epsilon_labels)} for mode in c.modes}
        return {"experiment": "heikkila2017", "dataset": c.dataset, "metric": "test MAE (scaled units): median, q25, q75, iqr over repeats",
                "epsilons": list(c.epsilon_labels), "results": res,
                "reference": {"predict_zero": quartiles(self.zero_mae),
                              "note": "MAE of ŷ = 0 (the prior mean): a posterior swamped by noise shrinks towards it"},
                "comparisons": self.comparisons(), "multipliers": mult, "thresholds": thr, "settings": self.settings()}

    def csv_rows(self) -> list[dict[str, Any]]:
        c = self.config
        rows = []
        for mode in c.modes:
            for k in METHODS:
                for (lab, eps), q in zip(zip(c.epsilon_labels, c.epsilons), self.stats(mode, k)):
                    rows.append({"dataset": c.dataset, "mode": mode, "method": LABELS[k], "code_key": CODE_KEYS[k], "epsilon": lab,
                                 "epsilon_value": eps, "delta": c.delta, "repeats": c.repeats, **q})
        return rows

    def raw_rows(self) -> list[dict[str, Any]]:
        c = self.config
        return [{"dataset": c.dataset, "mode": mode, "method": LABELS[k], "epsilon": lab, "repeat": r, "mae": float(a[r, i])}
                for (mode, k), a in self.mae.items() for r in range(a.shape[0]) for i, lab in enumerate(c.epsilon_labels)]

    def plot(self, path: str | Path) -> Path:
        """Figure 2 style: median MAE with IQR bars against log10 ε, one panel per mode, the paper's y range."""
        c = self.config
        xs = [math.log10(e) for e in c.epsilons]
        panels = []
        for mode in c.modes:
            curves = []
            for k in METHODS:
                q = self.stats(mode, k)
                med = [s["median"] for s in q]
                err = [[s["median"] - s["q25"] for s in q], [s["q75"] - s["median"] for s in q]]
                curves.append(Curve(LABELS[k], xs, med, err, COLORS[k], "--" if k in ("np", "proj_np") else "-", "o"))
            panels.append(Panel(f"{mode} mode", curves, key=mode, hlines=((float(np.median(self.zero_mae)), "predict 0 (prior mean)", "black"),)))
        ds = UCI_DATASETS[c.dataset]
        return plot_error_curves(
            path, panels, xlabel="log₁₀ ε  (ε = " + ", ".join(c.epsilon_labels) + ")", ylabel="test MAE (median, IQR bars)",
            ylim=PAPER_YLIM.get(c.dataset),
            suptitle=f"Heikkilä et al. 2017 Fig. 2 reproduction: {ds.name}, d={ds.d}, n={ds.n_train}, test {ds.n_test}, "
                     f"{c.repeats} repeats, δ={c.delta:g}" + (", authors' reader (zero row)" if self.data_summary.get("paper_reader") else "")
                     + " (y range as the paper's)",
        )

    def stem(self) -> str:
        return f"heikkila2017_{self.config.dataset}" + ("_paper_reader" if self.data_summary.get("paper_reader") else "")

    def write(self, out_dir: str | Path) -> dict[str, Path]:
        """CSV (summary and raw), JSON and PNG (when matplotlib is installed) into ``out_dir``; returns the paths."""
        from mpdp.experiments.common import can_plot

        out = Path(out_dir)
        stem = self.stem()
        files = {
            "csv": write_csv(out / f"{stem}.csv", self.csv_rows()),
            "raw_csv": write_csv(out / f"{stem}_runs.csv", self.raw_rows()),
            "json": write_json(out / f"{stem}.json", self.summary()),
        }
        if can_plot():
            files["png"] = self.plot(out / f"{stem}.png")
        return files


# -- entry point --------------------------------------------------------------------------------------------------
def run_heikkila2017(data: UciData, config: Heikkila2017Config, progress: ProgressCallback | None = None) -> Heikkila2017Result:
    """Grid searches first (public), then every repeat. ``progress(done, total)`` after each unit of work.
    BLAS runs single-threaded; parallelism comes from ``config.workers`` processes."""
    from threadpoolctl import threadpool_limits

    if data.key != config.dataset:
        raise ValueError(f"data is {data.key!r} but the config names {config.dataset!r}")
    with threadpool_limits(1):
        return _run(data, config, progress)


def _run(data: UciData, config: Heikkila2017Config, progress: ProgressCallback | None) -> Heikkila2017Result:
    t0 = time.perf_counter()
    reps = range(config.repeats) if config.grid_per_repeat else (-1,)
    tasks = [(m, i, r) for m in config.modes for i in range(len(config.epsilons)) for r in reps]
    total = len(tasks) + config.repeats
    done = [0]

    def tick() -> None:
        done[0] += 1
        if progress:
            progress(done[0], total)

    if progress:
        progress(0, total)
    _WORKER.update(data=data, config=config)
    try:
        grid = _pool_map(_grid_task, tasks, config.workers, tick)
        multipliers = {k: m for k, m in ((tuple(t), m) for t, m, _ in grid)}
        _WORKER["multipliers"] = {k: (m.p_x, m.p_y) for k, m in multipliers.items()}
        t_grid = time.perf_counter() - t0
        outcomes = _pool_map(_repeat_task, list(range(config.repeats)), config.workers, tick)
    finally:
        _WORKER.clear()
    outcomes.sort(key=lambda o: o.repeat)
    keys = [(m, k) for m in config.modes for k in METHODS]
    cells = [(m, i) for m in config.modes for i in range(len(config.epsilons))]
    result = Heikkila2017Result(
        config=config,
        data_summary=data.summary(),
        mae={k: np.stack([o.mae[k] for o in outcomes]) for k in keys},
        multipliers=multipliers,
        thresholds={k: np.stack([o.thresholds[k] for o in outcomes]) for k in cells},
        floored={k: np.array([o.floored[k] for o in outcomes]) for k in cells},
        zero_mae=np.array([o.zero_mae for o in outcomes]),
        seconds={
            "grid_wall": t_grid,
            "grid_cpu": float(sum(s for _, _, s in grid)),
            "repeats_cpu": float(sum(o.seconds for o in outcomes)),
            "dca_cpu": float(sum(o.dca_seconds for o in outcomes)),
            "wall": 0.0,
        },
    )
    result.seconds["wall"] = time.perf_counter() - t0
    result.environment = environment()
    return result


def summary_markdown(summary: Mapping[str, Any]) -> str:
    """A markdown table per mode (median [q25, q75]) from a :meth:`Heikkila2017Result.summary` object."""
    labels = list(summary["epsilons"])
    lines: list[str] = []
    for mode, per in summary["results"].items():
        lines.append(f"**{summary['dataset']}, {mode} mode** — median test MAE [q25, q75] over {summary['settings']['repeats']} repeats")
        lines.append("")
        lines.append("| method | " + " | ".join(f"ε = {lab}" for lab in labels) + " |")
        lines.append("|---|" + "---|" * len(labels))
        for method, cells in per.items():
            lines.append(f"| {method} | " + " | ".join(f"{cells[lab]['median']:.3f} [{cells[lab]['q25']:.2f}, {cells[lab]['q75']:.2f}]" for lab in labels) + " |")
        lines.append("")
    return "\n".join(lines)
