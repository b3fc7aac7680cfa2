"""Reproduction of the Adult (a9a) experiment of Pathak, Rane & Raj, NIPS 2010, Figure 2.

The paper's Sec. 5 setting: K = 5 parties, three training-set splits (``even``,
``15pct``, ``10pct``: n₍₁₎ = 6512, 4884, 3256), random disjoint splits re-drawn per run,
rows clipped to the unit ball, test error of the perturbed aggregate ŵ_s against ε, in both
noise modes (``corrected``, ``paper`` and ``gaussian-distributed`` at δ = ``delta``, t = K − 2), plus three baselines:

* ``nonprivate_all``: LR trained on all 32,561 rows (deterministic, one fit per mode);
* ``dp_all``: output perturbation of that model with n = 32,561, K = 1 (CM08), per mode;
* ``nonprivate_aggregate``: the average of the K local models, no noise.

Efficiency: the local models depend on the split and the mode's regulariser convention, not
on ε or on the noise, so each (run, split, mode) trains K models once and then draws the
noise for every ε; all test errors of a run are one matrix product.

Randomness: the partition of rows among parties is a public simulation choice and comes from
numpy's Generator seeded with (seed, run, split). All DP noise comes from
:meth:`PathakCalibration.draw` on per-party generators ``party_rng(root, "P<j>")``, where
``root`` is a child of ``Drbg.from_seed`` labelled with the run, split, mode and ε, i.e. the
plaintext mechanism path :func:`mpdp.pathak2010.mechanism.draw_aggregate` (recorded as
``path: "mechanism"``). Seeded generators make runs reproducible and the releases non-private;
the output says so.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mpdp.data.loaders import DatasetError, load_libsvm
from mpdp.dp.pathak_noise import DEFAULT_DELTA, GAUSSIAN, MODES, Mode, PathakCalibration
from mpdp.experiments.common import (
    Curve,
    ExtraPoints,
    Panel,
    ProgressCallback,
    environment,
    mean_sem,
    plot_error_curves,
    write_csv,
    write_json,
)
from mpdp.learn import logreg
from mpdp.math.drbg import Drbg
from mpdp.pathak2010.mechanism import draw_aggregate, party_rng
from mpdp.pathak2010.params import default_colluders

# -- the paper's configuration (its Sec. 5) -----------------------------------------
A9A_TRAIN_ROWS = 32_561
A9A_TEST_ROWS = 16_281
A9A_FEATURES = 123
PARTIES = 5
PAPER_LAMBDA = 1.0
PAPER_RUNS = 200
PAPER_EPSILONS: tuple[float, ...] = (0.01, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4)
SPLITS: Mapping[str, tuple[int, ...]] = {
    "even": (6512, 6512, 6512, 6512, 6512),
    "15pct": (4884, 6512, 6512, 6512, 8141),
    "10pct": (3256, 6512, 6512, 6512, 9769),
}
SPLIT_NAMES: tuple[str, ...] = tuple(SPLITS)
PATH = "mechanism"
CONVENTION_TEXT = {"half": "(λ/2)‖w‖²", "full": "λ‖w‖²"}
_SEED_LABEL = "mpdp/experiments/pathak2010"


def smallest(split: str) -> int:
    """n₍₁₎ of a split."""
    return min(SPLITS[split])


# -- data ------------------------------------------------------------------------------
@dataclass(frozen=True)
class A9a:
    """a9a train/test with every row clipped to ‖x‖ ≤ ``clip``."""

    X: np.ndarray
    y: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    clip: float
    train_norm_range: tuple[float, float]  # row norms before clipping

    @property
    def d(self) -> int:
        return int(self.X.shape[1])


def load_a9a(data_dir: str | Path, clip: float = 1.0) -> A9a:
    """Load ``a9a.gz``/``a9a.t.gz`` (or the uncompressed names) with 123 features, clip rows to the unit ball.

    Raises :class:`DatasetError` when a file is missing: the experiment never silently shrinks.
    """
    base = Path(data_dir)

    def find(*names: str) -> Path:
        for n in names:
            if (base / n).exists():
                return base / n
        raise DatasetError(f"a9a file {names[0]} not found in {base} (tried {', '.join(names)})")

    X, y = load_libsvm(find("a9a.gz", "a9a"), n_features=A9A_FEATURES)
    Xt, yt = load_libsvm(find("a9a.t.gz", "a9a.t"), n_features=A9A_FEATURES)
    norms = np.linalg.norm(X, axis=1)
    return A9a(
        X=logreg.clip_rows(X, clip),
        y=y,
        X_test=logreg.clip_rows(Xt, clip),
        y_test=yt,
        clip=clip,
        train_norm_range=(float(norms.min()), float(norms.max())),
    )


# -- configuration -----------------------------------------------------------------------
@dataclass(frozen=True)
class Pathak2010Config:
    lam: float = PAPER_LAMBDA
    epsilons: tuple[float, ...] = PAPER_EPSILONS
    epsilon_labels: tuple[str, ...] = ()  # ε as written by the user; default f"{ε:g}"
    runs: int = PAPER_RUNS
    splits: tuple[str, ...] = SPLIT_NAMES
    modes: tuple[Mode, ...] = ("corrected", "paper")
    seed: int = 0
    workers: int = 1
    paper_lam: float | None = None  # λ of paper mode if different (e.g. λ/2: the same models as corrected)
    draws: int = 1  # independent noise draws per (run, ε), averaged; 1 = the paper's "fresh noise each run"
    delta: float = DEFAULT_DELTA  # δ of the gaussian-distributed mode

    def __post_init__(self) -> None:
        for lam in (self.lam, self.paper_lam if self.paper_lam is not None else self.lam):
            if not (math.isfinite(lam) and lam > 0):
                raise ValueError(f"lambda must be positive, got {lam}")
        if not self.epsilons or any(not (math.isfinite(e) and e > 0) for e in self.epsilons):
            raise ValueError(f"epsilons must be positive, got {self.epsilons}")
        if len(set(self.epsilons)) != len(self.epsilons):
            raise ValueError(f"duplicate epsilons {self.epsilons}")
        if self.epsilon_labels and len(self.epsilon_labels) != len(self.epsilons):
            raise ValueError("need one label per epsilon")
        if self.runs < 1:
            raise ValueError(f"runs must be >= 1, got {self.runs}")
        unknown = [s for s in self.splits if s not in SPLITS]
        if unknown or not self.splits:
            raise ValueError(f"unknown splits {unknown}; use some of {SPLIT_NAMES}")
        bad = [m for m in self.modes if m not in MODES]
        if bad or not self.modes:
            raise ValueError(f"unknown modes {bad}; use some of {MODES}")
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.draws < 1:
            raise ValueError(f"draws must be >= 1, got {self.draws}")
        if not 0 < self.delta < 1:
            raise ValueError(f"delta must be in (0, 1), got {self.delta}")

    @property
    def labels(self) -> tuple[str, ...]:
        return self.epsilon_labels or tuple(f"{e:g}" for e in self.epsilons)

    def lam_for(self, mode: str) -> float:
        return self.paper_lam if (mode == "paper" and self.paper_lam is not None) else self.lam

    def reg_coefficient(self, mode: Mode) -> float:
        """c in (c/2)‖w‖² of the mode's local objective; modes with equal c train identical models."""
        return logreg.reg_coefficient(self.lam_for(mode), convention(mode))


def calibration(mode: Mode, eps: float, lam: float, parties: int, delta: float = DEFAULT_DELTA) -> PathakCalibration:
    """The mode's calibration; gaussian-distributed at δ with the protocol's default t = K − 2 (1 for K = 2, 0 for K = 1)."""
    if mode == GAUSSIAN:
        return PathakCalibration(mode, eps, lam, parties, delta, default_colluders(parties))
    return PathakCalibration(mode, eps, lam, parties)


def convention(mode: Mode) -> logreg.Convention:
    """Regulariser convention of a mode (the calibration decides; ε is irrelevant here)."""
    return calibration(mode, 1.0, 1.0, PARTIES).convention


def random_split(rng: np.random.Generator, sizes: Sequence[int], n_rows: int) -> list[np.ndarray]:
    """Disjoint random index sets of the given sizes; rows left over (even split: one) are dropped."""
    if sum(sizes) > n_rows:
        raise ValueError(f"split sizes {tuple(sizes)} need {sum(sizes)} rows, only {n_rows} available")
    perm = rng.permutation(n_rows)
    bounds = np.cumsum((0, *sizes))
    return [np.sort(perm[bounds[j] : bounds[j + 1]]) for j in range(len(sizes))]


def split_generator(seed: int, run: int, split: str) -> np.random.Generator:
    """Public simulation randomness for the partition of (seed, run, split)."""
    # public simulation choice (which rows go to which party); DP noise comes from the Drbg
    return np.random.default_rng([seed, run, SPLIT_NAMES.index(split)])  # public


def noise_root(master: Drbg, kind: str, run: int, mode: str, eps: float, split: str = "all", draw: int = 0) -> Drbg:
    """Fresh root generator per (kind, run, split, mode, ε, draw); parties derive theirs with party_rng."""
    return master.child(f"{kind}/run={run}/split={split}/mode={mode}/eps={eps!r}/draw={draw}")


def master_drbg(seed: int) -> Drbg:
    return Drbg.from_seed(f"{_SEED_LABEL}/seed={seed}")


def _error_rates(W: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Test error of each row of W (labels ±1, margin 0 → −1, as logreg.predict)."""
    pred = np.where(X @ W.T > 0, 1.0, -1.0)
    return np.mean(pred != y[:, None], axis=0)


def _fit(X: np.ndarray, y: np.ndarray, lam: float, mode: Mode) -> tuple[np.ndarray, float]:
    """Exact local model in the mode's convention, and its gradient norm (checked < 1e-10 by fit)."""
    conv = convention(mode)
    w = logreg.fit(X, y, lam, conv)  # raises unless ‖∇J‖ < 1e-10
    g = float(np.linalg.norm(logreg.gradient(w, X, y, logreg.reg_coefficient(lam, conv))))
    return w, g


# -- one run -----------------------------------------------------------------------------
@dataclass
class RunOutcome:
    run: int
    aggregate: dict[tuple[str, str], np.ndarray]  # (split, mode) -> errors per ε
    nonprivate_aggregate: dict[tuple[str, str], float]
    dp_all: dict[str, np.ndarray]  # mode -> errors per ε
    max_grad_norm: float


def run_once(data: A9a, config: Pathak2010Config, run: int, full_models: Mapping[str, np.ndarray]) -> RunOutcome:
    """All splits, modes and ε of one run; ``full_models`` are the pooled models per mode (for dp_all)."""
    master = master_drbg(config.seed)
    n = data.X.shape[0]
    names = [f"P{j + 1}" for j in range(PARTIES)]
    agg: dict[tuple[str, str], np.ndarray] = {}
    npa: dict[tuple[str, str], float] = {}
    gmax = 0.0
    for split in config.splits:
        sizes = SPLITS[split]
        parts = random_split(split_generator(config.seed, run, split), sizes, n)
        trained: dict[float, list[np.ndarray]] = {}  # reg. coefficient -> local models (shared by modes)
        for mode in config.modes:
            lam = config.lam_for(mode)
            c = config.reg_coefficient(mode)
            if c not in trained:
                fits = [_fit(data.X[idx], data.y[idx], lam, mode) for idx in parts]
                trained[c] = [w for w, _ in fits]
                gmax = max(gmax, *(g for _, g in fits))
            models = trained[c]
            weights = [np.mean(np.stack(models), axis=0)]
            for eps in config.epsilons:
                cal = calibration(mode, eps, lam, PARTIES, config.delta)
                for k in range(config.draws):
                    root = noise_root(master, "aggregate", run, mode, eps, split, k)
                    weights.append(draw_aggregate(models, list(sizes), cal, [party_rng(root, p) for p in names]).weights)
            errs = _error_rates(np.stack(weights), data.X_test, data.y_test)
            npa[(split, mode)] = float(errs[0])
            agg[(split, mode)] = errs[1:].reshape(len(config.epsilons), config.draws).mean(axis=1)
    dp: dict[str, np.ndarray] = {}
    for mode in config.modes:
        weights = []
        for eps in config.epsilons:
            cal = calibration(mode, eps, config.lam_for(mode), 1, config.delta)
            for k in range(config.draws):
                root = noise_root(master, "dp_all", run, mode, eps, draw=k)
                weights.append(draw_aggregate([full_models[mode]], [n], cal, [party_rng(root, "P1")]).weights)
        dp[mode] = _error_rates(np.stack(weights), data.X_test, data.y_test).reshape(len(config.epsilons), config.draws).mean(axis=1)
    return RunOutcome(run, agg, npa, dp, gmax)


# -- worker pool (fork: children share the loaded data) -------------------------------------
_WORKER: dict[str, Any] = {}


def _worker_init() -> None:
    from threadpoolctl import threadpool_limits

    _WORKER["limits"] = threadpool_limits(1)


def _worker_run(run: int) -> RunOutcome:
    return run_once(_WORKER["data"], _WORKER["config"], run, _WORKER["full_models"])


# -- results -------------------------------------------------------------------------------------
@dataclass
class Pathak2010Result:
    config: Pathak2010Config
    data_summary: dict[str, Any]
    aggregate: dict[tuple[str, str], np.ndarray]  # (split, mode) -> (runs, n_eps)
    nonprivate_aggregate: dict[tuple[str, str], np.ndarray]  # (split, mode) -> (runs,)
    dp_all: dict[str, np.ndarray]  # mode -> (runs, n_eps)
    nonprivate_all: dict[str, float]  # mode -> error
    max_grad_norm: float
    wall_seconds: float
    environment: dict[str, str] = field(default_factory=dict)

    # ---- numbers ----
    def mean(self, split: str, mode: str) -> np.ndarray:
        return self.aggregate[(split, mode)].mean(axis=0)

    def sem(self, split: str, mode: str) -> np.ndarray:
        a = self.aggregate[(split, mode)]
        return a.std(axis=0, ddof=1) / math.sqrt(a.shape[0]) if a.shape[0] > 1 else np.zeros(a.shape[1])

    def _per_eps(self, a: np.ndarray) -> dict[str, dict[str, float]]:
        labels = self.config.labels
        stats = [mean_sem(a[:, i]) for i in range(a.shape[1])]
        return {"error_rate_mean": {lab: m for lab, (m, _) in zip(labels, stats)}, "error_rate_sem": {lab: s for lab, (_, s) in zip(labels, stats)}}

    def settings(self) -> dict[str, Any]:
        c = self.config
        d = int(self.data_summary["d"])
        guarantees: dict[str, Any] = {}
        for mode in c.modes:
            per: dict[str, Any] = {}
            for kind, parties in (("aggregate", PARTIES), ("dp_all", 1)):
                gs = [calibration(mode, e, c.lam_for(mode), parties, c.delta).guarantee(d) for e in c.epsilons]
                per[kind] = {
                    "mechanism": gs[0].mechanism,
                    "norm": gs[0].norm,
                    "epsilon_actual": {lab: g.epsilon for lab, g in zip(c.labels, gs)},
                    "epsilon_actual_over_nominal": gs[0].epsilon / c.epsilons[0],
                    "delta": gs[0].delta,
                    "statement": gs[0].statement,
                }
            guarantees[mode] = per
        return {
            "path": PATH,
            "lambda": c.lam,
            "lambda_per_mode": {m: c.lam_for(m) for m in c.modes},
            "lambda_convention": {m: CONVENTION_TEXT[convention(m)] for m in c.modes},
            "reg_coefficient_per_mode": {m: c.reg_coefficient(m) for m in c.modes},
            "noise": {
                "corrected": "spherical Laplace, density ∝ exp(−‖η‖/β), β = 2/(K·n₍₁₎·λ·ε)",
                "paper": "coordinate-wise Laplace, β = 2/(n₍₁₎·ε·λ) (as published)",
                "gaussian-distributed": f"σ(n₍₁₎)·Σ_i z_i, z_i ~ N(0, I/(K−t)), σ analytic Gaussian for Δ₂ = 2/(K·n₍₁₎·λ) + √d·2^-32/K at δ = {c.delta:g}",
                "dp_all": "same formulas with K = 1, n = 32,561",
            },
            "guarantee": guarantees,
            "clipping": {
                "bound": self.data_summary["clip"],
                "method": "every row with ‖x‖ > bound scaled onto the sphere (logreg.clip_rows), train and test",
                "train_row_norms_before": self.data_summary["train_norm_range"],
            },
            "runs": c.runs,
            "noise_draws_per_run": c.draws,
            "parties": PARTIES,
            "splits": {s: {"sizes": list(SPLITS[s]), "n1": smallest(s), "rows_used": sum(SPLITS[s])} for s in c.splits},
            "split_procedure": "random disjoint splits re-drawn per run (numpy Generator seeded with (seed, run, split)); "
            "leftover rows dropped; the same partition is used for both modes",
            "epsilons": list(c.labels),
            "modes": list(c.modes),
            "seed": c.seed,
            "randomness": "noise from Drbg.from_seed children (AES-CTR, reproducible): a simulation, not a private release",
            "solver": "exact damped Newton (mpdp.learn.logreg.fit), ‖∇J‖ < 1e-10 enforced",
            "max_grad_norm": self.max_grad_norm,
            "data": self.data_summary,
            "workers": c.workers,
            "wall_seconds": self.wall_seconds,
            "environment": self.environment,
        }

    def summary(self) -> dict[str, Any]:
        """The JSON object of the CLI: errors per split/mode/ε, baselines, std errors, settings."""
        c = self.config
        out: dict[str, Any] = {"experiment": "pathak2010", "path": PATH, "lambda": c.lam,
                               "lambda_per_mode": {m: c.lam_for(m) for m in c.modes}, "epsilons": list(c.labels)}
        for split in c.splits:
            out[split] = {mode: self._per_eps(self.aggregate[(split, mode)]) for mode in c.modes}
        out["nonprivate_all"] = {mode: {"error_rate_mean": self.nonprivate_all[mode], "error_rate_sem": 0.0} for mode in c.modes}
        out["dp_all"] = {mode: self._per_eps(self.dp_all[mode]) for mode in c.modes}
        out["nonprivate_aggregate"] = {
            split: {mode: dict(zip(("error_rate_mean", "error_rate_sem"), mean_sem(self.nonprivate_aggregate[(split, mode)]))) for mode in c.modes}
            for split in c.splits
        }
        out["majority_rate_test"] = self.data_summary["majority_rate_test"]
        out["settings"] = self.settings()
        return out

    def csv_rows(self) -> list[dict[str, Any]]:
        """One row per (method, split, mode, ε): mean, sem, std over runs."""
        c = self.config
        rows: list[dict[str, Any]] = []

        def add(method: str, split: str, mode: str, n1: int, lab: str, eps: float | str, vals: np.ndarray) -> None:
            m, s = mean_sem(vals)
            rows.append({
                "method": method, "split": split, "mode": mode, "n1": n1, "lambda": c.lam_for(mode),
                "epsilon": lab, "epsilon_value": eps, "mean_error": m, "sem": s,
                "std": float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0, "runs": len(vals), "path": PATH,
            })

        for mode in c.modes:
            add("nonprivate_all", "all", mode, A9A_TRAIN_ROWS, "inf", "inf", np.array([self.nonprivate_all[mode]]))
            for i, (lab, eps) in enumerate(zip(c.labels, c.epsilons)):
                add("dp_all", "all", mode, A9A_TRAIN_ROWS, lab, eps, self.dp_all[mode][:, i])
            for split in c.splits:
                add("nonprivate_aggregate", split, mode, smallest(split), "inf", "inf", self.nonprivate_aggregate[(split, mode)])
                for i, (lab, eps) in enumerate(zip(c.labels, c.epsilons)):
                    add("dp_aggregate", split, mode, smallest(split), lab, eps, self.aggregate[(split, mode)][:, i])
        return rows

    def raw_rows(self) -> list[dict[str, Any]]:
        """Every run's test error (for re-analysis)."""
        c = self.config
        rows: list[dict[str, Any]] = []
        for (split, mode), a in self.aggregate.items():
            for r in range(a.shape[0]):
                for i, lab in enumerate(c.labels):
                    rows.append({"run": r, "method": "dp_aggregate", "split": split, "mode": mode, "epsilon": lab, "error": float(a[r, i])})
                rows.append({"run": r, "method": "nonprivate_aggregate", "split": split, "mode": mode, "epsilon": "inf",
                             "error": float(self.nonprivate_aggregate[(split, mode)][r])})
        for mode, a in self.dp_all.items():
            for r in range(a.shape[0]):
                for i, lab in enumerate(c.labels):
                    rows.append({"run": r, "method": "dp_all", "split": "all", "mode": mode, "epsilon": lab, "error": float(a[r, i])})
        return rows

    # ---- plot ----
    def plot(self, path: str | Path, extra_points: ExtraPoints | None = None) -> Path:
        """Figure 2 style: test error vs ε, one panel per mode, one line per method and split.

        ``extra_points`` {(split, mode, ε): (mean, sem, path)} are overlaid as black stars (e.g. points
        computed by the real protocol).
        """
        c = self.config
        colors = {"even": "tab:red", "15pct": "tab:green", "10pct": "tab:purple"}
        xs = list(c.epsilons)
        panels = []
        titles = {
            "paper": f"paper mode (λ={c.lam_for('paper'):g}): coord. Laplace 2/(n₍₁₎ελ), λ‖w‖²",
            "corrected": f"corrected mode (λ={c.lam_for('corrected'):g}): spherical 2/(Kn₍₁₎λε), (λ/2)‖w‖²",
            "gaussian-distributed": f"gaussian-distributed (λ={c.lam_for('corrected'):g}, δ={c.delta:g}): σ(n₍₁₎)·Σz_i, (λ/2)‖w‖²",
        }
        for mode in c.modes:
            curves = [
                Curve("DP all data", xs, list(self.dp_all[mode].mean(axis=0)), list(_sem(self.dp_all[mode])), "tab:blue", "-", "s"),
            ]
            for split in c.splits:
                curves.append(Curve(f"DP aggregate n(1)={smallest(split)}", xs, list(self.mean(split, mode)),
                                    list(self.sem(split, mode)), colors[split], "-", "o", group=split))
            hl = [(self.nonprivate_all[mode], "non-private all data", "black")]
            for split in c.splits:
                hl.append((float(self.nonprivate_aggregate[(split, mode)].mean()), f"non-private aggregate n(1)={smallest(split)}", colors[split]))
            panels.append(Panel(titles[mode], curves, key=mode, hlines=hl))
        lo = min(float(np.min(self.nonprivate_all[m])) for m in c.modes)
        hi = max(max(float(a.mean(axis=0).max()) for a in self.aggregate.values()), float(max(a.mean(axis=0).max() for a in self.dp_all.values())))
        ylim = (min(0.2, math.floor((lo - 0.02) * 20) / 20), max(0.5, math.ceil((hi + 0.02) * 20) / 20))
        return plot_error_curves(
            path, panels, xlabel="ε", ylabel="test error", ylim=ylim, extra_points=extra_points,
            suptitle=f"PRR10 Fig. 2 reproduction: a9a, K={PARTIES}, rows clipped to ‖x‖≤1, {c.runs} runs/point (path: {PATH})",
        )

    def stem(self) -> str:
        c = self.config
        extra = f"_paperlam{c.paper_lam:g}" if c.paper_lam is not None and c.paper_lam != c.lam and "paper" in c.modes else ""
        return f"pathak2010_lam{c.lam:g}{extra}"

    def write(self, out_dir: str | Path, extra_points: ExtraPoints | None = None) -> dict[str, Path]:
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
            files["png"] = self.plot(out / f"{stem}.png", extra_points)
        return files


def _sem(a: np.ndarray) -> np.ndarray:
    return a.std(axis=0, ddof=1) / math.sqrt(a.shape[0]) if a.shape[0] > 1 else np.zeros(a.shape[1])


# -- entry point ------------------------------------------------------------------------------------
def run_pathak2010(data: A9a, config: Pathak2010Config, progress: ProgressCallback | None = None) -> Pathak2010Result:
    """Run the whole grid. ``progress(done, total)`` is called after each run.

    BLAS runs single-threaded (threads only thrash on these 6512×123 Newton systems; parallelism
    comes from ``config.workers`` processes).
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        return _run(data, config, progress)


def _run(data: A9a, config: Pathak2010Config, progress: ProgressCallback | None) -> Pathak2010Result:
    if data.X.shape != (A9A_TRAIN_ROWS, A9A_FEATURES):
        raise DatasetError(f"a9a training data must be {A9A_TRAIN_ROWS}×{A9A_FEATURES}, got {data.X.shape}")
    t0 = time.perf_counter()
    full = {mode: _fit(data.X, data.y, config.lam_for(mode), mode) for mode in config.modes}
    full_models: dict[str, np.ndarray] = {m: w for m, (w, _) in full.items()}
    nonprivate_all: dict[str, float] = {m: logreg.error_rate(w, data.X_test, data.y_test) for m, w in full_models.items()}
    gmax = max(g for _, g in full.values())
    total = config.runs
    if progress:
        progress(0, total)
    outcomes: list[RunOutcome] = []
    if config.workers == 1:
        for r in range(config.runs):
            outcomes.append(run_once(data, config, r, full_models))
            if progress:
                progress(r + 1, total)
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        _WORKER.update(data=data, config=config, full_models=full_models)
        try:
            with ProcessPoolExecutor(config.workers, mp_context=mp.get_context("fork"), initializer=_worker_init) as pool:
                for o in pool.map(_worker_run, range(config.runs), chunksize=1):
                    outcomes.append(o)
                    if progress:
                        progress(len(outcomes), total)
        finally:
            _WORKER.clear()
    outcomes.sort(key=lambda o: o.run)
    keys = [(s, m) for s in config.splits for m in config.modes]
    result = Pathak2010Result(
        config=config,
        data_summary={
            "n_train": int(data.X.shape[0]), "n_test": int(data.X_test.shape[0]), "d": data.d, "clip": data.clip,
            "train_norm_range": list(data.train_norm_range),
            "majority_rate_test": float(min(np.mean(data.y_test == 1), np.mean(data.y_test == -1))),
        },
        aggregate={k: np.stack([o.aggregate[k] for o in outcomes]) for k in keys},
        nonprivate_aggregate={k: np.array([o.nonprivate_aggregate[k] for o in outcomes]) for k in keys},
        dp_all={m: np.stack([o.dp_all[m] for o in outcomes]) for m in config.modes},
        nonprivate_all=nonprivate_all,
        max_grad_norm=max(gmax, *(o.max_grad_norm for o in outcomes)),
        wall_seconds=0.0,
    )
    result.wall_seconds = time.perf_counter() - t0
    result.environment = environment()
    return result


def summary_markdown(summary: Mapping[str, Any]) -> str:
    """Markdown tables (one per mode) from a :meth:`Pathak2010Result.summary` object or its JSON file."""
    labels = list(summary["epsilons"])
    modes = list(summary["settings"]["modes"])
    splits = [s for s in SPLIT_NAMES if s in summary]
    lines: list[str] = []
    for mode in modes:
        lam = summary["settings"]["lambda_per_mode"][mode]
        g = summary["settings"]["guarantee"][mode]
        lines.append(f"**{mode} mode, λ = {lam:g}** (actual guarantee: aggregate "
                     f"{g['aggregate']['epsilon_actual_over_nominal']:.3g}·ε, DP all data {g['dp_all']['epsilon_actual_over_nominal']:.3g}·ε)")
        lines.append("")
        head = ["ε", "DP all data"] + [f"aggregate {s} (n₍₁₎={smallest(s)})" for s in splits]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for lab in labels:
            cells = [lab, _pm(summary["dp_all"][mode], lab)] + [_pm(summary[s][mode], lab) for s in splits]
            lines.append("| " + " | ".join(cells) + " |")
        npa = [summary["nonprivate_aggregate"][s][mode] for s in splits]
        lines.append("| ∞ (non-private) | " + " | ".join([f"{summary['nonprivate_all'][mode]['error_rate_mean']:.4f}"]
                                                       + [f"{b['error_rate_mean']:.4f} ± {b['error_rate_sem']:.4f}" for b in npa]) + " |")
        lines.append("")
    return "\n".join(lines)


def _pm(block: Mapping[str, Any], lab: str) -> str:
    return f"{block['error_rate_mean'][lab]:.4f} ± {block['error_rate_sem'][lab]:.4f}"
