"""Operator side of `mpdp jobs`: the curator's jobs of every protocol (services/curator/operations.py)."""

from __future__ import annotations

import re
import secrets
import time
from typing import Any, Callable, Iterator, Sequence

import grpc

from mpdp import registry
from mpdp.messages import common_pb2, operations_pb2 as pb, operations_pb2_grpc as pb_grpc
from mpdp_services.common import errors
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.common.channels import CHANNEL_OPTIONS

TIMEOUT = 30.0
SUBMIT_TIMEOUT = 120.0
SUBMIT_ATTEMPTS = 3  # one submit and two resends of it, under one idempotency key
LOST = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)  # the answer may have been lost: resend


class JobEnded(grpc.RpcError):
    """The job ended without a release. An RPC error with the status of the job's Problem (the error table) and the
    curator's "PROBLEM: detail", as if the submit itself had waited for the end and been refused."""

    def __init__(self, summary: dict[str, Any]) -> None:
        problem = common_pb2.Problem.Value(summary["problem"]) if summary.get("problem") else common_pb2.JOB_FAILED
        detail = summary.get("detail") or f"job {summary['job_id']} ended {summary['state']} and published nothing"
        self.job_id = str(summary["job_id"])
        self.summary = summary
        self._code = errors.status_for(problem)
        self._details = detail if detail.split(":", 1)[0] in common_pb2.Problem.keys() else errors.details_for(problem, detail)
        super().__init__(self._details)

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def _stub(ep: Endpoints) -> tuple[grpc.Channel, pb_grpc.JobOperationsStub]:
    ch = grpc.secure_channel(ep.curator_address, ep.tls.channel_credentials(), options=CHANNEL_OPTIONS + [("grpc.ssl_target_name_override", ep.curator_name)])
    return ch, pb_grpc.JobOperationsStub(ch)


def as_dict(s: pb.JobSummary) -> dict[str, Any]:
    """A summary as plain JSON-able data (the CLI's --json and the Python API)."""
    return {
        "job_id": s.job_id,
        "protocol": s.protocol,
        "state": s.state,
        "terminal": s.terminal,
        "problem": common_pb2.Problem.Name(s.problem) if s.problem else None,
        "detail": s.detail or None,
        "created": s.created_unix,
        "ended": s.ended_unix or None,
        "seconds": (s.ended_unix - s.created_unix) if s.ended_unix else None,
        "released": s.released,
        "stage": s.stage,
        "stage_seconds": ordered_stages(dict(s.stage_seconds), [e.state for e in s.events], registry.BY_NAME[s.protocol].stages if s.protocol in registry.BY_NAME else ()),
        "events": [{"at": e.at_unix, "state": e.state, "problem": common_pb2.Problem.Name(e.problem) if e.problem else None} for e in s.events],
    }


def ordered_stages(stage_seconds: dict[str, float], states: list[str], order: Sequence[str] = ()) -> dict[str, float]:
    """Stages in the order the job went through them: the protocol's own ``order`` of its stages first (the registry's),
    then by the first state-log entry naming them, then setup first and numbers in numeric order (stage2 before
    stage10); protobuf maps keep no order."""
    seen = {s.lower(): i for i, s in reversed(list(enumerate(states)))}
    known = {s: i for i, s in enumerate(order)}

    def key(name: str) -> tuple:
        parts = re.split(r"(\d+)", name.lower())
        return (known.get(name, len(known)), seen.get(name.lower(), len(states)), name.lower() != "setup", [int(p) if p.isdigit() else p for p in parts])

    return {k: stage_seconds[k] for k in sorted(stage_seconds, key=key)}


def list_jobs(ep: Endpoints, protocol: str = "", live_only: bool = False, limit: int = 0) -> list[dict[str, Any]]:
    ch, stub = _stub(ep)
    with ch:
        answer = stub.ListJobs(pb.JobQuery(protocol=protocol, live_only=live_only, limit=limit), timeout=TIMEOUT)
    return [as_dict(s) for s in answer.jobs]


def get_job(ep: Endpoints, job_id: str) -> dict[str, Any]:
    ch, stub = _stub(ep)
    with ch:
        return as_dict(stub.GetJob(common_pb2.JobRef(job_id=job_id), timeout=TIMEOUT))


def cancel_job(ep: Endpoints, job_id: str) -> dict[str, Any]:
    ch, stub = _stub(ep)
    with ch:
        return as_dict(stub.CancelJob(common_pb2.JobRef(job_id=job_id), timeout=TIMEOUT))


def new_key() -> str:
    """A fresh idempotency key for one logical submit (CSPRNG; an id, mpdp.limits)."""
    return "sub-" + secrets.token_hex(12)


def submit(ep: Endpoints, submission: pb.JobSubmission, *, key: str | None = None, attempts: int = SUBMIT_ATTEMPTS) -> dict[str, Any]:
    """Submit a job of any protocol to the curator's job host; its first summary, at once (the curator runs it).

    The submission carries ``key`` (default: a fresh one). When the answer is lost (UNAVAILABLE without a Problem of
    the curator's, DEADLINE_EXCEEDED) the same submission is sent again with the same key, so the curator answers
    with the job the first send started instead of starting a second one."""
    sent = pb.JobSubmission()
    sent.CopyFrom(submission)
    sent.idempotency_key = key or submission.idempotency_key or new_key()
    for attempt in range(attempts):
        ch, stub = _stub(ep)
        try:
            with ch:
                return as_dict(stub.SubmitJob(sent, timeout=SUBMIT_TIMEOUT))
        except grpc.RpcError as e:
            problem = (e.details() or "").split(":", 1)[0]
            refused = problem in common_pb2.Problem.keys() and problem != "NOT_READY"  # the curator answered: its refusal stands
            if e.code() not in LOST or refused or attempt == attempts - 1:
                raise
        time.sleep(0.5 * 2**attempt)  # a client's back-off between resends, not a synchronisation
    raise AssertionError("unreachable")  # pragma: no cover


def run(ep: Endpoints, submission: pb.JobSubmission, *, timeout: float | None = None,
        on_summary: Callable[[dict[str, Any]], None] | None = None) -> tuple[dict[str, Any], pb.JobRelease]:
    """Submit (keyed, :func:`submit`), follow the job to its end and fetch what it published: (last summary,
    release). :class:`JobEnded` (a grpc.RpcError with the job's Problem) if it published nothing; grpc.RpcError if
    the curator refused it."""
    last = submit(ep, submission)
    if on_summary is not None:
        on_summary(last)
    if not last["terminal"]:
        for last in follow(ep, last["job_id"], timeout):
            if on_summary is not None:
                on_summary(last)
    if last["problem"]:
        raise JobEnded(last)
    return last, release(ep, last["job_id"])


def release(ep: Endpoints, job_id: str) -> pb.JobRelease:
    """What a job published (any protocol), from the curator's job host."""
    ch, stub = _stub(ep)
    with ch:
        return stub.GetRelease(common_pb2.JobRef(job_id=job_id), timeout=60)


def released(ep: Endpoints, job_id: str, field: str) -> Any:
    """What a job of one kind published (``field``: the JobRelease oneof, e.g. ``lmgc``, ``learner``); ValueError
    if the job is another protocol's, grpc.RpcError if it published nothing."""
    rel = release(ep, job_id)
    if rel.WhichOneof("release") != field:
        raise ValueError(f"job {job_id} is a {rel.protocol} job, not a {field} job")
    return getattr(rel, field)


def follow(ep: Endpoints, job_id: str, timeout: float | None = None) -> Iterator[dict[str, Any]]:
    """A job's summary now and after each change, until it ends (`mpdp jobs watch`): the job host's WatchJob, the
    same for every protocol (stage "round r of R" for learners, the Pathak stage, the DCA state)."""
    ch, stub = _stub(ep)
    with ch:
        for s in stub.WatchJob(common_pb2.JobRef(job_id=job_id), timeout=timeout):
            yield as_dict(s)
            if s.terminal:
                return


def started(ep: Endpoints, summary: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
    """The job's summary once it has left the admission queue (at once if it was not QUEUED): a DCA job's clients may
    fetch it and submit only from then on (docs/protocols/job-model.md §5)."""
    if summary.get("state") != "QUEUED":
        return summary
    for now in follow(ep, str(summary["job_id"]), timeout):
        if now["state"] != "QUEUED":
            return now
    return summary
