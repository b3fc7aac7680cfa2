"""Every transition of DCA, as data (one table per protocol; Heikkilä et al. 2017, Algorithm 1; rows and
engine: mpdp/protocol.py).

A row says: in ``state``, a role may take ``event`` from a sender of one of the listed kinds, and
then moves to its next state. Events are message names (a message received) or lower-case local
events (``submit``, ``close``, ``announce``: the caller's action; ``agreement``, ``release``: a joint
condition the machine detects itself, like h11's second table). Rows with state ``*`` apply to every
non-terminal state. A message the role never takes is WRONG_ROLE; one it takes, but not in this
state, is STEP_OUT_OF_ORDER. States are named for what the role awaits or must do next.

Sender kinds: ``client`` (a PARTY certificate whose name is the share's client id), ``router`` (an
OPERATOR relaying shares for one node), ``node`` (a compute node of the job), ``curator`` (Charlie,
the job owner and aggregator), ``worker`` (another process of the same node, over its local socket: a
node may run W workers, see :mod:`mpdp.dca.compute_node`), ``self`` (a local event).

Participants (who can fail a job): ``node`` and ``curator``; clients and routers cannot.
``python tools/render_tables.py`` writes the tables into docs/protocols/dca.md.
"""

from __future__ import annotations

from mpdp.protocol import ANY, FAILED, Row, row

CLIENT = "client"
COMPUTE_NODE = "compute_node"
AGGREGATOR = "aggregator"

# client i (Algorithm 1, steps 1–2): draw η_i, share u_i, send m_{i,k} to every node k
CLIENT_STATES: tuple[str, ...] = ("MUST_SEND_SHARES", "DONE", FAILED)
CLIENT_TABLE: tuple[Row, ...] = (
    row("MUST_SEND_SHARES", "submit", "self", "DONE"),
)

# compute node k (Algorithm 1, step 3, and fault tolerance)
COMPUTE_NODE_STATES: tuple[str, ...] = ("AWAIT_SHARES", "AWAIT_RECEIVED_SETS", "AWAIT_WORKER_SUMS", "RELEASED", FAILED)
COMPUTE_NODE_TABLE: tuple[Row, ...] = (
    row("AWAIT_SHARES", "ClientShare", "client|router", "AWAIT_SHARES"),
    row("AWAIT_SHARES", "ShareBatch", "router", "AWAIT_SHARES"),
    row("AWAIT_SHARES", "WorkerClaim", "worker", "AWAIT_SHARES"),
    row("AWAIT_SHARES", "ReceivedClients", "node", "AWAIT_SHARES"),
    row("AWAIT_SHARES", "VerifyKeyPiece", "node", "AWAIT_SHARES"),
    row("AWAIT_SHARES", "SubmissionsClose", "curator", "AWAIT_RECEIVED_SETS"),
    row("AWAIT_SHARES", "close", "self", "AWAIT_RECEIVED_SETS"),
    row("AWAIT_RECEIVED_SETS", "ReceivedClients", "node", "AWAIT_RECEIVED_SETS"),
    row("AWAIT_RECEIVED_SETS", "SubmissionsClose", "curator", "AWAIT_RECEIVED_SETS"),
    row("AWAIT_RECEIVED_SETS", "close", "self", "AWAIT_RECEIVED_SETS"),
    row("AWAIT_RECEIVED_SETS", "agreement", "self", "RELEASED"),
    row("AWAIT_RECEIVED_SETS", "gather", "self", "AWAIT_WORKER_SUMS"),
    row("AWAIT_WORKER_SUMS", "WorkerSum", "worker", "AWAIT_WORKER_SUMS"),
    row("AWAIT_WORKER_SUMS", "SubmissionsClose", "curator", "AWAIT_WORKER_SUMS"),
    row("AWAIT_WORKER_SUMS", "close", "self", "AWAIT_WORKER_SUMS"),
    row("AWAIT_WORKER_SUMS", "agreement", "self", "RELEASED"),
    row("RELEASED", "SubmissionsClose", "curator", "RELEASED"),
    row(ANY, "JobAbort", "node|curator", FAILED),
)

# aggregator = curator (Algorithm 1, step 3: the final aggregator)
AGGREGATOR_STATES: tuple[str, ...] = ("MUST_ANNOUNCE", "AWAIT_PARTIAL_SUMS", "RELEASED", FAILED)
AGGREGATOR_TABLE: tuple[Row, ...] = (
    row("MUST_ANNOUNCE", "announce", "self", "AWAIT_PARTIAL_SUMS"),
    row("AWAIT_PARTIAL_SUMS", "close", "self", "AWAIT_PARTIAL_SUMS"),
    row("AWAIT_PARTIAL_SUMS", "PartialSum", "node", "AWAIT_PARTIAL_SUMS"),
    row("AWAIT_PARTIAL_SUMS", "release", "self", "RELEASED"),
    row(ANY, "JobAbort", "node", FAILED),
)
