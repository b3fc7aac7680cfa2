"""Compute node k of DCA (Heikkilä et al. 2017, Algorithm 1, step 3, and Sec. 3.1.3 "Fault tolerance").

Node k takes clients' messages m_{i,k}, agrees with the other nodes on A = ∩_l R_l (R_l: the clients
whose message reached node l) and sends the aggregator q_k = Σ_{i∈A} m_{i,k} mod 2^64 — never a sum that
includes a client missing at another node, and nothing at all when |A| < N − T (Thm 1: the noise would
fall short; :class:`~mpdp.dca.errors.InsufficientNoise`).

Agreement (ours). Each node reports R_k to every other node as disjoint deltas
(:class:`~mpdp.messages.dca_pb2.ReceivedClients`, numbered), once ``report_every`` clients (single shares or
in ShareBatches) are unreported, on the server's timer, and a final report when it closes (deadline, the curator's
SubmissionsClose, or N clients received). In a job with a roster a delta names clients by roster index, as
runs or a bitmap; otherwise by id (:mod:`mpdp.dca.agreement`). A node keeps, per client index, the mask of
nodes known to hold that client's message. A client whose mask is full is in A for good (sets only grow, and
a node's final set contains all it reported), so its share is folded into the O(d) running sum at once.
Shares of clients not yet confirmed wait in a pending buffer; at agreement the buffer holds exactly
R_k \\ A, which is discarded. The final report carries |R_k| and a digest of R_k; the receiver checks both,
and the partial sum carries a digest of A, which the aggregator compares across nodes.

Node noise (validated jobs with noise, :mod:`mpdp.dca.discrete`, "Node noise"). The clients of a validated job add
no noise and prove their data only; at agreement, before its partial sum exists, node k adds its own d draws of
N_Z(0, σ²) (σ² the job's, from the spec every role recomputes; exact sampler over a CSPRNG: os.urandom, or the
simulation seed in a seeded test job) to q_k, once: the PartialSum is kept and sent again unchanged. A node whose
noise cannot be drawn (σ below the sampler's range, or a draw that would not fit) sends nothing and fails the job.

Memory per job (the trade-off, stated): O(d) for the running sum; one node mask and one pending-row slot per
client index (2 + 4 bytes at M = 10; with a roster nothing else per client — no id, no object — and without one the id map needed to
refuse replays); plus the pending buffer — 8·d bytes per unconfirmed client holding a full vector, 32 bytes
per unconfirmed client holding a seed (seed-compressed jobs, nodes k ≥ 1). Unconfirmed = received here, not
yet reported by every other node, so with timely reports the buffer holds about one reporting window of
clients, not N; ``peak_pending`` records its high-water mark. A node running ahead of a slower peer takes no more
than ``backlog_limit`` such clients (see "Backlog" below). Only clients that never reach every node (taken beside
the limit once presumed stuck) can make the buffer grow towards O(N·d) (or O(32·N) on seed nodes). Alternatives rejected: keeping every share until the
end (always O(N·d)); folding at once and subtracting excluded clients later (impossible on the full-vector
node: it cannot re-derive u_i + r_{i,0}).

Submissions from clients and routers are validated per client: a bad one is rejected (REPLAY, MALFORMED
for a wrong length — i.e. wrong dimension — or the wrong share kind, WRONG_ROLE for a client not on the
roster or submitting for another client, STEP_OUT_OF_ORDER once submissions are closed or N clients are in)
and leaves the machine unchanged. A bad message from another node fails the job (see :mod:`mpdp.dca.engine`).

One spec everywhere (:mod:`mpdp.dca.spec`). Every share, batch, verify-key piece and received-set report carries the
spec digest its sender holds. One whose digest is not this node's (the digest of the spec it was announced) was made
for another specification of the job: it is refused INVALID_JOB and, like a message naming another job, never
touches the job (state, accounting, transcript), whoever sent it. A validated job's proofs and verify key are bound
to the digest as well (:func:`mpdp.dca.validation.binder`).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from mpdp.dca import discrete, mechanism, sharing, states, validation
from mpdp import limits
from mpdp.dca.agreement import ClientBook, decode_indices, encode_indices, is_run, roster_for
from mpdp.dca.engine import DcaMachine
from mpdp.dca.errors import InvalidJob
from mpdp.dca.params import DcaParams, valid_client_id
from mpdp.math import field as F
from mpdp.math.drbg import Drbg
from mpdp.messages import dca_pb2 as pb
from mpdp.protocol import CURATOR, LocalProtocolError, Output, Peer, Problem, ProtocolError, RemoteProtocolError, Reply, Send, admit_sender, require

DEFAULT_REPORT_EVERY = 256
DEFAULT_BACKLOG_BYTES = 64 << 20  # memory a node holds per job for its undecided clients before submissions wait (see "Backlog")
MALFORMED, REPLAY, WRONG_ROLE, STEP_OUT_OF_ORDER = Problem.MALFORMED, Problem.REPLAY, Problem.WRONG_ROLE, Problem.STEP_OUT_OF_ORDER
SPEC_BOUND = (pb.ClientShare, pb.ShareBatch, pb.ReceivedClients, pb.VerifyKeyPiece)  # the messages that carry a spec digest


def _short_ids(ids: list[str]) -> bool:
    """Every id has 1..64 characters (so at most 256 UTF-8 bytes: valid without encoding it)."""
    return not ids or (min(map(len, ids)) > 0 and max(map(len, ids)) <= 64)


class ComputeNodeMachine(DcaMachine):
    """Node k for one job. States: AWAIT_SHARES → AWAIT_RECEIVED_SETS → RELEASED (or FAILED)."""

    ROLE = states.COMPUTE_NODE
    STATES = states.COMPUTE_NODE_STATES
    TERMINAL = ("RELEASED", states.FAILED)
    TABLE = states.COMPUTE_NODE_TABLE

    def __init__(self, params: DcaParams, name: str, *, report_every: int = DEFAULT_REPORT_EVERY, record: bool = True, workers: int = 1,
                 backlog_bytes: int = DEFAULT_BACKLOG_BYTES) -> None:
        super().__init__(params.job_id, Peer("compute_node", name), record=record)
        self.params = params
        self.k = params.node_index(name)
        self.d = params.dimension
        self.report_every = max(1, report_every)
        # a validated job (mpdp.dca.validation): Field64 shares with a proof, verified with the other nodes
        self.plan = params.validation
        self._verdicts: validation.Verdicts | None = None
        self._rejected = np.zeros(0, dtype=bool)  # client index → its proof failed (held by every node, not in A)
        # its verify key: a hash of every node's piece, this node's drawn here (see "The verify key" below)
        self._pieces: list[bytes | None] = [None] * params.M
        self._verify_key = b""
        if self.plan is not None:
            self._verdicts = validation.Verdicts(self.plan, params.M, self.k)
            self._pieces[self.k] = validation.verify_key_piece()
        self._prechecked: dict[int, tuple[np.ndarray, bytes] | validation.MalformedShare] = {}  # id(ClientShare) → its check
        self.takes_seeds = params.node_gets_seed(self.k) and self.plan is None
        self._bit = 1 << self.k
        self._peers = [p for p in range(params.M) if p != self.k]
        self._book = ClientBook(params.M, self.k, self.d, roster_for(params))
        self.by_index = self._book.closed  # a roster job: nodes name clients by roster index
        # A roster that names its clients (a list, not a range) names federation identities: each such client
        # submits over its own certificate and nobody relays for it, so no slot can be filled by another caller.
        self.named = bool(params.roster)
        self.received = 0  # |R_k|
        self.confirmed = 0  # clients folded into the running sum (every node holds them)
        self._running = np.zeros(self.d, dtype=np.uint64)
        self._unreported: list[np.ndarray] = []  # indices received since the last report
        self._unreported_n = 0
        self._sent_seq = 0
        # peers' reports of their received sets
        self._peer_seqs: dict[int, set[int]] = {p: set() for p in self._peers}
        self._peer_count: dict[int, int] = {p: 0 for p in self._peers}
        self._peer_final: dict[int, pb.ReceivedClients] = {}
        self._peer_done: set[int] = set()
        self._agreed: np.ndarray | None = None  # indices of A, once agreed
        self._partial: pb.PartialSum | None = None
        # W worker processes (1 = this process takes every share): see "Workers" below
        self.workers = max(1, workers)
        self._owner = np.zeros(0, dtype=np.uint8)  # client index → worker holding its pending share (0 = here)
        self._to_confirm: dict[int, list[np.ndarray]] = {w: [] for w in range(1, self.workers)}
        self._expect: dict[int, int] = {w: 0 for w in range(1, self.workers)}  # clients of A summed at worker w
        self._worker_sums: dict[int, pb.WorkerSum] = {}
        self._to_drop: dict[int, list[np.ndarray]] = {w: [] for w in range(1, self.workers)}  # a validated job: proof failed
        # the backlog (see "Backlog" below): how many undecided clients this node takes before new shares wait
        self._backlog_base = max(4 * self.report_every, backlog_bytes // self.undecided_bytes)
        self.backlog_limit = self._backlog_base

    @classmethod
    def from_announcement(cls, name: str, announcement: pb.DcaJobAnnouncement, **kw: Any) -> "ComputeNodeMachine":
        if announcement.verify_key:
            raise InvalidJob("a validated job's verify key is the compute nodes' own: an announcement must not carry one")
        return cls(DcaParams.from_spec(announcement.job_id, announcement.spec), name, **kw)

    # -- the verify key ------------------------------------------------------------------------------
    # A validated job's query randomness is seeded by a key no client and not the curator may know or choose. Each
    # node draws a 32-byte piece (CSPRNG) when the job is announced and sends it to every other node (start); the
    # key is validation.verify_key(job, pieces in node order) once all M are in (key_ready). Shares are taken only
    # then: the servicer acknowledges the announcement once the key is ready, and the curator opens the job to
    # clients only when every node has acknowledged it. Argument: docs/protocols/dca.md, "The verify key".
    def start(self) -> list[Output]:
        """The job was announced: a validated job sends this node's piece of the verify key to every other node."""
        if self.plan is None:
            return []
        piece = self._pieces[self.k]
        assert piece is not None
        msg = pb.VerifyKeyPiece(job_id=self.job_id, piece=piece, spec_digest=self.params.spec_digest)
        return [Send(Peer("compute_node", self.params.nodes[p]), msg) for p in self._peers]

    @property
    def key_ready(self) -> bool:
        """Every node's piece is in (always true for an unvalidated job, which has no key)."""
        return self.plan is None or bool(self._verify_key)

    def _on_VerifyKeyPiece(self, sender: Peer, msg: pb.VerifyKeyPiece) -> list[Output]:
        require(self.plan is not None, MALFORMED, f"job {self.job_id} is not validated: it has no verify key")
        p = self.params.nodes.index(sender.name)
        require(self._pieces[p] is None, REPLAY, f"{sender} already sent its piece of the verify key")
        require(len(msg.piece) == validation.SEED, MALFORMED, f"a piece of the verify key is {validation.SEED} bytes")
        self._pieces[p] = bytes(msg.piece)
        if all(x is not None for x in self._pieces):
            self._verify_key = validation.verify_key(self.job_id, [x for x in self._pieces if x is not None], self.params.spec_digest)
        return []

    @property
    def rejected(self) -> int:
        """Clients of a validated job held by every node whose proof failed (not in A)."""
        return 0 if self._verdicts is None else self._verdicts.rejected

    # -- backlog -----------------------------------------------------------------------------------
    # A client received here is *undecided* until every node has reported it (and, in a validated job, its verdict is
    # in): until then this node keeps its pending row and, validated, a slot of M verifier records (this node's and
    # those of peers that verified it first). A node that runs ahead of a slower peer would hold that for every client
    # the peer has not reached yet: up to all N (measured: 59 % of N = 10⁵ at a seed node of a validated d = 10 job
    # fed as fast as it took shares). So the servicer holds new submissions while ``undecided`` is at
    # ``backlog_limit`` (about ``backlog_bytes`` of rows and records, at least four reports' worth of clients) until
    # the peers catch up. The peers' records held here for clients not received here are bounded by the peers' own
    # limits, so a node holds about M·backlog_bytes per job at most. A node never waits on a peer that waits on it: a
    # slower node's undecided clients are those its faster peers have already reported. Clients that reach some nodes
    # but never all (dropouts, or a client sending to one node only) are never decided; when none of this node's
    # clients is decided for a while although the backlog is full, the servicer calls :meth:`presume_stuck` and the
    # limit rises above them: such clients cost memory as before, at most one per roster entry, and each counts as
    # missing at agreement.
    @property
    def undecided_bytes(self) -> int:
        """What one undecided client costs this node, at most: its pending row and, validated, M verifier records."""
        return 8 * self.d + (self.params.M * self.plan.record_bytes if self.plan is not None else 0) + 64

    @property
    def decided(self) -> int:
        """Clients received here whose fate is known: folded into the sum, or rejected by their proofs."""
        return self.confirmed + self.rejected

    @property
    def undecided(self) -> int:
        """Clients received here not yet reported by every node (or, validated, not yet verified by every node)."""
        return self.received - self.decided

    @property
    def has_room(self) -> bool:
        """New shares may be taken now: fewer undecided clients than the limit (or no shares are taken any more: the
        machine refuses them itself)."""
        return self.state != "AWAIT_SHARES" or self.undecided < self.backlog_limit

    def presume_stuck(self) -> int:
        """The backlog is full and nothing was decided for a while: presume its clients will never reach every node and
        raise the limit above them. Returns how many clients that is."""
        stuck = self.undecided
        self.backlog_limit = max(self.backlog_limit, stuck + self._backlog_base)
        return stuck

    # -- public ------------------------------------------------------------------------------------
    def receive(self, sender: Peer, message: Any) -> list[Output]:
        """:meth:`mpdp.protocol.Machine.receive`, after the spec check: a message bound to another spec of this job
        (its ``spec_digest`` is not this node's) is refused INVALID_JOB and never touches the job, whoever sent it."""
        if isinstance(message, SPEC_BOUND):
            admit_sender(self.job_id, self._kinds(sender), sender, message)  # an outsider's or another job's: its own refusal first
            self.check_spec(sender, message.spec_digest, type(message).__name__)
        return super().receive(sender, message)

    def check_spec(self, sender: Peer, digest: bytes, what: str) -> None:
        """Refuse (INVALID_JOB) a message whose spec digest is not the digest of the spec this node was announced."""
        if digest != self.params.spec_digest:
            raise RemoteProtocolError(Problem.INVALID_JOB, f"{what} from {sender} is bound to another spec of job {self.job_id} than "
                                                           f"node {self.me.name} was announced (spec digests differ)")

    def close(self) -> list[Output]:
        """Stop taking shares (the node's own deadline) and send the final R_k to every other node."""
        return self._local("close")

    def flush_reports(self) -> list[Output]:
        """Report the clients received since the last report now (e.g. on a timer, to bound pending memory)."""
        if self.state != "AWAIT_SHARES":
            return []
        return self._report(final=False)

    def receive_shares(self, sender: Peer, shares: Sequence[pb.ClientShare]) -> tuple[list[Output], list[tuple[int, ProtocolError]]]:
        """Take a run of ClientShare messages from one sender (the backlog of one stream) in one step.

        The outcome is that of ``receive(sender, s)`` for every s in order: each share is accepted or rejected
        on its own, and a rejected share leaves the machine unchanged. A run in which every share would be
        accepted is checked and folded in with a few vectorised steps (as for a ShareBatch) instead of one
        machine step per share; any other run falls back to per-share steps. Received-set reports go out
        when ``report_every`` unreported clients have accumulated after the run, not inside it.

        Returns (outputs, rejections): the outputs start with one :class:`Reply` carrying a ShareReceipt with
        the number accepted (instead of one receipt per share); rejections are (position in ``shares``,
        error) — an error's ``notices`` must still be routed (they are set when the share failed the job).
        """
        out = self._fast_shares(sender, shares)
        if out is not None:
            return out, []
        accepted, outputs, rejected = 0, [], []
        self._precheck(sender, shares)
        try:
            for j, share in enumerate(shares):
                try:
                    for o in self.receive(sender, share):
                        if isinstance(o, Reply):
                            accepted += o.message.accepted
                        else:
                            outputs.append(o)
                except ProtocolError as e:
                    rejected.append((j, e))
        finally:
            self._prechecked.clear()
        return [Reply(pb.ShareReceipt(job_id=self.job_id, accepted=accepted))] + outputs, rejected

    def _precheck(self, sender: Peer, shares: Sequence[pb.ClientShare]) -> None:
        """A validated job: verify a run of shares' proofs in batched calls before the per-share steps take them
        (a pure function of each message and the verify key; the steps then find their result here). Only shares
        the per-share step would take are verified: the sender's own id, on the roster, not held here, the first of
        its id in the run, no more than the room left — a refused share costs no proof check."""
        if self.plan is None or self.state != "AWAIT_SHARES" or len(shares) < 2 or not self.key_ready or (self.named and sender.role != "party"):
            return
        room, seen, run = self.params.clients - self.received, set(), []
        for s in shares:
            cid = s.client_id
            if s.job_id != self.job_id or s.WhichOneof("share") != "validated" or cid in seen or (sender.role == "party" and sender.name != cid):
                continue
            if s.spec_digest != self.params.spec_digest:
                continue
            seen.add(cid)
            run.append(s)
        look = self._book.lookup([s.client_id for s in run]).tolist()
        run = [s for s, i in zip(run, look) if self._client_problem(s.client_id, int(i)) is None][:room]
        if len(run) < 2:
            return
        results = validation.check_shares(
            self.plan, [_share_fields(s.validated) for s in run], job_id=self.job_id, client_ids=[s.client_id for s in run], k=self.k,
            nodes=self.params.M, seeded=self.params.seed_compressed, verify_key=self._verify_key,
        )
        self._prechecked = {id(s): r for s, r in zip(run, results)}

    def _fast_shares(self, sender: Peer, shares: Sequence[pb.ClientShare]) -> list[Output] | None:
        """All of ``shares`` accepted in one step, or None (nothing changed) if any of them needs a closer look."""
        n = len(shares)
        if not n or self.state != "AWAIT_SHARES" or n > self.params.clients - self.received or self.plan is not None:
            return None
        row = self.lookup(self.state, "ClientShare")
        if self._kinds(sender).isdisjoint(row.senders):
            return None
        ids = [s.client_id for s in shares]
        if any(s.job_id != self.job_id for s in shares) or (sender.role == "party" and any(c != sender.name for c in ids)):
            return None
        if any(s.spec_digest != self.params.spec_digest for s in shares):
            return None  # refused one by one
        if self.named and sender.role != "party":
            return None
        if len(set(ids)) != n or not _short_ids(ids):
            return None
        field, width = ("mask_seed", sharing.SEED_BYTES) if self.takes_seeds else ("masked_vector", 8 * self.d)
        if any(s.WhichOneof("share") != field for s in shares):
            return None
        blobs = [getattr(s, field) for s in shares]  # each read of a bytes field copies it: read once
        if any(len(b) != width for b in blobs):
            return None
        look = self._book.lookup(ids)
        if (self.by_index and bool((look < 0).any())) or bool(self._book.has(look, self._bit).any()):
            return None
        if self.transcript is not None:
            self.transcript.extend((sender, s) for s in shares)
        if self.takes_seeds:
            self._accept(ids, look, None, blobs)
        else:
            self._accept(ids, look, sharing.unpack_u64(b"".join(blobs), self.d, n, copy=False), None)
        out: list[Output] = [Reply(pb.ShareReceipt(job_id=self.job_id, accepted=n))]
        if self._unreported_n >= self.report_every:
            out += self._report(final=False)
        self._move(row)
        return out + self._run_joint_events()

    def partial_sum(self) -> pb.PartialSum:
        """q_k once released (GetPartialSum); raises the job's error if it failed, STEP_OUT_OF_ORDER before."""
        if self._partial is not None:
            return self._partial
        if self.error is not None:
            raise self.error
        raise RemoteProtocolError(STEP_OUT_OF_ORDER, f"node {self.me.name} has not released q_k yet (state {self.state})")

    @property
    def clients_included(self) -> int:
        """|A| once agreed, else 0."""
        return 0 if self._agreed is None else int(self._agreed.size)

    @property
    def agreed_ids(self) -> tuple[str, ...] | None:
        """The ids of A, sorted, once agreed (computed on demand: a node keeps only indices)."""
        if self._agreed is None:
            return None
        return tuple(sorted(self._book.roster.names(self._agreed)))

    @property
    def pending(self) -> int:
        """Shares held back: received here, not yet known to be held by every node."""
        return self._book.pending

    @property
    def peak_pending(self) -> int:
        return self._book.peak_pending

    # -- engine hooks ---------------------------------------------------------------------------------
    def _sender_kind(self, sender: Peer) -> str | None:
        if sender.role == "worker":
            return "worker" if sender.name.isdigit() and 1 <= int(sender.name) < self.workers else None
        if sender.role == "compute_node":
            return "node" if sender.name in self.params.nodes and sender.name != self.me.name else None
        return {"curator": "curator", "operator": "router", "party": "client"}.get(sender.role)

    def _abort_notices(self, e: ProtocolError) -> list[Output]:
        return self._abort(e, [CURATOR] + [Peer("compute_node", self.params.nodes[p]) for p in self._peers])

    def _joint_event(self) -> str | None:
        if self.state == "AWAIT_SHARES" and self.received >= self.params.clients:
            return "close"
        if self.state == "AWAIT_RECEIVED_SETS" and len(self._peer_done) == len(self._peers):
            return "agreement" if self.workers == 1 else "gather"
        if self.state == "AWAIT_WORKER_SUMS" and len(self._worker_sums) == self.workers - 1:
            return "agreement"
        return None

    def _release_memory(self) -> None:
        self._book.drop_pending()
        self._running = np.zeros(self.d, dtype=np.uint64)
        if self._verdicts is not None:
            self._verdicts.clear()

    # -- step 2: shares ----------------------------------------------------------------------------------
    def _on_ClientShare(self, sender: Peer, msg: pb.ClientShare) -> list[Output]:
        cid = msg.client_id
        if sender.role == "party" and sender.name != cid:
            raise RemoteProtocolError(WRONG_ROLE, f"{sender} cannot submit for client {cid!r}")
        self._check_relay(sender)
        look = self._book.lookup([cid])
        problem = self._client_problem(cid, int(look[0]))
        if problem:
            raise RemoteProtocolError(*problem)
        kind = msg.WhichOneof("share")
        if self.plan is not None:
            require(kind == "validated", MALFORMED, f"job {self.job_id} is validated: it takes a ValidatedShare, got {kind}")
            require(self.key_ready, STEP_OUT_OF_ORDER, f"job {self.job_id}: the compute nodes have not agreed on its verify key yet")
            checked = self._prechecked.pop(id(msg), None)
            try:
                if checked is None:
                    checked = validation.check_share(
                        self.plan, _share_fields(msg.validated), job_id=self.job_id, client_id=cid, k=self.k, nodes=self.params.M,
                        seeded=self.params.seed_compressed, verify_key=self._verify_key,
                    )
                if isinstance(checked, validation.MalformedShare):
                    raise checked
            except validation.MalformedShare as e:
                raise RemoteProtocolError(MALFORMED, f"validated share: {e}") from None
            row, record = checked
            self._accept_validated([cid], look, row[None, :], [record])
        elif self.takes_seeds:
            require(kind == "mask_seed", MALFORMED, f"node {self.me.name} takes 32-byte mask seeds in this job, got {kind}")
            require(len(msg.mask_seed) == sharing.SEED_BYTES, MALFORMED, f"a mask seed must be {sharing.SEED_BYTES} bytes, got {len(msg.mask_seed)}")
            self._accept([cid], look, None, [msg.mask_seed])
        else:
            require(kind == "masked_vector", MALFORMED, f"node {self.me.name} takes masked vectors in this job, got {kind}")
            require(
                len(msg.masked_vector) == 8 * self.d,
                MALFORMED,
                f"wrong dimension: m_(i,k) must be 8·d = {8 * self.d} bytes (d = {self.d}), got {len(msg.masked_vector)}",
            )
            self._accept([cid], look, sharing.unpack_u64(msg.masked_vector, self.d)[None, :], None)
        out: list[Output] = [Reply(pb.ShareReceipt(job_id=self.job_id, accepted=1))]
        if self._unreported_n >= self.report_every:
            out += self._report(final=False)
        return out

    def _client_problem(self, cid: str, index: int) -> tuple[Problem.ValueType, str] | None:
        if not valid_client_id(cid):
            return MALFORMED, "client id must be 1..256 UTF-8 bytes"
        if index < 0 and self.by_index:
            return WRONG_ROLE, f"client {cid!r} is not on the roster of job {self.job_id}"
        if index >= 0 and self._book.has(np.array([index]), self._bit)[0]:
            return REPLAY, f"client {cid!r} already submitted to node {self.me.name}"
        return None

    def _check_relay(self, sender: Peer) -> None:
        """A job whose roster names its clients takes each client's share over that client's own certificate only."""
        if self.named and sender.role != "party":
            raise RemoteProtocolError(WRONG_ROLE, f"job {self.job_id} names its clients: each submits over its own certificate, nobody relays")

    def _on_ShareBatch(self, sender: Peer, msg: pb.ShareBatch) -> list[Output]:
        self._check_relay(sender)
        kind = msg.WhichOneof("shares")
        if self.plan is not None:  # n ValidatedShares in one message: lengths checked here, each client below
            require(kind == "validated" or not (msg.masked_vectors or msg.mask_seeds), MALFORMED,
                    f"job {self.job_id} is validated: a batch carries ValidatedShares (with their proofs), got {kind}")
            require(self.key_ready, STEP_OUT_OF_ORDER, f"job {self.job_id}: the compute nodes have not agreed on its verify key yet")
        elif kind == "validated":
            raise RemoteProtocolError(MALFORMED, f"job {self.job_id} is not validated: it takes no ValidatedShares")
        ids: list[str] | None = list(msg.client_ids)
        raw_idx = msg.client_indices
        look: np.ndarray | None = None
        if raw_idx:
            require(self.by_index, MALFORMED, "client_indices name roster indices: this job has no roster")
            require(not ids, MALFORMED, "a batch names its clients by client_ids or by client_indices, not both")
            require(len(raw_idx) % 4 == 0, MALFORMED, "client_indices must be packed 4-byte little-endian integers")
            look = np.frombuffer(raw_idx, dtype="<u4").astype(np.int64)
            ids = None
            n = look.size
        else:
            n = len(msg.client_ids)  # = len(ids)
        rows: np.ndarray | None = None
        seeds: list[bytes] | None = None
        packed: validation.PackedShares | None = None
        # every read of a protobuf bytes field returns a fresh copy: read each one once
        if self.plan is not None:
            v = msg.validated
            packed = validation.PackedShares(n, v.measurements, v.proofs, v.share_seeds, v.blinds, v.joint_rand_parts)
            require(n > 0 or not any(getattr(packed, f) for f in validation.PACKED_FIELDS), MALFORMED, "a batch without clients must carry no shares")
        elif n and self.takes_seeds:
            require(kind == "mask_seeds", MALFORMED, f"node {self.me.name} takes mask seeds in this job, got {kind}")
            data = msg.mask_seeds
            require(len(data) == sharing.SEED_BYTES * n, MALFORMED, f"{n} mask seeds must be {sharing.SEED_BYTES * n} bytes, got {len(data)}")
            seeds = sharing.split_seeds(data, n)
        elif n:
            require(kind == "masked_vectors", MALFORMED, f"node {self.me.name} takes masked vectors in this job, got {kind}")
            data = msg.masked_vectors
            require(
                len(data) == 8 * self.d * n,
                MALFORMED,
                f"wrong dimension: {n} vectors of d = {self.d} must be {8 * self.d * n} bytes, got {len(data)}",
            )
            rows = sharing.unpack_u64(data, self.d, n, copy=False)  # read-only view of ``data``: only summed or copied
        elif msg.masked_vectors or msg.mask_seeds:
            raise RemoteProtocolError(MALFORMED, "a batch without clients must carry no shares")
        room = self.params.clients - self.received
        receipt = pb.ShareReceipt(job_id=self.job_id)
        if look is None:
            assert ids is not None
            look = self._book.lookup(ids)
            clean = n <= room and len(set(ids)) == n and _short_ids(ids) and not (self.by_index and bool((look < 0).any()))
        else:
            in_range = look < self._book.size
            increasing = n < 2 or bool(np.all(look[1:] > look[:-1]))  # distinct without a sort (batches come in roster order)
            clean = n <= room and bool(in_range.all()) and (increasing or np.unique(look).size == n)
            if not clean:
                look = np.where(in_range, look, -1)
        clean = clean and not bool(self._book.has(look, self._bit).any())
        if clean:
            keep = list(range(n))
        else:  # per-client accounting
            keep = []
            in_batch: set = set()
            for j in range(n):
                cid = ids[j] if ids is not None else (self._book.roster.name(int(look[j])) if look[j] >= 0 else f"#{int(np.frombuffer(raw_idx, dtype='<u4')[j])}")
                key = cid if ids is not None else int(look[j])
                if ids is None and look[j] < 0:
                    problem: tuple[int, str] | None = (WRONG_ROLE, f"roster index {cid[1:]} is beyond N = {self.params.clients}")
                else:
                    problem = self._client_problem(cid, int(look[j]))
                if problem is None and key in in_batch:
                    problem = (REPLAY, f"client {cid!r} appears twice in one batch")
                if problem is None and len(keep) >= room:
                    problem = (STEP_OUT_OF_ORDER, f"node {self.me.name} already holds N = {self.params.clients} clients' shares")
                if problem is not None:
                    receipt.rejected.add(client_id=cid, problem=problem[0], detail=problem[1])
                    continue
                in_batch.add(key)
                keep.append(j)
        if keep and packed is not None:
            keep = self._take_validated_batch(ids, look, keep, packed, receipt)
        elif keep:
            whole = len(keep) == n
            self._accept(
                None if ids is None else (ids if whole else [ids[j] for j in keep]),
                look if whole else look[keep],
                None if rows is None else (rows if whole else rows[keep]),
                None if seeds is None else (seeds if whole else [seeds[j] for j in keep]),
            )
        receipt.accepted = len(keep)
        # the same rule as single shares: a report per report_every clients, not per batch (at d = 10⁴ a 4 MiB batch
        # holds 52 clients, and a report to M − 1 peers per batch cost the nodes more than the shares did)
        return [Reply(receipt)] + (self._report(final=False) if self._unreported_n >= self.report_every else [])

    def _take_validated_batch(self, ids: list[str] | None, look: np.ndarray, keep: list[int], packed: validation.PackedShares,
                              receipt: pb.ShareReceipt) -> list[int]:
        """A validated batch's clients that passed the per-client checks (``keep``): every one's share verified in one
        batched query, each bound to its own client id (as its own ClientShare would be); a malformed share refused
        (MALFORMED) on its own, the others taken. MALFORMED for the whole batch if a field is not n rows long."""
        plan, roster = self.plan, self._book.roster
        assert plan is not None
        names = ids if ids is not None else [roster.name(i) if i >= 0 else "" for i in look.tolist()]  # "": refused above, never taken
        try:
            validation.check_packed_lengths(plan, packed, k=self.k, nodes=self.params.M, seeded=self.params.seed_compressed)
            mine = packed if len(keep) == packed.clients else packed.rows(keep)  # refused rows cost no proof check
            checked = validation.check_packed(plan, mine, job_id=self.job_id, client_ids=[names[j] for j in keep], k=self.k,
                                              nodes=self.params.M, seeded=self.params.seed_compressed, verify_key=self._verify_key)
        except validation.MalformedShare as e:
            raise RemoteProtocolError(MALFORMED, f"validated batch: {e}") from None
        for at, bad in sorted(checked.refused.items()):
            receipt.rejected.add(client_id=names[keep[at]], problem=MALFORMED, detail=f"validated share: {bad}")
        good = checked.taken()
        taken = keep if good.size == len(keep) else [keep[at] for at in good.tolist()]
        if taken:
            rows, records = (checked.rows, checked.records) if good.size == len(keep) else (checked.rows[good], checked.records[good])
            self._accept_validated(None if self.by_index else [names[j] for j in taken], look[taken], rows, records)
        return taken

    def _accept(self, cids: list[str] | None, look: np.ndarray, rows: np.ndarray | None, seeds: list[bytes] | None) -> None:
        """Commit accepted shares (``cids`` may be None in a roster job): fold those every node already holds,
        hold back the rest."""
        idx = look if self.by_index else self._book.admit(cids, look)  # type: ignore[arg-type]
        full_now = self._book.mark(idx, self._bit)
        now = np.flatnonzero(full_now)
        later = np.flatnonzero(~full_now)
        n = idx.size
        self.received += n
        self._unreported.append(idx)
        self._unreported_n += n
        if now.size:
            self.confirmed += now.size
            if rows is not None:
                self._running += sharing.ring_sum(rows if now.size == n else rows[now])
            else:
                assert seeds is not None
                sharing.sum_expanded(seeds if now.size == n else [seeds[j] for j in now.tolist()], self.d, self._running)
        if later.size:
            if rows is not None:
                self._book.hold_rows(idx[later], rows[later])
            else:
                assert seeds is not None
                self._book.hold_seeds(idx[later], [seeds[j] for j in later.tolist()])

    def _accept_validated(self, cids: list[str] | None, look: np.ndarray, rows: np.ndarray, records: np.ndarray | list[bytes]) -> None:
        """Commit validated clients' shares (``cids`` may be None in a roster job): each output share (Field64) waits
        until every node's verifier record is in; then it is folded (valid) or dropped and counted (invalid). Those
        every node already holds are decided here, together."""
        assert self._verdicts is not None
        idx = look if self.by_index else self._book.admit(cids, look)  # type: ignore[arg-type]
        full_now = self._book.mark(idx, self._bit)
        self.received += idx.size
        self._unreported.append(idx)
        self._unreported_n += idx.size
        self._verdicts.put_own_many(idx, records)
        now = np.flatnonzero(full_now)
        if now.size:
            valid = self._settle(idx[now])
            if bool(valid.any()):
                self.confirmed += int(np.count_nonzero(valid))
                self._running = F.add(self._running, F.sum(rows[now[valid]], axis=0))
        later = np.flatnonzero(~full_now)
        if later.size:
            self._book.hold_rows(idx[later], rows[later])

    def _settle(self, idx: np.ndarray) -> np.ndarray:
        """Decide clients whose every record is in; flag the rejected ones (they leave A, and count like dropouts)."""
        assert self._verdicts is not None
        valid = self._verdicts.settle(idx)
        if not bool(valid.all()):
            need = int(idx.max()) + 1
            if self._rejected.size < need:
                grown = np.zeros(max(need, 2 * self._rejected.size, 64), dtype=bool)
                grown[: self._rejected.size] = self._rejected
                self._rejected = grown
            self._rejected[idx[~valid]] = True
        return valid

    def _excluded(self) -> np.ndarray | None:
        """The rejected clients as a flag per index (None when no client was rejected)."""
        if not self.rejected:
            return None
        out = np.zeros(self._book.size, dtype=bool)
        n = min(out.size, self._rejected.size)
        out[:n] = self._rejected[:n]
        return out

    # -- fault tolerance: received sets -------------------------------------------------------------
    def _report(self, *, final: bool) -> list[Output]:
        if not final and (not self._unreported_n or (self.state == "AWAIT_SHARES" and self.received >= self.params.clients)):
            return []  # nothing new, or N clients are in: the final report, sent in this same step, carries them
        idx = np.concatenate(self._unreported) if self._unreported else np.empty(0, dtype=np.int64)
        msg = pb.ReceivedClients(job_id=self.job_id, sequence=self._sent_seq, final=final, spec_digest=self.params.spec_digest)
        if self.by_index:
            runs, start, bitmap = encode_indices(idx)
            msg.index_runs.extend(runs)
            msg.bitmap_start, msg.bitmap = start, bitmap
        else:
            msg.client_ids.extend(self._book.roster.names(idx))
        if self._verdicts is not None:  # the receiver decodes a roster job's indices in ascending order
            msg.verifier_shares = self._verdicts.outgoing(np.sort(idx) if self.by_index else idx)
        if final:
            msg.total = self.received
            msg.digest = self._book.digest(self._bit)
        self._sent_seq += 1
        self._unreported, self._unreported_n = [], 0
        return [Send(Peer("compute_node", self.params.nodes[p]), msg) for p in self._peers]

    def _on_ReceivedClients(self, sender: Peer, msg: pb.ReceivedClients) -> list[Output]:
        p = self.params.nodes.index(sender.name)
        seqs = self._peer_seqs[p]
        if msg.sequence in seqs:
            raise RemoteProtocolError(REPLAY, f"received-set report {msg.sequence} from {sender} was already taken")
        final = self._peer_final.get(p)
        require(final is None or msg.sequence < final.sequence, MALFORMED, f"{sender} reported after its final set")
        if msg.final:
            require(final is None, MALFORMED, f"{sender} sent two final sets")
            require(not seqs or max(seqs) < msg.sequence, MALFORMED, f"{sender}'s final set must carry the last sequence number")
            require(len(msg.digest) == 32, MALFORMED, "a final received set needs a 32-byte digest")
        bit = 1 << p
        # validate everything before committing anything
        ids: list[str] = []
        if self.by_index:
            require(not msg.client_ids, MALFORMED, f"{sender} named clients by id in a roster job (roster indices expected)")
            try:
                limits.check_message("ReceivedClients", msg)
                look = decode_indices(msg.index_runs, msg.bitmap_start, msg.bitmap, self._book.size)
            except (limits.SpecError, ValueError) as e:
                raise RemoteProtocolError(MALFORMED, f"{sender}'s received-set report: {e}") from None
        else:
            require(not (msg.index_runs or msg.bitmap or msg.bitmap_start), MALFORMED, f"{sender} named clients by roster index in a job without a roster")
            ids = list(msg.client_ids)
            look = self._book.lookup(ids)
            if not is_run(look):  # a run of consecutive known indices is distinct, valid ids already
                if len(set(ids)) != len(ids):
                    raise RemoteProtocolError(MALFORMED, f"{sender} repeated a client id in one report")
                if not _short_ids(ids):
                    bad = [cid for cid in ids if not valid_client_id(cid)]
                    if bad:
                        raise RemoteProtocolError(MALFORMED, f"{sender} reported an invalid client id {bad[0]!r}")
        if bool(self._book.has(look, bit).any()):
            raise RemoteProtocolError(MALFORMED, f"{sender} reported a client twice")
        records = msg.verifier_shares
        if self.plan is None:
            require(not records, MALFORMED, f"{sender} sent verifier shares in a job without validation")
        else:
            width = self.plan.record_bytes
            require(len(records) == width * look.size, MALFORMED, f"{sender}'s report must carry {width} bytes of verifier record per client")
        # commit
        seqs.add(msg.sequence)
        self._peer_count[p] += look.size
        if look.size:
            idx = look if self.by_index else self._book.admit(ids, look)
            if self._verdicts is not None:
                self._verdicts.put(p, idx, records)
            confirmed = idx[self._book.mark(idx, bit)]
            if confirmed.size:
                self._confirm(confirmed)
        if msg.final:
            self._peer_final[p] = msg
        self._check_complete(p, sender)
        return []

    def _confirm(self, idx: np.ndarray) -> None:
        """Clients that just became members of A: fold the shares held here, queue the others for their worker.
        In a validated job, first decide each one: a rejected client's share is dropped, never summed."""
        if self.plan is not None:
            valid = self._settle(idx)
            if self.workers > 1:
                idx, valid = self._route_validated(idx, valid)
            self._book.take(idx[~valid], field=True)  # removed from the pending buffer, discarded
            good = idx[valid]
            self.confirmed += good.size
            if good.size:
                self._running = F.add(self._running, self._book.take(good, field=True))
            return
        self.confirmed += idx.size
        if self.workers > 1:
            self._grow_owner()
            owner = self._owner[idx]
            remote = owner != 0
            if remote.any():
                for w in np.unique(owner[remote]).tolist():
                    mine = idx[owner == w]
                    self._to_confirm[w].append(mine)
                    self._expect[w] += mine.size
                idx = idx[~remote]
        if idx.size:
            self._running += self._book.take(idx)

    def _check_complete(self, p: int, sender: Peer) -> None:
        final = self._peer_final.get(p)
        if final is None or len(self._peer_seqs[p]) != final.sequence + 1:
            return
        require(self._peer_count[p] == final.total, MALFORMED, f"{sender} said |R| = {final.total} but reported {self._peer_count[p]} clients")
        require(self._book.digest(1 << p) == final.digest, MALFORMED, f"the digest of {sender}'s received set does not match its reports")
        self._peer_done.add(p)

    # -- workers ----------------------------------------------------------------------------------------
    # A node may run W processes on one port (services/compute_node/worker.py). This machine lives in worker 0,
    # the coordinator; workers 1..W−1 check shares' shapes and keep the shares, the machine accounts their clients
    # (WorkerClaim: the same per-client checks as a ShareBatch, one bit per client, R_k and the reports as always),
    # tells each worker which of its clients are confirmed (in A), and at agreement adds the workers' partial sums
    # (WorkerSum) to its own: q_k = Σ_w Σ_{i ∈ A held by w} m_{i,k}, the same sum over the same A.
    #
    # A validated job: each worker verifies the proofs of the shares it takes with this node's verify key (handed to
    # it on the node's Unix socket: worker_key) and sends each client's verifier record with its claim. The records
    # join this node's own, ride in its received-set reports and are decided here exactly as for a share taken here;
    # a worker sums a share only once its client is decided valid, and drops it when decided invalid.
    def worker_key(self) -> bytes:
        """The verify key for this node's own workers (local socket only; b"" for an unvalidated job)."""
        if self.plan is None:
            return b""
        require(self.key_ready, STEP_OUT_OF_ORDER, f"job {self.job_id}: the compute nodes have not agreed on its verify key yet")
        return self._verify_key

    def _on_WorkerClaim(self, sender: Peer, msg: pb.WorkerClaim) -> list[Output]:
        w = int(sender.name)
        origin = Peer(msg.sender_role, msg.sender_name)
        require(origin.role in ("party", "operator"), WRONG_ROLE, f"{origin} cannot submit shares")
        relayed = self.named and origin.role != "party"  # refused per client, as _check_relay does for a share
        ids: list[str] | None = list(msg.client_ids)
        raw = msg.client_indices
        if raw:
            require(self.by_index and not ids, MALFORMED, "client_indices name roster indices (roster jobs only, not with client_ids)")
            require(len(raw) % 4 == 0, MALFORMED, "client_indices must be packed 4-byte little-endian integers")
            look = np.frombuffer(raw, dtype="<u4").astype(np.int64)
            ids = None
        else:
            assert ids is not None
            look = self._book.lookup(ids)
        n = look.size
        records = msg.verifier_records
        if self.plan is None:
            require(not records, MALFORMED, f"job {self.job_id} is not validated: a claim carries no verifier records")
        else:
            require(self.key_ready, STEP_OUT_OF_ORDER, f"job {self.job_id}: the compute nodes have not agreed on its verify key yet")
            require(len(records) == self.plan.record_bytes * n, MALFORMED, f"a claim must carry {self.plan.record_bytes} bytes of verifier record per client")
        reply = pb.WorkerClaimReply()
        verdict = np.zeros(n, dtype=np.uint8)
        room = self.params.clients - self.received
        keep: list[int] = []
        seen: set = set()
        valid = np.where(look < self._book.size, look, -1) if ids is None else look
        has = self._book.has(valid, self._bit)
        if ids is None:
            clean = bool((valid >= 0).all()) and (n < 2 or bool(np.all(look[1:] > look[:-1])))
        else:
            clean = len(set(ids)) == n and _short_ids(ids) and not (self.by_index and bool((look < 0).any()))
        clean = clean and not relayed and n <= room and not bool(has.any()) and (origin.role != "party" or (n == 1 and (ids[0] if ids else self._book.roster.name(int(look[0]))) == origin.name))
        for j in ([] if clean else range(n)):
            if ids is None:
                i = int(look[j])
                cid = self._book.roster.name(i) if i < self._book.size else f"#{i}"
                key: object = i
            else:
                cid, key = ids[j], ids[j]
            if origin.role == "party" and cid != origin.name:  # a client submits for itself only (as in ClientShare)
                problem: tuple[int, str] | None = (WRONG_ROLE, f"{origin} cannot submit for client {cid!r}")
            elif relayed:
                problem = (WRONG_ROLE, f"job {self.job_id} names its clients: each submits over its own certificate, nobody relays")
            elif ids is None:
                problem = None if int(look[j]) < self._book.size else (WRONG_ROLE, f"roster index {int(look[j])} is beyond N = {self.params.clients}")
            else:
                problem = self._client_problem(cid, int(look[j]))
            if problem is None and has[j]:
                problem = (REPLAY, f"client {cid!r} already submitted to node {self.me.name}")
            if problem is None and key in seen:
                problem = (REPLAY, f"client {cid!r} appears twice in one batch")
            if problem is None and len(keep) >= room:
                problem = (STEP_OUT_OF_ORDER, f"node {self.me.name} already holds N = {self.params.clients} clients' shares")
            if problem is not None:
                reply.rejected.add(client_id=cid, problem=problem[0], detail=problem[1])
                continue
            seen.add(key)
            keep.append(j)
        if clean:
            keep = list(range(n))
        idx = np.zeros(n, dtype=np.int64)
        if keep:
            kept = look[keep]
            got = kept if self.by_index else self._book.admit([ids[j] for j in keep], kept)  # type: ignore[index]
            full_now = self._book.mark(got, self._bit)
            self.received += got.size
            self._unreported.append(got)
            self._unreported_n += got.size
            self._grow_owner()
            self._owner[got[~full_now]] = w
            now_ok = full_now
            if self.plan is not None:
                assert self._verdicts is not None
                width = self.plan.record_bytes
                for j, i in zip(keep, got.tolist()):
                    self._verdicts.put_own(i, records[width * j : width * (j + 1)])
                now_ok = full_now.copy()
                if full_now.any():
                    now_ok[full_now] = self._settle(got[full_now])
            self.confirmed += int(now_ok.sum())
            self._expect[w] += int(now_ok.sum())
            idx[keep] = got
            verdict[keep] = np.where(full_now, np.where(now_ok, 2, 3), 1)
        reply.verdicts = verdict.tobytes()
        reply.indices = idx.astype("<u4").tobytes()
        queued = self._to_confirm[w]
        if queued:
            reply.confirmed = np.concatenate(queued).astype("<u4").tobytes()
            self._to_confirm[w] = []
        if self._to_drop[w]:
            reply.dropped = np.concatenate(self._to_drop[w]).astype("<u4").tobytes()
            self._to_drop[w] = []
        out: list[Output] = [Reply(reply)]
        if self._unreported_n >= self.report_every:
            out += self._report(final=False)
        return out

    def _on_gather(self) -> list[Output]:
        """Every peer's set is in: ask every worker for its partial sum, with its last confirmations."""
        out: list[Output] = []
        for w in range(1, self.workers):
            queued = self._to_confirm[w]
            confirmed = np.concatenate(queued).astype("<u4").tobytes() if queued else b""
            self._to_confirm[w] = []
            out.append(Send(Peer("worker", str(w)), pb.WorkerFinish(job_id=self.job_id, confirmed=confirmed)))
        return out

    def _on_WorkerSum(self, sender: Peer, msg: pb.WorkerSum) -> list[Output]:
        w = int(sender.name)
        if w in self._worker_sums:
            raise LocalProtocolError(Problem.INTERNAL, f"worker {w} sent two partial sums")
        if msg.clients_summed != self._expect[w] or len(msg.partial_sum) != 8 * self.d:
            raise LocalProtocolError(Problem.INTERNAL, f"worker {w} summed {msg.clients_summed} clients, {self._expect[w]} expected (or a wrong length)")
        part = sharing.unpack_u64(msg.partial_sum, self.d)
        if self.plan is None:
            self._running += part
        else:  # a validated job's sums are in Field64: the worker's is reduced, checked here all the same
            if bool((part >= F.P).any()):
                raise LocalProtocolError(Problem.INTERNAL, f"worker {w}'s partial sum is not in Field64")
            self._running = F.add(self._running, part)
        self._worker_sums[w] = msg
        return []

    def _route_validated(self, idx: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A validated job's decided clients held by workers: queue the valid ones for summing and the rejected ones
        for dropping at their worker; return the clients (and verdicts) whose shares are held here."""
        self._grow_owner()
        owner = self._owner[idx]
        remote = owner != 0
        for w in np.unique(owner[remote]).tolist():
            at_w = owner == w
            good, bad = idx[at_w & valid], idx[at_w & ~valid]
            if good.size:
                self._to_confirm[w].append(good)
                self._expect[w] += good.size
                self.confirmed += good.size
            if bad.size:
                self._to_drop[w].append(bad)
        return idx[~remote], valid[~remote]

    def _grow_owner(self) -> None:
        n = self._book.size
        if self._owner.size < n:
            grown = np.zeros(max(n, 2 * self._owner.size), dtype=np.uint8)
            grown[: self._owner.size] = self._owner
            self._owner = grown

    # -- closing and step 3 ---------------------------------------------------------------------------
    def _on_close(self) -> list[Output]:
        if self.state != "AWAIT_SHARES":
            return []  # already closed (e.g. N clients in, or the curator's close came first)
        return self._report(final=True)

    def _on_SubmissionsClose(self, sender: Peer, msg: pb.SubmissionsClose) -> list[Output]:
        return self._on_close()

    def _on_agreement(self) -> list[Output]:
        """A = {i : every node holds m_{i,·}}; q_k = Σ_{i∈A} m_{i,k}; refuse when |A| < N − T."""
        excluded = self._excluded()  # a validated job: clients whose proof failed are not in A
        agreed = np.flatnonzero(self._book.selection(self._book.full, excluded))
        assert agreed.size == self.confirmed, (agreed.size, self.confirmed)
        mechanism.require_enough_clients(agreed.size, self.params.clients, self.params.max_missing)
        self._agreed = agreed
        if self.params.node_noise:  # q_k + η_k: this node's share of the DP noise, added before q_k exists anywhere else
            self._running = F.add(self._running, F.from_signed(self.draw_noise()))
        self._partial = pb.PartialSum(
            job_id=self.job_id,
            partial_sum=sharing.pack_u64(self._running),
            clients_included=agreed.size,
            agreed_set_digest=self._book.digest(self._book.full, excluded),
            clients_rejected=self.rejected,
        )
        self._book.drop_pending()  # R_k \ A: never summed
        return [Send(CURATOR, self._partial)]


    def draw_noise(self) -> np.ndarray:
        """This node's noise η_k ~ N_Z(0, σ²)^d (units of 2^-f) for a validated job: exact, from a CSPRNG (os.urandom; a
        seeded test job: its simulation seed, labelled with the job and this node). Fails the job (INTERNAL) rather
        than send a partial sum with less noise than the guarantee counts."""
        acc = self.params.discrete
        if acc is None or not acc.by_nodes or acc.nodes != self.params.M:
            raise LocalProtocolError(Problem.INTERNAL, "this job's account has no node noise: nothing is sent")
        try:
            return discrete.node_noise(self.d, acc.sigma2, noise_rng(self.params, self.me.name))
        except discrete.NodeNoiseRefused as e:
            raise LocalProtocolError(Problem.INTERNAL, f"node noise refused: {e}; nothing is sent") from None


def noise_rng(params: DcaParams, name: str) -> Drbg:
    """The generator of node ``name``'s noise: os.urandom, or in a seeded test job (non-private, marked so in its
    release) the job's simulation seed labelled with the job and the node, so a test can recompute the noise."""
    if params.seeded:
        return Drbg.from_seed(params.simulation_seed).child(f"dca/{params.job_id}/node-noise/{name}")
    return Drbg.from_os()


def _share_fields(msg: pb.ValidatedShare) -> validation.ShareForNode:
    """The fields of a ValidatedShare (each protobuf bytes read once)."""
    return validation.ShareForNode(msg.measurement, msg.proof, msg.share_seed, msg.blind, msg.joint_rand_parts)
