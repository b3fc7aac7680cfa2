"""`mpdp model export`: any job's released model from the curator's store, as JSON or NumPy npz; and the
CLI side of curator-hosted learner jobs (``mpdp train dp-gd``, ``mpdp regress``): submit, then follow or detach.

The curator runs every round of such a job itself. With ``--detach`` the command prints the job id and returns at
once; without it, it watches the job (stage "round r of R") and prints the release. Ctrl-C only stops watching:
the job goes on at the curator (``mpdp jobs watch JOB``, ``mpdp jobs cancel JOB``).
"""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any, Callable

import click

from mpdp_services.cli.errors import CliError, from_rpc
from mpdp_services.cli.options import endpoints_option

if TYPE_CHECKING:  # numpy and rich load when a command runs, not for its --help
    pass


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr)


def submit_and_follow(endpoints: str, spec, detach: bool, as_json: bool, summary: Callable[[object], dict]) -> None:
    """Submit the learner job ``spec`` through the curator's job host; print its id (``detach``; with ``as_json`` its
    first summary) or follow it and print ``summary(model)``."""
    from mpdp.messages import operations_pb2

    run_job(endpoints, operations_pb2.JobSubmission(learner=spec), detach, as_json, lambda rel: summary(rel.learner))


def run_job(endpoints: str, submission: Any, detach: bool, as_json: bool, summarise: Callable[[Any], dict], show: Callable[[dict], None] | None = None) -> None:
    """Submit through the job host (a fresh idempotency key, reused on resends), then print the id or first summary
    (``detach``), or follow the job and print ``summarise(release)``."""
    import grpc

    from mpdp_services.cli.jobs import _stderr, _stdout_json
    from mpdp_services.common.endpoints import Endpoints
    from mpdp_services.operator.jobs import follow, release, submit

    ep = Endpoints.load(endpoints)
    try:
        first = submit(ep, submission)
    except grpc.RpcError as e:
        raise from_rpc(e, "the curator", ep.curator_address, "the job") from None
    job_id = first["job_id"]
    if detach:
        click.echo(json.dumps(first) if as_json else job_id)
        return
    last = first
    try:
        with _stderr().status(f"job {job_id}: {first['stage'] or first['state']}") if not as_json else _null() as status:
            if not first["terminal"]:
                for last in follow(ep, job_id):
                    if status is not None:
                        status.update(f"job {job_id}: {last['stage'] or last['state']}")
    except KeyboardInterrupt:
        _stderr().print(f"stopped watching; job {job_id} goes on at the curator (`mpdp jobs watch {job_id}`, `mpdp jobs cancel {job_id}`)")
        raise SystemExit(130) from None
    except grpc.RpcError as e:
        raise from_rpc(e, "the curator", ep.curator_address, f"to watch job {job_id}") from None
    if last["problem"]:
        raise CliError(f"job {job_id} failed ({last['problem']}): {last['detail'] or ''}. Nothing was published.", code="job_failed",
                       hint=f"`mpdp jobs logs {job_id}` shows each state it entered; a party's service.log says more")
    try:
        rel = release(ep, job_id)
    except grpc.RpcError as e:
        raise from_rpc(e, "the curator", ep.curator_address, f"the release of job {job_id}") from None
    out = summarise(rel)
    if as_json:
        print(json.dumps(out))
    elif show is not None:
        show(out)
    else:
        _stdout_json(out)


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


@click.group("model")
def model() -> None:
    """Released models of every protocol's jobs, from the curator's job host."""


@model.command("export")
@endpoints_option
@click.argument("job_id")
@click.option("--format", "fmt", type=click.Choice(["json", "npz"]), default="json", show_default=True,
              help="json: the whole release (weights or posterior, plan, guarantee, trust model); npz: its arrays, plus the rest as JSON under 'meta'")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="write here (default: JSON to stdout; npz needs --out)")
@click.option("--json", "as_json", is_flag=True, help="a failure is one JSON error object on stdout (the model is JSON either way)")
def export(endpoints: str, job_id: str, fmt: str, out: str | None, as_json: bool) -> None:
    """Write the model (or sum) any job released — Pathak, LMGC, HCB16, dp-gd, regression, DCA — read from the curator's
    store through its job host: coefficients, intercept and classes (or the posterior, or the sum), the guarantee and
    the trust model."""
    import grpc

    from mpdp_services.common.durable import write_atomic
    from mpdp_services.common.endpoints import Endpoints
    from mpdp_services.operator.export import exported
    from mpdp_services.operator.jobs import release

    if fmt == "npz" and not out:
        raise click.BadParameter("npz is binary: name a file", param_hint="--out")
    ep = Endpoints.load(endpoints)
    try:
        rel = release(ep, job_id)
    except grpc.RpcError as e:
        raise from_rpc(e, "the curator", ep.curator_address, f"the release of job {job_id}") from None
    try:
        doc, arrays = exported(rel)
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    if fmt == "json":
        text = json.dumps(doc)
        if out is None:
            click.echo(text)
            return
        write_atomic(out, text)
    else:
        import numpy as np

        buf = io.BytesIO()
        meta = {k: v for k, v in doc.items() if k not in arrays and k != "weights"}
        np.savez(buf, meta=np.array(json.dumps(meta)), **arrays)  # type: ignore[arg-type]
        write_atomic(out, buf.getvalue())  # type: ignore[arg-type]
    click.echo(f"wrote {rel.protocol} model {job_id} to {out}", err=True)
