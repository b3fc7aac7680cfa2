"""The validated DCA against hostile verify-key pieces, non-canonical field elements and split
joint-randomness hints, over real processes and mutual TLS; and a compute node that equivocates on its piece of the
verify key, through the real machines in one process.

- A compute-node certificate that the job does not name sends a piece of the verify key, before and after the key is
  agreed: refused (WRONG_ROLE) with a clean detail, the job unchanged.
- A validated share with a field element ≥ p (in its measurement at one node, in its proof at another): refused at
  that node (MALFORMED), the client counts as missing, never summed.
- A client that sends one node a joint-randomness hint different from the others' (each share well formed): every
  node takes its share and every node rejects the client alike (the nodes decide from the same records, so the
  decision cannot split), counted in ``clients_rejected``; the job releases the honest sum.
- A compute node that sends different pieces of the verify key to different peers: the honest nodes derive different
  keys, so their verifier shares no longer add up and every node rejects every client alike — no split decision, no
  client accepted by one node and not another, and with more than T rejected nothing is released. (A malicious node
  can always reject every client by sending garbage records; docs/limitations.md.)
- A party streaming a run of shares for other clients, or copies of its own, is refused share by share (WRONG_ROLE,
  REPLAY) — but the node expands and verifies the whole run first (expected failure: the batched precheck runs before
  the per-share refusals; in a seed-compressed job 32 bytes buy a whole share's expansion and FLP query); a router's
  validated ShareBatch likewise verifies the rows of clients it refused (expected failure).
"""

from __future__ import annotations

import asyncio
import math

import grpc
import numpy as np

from mpdp.dca import validation
from mpdp.dca.aggregator import AggregatorMachine
from mpdp.dca.client import ClientMachine
from mpdp.dca.compute_node import ComputeNodeMachine
from mpdp.dca.params import DcaParams
from mpdp.math import field as F
from mpdp.math.drbg import Drbg
from mpdp.messages import common_pb2, dca_pb2, dca_pb2_grpc
from mpdp.protocol import CURATOR, Peer, ProtocolError, Send
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.dca_client.client import submit_vector

from tests.adversarial.conftest import (job_host, NODES, assert_all_serving, assert_status, channel, client_ledger, create_dca, dca_spec, mint, operator_curator, refused,
                                        spec_digest_of, wait_dca)

D, F_BITS = 3, 16
HONEST = ["rv-honest-1", "rv-honest-2", "rv-honest-3"]


def _stream(fed, tls, node: str, shares: list[dca_pb2.ClientShare]) -> dca_pb2.ShareReceipt:
    """Stream raw shares to a node, each bound to the job's spec as the curator shows it (the digest every share carries)."""
    for s in shares:
        s.spec_digest = spec_digest_of(fed, s.job_id)
    with channel(fed, node, tls) as ch:
        return dca_pb2_grpc.ComputeNodeStub(ch).SubmitShares(iter(shares), timeout=30)


def _piece(fed, tls, node: str, job: str) -> grpc.RpcError:
    with channel(fed, node, tls) as ch:
        stub = dca_pb2_grpc.ComputeNodeStub(ch)
        return refused(lambda: stub.ShareVerifyKeyPiece(dca_pb2.VerifyKeyPiece(job_id=job, piece=b"\x07" * validation.SEED), timeout=30))


def _shares(params: DcaParams, job: str, cid: str) -> list[dca_pb2.ValidatedShare]:
    plan = params.validation
    assert plan is not None
    zeros = np.zeros(D, dtype=np.int64)
    meas = validation.encode_input(plan, zeros).astype(np.uint64)
    return [dca_pb2.ValidatedShare(measurement=s.measurement, proof=s.proof, share_seed=s.share_seed, blind=s.blind, joint_rand_parts=s.joint_rand_parts)
            for s in validation.client_shares(plan, job, cid, meas, params.M, seeded=False)]


def _non_canonical(blob: bytes, at: int) -> bytes:
    """``blob`` (encoded Field64 elements) with element ``at`` replaced by p + its value (the same residue, ≥ p)."""
    a = bytearray(blob)
    v = int.from_bytes(a[8 * at : 8 * at + 8], "little")
    a[8 * at : 8 * at + 8] = ((v + F.P) % 2**64 if v + F.P < 2**64 else F.P).to_bytes(8, "little")
    return bytes(a)


def test_hostile_pieces_non_canonical_shares_and_split_hints_are_refused_or_rejected_alike(fed):
    n, t = 6, 3
    job = create_dca(fed, dca_spec(n=n, d=D, deadline=45.0, max_missing=t, noise=dca_pb2.DISCRETE_GAUSSIAN, validate=dca_pb2.VALIDATE_RANGE,
                                   fractional_bits=F_BITS, sensitivity=2.0))
    outsider = mint(fed, "compute_node", "rv-node-x")
    e = _piece(fed, outsider, NODES[0], job)  # the key is agreed already (the job is open): an outsider's piece changes nothing
    assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
    with channel(fed, "curator", mint(fed, "party", "rv-reader")) as ch:
        ann = dca_pb2_grpc.DcaCuratorStub(ch).GetJob(common_pb2.JobRef(job_id=job), timeout=30)
    params = DcaParams.from_spec(job, ann.spec)
    assert params.validation is not None

    ep = Endpoints.load(fed.workdir)
    Z = np.random.default_rng(21).uniform(-0.8, 0.8, (len(HONEST), D))
    for cid, z in zip(HONEST, Z):
        assert not asyncio.run(submit_vector(ep, mint(fed, "party", cid), cid, job, z, ledger=client_ledger(fed, cid))).rejected

    # a field element ≥ p: in the measurement at node 0, in the proof at node 1; refused there, taken at node 2
    wide = _shares(params, job, "rv-wide")
    wide[0].measurement = _non_canonical(wide[0].measurement, 0)
    wide[1].proof = _non_canonical(wide[1].proof, 1)
    tls = mint(fed, "party", "rv-wide")
    for k, share in enumerate(wide):
        receipt = _stream(fed, tls, NODES[k], [dca_pb2.ClientShare(job_id=job, client_id="rv-wide", validated=share)])
        if k < 2:
            assert receipt.accepted == 0 and [r.problem for r in receipt.rejected] == [common_pb2.MALFORMED], receipt
            assert "non-canonical" in receipt.rejected[0].detail and len(receipt.rejected[0].detail) < 300
        else:
            assert receipt.accepted == 1, receipt

    # node 2 is told another joint-randomness part for node 0 than nodes 0 and 1 are: each share is well formed
    split = _shares(params, job, "rv-split")
    parts = bytearray(split[2].joint_rand_parts)
    parts[0] ^= 1
    split[2].joint_rand_parts = bytes(parts)
    tls = mint(fed, "party", "rv-split")
    for k, share in enumerate(split):
        assert _stream(fed, tls, NODES[k], [dca_pb2.ClientShare(job_id=job, client_id="rv-split", validated=share)]).accepted == 1

    e = _piece(fed, outsider, NODES[1], job)
    assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
    st = wait_dca(fed, job, timeout=120)
    assert st.state == "RELEASED", st
    with operator_curator(fed) as ch:
        r = job_host(ch).GetRelease(common_pb2.JobRef(job_id=job), timeout=30).dca
    assert (r.clients_included, r.clients_rejected) == (len(HONEST), 1), r  # rv-wide missing, rv-split rejected by all
    assert "rv-" not in str(r)
    err = np.array(r.values) - Z.sum(axis=0)
    assert np.all(np.abs(err) <= 6 * math.sqrt(r.noise_variance) + n * 2.0**-F_BITS), (err, r.noise_variance)
    assert_all_serving(fed)


# -- an equivocating node, in one process --------------------------------------------------------------------------
def _deliver(src: Peer, outs: list, by_peer: dict, agg: AggregatorMachine, *, tamper=None) -> None:
    """Route ``outs`` (sent by ``src``) to their machines, depth first; ``tamper(src, send)`` may rewrite a message."""
    for o in outs:
        if not isinstance(o, Send):
            continue
        msg = tamper(src, o) if tamper is not None else o.message
        target = agg if o.to == CURATOR else by_peer.get(o.to)
        if target is None:
            continue
        try:
            replies = target.receive(src, msg)
        except ProtocolError:
            continue
        _deliver(target.me, replies, by_peer, agg, tamper=tamper)


def test_a_node_equivocating_on_its_verify_key_piece_gets_every_client_rejected_alike_and_nothing_released():
    n, t = 6, 2
    prm = DcaParams(job_id="rv-equivocate", dimension=D, clients=n, max_missing=t, nodes=("n0", "n1", "n2"), frac_bits=F_BITS, validate="range",
                    simulation_seed=b"review", epsilon=1.0, delta=1e-5, sensitivity=2.0, noise="discrete-gaussian")
    agg = AggregatorMachine(prm)
    nodes = [ComputeNodeMachine.from_announcement(o.to.name, o.message) for o in agg.announce() if isinstance(o, Send)]
    by_peer = {m.me: m for m in nodes}
    other = validation.verify_key_piece()

    def equivocate(src: Peer, send: Send):  # n2 tells n1 another piece than the one it tells n0 and uses itself
        if src.name == "n2" and send.to.name == "n1" and isinstance(send.message, dca_pb2.VerifyKeyPiece):
            return dca_pb2.VerifyKeyPiece(job_id=prm.job_id, piece=other, spec_digest=prm.spec_digest)
        return send.message

    for m in nodes:
        _deliver(m.me, m.start(), by_peer, agg, tamper=equivocate)
    assert all(m.key_ready for m in nodes)
    assert nodes[0]._verify_key == nodes[2]._verify_key != nodes[1]._verify_key  # nobody cross-checks the keys

    Z = np.random.default_rng(5).uniform(-0.5, 0.5, (n, D))
    for i, z in enumerate(Z):
        cid = f"client-{i:06d}"
        _deliver(Peer("party", cid), ClientMachine(prm, cid, z, Drbg.from_seed(cid)).submit(), by_peer, agg)
    for m in nodes:  # N clients in: each node closed and sent its final set on its own
        assert m.terminal
    assert [m.received for m in nodes] == [n] * 3
    # no node accepted any client (no split decision): the nodes that decided rejected all six alike; the first to
    # fail aborted the others (the one still waiting for records fails with it)
    assert [m.confirmed for m in nodes] == [0, 0, 0] and sorted({m.rejected for m in nodes}) in ([n], [0, n])
    assert all(m.failed and m.error is not None and m.error.problem == common_pb2.INSUFFICIENT_NOISE for m in nodes)
    assert agg.state != "RELEASED"


# -- verification before refusal ------------------------------------------------------------------------------------
def _keyed_nodes(prm: DcaParams) -> tuple[AggregatorMachine, list[ComputeNodeMachine]]:
    agg = AggregatorMachine(prm)
    nodes = [ComputeNodeMachine.from_announcement(o.to.name, o.message) for o in agg.announce() if isinstance(o, Send)]
    by_peer = {m.me: m for m in nodes}
    for m in nodes:
        _deliver(m.me, m.start(), by_peer, agg)
    assert all(m.key_ready for m in nodes)
    return agg, nodes


def test_a_node_verifies_no_proof_of_a_share_it_will_refuse(monkeypatch):
    """A party may submit only its own share, once. A run of shares for other clients, or of copies of its own, is
    refused per share (WRONG_ROLE, REPLAY) — and must be refused before the node expands or verifies anything: in a
    seed-compressed job a 32-byte seed costs the node a full share's expansion and FLP query, so verifying first lets
    any party certificate buy unbounded verifier work per byte sent."""
    prm = DcaParams(job_id="rv-precheck", dimension=D, clients=6, max_missing=2, nodes=("n0", "n1", "n2"), frac_bits=F_BITS, validate="range",
                    simulation_seed=b"review", epsilon=1.0, delta=1e-5, sensitivity=2.0, noise="discrete-gaussian", seed_compressed=True)
    _, nodes = _keyed_nodes(prm)
    node = nodes[1]  # a seed node
    verified: list[int] = []
    real = validation.check_shares

    def counting(*args, **kw):
        verified.append(len(args[1]))
        return real(*args, **kw)

    monkeypatch.setattr(validation, "check_shares", counting)

    def share_for(cid: str) -> dca_pb2.ClientShare:
        c = ClientMachine(prm, cid, np.zeros(D), Drbg.from_seed(cid))
        return next(o.message for o in c.submit() if isinstance(o, Send) and o.to == node.me)

    mallory = Peer("party", "client-000000")
    own = share_for("client-000000")
    outs, rejected = node.receive_shares(mallory, [own])
    assert not rejected and node.received == 1
    verified.clear()
    others = [share_for(f"client-{i:06d}") for i in (1, 2, 3)]
    _, rejected = node.receive_shares(mallory, others + [own, own])
    assert [e.problem for _, e in rejected] == [common_pb2.WRONG_ROLE] * 3 + [common_pb2.REPLAY] * 2 and node.received == 1
    assert sum(verified) == 0, f"the node verified {sum(verified)} shares it then refused"


def test_a_node_verifies_no_proof_of_a_batched_share_it_refused(monkeypatch):
    """A router's validated ShareBatch replayed with one new client: the two replayed clients are refused (REPLAY) by
    the per-client checks, and only the new client's share should be expanded and verified."""
    prm = DcaParams(job_id="rv-batch", dimension=D, clients=6, max_missing=2, nodes=("n0", "n1", "n2"), frac_bits=F_BITS, validate="range",
                    simulation_seed=b"review", epsilon=1.0, delta=1e-5, sensitivity=2.0, noise="discrete-gaussian", seed_compressed=True)
    _, nodes = _keyed_nodes(prm)
    node = nodes[1]
    plan = prm.validation
    assert plan is not None
    zeros = np.zeros(D, dtype=np.int64)

    def batch(ids: list[str]) -> dca_pb2.ShareBatch:
        meas = np.stack([validation.encode_input(plan, zeros)] * len(ids)).astype(np.uint64)
        pk = validation.client_shares_packed(plan, prm.job_id, ids, meas, prm.M, seeded=True)[node.k]
        return dca_pb2.ShareBatch(job_id=prm.job_id, spec_digest=prm.spec_digest, client_ids=ids, validated=dca_pb2.ValidatedShares(
            measurements=pk.measurements, proofs=pk.proofs, share_seeds=pk.share_seeds, blinds=pk.blinds, joint_rand_parts=pk.joint_rand_parts))

    router = Peer("operator", "rv-router")
    receipt = node.receive(router, batch(["client-000000", "client-000001"]))[0].message
    assert receipt.accepted == 2 and node.received == 2
    verified: list[int] = []
    real = validation.check_packed

    def counting(p, pk, **kw):
        verified.append(pk.clients)
        return real(p, pk, **kw)

    monkeypatch.setattr(validation, "check_packed", counting)
    receipt = node.receive(router, batch(["client-000000", "client-000001", "client-000002"]))[0].message
    assert receipt.accepted == 1 and [r.problem for r in receipt.rejected] == [common_pb2.REPLAY] * 2 and node.received == 3
    assert sum(verified) == 1, f"the node verified {sum(verified)} batched shares, 2 of them refused"
