"""`mpdp jobs ls|show|watch|cancel|logs`: the curator's jobs of every protocol, for the federation's operator."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from mpdp import registry
from mpdp_services.cli.errors import CliError, from_rpc
from mpdp_services.cli.options import endpoints_option

PROTOCOLS = tuple(p.name for p in registry.PROTOCOLS)


def _endpoints(path: str):
    from mpdp_services.common.endpoints import Endpoints

    return Endpoints.load(path)


def _call(fn, endpoints, *args) -> Any:
    import grpc

    try:
        return fn(endpoints, *args)
    except grpc.RpcError as e:
        raise from_rpc(e, "the curator", endpoints.curator_address) from None


def _when(t: float | None) -> str:
    return "—" if not t else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _seconds(job: dict) -> str:
    return "—" if job["seconds"] is None else f"{job['seconds']:.2f}"


@click.group("jobs")
def jobs() -> None:
    """See, follow and cancel the curator's jobs of every protocol (`mpdp jobs ls --protocol`: the registry's names)."""


@jobs.command("ls")
@endpoints_option
@click.option("--protocol", type=click.Choice(PROTOCOLS), default=None, help="only this protocol's jobs")
@click.option("--live", is_flag=True, help="only jobs still running")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True, help="newest first, at most this many")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def ls(endpoints: str, protocol: str | None, live: bool, limit: int, as_json: bool) -> None:
    """List jobs, newest first: id, protocol, state, failure, start time and duration."""
    from mpdp_services.operator.jobs import list_jobs

    found = _call(list_jobs, _endpoints(endpoints), protocol or "", live, limit)
    if as_json:
        click.echo(json.dumps({"jobs": found}, indent=2))
        return
    cols = ("job", "protocol", "state", "problem", "released", "started", "seconds")
    rows = [(j["job_id"], j["protocol"], j["state"], j["problem"] or "", "yes" if j["released"] else "", _when(j["created"]), _seconds(j)) for j in found]
    if not sys.stdout.isatty():  # a pipe or a file: whole values, one tab-separated line per job (`cut -f1` gives the ids)
        for row in (cols, *rows):
            click.echo("\t".join(row))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(found)} job(s)", title_justify="left")
    for col in cols:
        table.add_column(col, no_wrap=col == "job", overflow="fold")
    for row in rows:
        table.add_row(*row)
    Console().print(table)


@jobs.command("show")
@endpoints_option
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def show(endpoints: str, job_id: str, as_json: bool) -> None:
    """One job: state, failure, per-stage seconds and its state log at the curator."""
    from mpdp_services.operator.jobs import get_job

    job = _call(get_job, _endpoints(endpoints), job_id)
    if as_json:
        click.echo(json.dumps(job, indent=2))
        return
    click.echo(f"job {job['job_id']}  ({job['protocol']})")
    click.echo(f"  state     {job['state']}{'' if job['terminal'] else ' (running)'}")
    if job["problem"]:
        click.echo(f"  problem   {job['problem']}: {job['detail'] or ''}")
    click.echo(f"  started   {_when(job['created'])}")
    click.echo(f"  ended     {_when(job['ended'])}  ({_seconds(job)} s)")
    click.echo(f"  released  {'yes' if job['released'] else 'no'}")
    for stage, secs in job["stage_seconds"].items():
        click.echo(f"  stage {stage:<24} {secs:8.3f} s")
    protocol = registry.BY_NAME.get(job["protocol"])
    if protocol is not None and protocol.hooks.show is not None and job["released"]:  # what its release shows (e.g. a query's table)
        from mpdp_services.operator.jobs import release

        click.echo("\n" + registry.hook(protocol.hooks.show)(getattr(_call(release, _endpoints(endpoints), job_id), protocol.submission)))


@jobs.command("logs")
@endpoints_option
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def logs(endpoints: str, job_id: str, as_json: bool) -> None:
    """A job's state log at the curator: each state it entered, when, and a failure's Problem."""
    from mpdp_services.operator.jobs import get_job

    job = _call(get_job, _endpoints(endpoints), job_id)
    if as_json:
        click.echo(json.dumps({"job_id": job["job_id"], "protocol": job["protocol"], "events": job["events"]}, indent=2))
        return
    start = job["events"][0]["at"] if job["events"] else 0.0
    for e in job["events"]:
        click.echo(f"{_when(e['at'])}  +{e['at'] - start:8.3f} s  {e['state']}{'  ' + e['problem'] if e['problem'] else ''}")


@jobs.command("watch")
@endpoints_option
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="one JSON object per change (state, stage, terminal, problem, detail)")
def watch(endpoints: str, job_id: str, as_json: bool) -> None:
    """Follow a job until it ends: each state and stage as it changes (dp-gd and regression: "round r of R").
    Ctrl-C stops watching only; the job goes on at the curator. Exits 1 if the job failed."""
    from mpdp_services.operator.jobs import follow

    import grpc

    last: dict[str, Any] = {}
    ep = _endpoints(endpoints)
    try:
        for last in follow(ep, job_id):
            if as_json:
                click.echo(json.dumps(last))
            else:
                line = f"{_when(time.time())}  {last['state']}  {last['stage']}"
                click.echo(line + (f"  {last['problem']}: {last['detail']}" if last["problem"] else ""))
    except KeyboardInterrupt:
        click.echo(f"stopped watching; job {job_id} goes on at the curator", err=True)
        raise SystemExit(130) from None
    except grpc.RpcError as e:
        raise from_rpc(e, "the curator", ep.curator_address) from None
    if last.get("problem"):
        raise CliError(f"job {job_id} failed: {last['problem']}: {last.get('detail') or ''}".rstrip(": "), code="job_failed",
                       hint=f"`mpdp jobs logs {job_id}` shows each state it entered")


@jobs.command("cancel")
@endpoints_option
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def cancel(endpoints: str, job_id: str, as_json: bool) -> None:
    """Cancel a running job: it fails with CANCELLED at every role and publishes nothing (privacy charges already
    made at the parties are kept)."""
    from mpdp_services.operator.jobs import cancel_job

    job = _call(cancel_job, _endpoints(endpoints), job_id)
    if as_json:
        click.echo(json.dumps(job, indent=2))
    else:
        click.echo(f"job {job['job_id']} ({job['protocol']}): {job['state']} {job['problem'] or ''}")
