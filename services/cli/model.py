"""`mpdp model export`: a released dp-gd or regression model from the curator's store, as JSON or NumPy npz; and the
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

from mpdp_services.cli.options import endpoints_option

if TYPE_CHECKING:  # numpy and rich load when a command runs, not for its --help
    import numpy as np


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr)


def _refused(e) -> click.ClickException:
    return click.ClickException(f"the curator refused the job: {e.details()}")


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
        raise click.ClickException(f"watching job {job_id}: {e.details()}") from None
    assert last is not None
    return last


def submit_and_follow(endpoints: str, spec, detach: bool, as_json: bool, summary: Callable[[object], dict]) -> None:
    """Submit ``spec``; print its id (``detach``) or follow it and print ``summary(model)``."""
    import grpc

    from mpdp.messages import common_pb2
    from mpdp_services.common.endpoints import Endpoints
    from mpdp_services.operator.learner import LearnerClient

    with LearnerClient(Endpoints.load(endpoints)) as client:
        try:
            job_id = client.submit(spec)
        except grpc.RpcError as e:
            raise _refused(e) from None
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
            raise click.ClickException(e.details()) from None
    out = summary(model)
    print(json.dumps(out)) if as_json else _console().print_json(json.dumps(out))


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


@click.group("model")
def model() -> None:
    """Released models of curator-hosted learner jobs (dp-gd, regression)."""


def _dpgd(m) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    import numpy as np

    from mpdp.dpgd.role import DpgdRun

    run = DpgdRun.of(m)
    doc = run.summary()
    doc["iterates"] = [np.asarray(it).tolist() for it in run.iterates]
    arrays = {"weights": np.asarray(run.model), "iterates": np.stack([np.asarray(it) for it in run.iterates])}
    return doc, arrays


def _regression(m) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    import numpy as np

    from mpdp.regression.role import RegressionRun

    run = RegressionRun.of(m)
    p = run.posterior
    releases = [{"job": r.job_id, "values": list(r.values), "epsilon": r.guarantee.epsilon, "delta": r.guarantee.delta, "statement": r.guarantee.statement}
                for r in (run.std_release, run.main_release)]
    doc = {
        "job_id": m.job_id, "model": "regression", "parties": list(m.parties), "bounds": list(run.plan.bounds), "epsilon": run.plan.epsilon,
        "delta": run.plan.delta, "mode": run.plan.mode, "posterior_mean": p.mean.tolist(), "posterior_precision": np.asarray(p.precision).tolist(),
        "posterior_lambda": p.lam, "thresholds": np.asarray(run.thresholds).tolist(), "multipliers": list(run.multipliers),
        "std_release": releases[0], "main_release": releases[1],
        "guarantee": {"epsilon": m.guarantee.epsilon, "delta": m.guarantee.delta, "mechanism": m.guarantee.mechanism, "statement": m.guarantee.statement},
        "trust_model": m.trust_model, "seeded": m.seeded,
    }
    arrays = {"posterior_mean": p.mean, "posterior_precision": np.asarray(p.precision), "thresholds": np.asarray(run.thresholds),
              "std_release": np.asarray(run.std_release.values), "main_release": np.asarray(run.main_release.values)}
    return doc, arrays


@model.command("export")
@endpoints_option
@click.argument("job_id")
@click.option("--format", "fmt", type=click.Choice(["json", "npz"]), default="json", show_default=True,
              help="json: the whole release (weights or posterior, plan, guarantee, trust model); npz: its arrays, plus the rest as JSON under 'meta'")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="write here (default: JSON to stdout; npz needs --out)")
def export(endpoints: str, job_id: str, fmt: str, out: str | None) -> None:
    """Write the model a dp-gd or regression job released, read from the curator's store."""
    import grpc

    from mpdp_services.common.durable import write_atomic
    from mpdp_services.common.endpoints import Endpoints
    from mpdp_services.operator.learner import LearnerClient

    if fmt == "npz" and not out:
        raise click.BadParameter("npz is binary: name a file", param_hint="--out")
    with LearnerClient(Endpoints.load(endpoints)) as client:
        try:
            m = client.model(job_id)
        except grpc.RpcError as e:
            raise click.ClickException(f"the curator answered {e.code().name}: {e.details()}") from None
    try:
        doc, arrays = (_dpgd if m.WhichOneof("model") == "dpgd" else _regression)(m)
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
    click.echo(f"wrote {m.protocol} model {job_id} to {out}", err=True)
