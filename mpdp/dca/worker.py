"""The share-taking side of a compute-node worker (one node, W processes; Algorithm 1, step 3; ours).

A compute node may run W worker processes on one port (services/compute_node/worker.py). Worker 0, the
coordinator, holds the job's :class:`~mpdp.dca.compute_node.ComputeNodeMachine`. A worker w ≥ 1 holds one
:class:`WorkerShares` per job: it checks the *shape* of each share it receives (spec digest, kind, length — what needs the
bytes), asks the coordinator to account the clients (a :class:`~mpdp.messages.dca_pb2.WorkerClaim`: roster,
replay, room, sender — what needs the node-wide view), then keeps the accepted shares exactly as the machine keeps
its own: a share whose client is already in A is folded into the worker's running sum at once, the others wait
in a pending buffer until the coordinator confirms them (in a claim reply or in the final WorkerFinish). At
WorkerFinish the worker folds the last confirmations, drops the rest (R_k \\ A at this worker) and returns its
partial sum and the number of clients in it (:class:`~mpdp.messages.dca_pb2.WorkerSum`); the coordinator checks
that number against the clients of A it assigned to this worker and adds the sum to its own.

A validated job (:mod:`mpdp.dca.validation`) works the same way with three differences. The worker verifies
each share's proof with the node's verify key (the coordinator hands it over on the Unix socket when the worker
attaches) and sends each client's verifier record with the claim; the coordinator keeps them as its own records
and relays them in the node's received-set reports, so every node decides every client on the same M records.
A share is summed only once the coordinator has decided its client valid (verdict 2, or ``confirmed``); a share
whose client was decided invalid is dropped (verdict 3, or ``dropped``). Sums are in Field64.

Memory: O(d) running sum plus the pending buffer (no per-client state once a share is summed or dropped).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mpdp.dca import sharing, validation
from mpdp.dca.agreement import ClientBook
from mpdp.dca.params import DcaParams
from mpdp.math import field as F
from mpdp.messages import dca_pb2 as pb
from mpdp.protocol import Problem, RemoteProtocolError, require

MALFORMED = Problem.MALFORMED
SPEC_DETAIL = "a share bound to another spec of job {job} than node {node} was announced (spec digests differ)"  # mpdp.dca.spec


@dataclass
class Parsed:
    """Shares whose shape is right, ready to claim: ``names`` (ids, or a roster job's packed indices) and the data;
    ``rejected`` are (position in the input, ShareRejection) for shares refused on shape alone."""

    claim: pb.WorkerClaim
    positions: list[int]  # position in the input of each claimed share
    rows: np.ndarray | None
    seeds: list[bytes] | None
    rejected: list[tuple[int, pb.ShareRejection]]


class WorkerShares:
    """One job at one worker: parse, claim, keep, fold, finish."""

    def __init__(self, params: DcaParams, node: str, verify_key: bytes = b"") -> None:
        self.params = params
        self.plan = params.validation  # a validated job: shares are verified here with the node's verify key
        self.verify_key = verify_key
        if self.plan is not None and len(verify_key) != validation.SEED:
            raise ValueError("a validated job's worker needs the node's verify key")
        self.job_id = params.job_id
        self.k = params.node_index(node)
        self.node = node
        self.d = params.dimension
        self.takes_seeds = params.node_gets_seed(self.k) and self.plan is None
        self.running = np.zeros(self.d, dtype=np.uint64)
        self.summed = 0
        # the pending buffer, keyed by the coordinator's client index (a ClientBook used for its buffer only)
        self._held = ClientBook(max(2, params.M), 0, self.d)
        self.finished = False

    # -- shape -----------------------------------------------------------------------------------------
    def parse_batch(self, sender_role: str, sender_name: str, msg: pb.ShareBatch) -> Parsed:
        """A ShareBatch: refused as a whole (RemoteProtocolError) when its shape is wrong, as at the coordinator."""
        require(msg.job_id == self.job_id, Problem.UNKNOWN_JOB, "a batch names another job")
        require(msg.spec_digest == self.params.spec_digest, Problem.INVALID_JOB, SPEC_DETAIL.format(job=self.job_id, node=self.node))
        if self.plan is not None:
            return self._parse_validated_batch(sender_role, sender_name, msg)
        claim = pb.WorkerClaim(job_id=self.job_id, sender_role=sender_role, sender_name=sender_name)
        raw = msg.client_indices
        if raw:
            require(not msg.client_ids, MALFORMED, "a batch names its clients by client_ids or by client_indices, not both")
            require(len(raw) % 4 == 0, MALFORMED, "client_indices must be packed 4-byte little-endian integers")
            n = len(raw) // 4
            claim.client_indices = raw
        else:
            ids = list(msg.client_ids)
            n = len(ids)
            claim.client_ids.extend(ids)
        kind = msg.WhichOneof("shares")
        rows: np.ndarray | None = None
        seeds: list[bytes] | None = None
        if n and self.takes_seeds:
            require(kind == "mask_seeds", MALFORMED, f"node {self.node} takes mask seeds in this job, got {kind}")
            data = msg.mask_seeds
            require(len(data) == sharing.SEED_BYTES * n, MALFORMED, f"{n} mask seeds must be {sharing.SEED_BYTES * n} bytes, got {len(data)}")
            seeds = sharing.split_seeds(data, n)
        elif n:
            require(kind == "masked_vectors", MALFORMED, f"node {self.node} takes masked vectors in this job, got {kind}")
            data = msg.masked_vectors
            require(len(data) == 8 * self.d * n, MALFORMED, f"wrong dimension: {n} vectors of d = {self.d} must be {8 * self.d * n} bytes, got {len(data)}")
            rows = sharing.unpack_u64(data, self.d, n, copy=False)
        elif msg.masked_vectors or msg.mask_seeds:
            raise RemoteProtocolError(MALFORMED, "a batch without clients must carry no shares")
        return Parsed(claim, list(range(n)), rows, seeds, [])

    def parse_shares(self, sender_role: str, sender_name: str, shares: list[pb.ClientShare]) -> Parsed:
        """A run of ClientShare messages: each share of the wrong kind or length is rejected on its own."""
        claim = pb.WorkerClaim(job_id=self.job_id, sender_role=sender_role, sender_name=sender_name)
        if self.plan is not None:
            return self._parse_validated(claim, shares)
        field, width = ("mask_seed", sharing.SEED_BYTES) if self.takes_seeds else ("masked_vector", 8 * self.d)
        positions: list[int] = []
        blobs: list[bytes] = []
        rejected: list[tuple[int, pb.ShareRejection]] = []
        for j, s in enumerate(shares):
            kind = s.WhichOneof("share")
            blob = getattr(s, field) if kind == field else b""
            if s.spec_digest != self.params.spec_digest:
                rejected.append((j, pb.ShareRejection(client_id=s.client_id, problem=Problem.INVALID_JOB, detail=SPEC_DETAIL.format(job=self.job_id, node=self.node))))
                continue
            if kind != field:
                why = f"node {self.node} takes {field.replace('_', ' ')}s in this job, got {kind}"
            elif len(blob) != width:
                why = f"wrong dimension: m_(i,k) must be {width} bytes (d = {self.d}), got {len(blob)}" if field == "masked_vector" else f"a mask seed must be {width} bytes, got {len(blob)}"
            else:
                positions.append(j)
                blobs.append(blob)
                claim.client_ids.append(s.client_id)
                continue
            rejected.append((j, pb.ShareRejection(client_id=s.client_id, problem=MALFORMED, detail=why)))
        if self.takes_seeds:
            return Parsed(claim, positions, None, blobs, rejected)
        rows = sharing.unpack_u64(b"".join(blobs), self.d, len(blobs), copy=False) if blobs else None
        return Parsed(claim, positions, rows, None, rejected)

    def _parse_validated(self, claim: pb.WorkerClaim, shares: list[pb.ClientShare]) -> Parsed:
        """A validated job's shares: each proof queried here (as node k would), the records ride with the claim."""
        assert self.plan is not None
        rejected: list[tuple[int, pb.ShareRejection]] = []
        run: list[tuple[int, pb.ClientShare]] = []
        seen: set[str] = set()
        for j, s in enumerate(shares):  # what this process can refuse alone is refused before any proof check
            cid = s.client_id
            if s.spec_digest != self.params.spec_digest:
                problem, why = Problem.INVALID_JOB, SPEC_DETAIL.format(job=self.job_id, node=self.node)
            elif s.WhichOneof("share") != "validated":
                problem, why = MALFORMED, f"job {self.job_id} is validated: it takes a ValidatedShare, got {s.WhichOneof('share')}"
            elif claim.sender_role == "party" and claim.sender_name != cid:
                problem, why = Problem.WRONG_ROLE, f"party:{claim.sender_name} cannot submit for client {cid!r}"
            elif cid in seen:
                problem, why = Problem.REPLAY, f"client {cid!r} appears twice in one run of shares"
            else:
                seen.add(cid)
                run.append((j, s))
                continue
            rejected.append((j, pb.ShareRejection(client_id=cid, problem=problem, detail=why)))
        checked = validation.check_shares(
            self.plan, [validation.ShareForNode(s.validated.measurement, s.validated.proof, s.validated.share_seed, s.validated.blind,
                                                s.validated.joint_rand_parts) for _, s in run],
            job_id=self.job_id, client_ids=[s.client_id for _, s in run], k=self.k, nodes=self.params.M,
            seeded=self.params.seed_compressed, verify_key=self.verify_key,
        )
        positions: list[int] = []
        rows: list[np.ndarray] = []
        records: list[bytes] = []
        for (j, s), r in zip(run, checked):
            if isinstance(r, validation.MalformedShare):
                rejected.append((j, pb.ShareRejection(client_id=s.client_id, problem=MALFORMED, detail=f"validated share: {r}")))
                continue
            positions.append(j)
            rows.append(r[0])
            records.append(r[1])
            claim.client_ids.append(s.client_id)
        claim.verifier_records = b"".join(records)
        rejected.sort(key=lambda x: x[0])
        return Parsed(claim, positions, np.stack(rows) if rows else None, None, rejected)

    def _parse_validated_batch(self, sender_role: str, sender_name: str, msg: pb.ShareBatch) -> Parsed:
        """A validated ShareBatch: every row verified here as the coordinator would (validation.check_packed, each
        bound to its own client id); a malformed row is rejected on its own, the others claimed with their records."""
        assert self.plan is not None
        claim = pb.WorkerClaim(job_id=self.job_id, sender_role=sender_role, sender_name=sender_name)
        require(msg.WhichOneof("shares") == "validated", MALFORMED, f"job {self.job_id} is validated: a batch carries ValidatedShares (with their proofs)")
        raw = msg.client_indices
        if raw:
            require(not msg.client_ids, MALFORMED, "a batch names its clients by client_ids or by client_indices, not both")
            require(len(raw) % 4 == 0, MALFORMED, "client_indices must be packed 4-byte little-endian integers")
            index = np.frombuffer(raw, dtype="<u4").astype(np.int64)
            names = [self.params.roster_id(i) if i < self.params.clients else f"#{i}" for i in index.tolist()]
        else:
            names = list(msg.client_ids)
        v = msg.validated
        packed = validation.PackedShares(len(names), v.measurements, v.proofs, v.share_seeds, v.blinds, v.joint_rand_parts)
        try:
            checked = validation.check_packed(self.plan, packed, job_id=self.job_id, client_ids=names, k=self.k, nodes=self.params.M,
                                              seeded=self.params.seed_compressed, verify_key=self.verify_key)
        except validation.MalformedShare as e:
            raise RemoteProtocolError(MALFORMED, f"validated batch: {e}") from None
        positions: list[int] = []
        rows: list[np.ndarray] = []
        records: list[bytes] = []
        rejected: list[tuple[int, pb.ShareRejection]] = []
        for j, r in enumerate(checked):
            if isinstance(r, validation.MalformedShare):
                rejected.append((j, pb.ShareRejection(client_id=names[j], problem=MALFORMED, detail=f"validated share: {r}")))
                continue
            positions.append(j)
            rows.append(r[0])
            records.append(r[1])
        if raw:
            claim.client_indices = index[positions].astype("<u4").tobytes()
        else:
            claim.client_ids.extend(names[j] for j in positions)
        claim.verifier_records = b"".join(records)
        return Parsed(claim, positions, np.stack(rows) if rows else None, None, rejected)

    # -- the coordinator's answer ------------------------------------------------------------------------
    def apply(self, parsed: Parsed, reply: pb.WorkerClaimReply) -> tuple[int, list[tuple[int, pb.ShareRejection]]]:
        """Keep the accepted shares (fold or hold) and the confirmations; returns (accepted, rejections by position)."""
        n = len(parsed.positions)
        verdict = np.frombuffer(reply.verdicts, dtype=np.uint8)
        idx = np.frombuffer(reply.indices, dtype="<u4").astype(np.int64)
        top = 2 if self.plan is None else 3  # 3: a validated client decided invalid at once (its share is dropped)
        if verdict.size != n or idx.size != n or (verdict > top).any() or int((verdict == 0).sum()) != len(reply.rejected):
            raise ValueError("the coordinator's claim reply does not match the claim")
        now, hold, gone = np.flatnonzero(verdict == 2), np.flatnonzero(verdict == 1), np.flatnonzero(verdict == 3)
        if now.size:
            self._fold_rows(parsed, now)
        if hold.size:
            self._held.reserve(int(idx[hold].max()) + 1)
            if parsed.rows is not None:
                self._held.hold_rows(idx[hold], parsed.rows[hold])
            else:
                assert parsed.seeds is not None
                self._held.hold_seeds(idx[hold], [parsed.seeds[j] for j in hold.tolist()])
        self.confirm(reply.confirmed)
        self.discard(reply.dropped)
        refused = [parsed.positions[j] for j in np.flatnonzero(verdict == 0).tolist()]
        return int(now.size + hold.size + gone.size), parsed.rejected + list(zip(refused, reply.rejected))

    @staticmethod
    def refused(parsed: Parsed, problem: Problem.ValueType, detail: str) -> list[tuple[int, pb.ShareRejection]]:
        """The coordinator refused the whole claim (e.g. submissions closed): every claimed client is rejected."""
        names = list(parsed.claim.client_ids) or [f"#{i}" for i in np.frombuffer(parsed.claim.client_indices, dtype="<u4").tolist()]
        return parsed.rejected + [(pos, pb.ShareRejection(client_id=c, problem=problem, detail=detail)) for pos, c in zip(parsed.positions, names)]

    def confirm(self, packed: bytes) -> None:
        """Fold the held shares of clients the coordinator confirmed (members of A)."""
        if packed:
            idx = np.frombuffer(packed, dtype="<u4").astype(np.int64)
            if self.plan is None:
                self.running += self._held.take(idx)
            else:
                self.running = F.add(self.running, self._held.take(idx, field=True))
            self.summed += idx.size

    def discard(self, packed: bytes) -> None:
        """A validated job: drop the held shares of clients whose proof failed (never summed)."""
        if packed:
            self._held.take(np.frombuffer(packed, dtype="<u4").astype(np.int64), field=True)

    def finish(self, order: pb.WorkerFinish) -> pb.WorkerSum:
        """The last confirmations, then the partial sum; every share still held (R_k \\ A here) is dropped."""
        self.confirm(order.confirmed)
        self._held.drop_pending()
        self.finished = True
        out = pb.WorkerSum(job_id=self.job_id, partial_sum=sharing.pack_u64(self.running), clients_summed=self.summed)
        self.running = np.zeros(self.d, dtype=np.uint64)
        return out

    def drop(self) -> None:
        self._held.drop_pending()
        self.running = np.zeros(self.d, dtype=np.uint64)
        self.finished = True

    @property
    def pending(self) -> int:
        return self._held.pending

    def _fold_rows(self, parsed: Parsed, pos: np.ndarray) -> None:
        if parsed.rows is not None and self.plan is not None:
            self.running = F.add(self.running, F.sum(parsed.rows[pos], axis=0))
        elif parsed.rows is not None:
            self.running += sharing.ring_sum(parsed.rows if pos.size == parsed.rows.shape[0] else parsed.rows[pos])
        else:
            assert parsed.seeds is not None
            sharing.sum_expanded([parsed.seeds[j] for j in pos.tolist()], self.d, self.running)
        self.summed += pos.size


def rejection_receipt(job_id: str, accepted: int, rejected: list[tuple[int, pb.ShareRejection]]) -> pb.ShareReceipt:
    """The ShareReceipt a worker answers with (rejections in input order)."""
    r = pb.ShareReceipt(job_id=job_id, accepted=accepted)
    for _, rej in sorted(rejected, key=lambda x: x[0]):
        r.rejected.append(rej)
    return r


