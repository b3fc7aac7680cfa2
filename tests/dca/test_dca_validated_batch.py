"""Validated shares in bulk: many clients' ValidatedShares in one ShareBatch (a load generator or router → node k).

Each row is checked as its own ClientShare would be: its proof is bound to its own client id (the joint randomness
and the query), a non-canonical row is refused on its own (MALFORMED), a client named twice in a batch or again in a
later batch is refused (REPLAY), a field whose length is not n rows refuses the whole batch and takes nothing, and an
unvalidated job refuses ValidatedShares. The packed client path produces the same shares a client's own machine would.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from mpdp.dca import validation
from mpdp.dca.aggregator import AggregatorMachine
from mpdp.dca.client import validated_cohort, validated_values_many
from mpdp.dca.compute_node import ComputeNodeMachine
from mpdp.dca.params import DcaParams
from mpdp.driver import Wire
from mpdp.math import field as F
from mpdp.math.drbg import Drbg
from mpdp.messages import dca_pb2 as pb
from mpdp.protocol import CURATOR, Peer, Problem, RemoteProtocolError

N, D, T = 12, 5, 3
ROUTER = Peer("operator", "router")


def _params(kind: str = "range", **kw) -> DcaParams:
    return DcaParams(job_id=f"vb-{kind}", dimension=D, clients=N, max_missing=T, nodes=("n0", "n1", "n2"), frac_bits=16, validate=kind,
                     simulation_seed=b"validated-batch", epsilon=1.0, delta=1e-5, sensitivity=2.0, noise="discrete-gaussian", **kw)


def _federation(prm: DcaParams) -> tuple[Wire, AggregatorMachine, list[ComputeNodeMachine]]:
    wire = Wire()
    agg = AggregatorMachine(prm)
    wire.machines[CURATOR] = agg
    ann = agg.announce()
    for o in ann:
        wire.machines[o.to] = ComputeNodeMachine.from_announcement(o.to.name, o.message, report_every=4)
    for o in ann:
        wire.route(o.to, wire.machines[o.to].start())
    wire.pump()
    return wire, agg, [wire.machines[Peer("compute_node", n)] for n in prm.nodes]


def _deliver(wire: Wire, node: ComputeNodeMachine, batch: pb.ShareBatch) -> pb.ShareReceipt:
    outs = node.receive(ROUTER, batch)
    wire.route(node.me, outs[1:])
    wire.pump()
    return outs[0].message


def _fields(msg: pb.ShareBatch) -> validation.PackedShares:
    v = msg.validated
    n = len(msg.client_ids) or len(msg.client_indices) // 4
    return validation.PackedShares(n, v.measurements, v.proofs, v.share_seeds, v.blinds, v.joint_rand_parts)


def test_encode_inputs_is_encode_input_row_by_row():
    for kind in ("range", "l2", "one-hot"):
        prm = _params(kind)
        rng = np.random.default_rng(1)  # public test data
        Z = np.eye(D)[rng.integers(D, size=6)] if kind == "one-hot" else rng.uniform(-1, 1, (6, D)) / (np.sqrt(D) if kind == "l2" else 1)
        ys = validated_values_many(prm, Z, Drbg.from_seed(kind))
        plan = prm.validation
        many = validation.encode_inputs(plan, ys)
        assert np.array_equal(many, np.stack([validation.encode_input(plan, y) for y in ys]))
        bad = ys.copy()
        bad[3, 0] = 10**9
        with pytest.raises(validation.ValidationError):
            validation.encode_inputs(plan, bad)


@pytest.mark.parametrize("seeded", [False, True], ids=["full", "seed-compressed"])
def test_a_packed_batch_verifies_like_its_clients_own_shares(seeded):
    """check_packed on a batch = check_shares on the same clients' shares, one by one (same rows, same records)."""
    prm = _params("range", seed_compressed=seeded)
    plan = prm.validation
    ids = [f"client-{i:06d}" for i in range(7)]
    ys = validated_values_many(prm, np.random.default_rng(2).uniform(-1, 1, (7, D)), Drbg.from_seed("p"))
    meas = validation.encode_inputs(plan, ys)
    packed = validation.client_shares_packed(plan, prm.job_id, ids, meas, prm.M, seeded=seeded)
    key = os.urandom(32)
    records = []
    for k in range(prm.M):
        got = validation.check_packed(plan, packed[k], job_id=prm.job_id, client_ids=ids, k=k, nodes=prm.M, seeded=seeded, verify_key=key)
        one = validation.check_shares(plan, [packed[k].row(i) for i in range(7)], job_id=prm.job_id, client_ids=ids, k=k, nodes=prm.M, seeded=seeded,
                                      verify_key=key)
        assert all(np.array_equal(a[0], b[0]) and a[1] == b[1] for a, b in zip(got, one))  # type: ignore[index]
        records.append([g[1] for g in got])  # type: ignore[index]
    assert all(validation.decide(plan, [records[k][i] for k in range(prm.M)]) for i in range(7))
    # the same rows named in another order: every proof is bound to its own id, so every client fails
    swapped = ids[1:] + ids[:1]
    bad = [validation.check_packed(plan, packed[k], job_id=prm.job_id, client_ids=swapped, k=k, nodes=prm.M, seeded=seeded, verify_key=key)
           for k in range(prm.M)]
    assert not any(validation.decide(plan, [bad[k][i][1] for k in range(prm.M)]) for i in range(7))  # type: ignore[index]


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_a_validated_job_takes_batches_per_client_and_releases_the_honest_sum():
    prm = _params("range")
    ids = [f"client-{i:06d}" for i in range(N)]
    Z = np.random.default_rng(3).uniform(-0.9, 0.9, (N, D))
    wire, agg, nodes = _federation(prm)
    batches = list(validated_cohort(prm, ids, Z, Drbg.from_seed("cohort"), batch_size=5))
    assert [len(b[0]) for b in batches] == [5, 5, 2]
    # batch 0 as sent; batch 1 with client 6's proof shares altered at node 1 and client 8's row non-canonical at node 0
    for k, node in enumerate(nodes):
        r = _deliver(wire, node, batches[0][1][k])
        assert (r.accepted, list(r.rejected)) == (5, [])
    ids1, msgs1 = batches[1]
    proof_width = len(msgs1[1].validated.proofs) // 5
    altered = bytearray(msgs1[1].validated.proofs)
    row = np.frombuffer(bytes(altered[proof_width : 2 * proof_width]), dtype="<u8").copy()
    row[3] = F.add(row[3], np.uint64(1))
    altered[proof_width : 2 * proof_width] = row.tobytes()
    msgs1[1].validated.proofs = bytes(altered)
    wide = bytearray(msgs1[0].validated.measurements)
    mw = len(wide) // 5
    wide[3 * mw : 3 * mw + 8] = (2**64 - 1).to_bytes(8, "little")
    msgs1[0].validated.measurements = bytes(wide)
    got = [_deliver(wire, node, msgs1[k]) for k, node in enumerate(nodes)]
    assert got[0].accepted == 4 and [(x.client_id, x.problem) for x in got[0].rejected] == [(ids1[3], Problem.MALFORMED)]
    assert "client-" not in got[0].rejected[0].detail
    assert [g.accepted for g in got[1:]] == [5, 5]
    # a replay of batch 0 at node 2, and a client named twice in one batch: refused per client, nothing else changes
    again = _deliver(wire, nodes[2], batches[0][1][2])
    assert again.accepted == 0 and {x.problem for x in again.rejected} == {Problem.REPLAY}
    ids2, msgs2 = batches[2]
    twice = pb.ShareBatch()
    twice.CopyFrom(msgs2[0])
    del twice.client_ids[:]
    twice.client_ids.extend([ids2[0], ids2[0]])
    r = _deliver(wire, nodes[0], twice)
    assert r.accepted == 1 and [x.problem for x in r.rejected] == [Problem.REPLAY]
    for k in (1, 2):
        assert _deliver(wire, nodes[k], msgs2[k]).accepted == 2
    wire.route(CURATOR, agg.close_submissions())
    wire.pump()
    rel = agg.dp_sum()
    # ids1[1] (altered proof) rejected by every node; ids1[3] (malformed at node 0) and ids2[1] (never at node 0) missing
    assert (rel.clients_included, rel.clients_rejected) == (N - 3, 1)
    assert np.max(np.abs(np.asarray(rel.values) - np.delete(Z, [6, 8, 11], axis=0).sum(axis=0))) < 6 * np.sqrt(rel.noise_variance) + 1


def test_a_batch_of_the_wrong_shape_or_kind_is_refused_whole():
    prm = _params("range")
    ids = [f"client-{i:06d}" for i in range(3)]
    wire, _, nodes = _federation(prm)
    _, msgs = next(validated_cohort(prm, ids, np.zeros((3, D)), Drbg.from_seed("s")))
    short = pb.ShareBatch()
    short.CopyFrom(msgs[0])
    short.validated.blinds = short.validated.blinds[:-1]
    for bad in (short, pb.ShareBatch(job_id=prm.job_id, spec_digest=prm.spec_digest, client_ids=ids, masked_vectors=bytes(24 * D))):
        with pytest.raises(RemoteProtocolError) as e:
            nodes[0].receive(ROUTER, bad)
        assert e.value.problem == Problem.MALFORMED and "client-" not in e.value.detail
    assert nodes[0].received == 0
    plain = DcaParams(job_id="plain", dimension=D, clients=N, max_missing=T, nodes=("n0", "n1", "n2"), epsilon=1.0, delta=1e-5, sensitivity=2.0)
    node = ComputeNodeMachine(plain, "n0")
    with pytest.raises(RemoteProtocolError) as e:
        node.receive(ROUTER, pb.ShareBatch(job_id="plain", spec_digest=plain.spec_digest, client_ids=ids, validated=msgs[0].validated))
    assert e.value.problem == Problem.MALFORMED


def _checked_at_every_node(prm: DcaParams, n: int, *, invalid: int) -> list[validation.Checked]:
    """n clients of zeros, client ``invalid`` with a non-bit, full shares checked at each of the M nodes."""
    plan = prm.validation
    ids = [f"client-{i:06d}" for i in range(n)]
    zeros = np.zeros((n, D), dtype=np.int64)
    meas = validation.encode_inputs(plan, zeros).astype(np.uint64)
    meas[invalid, 0] = F.scalar(3)  # not a bit: an invalid client
    packed = validation.client_shares_packed(plan, prm.job_id, ids, meas, prm.M, seeded=False)
    key = os.urandom(32)
    return [validation.check_packed(plan, packed[k], job_id=prm.job_id, client_ids=ids, k=k, nodes=prm.M, seeded=False, verify_key=key)
            for k in range(prm.M)]


def test_decide_many_is_decide_client_by_client():
    """The nodes' batched decision agrees with the one-client decision on valid, invalid and corrupted records."""
    prm = _params("range")
    plan = prm.validation
    checked = _checked_at_every_node(prm, 6, invalid=1)
    records = [[checked[k][i][1] for k in range(prm.M)] for i in range(6)]  # type: ignore[index]
    vb = plan.record_bytes - 2 * validation.SEED
    records[2][1] = records[2][1][:-1]  # a record one byte short
    records[3][2] = records[3][2][: vb + validation.SEED] + bytes(validation.SEED)  # a node claims another joint-randomness seed
    records[4][0] = (2**64 - 1).to_bytes(8, "little") + records[4][0][8:]  # a non-canonical verifier element
    one = [validation.decide(plan, r) for r in records]
    assert one == [True, False, False, False, False, True]
    assert validation.decide_many(plan, records).tolist() == one


def test_expand_shares_is_expand_share_row_by_row():
    plan = _params("range", seed_compressed=True).validation
    seeds = [os.urandom(validation.SEED) for _ in range(5)]
    binds = [validation.binder("vb-range", f"client-{i:06d}", plan.spec_digest) for i in range(5)]
    meas, proof = validation.expand_shares(plan, seeds, binds, 2)
    for i in range(5):
        one_m, one_p = validation.expand_share(plan, seeds[i], binds[i], 2)
        assert np.array_equal(meas[i], one_m) and np.array_equal(proof[i], one_p)
    assert not np.array_equal(validation.expand_shares(plan, seeds, binds, 1)[0], meas)  # bound to the node
    other = [validation.binder("vb-range", f"client-{i:06d}", bytes(32)) for i in range(5)]
    assert not np.array_equal(validation.expand_shares(plan, seeds, other, 2)[0], meas)  # and to the job's spec


def test_verdicts_decide_like_decide_many_whatever_the_order_records_come_in():
    """A node's record book: its own records leave in the order a report asks for them (each once), every client is
    decided from its M records as decide_many decides it, a client missing a record is invalid, and settled clients'
    room is reused (the store does not grow with the clients decided)."""
    prm = _params("range")
    plan = prm.validation
    checked = _checked_at_every_node(prm, 8, invalid=5)
    want = validation.decide_many(plan, [[checked[k][i][1] for k in range(prm.M)] for i in range(8)])  # type: ignore[index]
    assert want.tolist() == [True] * 5 + [False] + [True] * 2
    book = validation.Verdicts(plan, prm.M, 1)
    idx = np.array([7, 3, 0, 5, 1, 6, 2, 4])
    book.put_own_many(idx[:5], checked[1].records[idx[:5]])
    book.put_own_many(idx[5:], [checked[1][int(i)][1] for i in idx[5:]])  # type: ignore[index]
    assert book.outgoing(np.array([0, 3])) == checked[1].records[[0, 3]].tobytes()  # a part, sorted: the rest stays
    with pytest.raises(KeyError):
        book.outgoing(np.array([3]))
    rest = np.array([7, 5, 1, 6, 2, 4])
    assert book.outgoing(rest) == checked[1].records[rest].tobytes() and book.outgoing(np.zeros(0, dtype=np.int64)) == b""
    for k in (2, 0):
        order = np.array([4, 2, 6, 0, 1, 5, 3, 7]) if k == 2 else np.arange(8)
        keep = order[order != 6] if k == 0 else order  # node 0's record of client 6 never comes
        book.put(k, keep, checked[k].records[keep].tobytes())
    got = book.settle(np.arange(8))
    assert got.tolist() == [bool(w) and i != 6 for i, w in enumerate(want)] and book.rejected == 2
    size = len(book._blocks)
    for _ in range(3):  # the same clients again (a new round of the book): the settled clients' slots are reused
        for k in range(prm.M):
            book.put(k, np.arange(8), checked[k].records.tobytes())
        assert book.settle(np.arange(8)).tolist() == want.tolist()
    assert len(book._blocks) == size == 1
    with pytest.raises(ValueError):
        book.put(0, np.arange(2), bytes(plan.record_bytes))
