"""One place maps every Problem to one gRPC status code (style.md §5, janus error.rs)."""

from __future__ import annotations

import grpc

from mpdp.messages import common_pb2
from mpdp.protocol import ProtocolError

P = common_pb2.Problem

STATUS: dict[int, grpc.StatusCode] = {
    P.UNKNOWN_JOB: grpc.StatusCode.NOT_FOUND,
    P.WRONG_ROLE: grpc.StatusCode.PERMISSION_DENIED,
    P.STEP_OUT_OF_ORDER: grpc.StatusCode.FAILED_PRECONDITION,
    P.REPLAY: grpc.StatusCode.ALREADY_EXISTS,
    P.MALFORMED: grpc.StatusCode.INVALID_ARGUMENT,
    P.INSUFFICIENT_NOISE: grpc.StatusCode.FAILED_PRECONDITION,
    P.PEER_UNREACHABLE: grpc.StatusCode.UNAVAILABLE,
    P.BUDGET_EXCEEDED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    P.JOB_FAILED: grpc.StatusCode.ABORTED,
    P.INTERNAL: grpc.StatusCode.INTERNAL,
    P.INVALID_JOB: grpc.StatusCode.INVALID_ARGUMENT,
    P.PROBLEM_UNSPECIFIED: grpc.StatusCode.UNKNOWN,
}


def status_for(problem: int) -> grpc.StatusCode:
    return STATUS.get(problem, grpc.StatusCode.UNKNOWN)


def details(e: ProtocolError) -> str:
    return f"{e.problem_name}: {e.detail}"


async def abort(context: grpc.aio.ServicerContext, e: ProtocolError) -> None:
    await context.abort(status_for(e.problem), details(e))


def problem_from_status(code: grpc.StatusCode, details: str | None = None) -> int:
    """The Problem a peer refused a message with: named by the ``PROBLEM: …`` prefix every refusal carries
    (:func:`details`), else the best-effort inverse of :data:`STATUS`."""
    name = (details or "").split(":", 1)[0].strip()
    if name in P.keys() and name != "PROBLEM_UNSPECIFIED":
        return P.Value(name)
    for p, c in STATUS.items():
        if c == code and p != P.PROBLEM_UNSPECIFIED:
            return p
    return P.PEER_UNREACHABLE
