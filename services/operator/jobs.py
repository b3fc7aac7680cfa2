"""Operator side of `mpdp jobs`: the curator's jobs of every protocol (services/curator/operations.py)."""

from __future__ import annotations

from typing import Any

import grpc

from mpdp.messages import common_pb2, operations_pb2 as pb, operations_pb2_grpc as pb_grpc
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.common.rpc import CHANNEL_OPTIONS

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
        "stage_seconds": dict(s.stage_seconds),
        "events": [{"at": e.at_unix, "state": e.state, "problem": common_pb2.Problem.Name(e.problem) if e.problem else None} for e in s.events],
    }


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
