"""`mpdp query "SQL"`: a DP answer to one SQL query across the parties (docs/protocols/query.md)."""

from __future__ import annotations

import json

import click

from mpdp_services.cli.options import endpoints_option


@click.command(short_help="Answer one SQL query across the parties with DP: counts, sums, means, quantiles, each with a 95 % interval.")
@endpoints_option
@click.argument("sql")
@click.option("--epsilon", type=click.FloatRange(min=0.0, min_open=True), default=1.0, show_default=True, help="ε of the whole query (its aggregates share it)")
@click.option("--delta", type=click.FloatRange(min=0.0, max=1.0, min_open=True, max_open=True), default=1e-6, show_default=True, help="δ of the whole query")
@click.option("--schema", type=click.Path(dir_okay=False, exists=True), default=None,
              help="the federation's schema (docs/schema.md): the columns, categories and public bounds a query may use; without it, COUNT(*) only")
@click.option("--parties", default=None, help="comma-separated party names [default: every party in the endpoints file]")
@click.option("--nodes", default=None, help="comma-separated compute node names [default: every compute node in the endpoints file]")
@click.option("--records-per-party", type=click.IntRange(min=1), default=100_000, show_default=True,
              help="public bound on any party's row count: every party proves each value of its vector within it (it does not change the noise)")
@click.option("--detach", is_flag=True, help="print the job id and return at once (`mpdp jobs watch JOB` follows it)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object (the rows, the guarantee, the interval method)")
def query(endpoints, sql, epsilon, delta, schema, parties, nodes, records_per_party, detach, as_json) -> None:
    """Answer SQL over the parties' records with differential privacy, e.g.

      mpdp query --schema adult.yaml "SELECT sex, COUNT(*), AVG(age) FROM adult GROUP BY sex"

    Allowed: SELECT of COUNT(*), SUM(col), AVG(col), QUANTILE(col, q), MEDIAN(col) or PERCENTILE_CONT(q) WITHIN GROUP
    (ORDER BY col) FROM <dataset>, WHERE comparisons of schema columns with literals (AND/OR/NOT, IN, BETWEEN), GROUP BY
    schema columns with listed categories or BIN(col, k) over the schema's public bounds. Anything else is refused here,
    before the curator or any party sees it. Each party is charged the query's (ε, δ) once."""
    import grpc

    from mpdp.query.plan import QueryError
    from mpdp_services.cli.errors import from_rpc
    from mpdp_services.common.endpoints import Endpoints
    from mpdp_services.operator.learner import fetch_model, submit, wait
    from mpdp_services.operator.query import dumps, load_schema, query_spec, text_table

    ep = Endpoints.load(endpoints)  # a missing federation is one clear error (where it looked, what to do)
    doc = json.loads(_endpoints_file(endpoints).read_text())
    names = parties.split(",") if parties else list(doc.get("parties", {}))
    node_names = nodes.split(",") if nodes else sorted(doc.get("compute_nodes", {}))
    if len(node_names) < 2:
        raise click.UsageError("a query runs over the DCA: the federation needs at least 2 compute nodes (`--compute-nodes`)")
    try:
        spec, _ = query_spec(sql, parties=names, nodes=node_names, epsilon=epsilon, delta=delta, records_per_party=records_per_party,
                             schema=load_schema(schema))
    except QueryError as e:
        raise click.ClickException(f"query refused (nothing was sent): {e}") from None
    try:
        job_id = submit(ep, spec)
    except grpc.RpcError as e:
        raise from_rpc(e, "the curator", ep.curator_address, "the query") from None
    if detach:
        click.echo(json.dumps({"job_id": job_id}) if as_json else job_id)
        return
    try:
        status = wait(ep, job_id)
        if status["state"] != "DONE":
            raise click.ClickException(f"query {job_id} failed: {status['detail']}. Nothing was released.")
        model = fetch_model(ep, job_id)
    except grpc.RpcError as e:
        raise from_rpc(e, "the curator", ep.curator_address, f"to follow query {job_id}") from None
    if as_json:
        click.echo(dumps(model))
        return
    q = model.query
    click.echo(text_table(model))
    click.echo(f"\njob {model.job_id}: {model.guarantee.epsilon:g}-DP with δ = {model.guarantee.delta:.3g} for the whole table; "
               f"{q.confidence:.0%} intervals ({q.interval_method}); Δ₂ = {q.sensitivity:.4g} ({q.budget_split})")


def _endpoints_file(endpoints: str):
    from pathlib import Path

    p = Path(endpoints)
    return p / "endpoints.json" if p.is_dir() else p
