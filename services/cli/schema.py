"""`mpdp schema check` and `mpdp schema draft`: a party validates its own file against the federation's schema,
or proposes a first schema from a file (docs/schema.md). Nothing here touches the network; the report is the
party's own and is only printed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from mpdp_services.cli.errors import CliError


@click.group()
def schema() -> None:
    """Check a data file against the federation's schema, or draft a schema from a file (docs/schema.md)."""


@schema.command("check")
@click.argument("schema_file", metavar="SCHEMA", type=click.Path(exists=True, dir_okay=False))
@click.argument("data", metavar="FILE", type=click.Path(exists=True))
@click.option("--format", "fmt", type=click.Choice(["auto", "csv", "libsvm", "parquet"]), default="auto", show_default=True,
              help="the file's format (parquet: a file or a folder of parts)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def check(schema_file: str, data: str, fmt: str, as_json: bool) -> None:
    """Validate FILE against SCHEMA and encode it as a party would; print the local report (it stays here).

    Exits 1 if the file cannot be encoded (an unknown category under `unknown: error`, a missing column, no row left)."""
    from mpdp.data.loaders import DatasetError
    from mpdp.schema import Schema, SchemaError

    try:
        s = Schema.load(schema_file)
        report = s.check_file(data, fmt)  # batch by batch: bounded memory
    except (SchemaError, DatasetError) as e:
        hint = "fix the file or the schema as the message says (docs/schema.md); `mpdp schema draft FILE` drafts a schema from a file"
        if as_json:  # one object, as on success, with the error beside "ok"
            print(json.dumps({"ok": False, "error": {"code": "invalid", "message": str(e), "hint": hint}}))
            sys.exit(1)
        raise CliError(str(e), code="invalid", hint=hint) from None
    out = {"ok": report.used > 0, "schema_sha256": s.sha256(), "schema_version": s.version, "dimension": s.dimension, **report.to_json()}
    if not out["ok"]:
        out["error"] = {"code": "invalid", "message": "no row of the file could be used", "hint": "the counts above say which rows were dropped and why"}
    if as_json:
        print(json.dumps(out))
    else:
        click.echo(f"schema {Path(schema_file).name}: version {s.version}, sha256 {s.sha256()}, d = {s.dimension}")
        click.echo(f"rows read {report.rows}, used {report.used} (labels: {report.positive} positive, {report.negative} negative)")
        for label, counts in (("dropped", report.dropped), ("imputed", report.imputed), ("clipped to the public bounds", report.clipped)):
            if counts:
                click.echo(f"{label}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        click.echo(f"rows clipped to norm {s.row_norm:g}: {report.clipped_rows}")
        for k, v in report.examples.items():
            click.echo(f"values of {k} outside the schema, e.g.: {', '.join(v)}")
        click.echo("This report is about your own records: keep it here (the counts are private).", err=True)
    if report.used == 0:
        if as_json:
            sys.exit(1)
        raise CliError(out["error"]["message"], code="invalid", hint=out["error"]["hint"])


@schema.command("draft")
@click.argument("data", metavar="FILE", type=click.Path(exists=True, dir_okay=False))
@click.option("--label", default=None, help="the label column's name (default: the last column; c1, c2, … in a file without a header)")
@click.option("--header/--no-header", default=None, help="whether the first row names the columns (default: guessed)")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="write the YAML here instead of stdout")
def draft(data: str, label: str | None, header: bool | None, output: str | None) -> None:
    """Propose a schema from FILE. Its bounds and vocabularies come from YOUR PRIVATE DATA: replace them with public ones."""
    from mpdp.data.loaders import DatasetError
    from mpdp.schema import draft as make_draft

    try:
        d = make_draft(data, label=label, header=header)
    except DatasetError as e:
        raise click.ClickException(str(e))
    text = ("# DRAFT proposed by `mpdp schema draft` from a private file. Its bounds and vocabularies are NOT public:\n"
            "# replace each with public knowledge before sharing (docs/schema.md).\n" + d.schema.to_yaml())
    if output:
        Path(output).write_text(text)
    else:
        click.echo(text, nl=False)
    click.secho("\n" + "!" * 78 + "\n" + d.warning + "\n" + "!" * 78, fg="red", bold=True, err=True)
    if d.skipped:
        click.echo(f"left out (too many distinct text values, e.g. ids or free text): {', '.join(d.skipped)}", err=True)
