"""`mpdp regress`: distributed DP Bayesian linear regression across the parties (two DCA rounds)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from mpdp_services.cli.options import endpoints_option, renamed_option


@click.command(short_help="Fit DP Bayesian linear regression with projection over the parties' data (Heikkilä et al. 2017, Alg. 2).")
@endpoints_option
@click.option("--dataset", required=True, help="dataset name every party maps to its own CSV (last column = target)")
@click.option("--parties", required=True, help="comma-separated party names (each is one DCA client)")
@click.option("--nodes", required=True, help="comma-separated compute node names")
@click.option("--bounds", required=True, help="clip bound c for every column, or d+1 comma-separated values (features, then target)")
@click.option("--dimension", "-d", type=int, required=True, help="number of features d")
@click.option("--epsilon", type=float, required=True, help="ε of the whole fit (0.3 std round / 0.7 main round)")
@click.option("--delta", type=float, default=1e-4, show_default=True, help="δ of the whole fit")
@click.option("--total-records", type=int, required=True, help="N, the public total number of records (substitution adjacency keeps it fixed)")
@click.option("--records-per-party", type=int, required=True, help="public bound on any party's row count (scales the DCA clip box)")
@renamed_option("--calibration", "--mode", "mode", type=click.Choice(["corrected", "paper"]), default="corrected", show_default=True,
                help="corrected sensitivities and analytic Gaussian, or the authors' code (paper: with --validate none)")
@click.option("--noise", type=click.Choice(["gaussian", "discrete-gaussian"]), default=None,
              help="the DCA rounds' noise: floating-point Gaussian, or exact integer discrete Gaussian (ρ-zCDP and (ε, δ))  "
                   "[default: discrete-gaussian; gaussian with --validate none]")
@click.option("--validate", type=click.Choice(("on", "none")), default="on", show_default=True,
              help="on: every party proves on its shares that each coordinate of its statistic lies in the range its row bound and "
                   "the public bounds give (discrete Gaussian noise); none: no proofs (honest-but-curious parties)")
@click.option("--grid-repeats", default="20,20", show_default=True, help="auxiliary-data grid search repeats (data sets, noise draws)")
@click.option("--test-data", type=click.Path(dir_okay=False), default=None, help="CSV to report the posterior's MAE on")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="write the posterior (mean, precision) as JSON here")
@click.option("--detach", is_flag=True, help="print the job id and return at once (the curator runs the job; `mpdp jobs watch JOB` follows it)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def regress(endpoints, dataset, parties, nodes, bounds, dimension, epsilon, delta, total_records, records_per_party, mode, noise, validate, grid_repeats, test_data,
            out, detach, as_json) -> None:
    """Fit DP Bayesian linear regression with projection over the parties' data (Heikkilä et al. 2017, Alg. 2).

    The curator runs the job (both rounds) and keeps the posterior; this command follows it (Ctrl-C stops watching
    only) or, with --detach, prints its id and returns."""
    from mpdp import registry
    from mpdp.regression.role import RegressionRun
    from mpdp_services.cli.model import submit_and_follow
    from mpdp_services.operator.jobs import ordered_stages
    from mpdp_services.operator.regression import regression_spec

    try:
        b = [float(v) for v in bounds.split(",")]
        reps = tuple(int(v) for v in grid_repeats.split(","))
    except ValueError:
        raise click.BadParameter("comma-separated numbers, please", param_hint="--bounds / --grid-repeats") from None
    if len(b) == 1:
        b = b * (dimension + 1)
    if len(b) != dimension + 1:
        raise click.BadParameter(f"give 1 or d+1 = {dimension + 1} bounds", param_hint="--bounds")
    if validate != "none" and mode == "paper":
        raise click.BadParameter("the paper calibration reproduces the published Gaussian rounds; add --validate none", param_hint="--calibration")
    if validate != "none" and noise == "gaussian":
        raise click.BadParameter("validated rounds take the discrete Gaussian (the proof bounds integer noise); add --validate none for gaussian",
                                 param_hint="--noise")
    noise = noise or ("gaussian" if validate == "none" else "discrete-gaussian")
    try:
        spec = regression_spec(dataset, parties.split(","), nodes.split(","), tuple(b), epsilon, delta, total_records, records_per_party, mode=mode,
                               noise=noise, grid_repeats=reps, validate=validate != "none")  # type: ignore[arg-type]
    except ValueError as e:
        raise click.ClickException(f"not a valid regression job: {e}")

    def summary(model) -> dict:
        import numpy as np

        run = RegressionRun.of(model)
        result = {
            "job_id": model.job_id,
            "std_job": run.std_job,
            "main_job": run.main_job,
            "calibration": mode,
            "mode": mode,  # deprecated spelling of "calibration", kept for one release
            "noise": noise,
            "epsilon": epsilon,
            "delta": delta,
            "multipliers": list(run.multipliers),
            "thresholds": run.thresholds.tolist(),
            "posterior_mean": run.posterior.mean.tolist(),
            "guarantees": [run.std_release.guarantee.statement, run.main_release.guarantee.statement],
            "guarantee": model.guarantee.statement,  # the composed one; it says when the statistics are not proven valid
            "rounds": [{"job": r.job_id, "epsilon": r.guarantee.epsilon, "delta": r.guarantee.delta, "rho": r.rho if r.noise else None}
                       for r in (run.std_release, run.main_release)],
            # the curator's stages, admission to release, one after the other (they add up to the job's wall time there)
            "seconds": ordered_stages(run.seconds, [], registry.BY_NAME["regression"].stages),
        }
        if test_data:
            from mpdp.data.loaders import load

            X, y = load(test_data, "csv")
            result["test_mae"] = run.posterior.mae(X, y)
        if out:
            Path(out).write_text(json.dumps({"mean": run.posterior.mean.tolist(), "precision": np.asarray(run.posterior.precision).tolist()}))
        return result

    submit_and_follow(endpoints, spec, detach, as_json, summary)
