"""The one error table and the one way a service refuses an RPC (style.md §5, janus error.rs).

Every refusal goes through :func:`refuse`: the Problem picks the gRPC status from :data:`STATUS`, the
details are ``PROBLEM: short text`` bounded to :data:`MAX_DETAIL` characters with control characters
removed, and one WARNING line (no traceback) is logged. Text that came from the network is never echoed
as is: :func:`shown` prints an identifier only when it is short and plain, else a placeholder.
"""

from __future__ import annotations

import logging
import re
from typing import NoReturn

import grpc

from mpdp import limits
from mpdp.messages import common_pb2
from mpdp.protocol import ProtocolError
from mpdp_services.common import calls, metrics

P = common_pb2.Problem
log = logging.getLogger("mpdp.refusal")

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
    P.NOT_READY: grpc.StatusCode.UNAVAILABLE,
    P.OVERLOADED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    P.CANCELLED: grpc.StatusCode.ABORTED,
    P.PROBLEM_UNSPECIFIED: grpc.StatusCode.UNKNOWN,
}

MAX_DETAIL = 240  # characters of status details after the Problem name
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class Refused(Exception):
    """A job this service refused or that failed in it: its Problem (the gRPC status by :data:`STATUS`) and a short
    detail, raised by a service's own steps and turned into a refusal where a call answers (:func:`refuse`)."""

    def __init__(self, problem: int, detail: str) -> None:
        super().__init__(detail)
        self.problem, self.detail = problem, detail


def status_for(problem: int) -> grpc.StatusCode:
    return STATUS.get(problem, grpc.StatusCode.UNKNOWN)


def shown(value: object) -> str:
    """An identifier from the network, fit to print: itself if short and plain, else ``<invalid>``."""
    text = str(value)
    return repr(text) if limits.is_id(text) else "<invalid>"


def bounded(detail: str) -> str:
    text = _CONTROL.sub(" ", detail)
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 1] + "…"


def problem_name(problem: int) -> str:
    try:
        return P.Name(P.ValueType(problem))
    except ValueError:
        return "PROBLEM_UNSPECIFIED"


def details_for(problem: int, detail: str) -> str:
    return f"{problem_name(problem)}: {bounded(detail)}"


def details(e: ProtocolError) -> str:
    return details_for(e.problem, e.detail)


def method_of(context: grpc.aio.ServicerContext | None = None) -> str:
    """The method of the RPC being served, "?" outside one the gate wrapped. grpc.aio's servicer context does not
    expose it: the gate (rpc.RoleInterceptor) names each call it admits (:mod:`calls`)."""
    return calls.method()


async def refuse(context: grpc.aio.ServicerContext, problem: int, detail: str) -> NoReturn:
    """Refuse the RPC: the table's status, bounded details, one WARNING log line. Never returns."""
    text = details_for(problem, detail)
    method = method_of(context)
    log.warning("refused %s: %s", method, text)
    metrics.refused(method, problem_name(problem), status_for(problem).name)
    await context.abort(status_for(problem), text)
    raise AssertionError("unreachable: context.abort raises")  # pragma: no cover


async def abort(context: grpc.aio.ServicerContext, e: ProtocolError) -> NoReturn:
    """Refuse the RPC with a protocol error's Problem and detail."""
    await refuse(context, e.problem, e.detail)


async def relay(context: grpc.aio.ServicerContext, code: grpc.StatusCode, peer_details: str | None) -> NoReturn:
    """Pass on a refusal by the process this one relays for (a node's worker for its coordinator): the same
    Problem and detail, through this table again."""
    problem = problem_from_status(code, peer_details)
    text = peer_details or ""
    prefix = problem_name(problem) + ":"
    await refuse(context, problem, text[len(prefix):].strip() if text.startswith(prefix) else text)


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


MEANING: dict[int, str] = {
    P.UNKNOWN_JOB: "the job id names no job this service has or still remembers",
    P.WRONG_ROLE: "the caller's certificate (role, federation or exact name) may not send this",
    P.STEP_OUT_OF_ORDER: "a participant's message arrived before or after its step",
    P.REPLAY: "the same message from the same sender was already taken",
    P.MALFORMED: "the body does not parse, or a field is outside its documented range",
    P.INSUFFICIENT_NOISE: "a release would carry less noise than its guarantee needs; nothing is released",
    P.PEER_UNREACHABLE: "a participant the job needs did not answer within its deadline",
    P.BUDGET_EXCEEDED: "a party's privacy budget cannot pay the job's true (ε, δ)",
    P.JOB_FAILED: "the job has failed; its failure names the cause",
    P.INTERNAL: "a bug on the refusing side; its log has the cause",
    P.INVALID_JOB: "a job specification that can never run (unknown dataset, another data schema, duplicate names, bad parameters), or a DCA message "
                   "bound to another specification of the job than the receiver holds (its spec digest)",
    P.NOT_READY: "the service is starting up; retry",
    P.OVERLOADED: "a per-caller or per-service limit is reached; retry later",
    P.CANCELLED: "the federation's operator cancelled the job (`mpdp jobs cancel`); charges already made are kept",
}


def render_table() -> str:
    """The error table as markdown (docs/protocols/job-model.md carries it between markers)."""
    rows = ["| Problem | gRPC status | meaning |", "|---|---|---|"]
    for problem, code in STATUS.items():
        if problem == P.PROBLEM_UNSPECIFIED:
            continue
        rows.append(f"| `{problem_name(problem)}` | `{code.name}` | {MEANING[problem]} |")
    return "\n".join(rows) + "\n"
