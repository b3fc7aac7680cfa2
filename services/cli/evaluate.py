"""`mpdp evaluate JOB --dataset NAME`: a released classifier's accuracy, confusion matrix and AUC on the parties' own
rows, released as one DP query (docs/protocols/query.md, "Evaluating a released model")."""

from __future__ import annotations

import json

import click

from mpdp_services.cli.options import endpoints_option


@click.command(short_help="Evaluate a released classifier on the parties' own rows with DP: accuracy, confusion matrix, AUC.")
@endpoints_option
@click.argument("job")
@click.option("--dataset", required=True, help="the dataset every party evaluates on (its held-out rows, under this name at each party)")
@click.option("--epsilon", type=click.FloatRange(min=0.0, min_open=True), default=1.0, show_default=True, help="ε of the whole evaluation")
@click.option("--delta", type=click.FloatRange(min=0.0, max=1.0, min_open=True, max_open=True), default=1e-6, show_default=True, help="δ of the whole evaluation")
@click.option("--score-bins", type=click.IntRange(2, 100), default=20, show_default=True, help="equal-width score bins over [0, 1] per class, for the AUC")
@click.option("--schema", type=click.Path(dir_okay=False, exists=True), default=None, help="the dataset's schema, when the parties' dataset has one")
@click.option("--parties", default=None, help="comma-separated party names [default: every party in the endpoints file]")
@click.option("--nodes", default=None, help="comma-separated compute node names [default: every compute node in the endpoints file]")
@click.option("--records-per-party", type=click.IntRange(min=1), default=100_000, show_default=True,
              help="public bound on any party's row count (every party proves each value of its vector within it)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def evaluate(endpoints, job, dataset, epsilon, delta, score_bins, schema, parties, nodes, records_per_party, as_json) -> None:
    """Score the model JOB released (pathak2010, or binary dp-gd) on every party's DATASET rows: each party counts its
    confusion matrix and per-class score histogram, and one validated DCA sum releases them with DP. Each party is
    charged (ε, δ) once, like a query.

      mpdp evaluate pk-1a2b3c4d5e6f --dataset bc_test --epsilon 1 --json"""
    import grpc

    from mpdp_services.cli.errors import from_rpc
    from mpdp_services.cli.query import _endpoints_file
    from mpdp_services.common.endpoints import Endpoints
    from mpdp_services.operator.learner import fetch_model, submit, wait
    from mpdp_services.operator.query import QueryFailed, evaluation_spec, evaluation_summary, load_schema, released_classifier

    ep = Endpoints.load(endpoints)
    doc = json.loads(_endpoints_file(endpoints).read_text())
    names = parties.split(",") if parties else list(doc.get("parties", {}))
    node_names = nodes.split(",") if nodes else sorted(doc.get("compute_nodes", {}))
    if len(node_names) < 2:
        raise click.UsageError("an evaluation runs over the DCA: the federation needs at least 2 compute nodes (`--compute-nodes`)")
    try:
        protocol, weights = released_classifier(ep, job)
    except grpc.RpcError as e:
        raise from_rpc(e, "the curator", ep.curator_address, f"to give the released model of {job}") from None
    except (QueryFailed, ValueError) as e:
        raise click.ClickException(str(e)) from None
    sch = load_schema(schema)
    try:
        spec, _ = evaluation_spec(job, protocol, weights, dataset=dataset, parties=names, nodes=node_names, epsilon=epsilon, delta=delta,
                                  records_per_party=records_per_party, score_bins=score_bins, schema_sha256=sch.sha256() if sch is not None else "")
    except ValueError as e:
        raise click.ClickException(f"evaluation refused (nothing was sent): {e}") from None
    try:
        eval_id = submit(ep, spec)
        status = wait(ep, eval_id)
        if status["state"] != "DONE":
            raise click.ClickException(f"evaluation {eval_id} failed: {status['detail']}. Nothing was released.")
        model = fetch_model(ep, eval_id)
    except grpc.RpcError as e:
        raise from_rpc(e, "the curator", ep.curator_address, "the evaluation") from None
    out = evaluation_summary(model)
    out.update(_versus_majority(out))
    if as_json:
        click.echo(json.dumps(out, indent=2, allow_nan=False))
        return

    def show(name: str) -> str:
        v = out[name]
        return f"{name}: {'undefined' if v is None else format(v, '.4g')} [{out[name + '_low']:.4g}, {out[name + '_high']:.4g}] ±{out[name + '_noise_sd'] or 0:.3g}"

    from mpdp.results import majority_warning

    for name in ("accuracy", "auc", "true_positive", "false_negative", "false_positive", "true_negative"):
        click.echo(show(name))
        if name == "accuracy" and "majority_rate" in out:
            click.echo(f"majority_rate: {out['majority_rate']:.4g} (of the released counts)")
            warning = majority_warning(out)
            if warning:
                click.echo(warning)
    click.echo(f"\njob {out['job_id']} evaluated {job} on {dataset}: {out['guarantee']['epsilon']:g}-DP with δ = {out['guarantee']['delta']:.3g}; "
               f"{out['interval_method']}")


def _versus_majority(out: dict) -> dict:
    """The majority rate of the parties' rows from the released (noisy) confusion counts, and whether the released
    accuracy beats it: post-processing of the DP release, no further privacy cost. Nothing when the counts' total is
    not positive or the accuracy is undefined."""
    from mpdp.results import against_majority

    counts = [max(0.0, float(out.get(k) or 0.0)) for k in ("true_positive", "false_negative", "false_positive", "true_negative")]
    positives, negatives = counts[0] + counts[1], counts[2] + counts[3]
    if positives + negatives <= 0 or out.get("accuracy") is None:
        return {}
    return against_majority(float(out["accuracy"]), max(positives, negatives) / (positives + negatives))
