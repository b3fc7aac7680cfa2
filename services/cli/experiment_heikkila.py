"""`mpdp experiment heikkila2017`: reproduce Heikkilä et al. 2017 Figure 2 (UCI) with DDP through the DCA core."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from mpdp_services.cli.experiment_options import UCI_DATASET_NAMES, UCI_DELTA, UCI_EPSILON_LABELS, UCI_GRID_REPEATS, UCI_REPEATS

if TYPE_CHECKING:  # the experiment loads with the command, not for its --help
    from mpdp.experiments import heikkila2017 as exp

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data"


def _modes(text: str) -> tuple[str, ...]:
    from mpdp.experiments import heikkila2017 as exp

    names = tuple(s.strip() for s in text.split(",") if s.strip())
    bad = [s for s in names if s not in exp.MODES]
    if bad or not names or len(set(names)) != len(names):
        raise click.BadParameter(f"modes must be distinct values of {','.join(exp.MODES)}, got {text!r}", param_hint="--modes")
    return names


def _grid_repeats(text: str) -> tuple[int, int]:
    try:
        a, b = (int(v) for v in text.split(","))
    except ValueError:
        raise click.BadParameter(f"expected two counts R_data,R_noise, got {text!r}", param_hint="--grid-repeats") from None
    if a < 1 or b < 1:
        raise click.BadParameter("grid repeat counts must be positive", param_hint="--grid-repeats")
    return a, b


def _table(result: exp.Heikkila2017Result) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from mpdp.experiments import heikkila2017 as exp
    from mpdp.regression.config import UCI_DATASETS

    c = result.config
    console = Console()
    for mode in c.modes:
        t = Table(title=escape(f"{UCI_DATASETS[c.dataset].name}, {mode} mode: median test MAE [q25, q75] over {c.repeats} repeats, δ={c.delta:g}"))
        t.add_column("method")
        for lab in c.epsilon_labels:
            t.add_column(f"ε={lab}", justify="right")
        for k in exp.METHODS:
            t.add_row(exp.LABELS[k], *(escape(f"{q['median']:.3f} [{q['q25']:.2f}, {q['q75']:.2f}]") for q in result.stats(mode, k)))
        console.print(t)
        p = [(result.multipliers[(mode, i, -1)].p_x, result.multipliers[(mode, i, -1)].p_y) for i in range(len(c.epsilons))] if not c.grid_per_repeat else []
        if p:
            console.print("  (p_x, p_y) per ε: " + ", ".join(f"{lab}: {a:g}/{b:g}" for lab, (a, b) in zip(c.epsilon_labels, p)))
    s = result.seconds
    console.print(f"wall {s['wall']:.1f} s (grid {s['grid_wall']:.1f} s, DCA {s['dca_cpu']:.1f} s CPU); seeded simulation (reproducible, not a private release)")


@click.command("heikkila2017", short_help="Heikkilä et al. 2017 Fig. 2: BLR test MAE vs ε on UCI data (TA, DDP via DCA, projection).")
@click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_DATA, show_default=True,
              help="Folder holding wine_quality/ and abalone/ (the offline UCI copies).")
@click.option("--dataset", type=click.Choice(UCI_DATASET_NAMES), default="red", show_default=True,
              help="red wine (1000/500, d=11), white wine (3000/1000, d=11) or abalone (3000/1000, d=8).")
@click.option("--repeats", type=click.IntRange(min=1), default=UCI_REPEATS, show_default=True,
              help="Random train/test splits (fixed across ε and modes); the paper used 25.")
@click.option("--epsilons", default=",".join(UCI_EPSILON_LABELS), show_default=True,
              help="Comma-separated ε grid (total budget per fit); results are keyed by ε as written.")
@click.option("--delta", type=click.FloatRange(min=0, max=1, min_open=True, max_open=True), default=UCI_DELTA, show_default=True,
              help="Total δ per fit (split 0.3/0.7 between the std and main rounds).")
@click.option("--modes", default="corrected,paper", show_default=True,
              help="corrected (provable sensitivities, analytic Gaussian) and/or paper (the authors' code, bugs included).")
@click.option("--grid-repeats", default=",".join(map(str, UCI_GRID_REPEATS)), show_default=True,
              help="R_data,R_noise of the auxiliary-data grid search (20,20 in the paper).")
@click.option("--grid-per-repeat", is_flag=True,
              help="Re-run the grid search inside every repeat with fresh synthetic data, as the authors' script did (repeats× slower).")
@click.option("--paper-reader", is_flag=True,
              help="Reproduce the authors' wine reader (last row dropped, an all-zero row added; docs/experiments/heikkila2017.md): puts MAE on the paper's scale. No effect on abalone.")
@click.option("--seed", type=int, default=1, show_default=True,
              help="Seed of the splits, the grid search and the seeded noise generators (simulation: reproducible, not private).")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes (grid searches, then repeats); each uses one BLAS thread.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("runs/heikkila2017"), show_default=True,
              help="Output folder for the CSV (summary and per-repeat), JSON and PNG.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (median MAE and IQR per method and ε, settings) instead of a table.")
def heikkila2017(data_dir: Path, dataset: str, repeats: int, epsilons: str, delta: float, modes: str, grid_repeats: str,
                 grid_per_repeat: bool, paper_reader: bool, seed: int, workers: int, out_dir: Path, as_json: bool) -> None:
    """Heikkilä et al. 2017 Fig. 2: BLR test MAE vs ε on a UCI data set (NP, TA, DDP via DCA, projections, input perturbation)."""
    from mpdp.data.loaders import DatasetError
    from mpdp.experiments import heikkila2017 as exp
    from mpdp.experiments.common import parse_float_list, rich_progress, to_json

    try:
        grid = parse_float_list(epsilons)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--epsilons") from e
    if any(v <= 0 for _, v in grid):
        raise click.BadParameter("every ε must be positive", param_hint="--epsilons")
    config = exp.Heikkila2017Config(
        dataset=dataset,
        epsilons=tuple(v for _, v in grid),
        epsilon_labels=tuple(lab for lab, _ in grid),
        delta=delta,
        repeats=repeats,
        modes=_modes(modes),
        seed=seed,
        grid_repeats=_grid_repeats(grid_repeats),
        grid_per_repeat=grid_per_repeat,
        workers=workers,
    )
    try:
        data = exp.load_uci(data_dir, dataset, paper_reader=paper_reader)
    except DatasetError as e:
        raise click.ClickException(str(e)) from e
    with rich_progress(f"heikkila2017 {dataset}", enabled=not as_json) as progress:
        result = exp.run_heikkila2017(data, config, progress)
    files = result.write(out_dir)
    if "png" not in files:
        from mpdp.experiments.common import NO_PLOT

        click.echo(f"mpdp: {NO_PLOT}", err=True)
    if as_json:
        summary = result.summary()
        summary["files"] = {k: str(v) for k, v in files.items()}
        sys.stdout.write(to_json(summary) + "\n")
        return
    _table(result)
    click.echo("wrote " + ", ".join(str(p) for p in files.values()))


command = heikkila2017
