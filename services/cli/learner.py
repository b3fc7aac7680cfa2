"""The CLI side of curator-hosted learner jobs (dp-gd, regression): submit, then follow or detach.

``mpdp train --model dp-gd`` and ``mpdp regress`` submit the job to the curator, which runs every round itself.
With ``--detach`` the command prints the job id and returns at once; without it, it watches the job (stage
"round r of R") and prints the release. Ctrl-C only stops watching: the job goes on at the curator
(``mpdp jobs watch JOB``, ``mpdp jobs cancel JOB``).
"""

from __future__ import annotations

import json
from typing import Callable

import click
from rich.console import Console

err = Console(stderr=True)


def _refused(e) -> click.ClickException:
    return click.ClickException(f"the curator refused the job: {e.details()}")


def follow(client, job_id: str, as_json: bool, timeout: float | None = None):
    """Watch a learner job to its end (status on stderr); its final LearnerStatus. Ctrl-C stops watching only."""
    import grpc

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
            err.print(f"job {job_id} submitted; the curator runs it (Ctrl-C stops watching only)")
        status = follow(client, job_id, as_json)
        if status.state != "DONE":
            raise click.ClickException(f"job {job_id} failed ({common_pb2.Problem.Name(status.problem)}): {status.detail}. Nothing was released.")
        try:
            model = client.model(job_id)
        except grpc.RpcError as e:
            raise click.ClickException(e.details()) from None
    out = summary(model)
    print(json.dumps(out)) if as_json else Console().print_json(json.dumps(out))


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
