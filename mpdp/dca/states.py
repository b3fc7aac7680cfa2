"""Every transition of DCA, as data (style.md §5: one table per protocol; spec dca.md §4.3).

A row says: in ``state``, a role may take ``event`` from a sender of one of the listed kinds, and
then moves to ``next_state``. Events are message names (a message received) or lower-case local
events (``submit``, ``close``, ``announce``: the caller's action; ``agreement``, ``release``: a joint
condition the machine detects itself, like h11's second table). Rows with state ``*`` apply to every
non-terminal state. A message the role never takes is WRONG_ROLE; one it takes, but not in this
state, is STEP_OUT_OF_ORDER. States are named for what the role awaits or must do next.

Sender kinds: ``client`` (a PARTY certificate whose name is the share's client id), ``router`` (an
OPERATOR relaying shares for one node), ``node`` (a compute node of the job), ``curator`` (Charlie,
the job owner and aggregator), ``self`` (a local event).

``python -m mpdp.dca.states`` prints the table as Markdown for docs/protocols/dca.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from mpdp.protocol import Problem, RemoteProtocolError

CLIENT = "client"
COMPUTE_NODE = "compute_node"
AGGREGATOR = "aggregator"
FAILED = "FAILED"
ANY = "*"


@dataclass(frozen=True)
class Transition:
    role: str
    state: str
    event: str
    senders: tuple[str, ...]
    next_state: str


def _t(role: str, state: str, event: str, senders: str, next_state: str) -> Transition:
    return Transition(role, state, event, tuple(senders.split("|")), next_state)


STATES: dict[str, tuple[str, ...]] = {
    CLIENT: ("MUST_SEND_SHARES", "DONE", FAILED),
    COMPUTE_NODE: ("AWAIT_SHARES", "AWAIT_RECEIVED_SETS", "RELEASED", FAILED),
    AGGREGATOR: ("MUST_ANNOUNCE", "AWAIT_PARTIAL_SUMS", "RELEASED", FAILED),
}

TERMINAL: dict[str, tuple[str, ...]] = {
    CLIENT: ("DONE", FAILED),
    COMPUTE_NODE: ("RELEASED", FAILED),
    AGGREGATOR: ("RELEASED", FAILED),
}

TABLE: tuple[Transition, ...] = (
    # client i (§4.3 steps 1–2): draw η_i, share u_i, send m_{i,k} to every node k
    _t(CLIENT, "MUST_SEND_SHARES", "submit", "self", "DONE"),
    _t(CLIENT, ANY, "fail", "self", FAILED),
    # compute node k (§4.3 step 3 and fault tolerance)
    _t(COMPUTE_NODE, "AWAIT_SHARES", "ClientShare", "client|router", "AWAIT_SHARES"),
    _t(COMPUTE_NODE, "AWAIT_SHARES", "ShareBatch", "router", "AWAIT_SHARES"),
    _t(COMPUTE_NODE, "AWAIT_SHARES", "ReceivedClients", "node", "AWAIT_SHARES"),
    _t(COMPUTE_NODE, "AWAIT_SHARES", "SubmissionsClose", "curator", "AWAIT_RECEIVED_SETS"),
    _t(COMPUTE_NODE, "AWAIT_SHARES", "close", "self", "AWAIT_RECEIVED_SETS"),
    _t(COMPUTE_NODE, "AWAIT_RECEIVED_SETS", "ReceivedClients", "node", "AWAIT_RECEIVED_SETS"),
    _t(COMPUTE_NODE, "AWAIT_RECEIVED_SETS", "SubmissionsClose", "curator", "AWAIT_RECEIVED_SETS"),
    _t(COMPUTE_NODE, "AWAIT_RECEIVED_SETS", "close", "self", "AWAIT_RECEIVED_SETS"),
    _t(COMPUTE_NODE, "AWAIT_RECEIVED_SETS", "agreement", "self", "RELEASED"),
    _t(COMPUTE_NODE, "RELEASED", "SubmissionsClose", "curator", "RELEASED"),
    _t(COMPUTE_NODE, ANY, "JobAbort", "node|curator", FAILED),
    _t(COMPUTE_NODE, ANY, "fail", "self", FAILED),
    # aggregator = curator (§4.3 step 4)
    _t(AGGREGATOR, "MUST_ANNOUNCE", "announce", "self", "AWAIT_PARTIAL_SUMS"),
    _t(AGGREGATOR, "AWAIT_PARTIAL_SUMS", "close", "self", "AWAIT_PARTIAL_SUMS"),
    _t(AGGREGATOR, "AWAIT_PARTIAL_SUMS", "PartialSum", "node", "AWAIT_PARTIAL_SUMS"),
    _t(AGGREGATOR, "AWAIT_PARTIAL_SUMS", "release", "self", "RELEASED"),
    _t(AGGREGATOR, ANY, "JobAbort", "node", FAILED),
    _t(AGGREGATOR, ANY, "fail", "self", FAILED),
)

_INDEX: dict[tuple[str, str, str], Transition] = {(r.role, r.state, r.event): r for r in TABLE}
_EVENTS: dict[str, frozenset[str]] = {role: frozenset(r.event for r in TABLE if r.role == role) for role in STATES}


def lookup(role: str, state: str, event: str) -> Transition:
    """The row for (role, state, event), or WRONG_ROLE / STEP_OUT_OF_ORDER."""
    if event not in _EVENTS[role]:
        raise RemoteProtocolError(Problem.WRONG_ROLE, f"a {role} does not take {event}")
    row = _INDEX.get((role, state, event))
    if row is None and state not in TERMINAL[role]:
        row = _INDEX.get((role, ANY, event))
    if row is None:
        raise RemoteProtocolError(Problem.STEP_OUT_OF_ORDER, f"a {role} in {state} does not take {event}")
    return row


def markdown() -> str:
    lines = []
    for role in STATES:
        lines += [f"### {role}", "", "| state | event | from | next state |", "|---|---|---|---|"]
        lines += [f"| {r.state} | {r.event} | {', '.join(r.senders)} | {r.next_state} |" for r in TABLE if r.role == role]
        lines.append("")
    return "\n".join(lines)


def _check() -> None:
    for r in TABLE:
        assert r.state == ANY or r.state in STATES[r.role], r
        assert r.next_state in STATES[r.role], r


_check()

if __name__ == "__main__":
    print(markdown())
