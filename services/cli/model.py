"""`mpdp model export`: any job's released model from the curator's store, as JSON or NumPy npz; and the
CLI side of curator-hosted learner jobs (``mpdp train --model dp-gd``, ``mpdp regress``): submit, then follow or detach.

The curator runs every round of such a job itself. With ``--detach`` the command prints the job id and returns at
once; without it, it watches the job (stage "round r of R") and prints the release. Ctrl-C only stops watching:
the job goes on at the curator (``mpdp jobs watch JOB``, ``mpdp jobs cancel JOB``).
"""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any, Callable

import click

from mpdp_services.cli.errors import from_rpc
from mpdp_services.cli.options import endpoints_option

if TYPE_CHECKING:  # numpy and rich load when a command runs, not for its --help
    pass


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr)


def follow(client, job_id: str, as_json: bool, timeout: float | None = None):
    """Watch a learner job to its end (status on stderr); its final LearnerStatus. Ctrl-C stops watching only."""
    import grpc

    err = _console(stderr=True)
    last = None
    try:
        with err.status(f"job {job_id}: submitted") if not as_json else _null() as status:
            for last in client.watch(job_id, timeout):
                if status is not None:
                    status.update(f"job {job_id}: {last.stage}{' (DCA job ' + last.dca_job_id + ')' if last.dca_job_id else ''}")
    except KeyboardInterrupt:
        err.print(f"stopped watching; job {job_id} goes on at the curator (`mpdp jobs watch {job_id}`, `mpdp jobs cancel {job_id}`)")
        raise SystemExit(130) from None
    except grpc.RpcError as e:
        raise from_rpc(e, "the curator", None, f"watching job {job_id}") from None
    assert last is not None
    return last


def submit_and_follow(endpoints: str, spec, detach: bool, as_json: bool, summary: Callable[[object], dict]) -> None:
    """Submit ``spec``; print its id (``detach``) or follow it and print ``summary(model)``."""
    import grpc

    from mpdp.messages import common_pb2
    from mpdp_services.common.endpoints import Endpoints
    from mpdp_services.operator.learner import LearnerClient

    ep = Endpoints.load(endpoints)
    with LearnerClient(ep) as client:
        try:
            job_id = client.submit(spec)
        except grpc.RpcError as e:
            raise from_rpc(e, "the curator", ep.curator_address, "the job") from None
        if detach:
            click.echo(json.dumps({"job_id": job_id}) if as_json else job_id)
            return
        if not as_json:
            _console(stderr=True).print(f"job {job_id} submitted; the curator runs it (Ctrl-C stops watching only)")
        status = follow(client, job_id, as_json)
        if status.state != "DONE":
            raise click.ClickException(f"job {job_id} failed ({common_pb2.Problem.Name(status.problem)}): {status.detail}. Nothing was released.")
        try:
            model = client.model(job_id)
        except grpc.RpcError as e:
            raise from_rpc(e, "the curator", ep.curator_address, f"the model of job {job_id}") from None
    out = summary(model)
    print(json.dumps(out)) if as_json else _console().print_json(json.dumps(out))


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
