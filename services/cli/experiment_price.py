"""`mpdp experiment price-of-distrust`: multiparty DP-GD against Pathak's protocol and central DP."""

from __future__ import annotations

from pathlib import Path

import click

from mpdp_services.cli.errors import CliError

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data"


@click.command("price-of-distrust")
@click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_DATA, show_default=True,
              help="Folder holding a9a/ (a9a.gz, a9a.t.gz); digits come with scikit-learn.")
@click.option("--epsilons", default="0.05,0.2,0.5,1", show_default=True, help="Comma-separated ε values.")
@click.option("--runs", type=click.IntRange(1, 1000), default=20, show_default=True, help="Random party splits and noise draws per ε.")
@click.option("--seed", type=int, default=0, show_default=True, help="Simulation seed (reproducible; not a private release).")
@click.option("--datasets", default="a9a,digits", show_default=True, help="Which of a9a,digits to run.")
@click.option("--diffprivlib/--no-diffprivlib", default=True, show_default=True,
              help="Also run diffprivlib 0.6.6 in a virtualenv created on demand (pip install from the package index).")
@click.option("--work", type=click.Path(file_okay=False, path_type=Path), default=None, help="Folder for the virtualenv and scratch files.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write the error curves (PNG).")
@click.option("--json", "as_json", is_flag=True, help="Print the full result as JSON.")
def command(data_dir: Path, epsilons: str, runs: int, seed: int, datasets: str, diffprivlib: bool, work: Path | None, plot_path: Path | None, as_json: bool) -> None:
    """Test error of multiparty DP-GD (DCA), Pathak 2010 (both modes), central output and objective perturbation,
    and diffprivlib, on a9a (K = 5) and digits, at the same (ε, δ = 1e-6)."""
    from mpdp.data.loaders import DatasetError
    from mpdp.experiments import price_of_distrust as exp
    from mpdp.experiments.common import parse_float_list, to_json

    try:
        eps = [e for _, e in parse_float_list(epsilons)]
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--epsilons") from None
    names = tuple(s.strip() for s in datasets.split(",") if s.strip())
    if not names or any(n not in ("a9a", "digits") for n in names):
        raise click.BadParameter("choose from a9a,digits", param_hint="--datasets")
    try:
        out = exp.run(data_dir, eps, runs, seed=seed, diffprivlib=diffprivlib, work=work, datasets=names)
    except DatasetError as e:
        raise CliError(str(e), code="not_found", hint="--data names the folder holding a9a/ (a9a.gz, a9a.t.gz)", exit_code=2) from None
    if plot_path is not None:
        exp.plot(out, plot_path)
    if as_json:
        click.echo(to_json(out))
        return
    for r in out["results"]:
        click.echo(f"{r['dataset']} ({r['task']}): non-private {r['nonprivate']:.4f}, majority {r['majority']:.4f}")
        for m, blk in r["errors"].items():
            click.echo(f"  {m:18s} " + "  ".join(f"ε={k}: {v['error_rate_mean']:.4f}±{v['error_rate_sem']:.4f}" for k, v in blk.items()))
    click.echo(f"diffprivlib: {out['diffprivlib']}; seeded simulation; {out['wall_seconds']:.1f} s")
