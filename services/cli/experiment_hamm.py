"""`mpdp experiment hamm2016`: Hamm, Cao & Belkin 2016 Fig. 3 — private ensembles from auxiliary data on KDD-99."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from mpdp_services.cli.experiment_options import (HAMM_EPSILONS_INV, HAMM_LOCAL_CHOICES, HAMM_METHODS as METHODS, HAMM_PARTIES, HAMM_PATE_DELTA,
                                                   HAMM_PATE_QUERIES)

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data"


def _ints(text: str, hint: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {text!r}", param_hint=hint) from None
    if not vals or min(vals) < 1 or len(set(vals)) != len(vals):
        raise click.BadParameter(f"expected distinct positive integers, got {text!r}", param_hint=hint)
    return vals


def _table(result: dict) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    c = result["config"]
    console = Console()
    grid = c["epsilons_inv"]
    for M in c["parties"]:
        s = result["settings"][str(M)]
        sp = s["split"]
        t = Table(title=escape(f"KDD-99 {result['task']}, M = {M:,} parties × {sp['per_party']} rows, N_aux = {sp['n_aux']:,}: "
                               f"test accuracy mean ± s.d."))
        t.add_column("method")
        for e in grid:
            t.add_column(f"1/ε={e:g}", justify="right")
        for method in METHODS:
            rows = {r["eps_inv"]: r for r in result["results"] if r["parties"] == M and r["method"] == method}
            if rows:
                t.add_row(f"{method} (n={max(r['n'] for r in rows.values())})",
                          *(f"{rows[e]['accuracy_mean']:.4f}±{rows[e]['accuracy_sd']:.4f}" if e in rows else "—" for e in grid))
        console.print(t)
        console.print(f"  split: {sp}; seconds: {s['seconds']}")
    console.print(f"d = {result['n_features']}, test rows = {result['n_test_rows']:,} ({result['n_test_distinct']:,} distinct); "
                  f"λ = {c['lam']:g}, local = {c['local']}, trials = {c['trials']}, noise draws = {c['noise_draws']}, "
                  f"protect_aux = {c['protect_aux']}; pate: {c['pate_queries']} queries, (ε, δ = {c['pate_delta']:g})-DP, "
                  f"the others pure ε-DP")
    console.print(f"{result['noise_note']}; wall time {result['seconds']['wall']:.1f} s")


@click.command("hamm2016", short_help="Hamm, Cao & Belkin 2016 Fig. 3: private ensembles (soft/vote/avg/avg-tight/pate) vs batch/indiv on KDD-99.")
@click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_DATA, show_default=True,
              help="Folder holding kddcup99/ (or the kddcup99 folder itself): kddcup.data_10_percent.gz, corrected.gz, "
                   "training_attack_types.txt. Read in place.")
@click.option("--parties", default=",".join(str(m) for m in HAMM_PARTIES), show_default=True,
              help="Comma-separated numbers of parties M (one figure panel each).")
@click.option("--epsilons-inv", default=",".join(f"{e:g}" for e in HAMM_EPSILONS_INV), show_default=True,
              help="Comma-separated privacy levels 1/ε; 0 means no noise (ε = ∞, not private).")
@click.option("--trials", type=click.IntRange(min=1), default=10, show_default=True,
              help="Data trials (fresh public aux/party split each); the non-private methods get one value per trial.")
@click.option("--noise-draws", type=click.IntRange(min=1), default=10, show_default=True,
              help="Noise vectors per data trial for each private point (trials × draws values; the paper used 100).")
@click.option("--per-party", type=click.IntRange(min=1), default=22, show_default=True,
              help="Private rows per party (fewer if the data do not allow it; the actual number is reported).")
@click.option("--lam", type=click.FloatRange(min=0, min_open=True), default=1e-4, show_default=True,
              help="λ of (λ/2)‖w‖² for local, global and batch models.")
@click.option("--aux-fraction", type=click.FloatRange(min=0, max=1, min_open=True, max_open=True), default=0.1, show_default=True,
              help="Share of the training rows used as public auxiliary unlabeled data.")
@click.option("--multiclass", is_flag=True,
              help="5 attack categories (normal/dos/probe/r2l/u2r) instead of normal vs attack; test attacks of unknown type are dropped.")
@click.option("--local", type=click.Choice(HAMM_LOCAL_CHOICES), default="logreg", show_default=True,
              help="Local classifier of every party; 'mixed' cycles logreg, linear_svm, tree, naive_bayes (avg, avg-tight are then skipped).")
@click.option("--methods", default=None,
              help="Comma-separated subset of: " + ", ".join(METHODS) + ". Default: all (without avg, avg-tight unless --local logreg).")
@click.option("--pate-queries", type=click.IntRange(min=1), default=HAMM_PATE_QUERIES, show_default=True,
              help="pate: distinct auxiliary points the curator queries (noisy counts; RDP cost grows with their number).")
@click.option("--pate-delta", type=click.FloatRange(min=0, max=1, min_open=True, max_open=True), default=HAMM_PATE_DELTA,
              show_default=True, help="pate: the δ of its (ε, δ) guarantee (the other private methods are pure ε-DP).")
@click.option("--protect-aux", is_flag=True,
              help="Also protect one auxiliary sample (HCB16 §3.4: soft sensitivity × (N+M−1)/N).")
@click.option("--indiv-parties", type=click.IntRange(min=1), default=1000, show_default=True,
              help="indiv = mean test accuracy of this many randomly chosen local classifiers (all if M is smaller).")
@click.option("--max-aux", type=click.IntRange(min=2), default=None,
              help="Keep at most this many auxiliary rows (quick runs; default all ≈ 10 % of the training file).")
@click.option("--max-test", type=click.IntRange(min=2), default=None,
              help="Score on a fixed random subset of this many test rows (quick runs; default all).")
@click.option("--seed", type=int, default=None,
              help="Seed the noise generator (reproducible simulation, NOT a private release). Default: OS-keyed noise.")
@click.option("--split-seed", type=int, default=0, show_default=True,
              help="Seed of the public aux/party splits (trial r uses (split-seed, r)).")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="BLAS threads (keep 1 on shared machines).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the figure (one panel per M, like the paper's Fig. 3) to this PNG file.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also write hamm2016_<task>.json (everything) and .csv (one row per M, method, 1/ε) into this folder.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object to stdout instead of tables (no progress bar).")
def hamm2016(data_dir: Path, parties: str, epsilons_inv: str, trials: int, noise_draws: int, per_party: int, lam: float,
             aux_fraction: float, multiclass: bool, local: str, methods: str | None, pate_queries: int, pate_delta: float,
             protect_aux: bool, indiv_parties: int,
             max_aux: int | None, max_test: int | None, seed: int | None, split_seed: int, threads: int,
             plot_path: Path | None, out_dir: Path | None, as_json: bool) -> None:
    """Test accuracy of batch, soft, avg, avg-tight, pate, vote and indiv against 1/ε for M parties on KDD-99 (HCB16 §6.2, Fig. 3)."""
    from mpdp.data.loaders import DatasetError
    from mpdp.experiments import hamm2016 as exp
    from mpdp.experiments.common import parse_float_list, rich_progress, to_json
    from mpdp.hamm2016.simulation import LINEAR_LOCAL_METHODS

    Ms = _ints(parties, "--parties")
    try:
        grid = tuple(v for _, v in parse_float_list(epsilons_inv))
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--epsilons-inv") from e
    if any(v < 0 for v in grid):
        raise click.BadParameter("1/ε must be ≥ 0 (0 = no noise)", param_hint="--epsilons-inv")
    if methods is None:
        chosen = tuple(m for m in METHODS if m not in LINEAR_LOCAL_METHODS or local == "logreg")
    else:
        chosen = tuple(s.strip() for s in methods.split(",") if s.strip())
        bad = [m for m in chosen if m not in METHODS]
        if bad or not chosen or len(set(chosen)) != len(chosen):
            raise click.BadParameter(f"methods must be distinct names from {METHODS}, got {methods!r}", param_hint="--methods")
    try:
        config = exp.Hamm2016Config(
            data_dir=str(data_dir), parties=Ms, epsilons_inv=grid, trials=trials, noise_draws=noise_draws, per_party=per_party,
            lam=lam, aux_fraction=aux_fraction, task="multiclass" if multiclass else "binary", local=local, methods=chosen,
            protect_aux=protect_aux, indiv_parties=indiv_parties, pate_queries=pate_queries, pate_delta=pate_delta, max_aux=max_aux, max_test=max_test, seed=seed,
            split_seed=split_seed, threads=threads)
    except ValueError as e:
        raise click.UsageError(str(e)) from e
    try:
        with rich_progress(f"hamm2016 {config.task}", enabled=not as_json) as progress:
            result = exp.run_hamm2016(config, progress=progress)
    except (DatasetError, ValueError) as e:
        raise click.ClickException(str(e)) from e
    files: dict[str, str] = {}
    if out_dir is not None:
        files.update({k: str(v) for k, v in exp.write_outputs(result, out_dir).items()})
    if plot_path is not None:
        files["png"] = str(exp.plot_figure(result, plot_path))
    result["files"] = files
    if as_json:
        sys.stdout.write(to_json(result) + "\n")
        return
    _table(result)
    if files:
        click.echo("wrote " + ", ".join(files.values()))


command = hamm2016
