"""`mpdp experiment lmgc`: accuracy vs ε of DP large-margin Gaussian classifiers (Pathak & Raj 2010)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from mpdp_services.cli.experiment_options import LMGC_DATASETS, LMGC_EPSILONS, LMGC_METHODS

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data"


def _table(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"{result['dataset']}: mean test accuracy ± s.e. over {result['config']['runs']} runs "
                        f"(n_train={result['n_train']}, d={result['n_features']}, C={result['n_classes']})")
    for col in ("method", "ε", "accuracy", "released/attempted", "privacy"):
        table.add_column(col)
    for r in result["results"]:
        acc = "—" if r["accuracy_mean"] is None else f"{r['accuracy_mean']:.4f} ± {r['accuracy_sem']:.4f}"
        priv = r["privacy"] or {}
        if r["method"] == "lmgc_corrected" and priv:
            note = f"ε_b={priv['eps_noise']:.4g} + ε_J={priv['eps_jacobian']:.4g}, Δ={priv['ridge']:.3g}"
        elif r["method"] == "lmgc_paper":
            note = "NOT proven private" + (f"; {r['runs_unbounded']} unbounded" if r["runs_unbounded"] else "")
        elif r["method"] == "logreg_dp" and priv.get("guarantee"):
            note = f"Δ₂={priv['guarantee']['sensitivity']:.4g} (Frobenius)"
        else:
            note = "non-private"
        eps = "∞" if r["epsilon"] is None else f"{r['epsilon']:g}"
        table.add_row(r["method"], eps, acc, f"{r['runs_released']}/{r['runs_attempted']}", note)
    console.print(table)
    console.print(f"{result['noise_note']}; wall time {result['wall_seconds']:.1f} s")


@click.command("lmgc")
@click.option("--dataset", type=click.Choice(LMGC_DATASETS), required=True,
              help="digits and wine are scikit-learn's bundled sets; kdd99 is the 5-category KDD-99 task read from --data.")
@click.option("--epsilons", default=",".join(f"{e:g}" for e in LMGC_EPSILONS), show_default=True,
              help="Comma-separated total privacy budgets ε for the DP methods.")
@click.option("--runs", type=click.IntRange(min=1), default=3, show_default=True,
              help="Runs per point; each run has a fresh train/test split and fresh noise.")
@click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_DATA, show_default=True,
              help="Folder holding kddcup99/ (or the kddcup99 folder itself); only used for --dataset kdd99. Data is read in place.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("runs/lmgc"), show_default=True,
              help="Output folder for lmgc_<dataset>.json, .csv and .png.")
@click.option("--methods", default=",".join(LMGC_METHODS), show_default=True,
              help="Comma-separated subset of: " + ", ".join(LMGC_METHODS) + ".")
@click.option("--seed", type=int, default=None,
              help="Seed the noise generator (reproducible simulation, NOT a private release). Default: OS-keyed noise.")
@click.option("--split-seed", type=int, default=0, show_default=True,
              help="Seed of the public train/test splits (run r uses split-seed + r).")
@click.option("--lam", type=click.FloatRange(min=0), default=1e-3, show_default=True,
              help="Trace-regulariser weight λ of the LMGC objective (eq. (5)).")
@click.option("--huber-h", type=click.FloatRange(min=0, min_open=True), default=0.5, show_default=True,
              help="Huber width h (eq. (6)); the Jacobian term uses c = 1/(2h).")
@click.option("--ridge-floor", type=click.FloatRange(min=0), default=1e-3, show_default=True,
              help="Minimum ridge Δ of the corrected mechanism; Δ = max(floor, Δ(ε/2)) and ε_J is recomputed from it.")
@click.option("--jacobian-share", type=click.FloatRange(min=0, max=1, min_open=True, max_open=True), default=0.5, show_default=True,
              help="Share of ε spent on the Jacobian term when Δ comes from ε (Pathak & Raj, the corrected calibration; docs/experiments/lmgc.md).")
@click.option("--lr-reg", type=click.FloatRange(min=0, min_open=True), default=1e-5, show_default=True,
              help="L2 weight Λ of non-private multinomial LR, (Λ/2)‖W‖².")
@click.option("--lr-reg-dp", type=click.FloatRange(min=0, min_open=True), default=1e-3, show_default=True,
              help="L2 weight Λ of DP multinomial LR (sensitivity 2√2·R/(nΛ) + 2·g_tol/Λ).")
@click.option("--kdd-per-class", type=click.IntRange(min=10), default=600, show_default=True,
              help="Rows sampled per KDD-99 category (u2r has only 52 in the 10% file).")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="BLAS threads (keep 1 on shared machines: oversubscription slows the solvers badly).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object to stdout instead of a table (no progress bar).")
def lmgc(dataset: str, epsilons: str, runs: int, data_dir: Path, out_dir: Path, methods: str, seed: int | None, split_seed: int,
         lam: float, huber_h: float, ridge_floor: float, jacobian_share: float, lr_reg: float, lr_reg_dp: float,
         kdd_per_class: int, threads: int, as_json: bool) -> None:
    """Accuracy vs ε: non-private and DP LMGC (corrected and paper modes) against (DP) multinomial LR."""
    from mpdp.data.loaders import DatasetError
    from mpdp.experiments import lmgc as exp
    from mpdp.experiments.common import parse_float_list, rich_progress, to_json

    try:
        grid = parse_float_list(epsilons)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--epsilons") from e
    if any(v <= 0 for _, v in grid):
        raise click.BadParameter("every ε must be positive", param_hint="--epsilons")
    try:
        chosen = exp.parse_methods(methods)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--methods") from e
    config = exp.LMGCExperimentConfig(
        dataset=dataset, epsilons=tuple(v for _, v in grid), runs=runs, data_dir=str(data_dir), seed=seed,
        split_seed=split_seed, methods=chosen, lam=lam, huber_h=huber_h, ridge_floor=ridge_floor,
        jacobian_share=jacobian_share, lr_reg=lr_reg, lr_reg_dp=lr_reg_dp, kdd_per_class=kdd_per_class, threads=threads,
    )
    try:
        with rich_progress(f"lmgc {dataset}", enabled=not as_json) as progress:
            result = exp.run_lmgc_experiment(config, progress=progress)
    except DatasetError as e:
        raise click.ClickException(str(e)) from e
    files = exp.write_outputs(result, out_dir)
    result["files"] = {k: str(v) for k, v in files.items()}
    if as_json:
        sys.stdout.write(to_json(result) + "\n")
        return
    _table(result)
    click.echo("wrote " + ", ".join(str(p) for p in files.values()))


command = lmgc
