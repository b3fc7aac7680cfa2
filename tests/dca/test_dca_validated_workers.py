"""Validated DCA jobs on compute nodes of W processes (ComputeNodeMachine(workers=W) + mpdp.dca.worker), in memory:
each worker verifies the proofs of the shares it takes and sends the verifier records with its claim, the
coordinator relays them in the node's reports, and every node releases the same q_k over the same A, with the
same rejected count, as nodes of one process on the same shares (honest and invalid clients alike)."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from mpdp.dca import validation
from mpdp.dca.compute_node import ComputeNodeMachine
from mpdp.dca.params import DcaParams
from mpdp.dca.worker import WorkerShares
from mpdp.messages import dca_pb2 as pb
from mpdp.protocol import CURATOR, Peer, Problem, ProtocolError, Reply, Send

N, D, T = 12, 5, 3
NODES = ("n0", "n1", "n2")
ROUTER = Peer("operator", "router-0")


def _params(kind: str) -> DcaParams:
    return DcaParams(job_id=f"vw-{kind}", dimension=D, clients=N, max_missing=T, nodes=NODES, frac_bits=16, validate=kind,
                     simulation_seed=b"validated", epsilon=1.0, delta=1e-5, sensitivity=2.0, noise="discrete-gaussian")


def _shares(prm: DcaParams, bad: set[int]) -> list[list[pb.ValidatedShare]]:
    """Per client, its share for each node: honest inputs, or 10^9 in one coordinate for the clients in ``bad``."""
    plan = prm.validation
    assert plan is not None
    rng = np.random.default_rng(7)
    out = []
    for i in range(N):
        if plan.kind == "one-hot":
            y = np.eye(D, dtype=np.int64)[rng.integers(D)] * plan.scale
        else:
            y = rng.integers(-plan.scale // 2, plan.scale // 2, D).astype(np.int64)
        meas = validation.encode_input(plan, y)
        if i in bad:
            meas = meas.copy()
            meas[i % D] = 10**9
        forged = validation.client_shares(plan, prm.job_id, f"c{i:02d}", meas, prm.M, seeded=False)
        out.append([pb.ValidatedShare(measurement=s.measurement, proof=s.proof, share_seed=s.share_seed, blind=s.blind,
                                      joint_rand_parts=s.joint_rand_parts) for s in forged])
    return out


def _run(prm: DcaParams, shares: list[list[pb.ValidatedShare]], W: int, missing: set[tuple[int, int]] = frozenset(), batched: bool = False):  # type: ignore[assignment]
    """Every node as a coordinator and W − 1 workers; client i goes to process i mod W of each node (one ClientShare
    each, or with ``batched`` one ShareBatch of ValidatedShares per process and node)."""
    coords = {n: ComputeNodeMachine(prm, n, workers=W, report_every=3) for n in NODES}
    queue: collections.deque = collections.deque()
    partials: dict[str, pb.PartialSum] = {}
    workers: dict[str, dict[int, WorkerShares]] = {}

    def route(sender: Peer, outs) -> None:
        for o in outs:
            if isinstance(o, Send):
                queue.append((sender, o.to, o.message))

    def pump() -> None:
        while queue:
            sender, to, msg = queue.popleft()
            if to == CURATOR:
                if isinstance(msg, pb.PartialSum):
                    partials[sender.name] = msg
                continue
            node = sender.name if to.role == "worker" else to.name
            if to.role == "worker":
                out = workers[node][int(to.name)].finish(msg)
                route(Peer("compute_node", node), coords[node].receive(Peer("worker", to.name), out))
            else:
                route(Peer("compute_node", node), coords[node].receive(sender, msg))

    for n, m in coords.items():
        route(Peer("compute_node", n), m.start())
    pump()
    for n, m in coords.items():
        workers[n] = {w: WorkerShares(prm, n, m.worker_key()) for w in range(1, W)}
    if batched:
        for k, n in enumerate(NODES):
            for w in range(W):
                mine = [i for i in range(N) if i % W == w and (i, k) not in missing]
                rows = [shares[i][k] for i in mine]
                msg = pb.ShareBatch(job_id=prm.job_id, spec_digest=prm.spec_digest, client_ids=[f"c{i:02d}" for i in mine], validated=pb.ValidatedShares(
                    measurements=b"".join(r.measurement for r in rows), proofs=b"".join(r.proof for r in rows), share_seeds=b"",
                    blinds=b"".join(r.blind for r in rows), joint_rand_parts=b"".join(r.joint_rand_parts for r in rows)))
                if w == 0:
                    outs = coords[n].receive(ROUTER, msg)
                else:
                    ws = workers[n][w]
                    parsed = ws.parse_batch(ROUTER.role, ROUTER.name, msg)
                    outs = coords[n].receive(Peer("worker", str(w)), parsed.claim)
                    accepted, rejected = ws.apply(parsed, next(o.message for o in outs if isinstance(o, Reply)))
                    assert accepted == len(mine) and not rejected
                route(Peer("compute_node", n), [o for o in outs if not isinstance(o, Reply)])
                pump()
    for i, per_node in enumerate([] if batched else shares):
        for k, n in enumerate(NODES):
            if (i, k) in missing:
                continue
            msg = pb.ClientShare(job_id=prm.job_id, spec_digest=prm.spec_digest, client_id=f"c{i:02d}", validated=per_node[k])
            w = i % W
            if w == 0:
                outs = coords[n].receive(ROUTER, msg)
            else:
                ws = workers[n][w]
                parsed = ws.parse_shares(ROUTER.role, ROUTER.name, [msg])
                outs = coords[n].receive(Peer("worker", str(w)), parsed.claim)
                reply = next(o.message for o in outs if isinstance(o, Reply))
                accepted, rejected = ws.apply(parsed, reply)
                assert accepted == 1 and not rejected
            route(Peer("compute_node", n), [o for o in outs if not isinstance(o, Reply)])
            pump()
    for n, m in coords.items():
        route(Peer("compute_node", n), m.close())
    pump()
    for ws in workers.values():
        assert all(x.finished and x.pending == 0 for x in ws.values())
    return coords, partials


@pytest.mark.parametrize("kind", ["range", "l2", "one-hot"])
def test_workers_give_the_same_sums_and_rejections_as_one_process(kind):
    prm = _params(kind)
    shares = _shares(prm, bad={1, 6})
    missing = {(9, 2)}  # one honest client never reaches node 2: missing, like a dropout
    _, one = _run(prm, shares, 1, missing)
    assert set(one) == set(NODES)
    assert {(p.clients_included, p.clients_rejected) for p in one.values()} == {(N - 3, 2)}
    for W, batched in ((2, False), (3, False), (2, True), (3, True)):
        coords, many = _run(prm, shares, W, missing, batched)
        for n in NODES:
            assert many[n].partial_sum == one[n].partial_sum
            assert (many[n].clients_included, many[n].clients_rejected, many[n].agreed_set_digest) == (
                one[n].clients_included, one[n].clients_rejected, one[n].agreed_set_digest)
        assert len({m.agreed_ids for m in coords.values()}) == 1


def test_a_claim_must_carry_one_record_per_client_and_the_key_stays_until_agreed():
    prm = _params("range")
    m = ComputeNodeMachine(prm, "n0", workers=2)
    with pytest.raises(ProtocolError) as e:
        m.worker_key()  # the other nodes' pieces are not in: no key for the workers yet
    assert e.value.problem == Problem.STEP_OUT_OF_ORDER
    with pytest.raises(ValueError):
        WorkerShares(prm, "n0", b"")  # a validated job's worker cannot run without the key
    for p in NODES[1:]:
        m.receive(Peer("compute_node", p), pb.VerifyKeyPiece(job_id=prm.job_id, spec_digest=prm.spec_digest, piece=bytes(validation.SEED)))
    ws = WorkerShares(prm, "n0", m.worker_key())
    msg = pb.ClientShare(job_id=prm.job_id, spec_digest=prm.spec_digest, client_id="c00", validated=_shares(prm, set())[0][0])
    parsed = ws.parse_shares("operator", "router-0", [msg])
    assert len(parsed.claim.verifier_records) == prm.validation.record_bytes  # type: ignore[union-attr]
    short = pb.WorkerClaim()
    short.CopyFrom(parsed.claim)
    short.verifier_records = parsed.claim.verifier_records[:-1]
    with pytest.raises(ProtocolError) as e:
        m.receive(Peer("worker", "1"), short)
    assert e.value.problem == Problem.MALFORMED and not m.failed and m.received == 0
    # a share of the wrong kind is refused at the worker, never claimed; a batch is refused as a whole
    plain = ws.parse_shares("operator", "router-0", [pb.ClientShare(job_id=prm.job_id, spec_digest=prm.spec_digest, client_id="c01", masked_vector=bytes(8 * D))])
    assert not parsed.rejected and [r.problem for _, r in plain.rejected] == [Problem.MALFORMED] and not plain.positions
    with pytest.raises(ProtocolError):
        ws.parse_batch("operator", "router-0", pb.ShareBatch(job_id=prm.job_id, spec_digest=prm.spec_digest, client_ids=["c02"], masked_vectors=bytes(8 * D)))
    outs = m.receive(Peer("worker", "1"), parsed.claim)
    reply = next(o.message for o in outs if isinstance(o, Reply))
    assert ws.apply(parsed, reply)[0] == 1 and ws.pending == 1 and m.received == 1


def test_a_worker_checks_no_proof_of_a_share_it_can_refuse_alone(monkeypatch):
    """A party may submit only its own share, once: a run of shares for other clients, or copies of its own, is
    refused at the worker (WRONG_ROLE, REPLAY) before any proof is checked, so no certificate buys verifier work
    with shares that are refused anyway."""
    prm = _params("range")
    m = ComputeNodeMachine(prm, "n0", workers=2)
    for peer in NODES[1:]:  # the key is agreed once every node's piece is in
        m.receive(Peer("compute_node", peer), pb.VerifyKeyPiece(job_id=prm.job_id, spec_digest=prm.spec_digest, piece=bytes(validation.SEED)))
    ws = WorkerShares(prm, "n0", m.worker_key())
    shares = _shares(prm, set())
    checked: list[int] = []
    real = validation.check_shares
    monkeypatch.setattr(validation, "check_shares", lambda p, rows, **kw: checked.append(len(rows)) or real(p, rows, **kw))
    run = [pb.ClientShare(job_id=prm.job_id, spec_digest=prm.spec_digest, client_id=f"c{i:02d}", validated=shares[i][0]) for i in (1, 2, 0, 0, 0)]
    parsed = ws.parse_shares("party", "c00", run)
    assert [(j, r.problem) for j, r in parsed.rejected] == [(0, Problem.WRONG_ROLE), (1, Problem.WRONG_ROLE), (3, Problem.REPLAY), (4, Problem.REPLAY)]
    assert list(parsed.claim.client_ids) == ["c00"] and checked == [1]
