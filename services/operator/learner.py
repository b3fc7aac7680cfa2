"""The operator's side of the curator's learner jobs (services/curator/learner.py: dp-gd, regression, query), all
through the curator's one job host (services/operator/jobs.py): submit, follow, fetch the model. The curator runs
the rounds; this process may exit at any time."""

from __future__ import annotations

from typing import Any

import grpc

from mpdp.messages import learner_pb2 as pb, operations_pb2
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.operator import jobs


def submit(ep: Endpoints, spec: pb.LearnerJobSpec) -> str:
    """Submit a learner job through the job host (keyed: a resend never starts a second job); its id, at once."""
    return str(jobs.submit(ep, operations_pb2.JobSubmission(learner=spec))["job_id"])


def wait(ep: Endpoints, job_id: str, timeout: float | None = None) -> dict[str, Any]:
    """Follow the job to its end (the job host's WatchJob); its last summary (:func:`jobs.as_dict`)."""
    last: dict[str, Any] | None = None
    for last in jobs.follow(ep, job_id, timeout):
        pass
    assert last is not None
    return last


def fetch_model(ep: Endpoints, job_id: str) -> pb.LearnerModel:
    """What a learner job released (the job host's GetRelease); ValueError if the job is another protocol's,
    grpc.RpcError if it released nothing."""
    return jobs.released(ep, job_id, "learner")


def run_model(ep: Endpoints, spec: pb.LearnerJobSpec, what: str, failed: type[Exception]) -> pb.LearnerModel:
    """Submit ``spec`` through the curator's job host (keyed: a resend never starts a second job), wait for its end
    and return its model; ``failed`` (naming why) if nothing was released or the curator refused the job (``what``:
    the job's kind, for that message)."""
    try:
        return jobs.run(ep, operations_pb2.JobSubmission(learner=spec))[1].learner
    except jobs.JobEnded as e:
        s = e.summary
        raise failed(f"job {s['job_id']} {s['state']} ({s['problem']}): {s['detail'] or ''}") from None
    except grpc.RpcError as e:
        raise failed(f"the curator refused the {what} job: {e.details()}") from None
