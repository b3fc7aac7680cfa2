"""Operator side of `mpdp jobs`: the curator's jobs of every protocol (services/curator/operations.py)."""

from __future__ import annotations

import re
import time
from typing import Any, Iterator

import grpc

from mpdp.messages import common_pb2, operations_pb2 as pb, operations_pb2_grpc as pb_grpc
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.common.channels import CHANNEL_OPTIONS

TIMEOUT = 30.0


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
        "stage_seconds": ordered_stages(dict(s.stage_seconds), [e.state for e in s.events]),
        "events": [{"at": e.at_unix, "state": e.state, "problem": common_pb2.Problem.Name(e.problem) if e.problem else None} for e in s.events],
    }


def ordered_stages(stage_seconds: dict[str, float], states: list[str]) -> dict[str, float]:
    """Stages in the order the job went through them: by the first state-log entry naming them, then setup first
    and numbers in numeric order (stage2 before stage10); protobuf maps keep no order."""
    seen = {s.lower(): i for i, s in reversed(list(enumerate(states)))}

    def key(name: str) -> tuple:
        parts = re.split(r"(\d+)", name.lower())
        return (seen.get(name.lower(), len(states)), name.lower() != "setup", [int(p) if p.isdigit() else p for p in parts])

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


def _status(st: Any, stage: str | None = None) -> dict[str, Any]:
    return {"job_id": st.job_id, "state": st.state, "stage": stage if stage is not None else st.stage, "terminal": st.terminal,
            "problem": common_pb2.Problem.Name(st.problem) if st.problem else None, "detail": st.detail or None}


def follow(ep: Endpoints, job_id: str, poll: float = 0.5) -> Iterator[dict[str, Any]]:
    """A job's state and stage now and after each change, until it ends (`mpdp jobs watch`): streamed from the
    protocol's own watch where it has one (learner jobs: "round r of R"; Pathak: its stage; DCA: its state),
    else the catalog's summary, polled."""
    from mpdp.messages import dca_pb2_grpc, learner_pb2_grpc, pathak2010_pb2_grpc

    protocol = get_job(ep, job_id)["protocol"]
    ref = common_pb2.JobRef(job_id=job_id)
    ch, _ = _stub(ep)
    stream: Iterator[dict[str, Any]]
    with ch:
        if protocol in ("dpgd", "regression"):
            stream = (_status(st) for st in learner_pb2_grpc.LearnerCuratorStub(ch).WatchLearner(ref))
        elif protocol == "pathak2010":
            stream = (_status(st) for st in pathak2010_pb2_grpc.CuratorStub(ch).WatchJob(ref))
        elif protocol == "dca":
            stream = (_status(st, st.state.lower()) for st in dca_pb2_grpc.DcaCuratorStub(ch).WatchJob(ref))
        else:
            stream = _poll(ep, job_id, poll)
        for st in stream:
            yield st
            if st["terminal"]:
                return


def _poll(ep: Endpoints, job_id: str, poll: float) -> Iterator[dict[str, Any]]:
    seen = None
    while True:
        j = get_job(ep, job_id)
        st = {"job_id": j["job_id"], "state": j["state"], "stage": j["state"].lower(), "terminal": j["terminal"], "problem": j["problem"], "detail": j["detail"]}
        if st != seen:
            yield st
            seen = st
        if st["terminal"]:
            return
        time.sleep(poll)
