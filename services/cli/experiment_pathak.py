"""`mpdp experiment pathak2010`: reproduce PRR10 Figure 2 (a9a, K = 5) on the mechanism path."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from mpdp_services.cli.experiment_options import PATHAK_EPSILONS, PATHAK_LAMBDA, PATHAK_RUNS, PATHAK_SPLITS
from mpdp_services.cli.options import renamed_option

if TYPE_CHECKING:  # the experiment loads with the command, not for its --help
    from mpdp.experiments import pathak2010 as exp

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "a9a"
DEFAULT_EPSILONS = ",".join(f"{e:g}" for e in PATHAK_EPSILONS)


def _names(text: str, allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
    names = tuple(s.strip() for s in text.split(",") if s.strip())
    bad = [s for s in names if s not in allowed]
    if bad or not names:
        raise click.BadParameter(f"unknown {what} {bad}; choose from {','.join(allowed)}")
    if len(set(names)) != len(names):
        raise click.BadParameter(f"duplicate {what} in {text!r}")
    return names


def _table(result: exp.Pathak2010Result) -> None:
    from rich.console import Console
    from rich.table import Table

    from mpdp.experiments import pathak2010 as exp

    c = result.config
    s = result.summary()
    console = Console()

    def cell(block: dict, lab: str) -> str:
        return f"{block['error_rate_mean'][lab]:.4f} ± {block['error_rate_sem'][lab]:.4f}"

    for mode in c.modes:
        table = Table(title=f"{mode} mode, λ={c.lam_for(mode):g}: mean test error ± s.e. over {c.runs} runs (path: {exp.PATH})")
        table.add_column("ε", justify="right")
        table.add_column("DP all data", justify="right")
        for split in c.splits:
            table.add_column(f"aggregate {split}\nn₍₁₎={exp.smallest(split)}", justify="right")
        for lab in c.labels:
            table.add_row(lab, cell(s["dp_all"][mode], lab), *(cell(s[split][mode], lab) for split in c.splits))
        npa = [s["nonprivate_aggregate"][split][mode] for split in c.splits]
        table.add_row("∞ (non-private)", f"{s['nonprivate_all'][mode]['error_rate_mean']:.4f}", *(f"{b['error_rate_mean']:.4f} ± {b['error_rate_sem']:.4f}" for b in npa))
        console.print(table)
        g = s["settings"]["guarantee"][mode]
        console.print(f"  guarantee: aggregate {g['aggregate']['epsilon_actual_over_nominal']:.4g}·ε, "
                      f"DP all data {g['dp_all']['epsilon_actual_over_nominal']:.4g}·ε ({g['aggregate']['norm']})")
    console.print(f"majority rate (test): {s['majority_rate_test']:.4f}; wall time {result.wall_seconds:.1f} s; "
                  "seeded simulation (reproducible, not a private release)")


@click.command("pathak2010")
@click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_DATA, show_default=True,
              help="Folder holding a9a.gz and a9a.t.gz (LIBSVM a9a; loaded with n_features=123).")
@renamed_option("--lam", "--lambda", "lam", type=click.FloatRange(min=0, min_open=True), default=PATHAK_LAMBDA, show_default=True,
                help="The regulariser λ. corrected mode trains with (λ/2)‖w‖², paper mode with λ‖w‖² (the paper ran λ=1).")
@renamed_option("--paper-lam", "--paper-lambda", "paper_lam", type=click.FloatRange(min=0, min_open=True), default=None,
                help="λ for paper mode only (default: --lam). λ/2 gives paper mode the same local models as corrected mode.")
@click.option("--epsilons", default=DEFAULT_EPSILONS, show_default=True,
              help="Comma-separated ε grid; results are keyed by ε exactly as written here.")
@click.option("--runs", type=click.IntRange(min=1), default=PATHAK_RUNS, show_default=True,
              help="Runs per point (fresh random split and fresh noise each run).")
@click.option("--splits", default=",".join(PATHAK_SPLITS), show_default=True,
              help="Comma-separated subset of even (n₍₁₎=6512), 15pct (4884), 10pct (3256).")
@click.option("--modes", default="corrected,paper", show_default=True,
              help="Noise modes: corrected (spherical Laplace, ε-DP), paper (as published) and/or gaussian-distributed "
                   "((ε, δ)-DP, no K−2 parties know the noise).")
@click.option("--delta", type=click.FloatRange(min=0, max=1, min_open=True, max_open=True), default=1e-6, show_default=True,
              help="δ of the gaussian-distributed mode.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed for the splits and the seeded noise generators (simulation: reproducible, not private).")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes (runs are distributed; each worker uses one BLAS thread).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("runs/pathak2010"), show_default=True,
              help="Output folder for the CSV, JSON and PNG (file names carry λ).")
@click.option("--protocol", "protocol", is_flag=True,
              help="Also run a few points through the real services (curator + 5 party processes, mutual TLS) and plot them.")
@click.option("--protocol-epsilons", default=None,
              help="ε values (from --epsilons) for the protocol spot check (default: the smallest and the largest).")
@click.option("--protocol-runs", type=click.IntRange(min=1), default=2, show_default=True, help="Real jobs per protocol point.")
@click.option("--protocol-key-bits", type=click.IntRange(min=512), default=2048, show_default=True, help="Paillier/DGK key size for the spot check.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (errors, std errors, settings) to stdout instead of a table.")
def pathak2010(data_dir: Path, lam: float, paper_lam: float | None, epsilons: str, runs: int, splits: str, modes: str, delta: float, seed: int, workers: int,
               out_dir: Path, protocol: bool, protocol_epsilons: str | None, protocol_runs: int, protocol_key_bits: int, as_json: bool) -> None:
    """PRR10 Figure 2: test error of the DP aggregate classifier on a9a vs ε (K=5, three splits, both modes)."""
    from mpdp.data.loaders import DatasetError
    from mpdp.experiments import pathak2010 as exp
    from mpdp.experiments.common import parse_float_list, rich_progress, to_json

    try:
        grid = parse_float_list(epsilons)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--epsilons") from e
    if any(v <= 0 for _, v in grid):
        raise click.BadParameter("every ε must be positive", param_hint="--epsilons")
    config = exp.Pathak2010Config(
        lam=lam,
        paper_lam=paper_lam,
        epsilons=tuple(v for _, v in grid),
        epsilon_labels=tuple(lab for lab, _ in grid),
        runs=runs,
        splits=_names(splits, exp.SPLIT_NAMES, "splits"),
        modes=_names(modes, exp.MODES, "modes"),  # type: ignore[arg-type]
        delta=delta,
        seed=seed,
        workers=workers,
    )
    try:
        data = exp.load_a9a(data_dir)
    except DatasetError as e:
        raise click.ClickException(str(e)) from e
    with rich_progress(f"pathak2010 λ={lam:g}", enabled=not as_json) as progress:
        result = exp.run_pathak2010(data, config, progress)
    extra = None
    spot: dict = {}
    if protocol:
        from mpdp_services.operator.spotcheck import Point, protocol_points

        wanted = [lab.strip() for lab in protocol_epsilons.split(",")] if protocol_epsilons else [config.labels[0], config.labels[-1]]
        unknown = [w for w in wanted if w not in config.labels]
        if unknown:
            raise click.BadParameter(f"{unknown} are not in --epsilons", param_hint="--protocol-epsilons")
        pts: list[Point] = [(sp, m, lab, config.epsilons[config.labels.index(lab)]) for sp in config.splits for m in config.modes for lab in dict.fromkeys(wanted)]
        with rich_progress("protocol spot check", enabled=not as_json) as progress:
            extra, info = protocol_points(data, config, pts, runs=protocol_runs, key_bits=protocol_key_bits, progress=progress)
        spot = {"settings": info, "points": {f"{sp}/{m}/{eps:g}": {"error_rate_mean": v[0], "error_rate_sem": v[1], "path": v[2]} for (sp, m, eps), v in extra.items()}}
    files = result.write(out_dir, extra)
    if "png" not in files:
        from mpdp.experiments.common import NO_PLOT

        click.echo(f"mpdp: {NO_PLOT}", err=True)
    if as_json:
        summary = result.summary()
        if spot:
            summary["protocol"] = spot
        summary["files"] = {k: str(v) for k, v in files.items()}
        sys.stdout.write(to_json(summary) + "\n")
        return
    _table(result)
    for key, point in spot.get("points", {}).items():
        click.echo(f"protocol {key}: {point['error_rate_mean']:.4f} ± {point['error_rate_sem']:.4f} (mechanism: see table)")
    click.echo("wrote " + ", ".join(str(p) for p in files.values()))


command = pathak2010
