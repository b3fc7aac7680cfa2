"""Validated DCA jobs in one process (mpdp.dca.validation through the real machines and the driver's wire).

Honest clients are always accepted and the release is their exact integer sum Σ ỹ plus the compute nodes' noise
Σ_k η_k (recomputed here from the job's simulation seed: the clients add none); every malicious client —
10^9 in a coordinate, a non-bit, a proof for another circuit, a proof share altered at one node, a replayed proof
under another id — is rejected by every node alike, counted (never named), and the job releases the
honest-only sum when at most T are missing; with more than T missing nothing is released. A share of the wrong
length is refused at its node (the client is then missing, like a dropout).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mpdp import limits
from mpdp.dca import discrete, validation
from mpdp.dca.aggregator import AggregatorMachine
from mpdp.dca.client import ClientMachine
from mpdp.dca.compute_node import ComputeNodeMachine, noise_rng
from mpdp.dca.driver import run_job
from mpdp.dca.errors import InvalidJob
from mpdp.dca.params import DcaParams
from mpdp.math import field as F
from mpdp.math import flp
from mpdp.math.drbg import Drbg
from mpdp.messages import dca_pb2 as pb
from mpdp.protocol import Peer, Problem, RemoteProtocolError, Send

N, D, T = 12, 5, 3


def _params(kind: str, *, seeded: bool = False, secure_sum: bool = False, max_missing: int = T, **kw) -> DcaParams:
    noise = {} if secure_sum else {"epsilon": 1.0, "delta": 1e-5, "sensitivity": 2.0, "noise": "discrete-gaussian"}
    return DcaParams(job_id=f"v-{kind}", dimension=D, clients=N, max_missing=max_missing, nodes=("n0", "n1", "n2"), frac_bits=16,
                     validate=kind, simulation_seed=b"validated", seed_compressed=seeded, secure_sum=secure_sum,
                     **{"epsilon": 0.0, "delta": 0.0, "sensitivity": 0.0, **noise}, **kw)


def _data(kind: str, rng: np.random.Generator) -> np.ndarray:
    if kind == "one-hot":
        return np.eye(D)[rng.integers(D, size=N)]
    return rng.uniform(-0.9, 0.9, (N, D))


def _honest_sum(run, ids_out: set[int]) -> np.ndarray:
    """Σ over the accepted clients of their ỹ_i (int64 units, the driver's kept contributions), plus every node's
    noise η_k recomputed from the seeded job's generator (none in a secure sum)."""
    keep = [i for i in range(N) if i not in ids_out]
    total = run.encoded[keep].view(np.int64).sum(axis=0)
    prm = run.params
    if prm.node_noise:
        total = total + sum(discrete.node_noise(prm.dimension, prm.discrete.sigma2, noise_rng(prm, name)) for name in prm.nodes)
    return total


def _released_units(release: pb.DpSum) -> np.ndarray:
    return np.frombuffer(release.encoded_sum, dtype="<i8")


@pytest.mark.parametrize("kind", ["range", "l2", "one-hot"])
@pytest.mark.parametrize("seeded", [False, True], ids=["full", "seed-compressed"])
def test_honest_clients_are_accepted_and_released_exactly(kind, seeded):
    prm = _params(kind, seeded=seeded)
    run = run_job(prm, _data(kind, np.random.default_rng(1)), Drbg.from_seed(kind), keep_noise=True, report_every=5)
    r = run.release
    assert run.error is None and r is not None
    assert (r.clients_included, r.clients_rejected, r.validate) == (N, 0, pb.Validation.Value(f"VALIDATE_{kind.upper().replace('-', '_')}"))
    assert np.array_equal(_released_units(r), _honest_sum(run, set()))
    assert "proven valid" in r.guarantee.statement and "malicious" in r.trust_model


def test_validated_secure_sum_of_one_hot_votes_is_exact():
    prm = _params("one-hot", secure_sum=True)
    Z = _data("one-hot", np.random.default_rng(2))
    run = run_job(prm, Z, Drbg.from_seed("votes"), report_every=3)
    assert run.release is not None and np.array_equal(np.array(run.release.values), Z.sum(axis=0))


def _attack(prm: DcaParams, victims: dict[str, str]):
    """A tamper hook replacing the named clients' shares with a malicious client's (same shares at every node)."""
    plan = prm.validation
    assert plan is not None
    made: dict[str, list[pb.ValidatedShare] | None] = {}

    def forge(cid: str, how: str) -> list[validation.ShareForNode] | None:
        honest = validation.encode_input(plan, np.zeros(D, dtype=np.int64) if plan.kind != "one-hot" else np.eye(D, dtype=np.int64)[0] * plan.scale)
        if how == "huge-value":  # 10^9 in place of a bit
            bad = honest.copy()
            bad[3] = 10**9
            return validation.client_shares(plan, prm.job_id, cid, bad, prm.M, seeded=prm.seed_compressed)
        if how == "other-circuit":  # a valid proof, for a circuit that allows 10^9 units
            wide = dataclasses.replace(validation.plan("range", d=D, clip_bounds=(2.0**14,), frac_bits=16, noise_tail=0,
                                                       clients=N, rounding_sq=0.0), spec_digest=prm.spec_digest)  # bound to the job's spec
            if wide.circuit.meas_len != plan.circuit.meas_len:
                big = validation.encode_input(wide, np.full(D, 10**9, dtype=np.int64))
                return validation.client_shares(wide, prm.job_id, cid, big, prm.M, seeded=prm.seed_compressed)
        if how == "huge-last":  # the last input bit reads 10^9
            bad = honest.copy()
            bad[-1] = 10**9
            return validation.client_shares(plan, prm.job_id, cid, bad, prm.M, seeded=prm.seed_compressed)
        if how == "altered-proof":  # honest shares, one proof element changed at node 1
            shares = validation.client_shares(plan, prm.job_id, cid, honest, prm.M, seeded=False)
            c = plan.circuit
            proof = F.decode(shares[1].proof, c.proofs * c.proof_len)
            proof[7] = F.add(proof[7], np.uint64(1))
            return [shares[0], validation.ShareForNode(shares[1].measurement, F.encode(proof), b"", shares[1].blind, shares[1].joint_rand_parts)] + shares[2:]
        if how == "replayed":  # another client's honest shares, presented under this id
            return validation.client_shares(plan, prm.job_id, "somebody-else", honest, prm.M, seeded=prm.seed_compressed)
        if how == "wrong-length":
            shares = validation.client_shares(plan, prm.job_id, cid, honest, prm.M, seeded=False)
            return [validation.ShareForNode(s.measurement[:-8], s.proof, b"", s.blind, s.joint_rand_parts) for s in shares]
        raise AssertionError(how)

    def tamper(sender, recipient, msg):
        if isinstance(msg, pb.ClientShare) and msg.client_id in victims:
            if msg.client_id not in made:
                forged = forge(msg.client_id, victims[msg.client_id])
                made[msg.client_id] = None if forged is None else [
                    pb.ValidatedShare(measurement=s.measurement, proof=s.proof, share_seed=s.share_seed, blind=s.blind, joint_rand_parts=s.joint_rand_parts)
                    for s in forged
                ]
            forged_msgs = made[msg.client_id]
            if forged_msgs is None:
                return msg
            out = pb.ClientShare(job_id=msg.job_id, client_id=msg.client_id, spec_digest=msg.spec_digest)
            out.validated.CopyFrom(forged_msgs[prm.nodes.index(recipient.name)])
            return out
        return msg

    return tamper


ATTACKS = ["huge-value", "other-circuit", "huge-last", "altered-proof", "replayed"]


@pytest.mark.parametrize("kind", ["range", "l2", "one-hot"])
def test_malicious_clients_are_rejected_counted_and_left_out(kind):
    prm = _params(kind)
    ids = [f"client-{i:06d}" for i in range(N)]
    bad = {ids[1]: "huge-value", ids[4]: "huge-last", ids[7]: "altered-proof"}
    run = run_job(prm, _data(kind, np.random.default_rng(3)), Drbg.from_seed("m"), client_ids=ids, keep_noise=True, tamper=_attack(prm, bad), report_every=4)
    r = run.release
    assert run.error is None and r is not None
    assert (r.clients_included, r.clients_rejected) == (N - 3, 3)
    assert np.array_equal(_released_units(r), _honest_sum(run, {1, 4, 7}))
    assert all(ids[i] not in str(r) for i in (1, 4, 7))  # never named


@pytest.mark.parametrize("seeded", [False, True], ids=["full", "seed-compressed"])
def test_other_circuit_and_replayed_proofs_are_rejected(seeded):
    prm = _params("range", seeded=seeded)
    ids = [f"client-{i:06d}" for i in range(N)]
    bad = {ids[0]: "other-circuit", ids[5]: "replayed"}
    run = run_job(prm, _data("range", np.random.default_rng(4)), Drbg.from_seed("o"), client_ids=ids, keep_noise=True, tamper=_attack(prm, bad), report_every=4)
    r = run.release
    assert r is not None
    if prm.validation.circuit.meas_len != validation.plan("range", d=D, clip_bounds=(2.0**14,), frac_bits=16, noise_tail=0, clients=N, rounding_sq=0.0).circuit.meas_len:
        # a proof for a longer circuit is a share of the wrong length: refused at the node, the client missing
        assert r.clients_included == N - 2 and r.clients_rejected == 1
    assert np.array_equal(_released_units(r), _honest_sum(run, {0, 5}))


def test_wrong_length_share_is_refused_at_the_node_and_counts_as_missing():
    prm = _params("range")
    ids = [f"client-{i:06d}" for i in range(N)]
    run = run_job(prm, _data("range", np.random.default_rng(5)), Drbg.from_seed("w"), client_ids=ids, keep_noise=True,
                  tamper=_attack(prm, {ids[2]: "wrong-length"}), report_every=4)
    assert run.release is not None and (run.release.clients_included, run.release.clients_rejected) == (N - 1, 0)
    assert {e.problem for _, _, e in run.rejections} == {Problem.MALFORMED}


def test_more_than_t_rejected_releases_nothing():
    prm = _params("range", max_missing=2)
    ids = [f"client-{i:06d}" for i in range(N)]
    bad = {ids[i]: "huge-value" for i in range(3)}
    run = run_job(prm, _data("range", np.random.default_rng(6)), Drbg.from_seed("t"), client_ids=ids, tamper=_attack(prm, bad), report_every=4)
    assert run.release is None and run.error is not None and run.error.problem == Problem.INSUFFICIENT_NOISE


def test_a_client_proves_its_data_only_and_the_nodes_carry_the_noise():
    """The circuit of a validated job is the data predicate alone (docs: "Validated mode"): a client has no noise to
    inflate or omit; ỹ at the data bound is valid, one unit beyond it cannot be encoded; the account counts the noise
    of M − c nodes (c unset: M − 1) and the window holds N·c_u plus the M nodes' noise tail."""
    prm = _params("range")
    plan = prm.validation
    assert len(plan.circuit.predicates) == 1 and plan.circuit.meas_len == plan.circuit.predicates[0].meas_len
    edge = np.zeros(D, dtype=np.int64)
    edge[0] = plan.data_bound
    assert bool(plan.circuit.valid(validation.encode_input(plan, edge)))
    edge[0] += 1
    with pytest.raises(validation.ValidationError):
        validation.encode_input(plan, edge)
    acc = prm.discrete
    assert acc.by_nodes and (acc.nodes, acc.colluders, acc.honest) == (3, 2, 1) and prm.sigma_client == 0
    assert plan.window == N * plan.data_bound + discrete.noise_tail(3, float(acc.sigma2), D)
    trusting = _params("range", colluders=0)  # every node trusted: each adds σ_std²/M
    assert trusting.discrete.honest == 3 and trusting.sigma_std == pytest.approx(prm.sigma_std, rel=1e-3)
    assert trusting.sigma_node == pytest.approx(prm.sigma_node / 3**0.5, rel=1e-3)
    with pytest.raises(InvalidJob, match="colluders"):
        _params("range", colluders=3)
    with pytest.raises(InvalidJob, match="colluders"):
        _params("range", secure_sum=True, colluders=1)
    back = DcaParams.from_spec(trusting.job_id, trusting.to_spec())
    assert back.colluders == 0 and back.discrete == trusting.discrete


def test_validated_job_parameters():
    with pytest.raises(InvalidJob, match="DISCRETE_GAUSSIAN"):
        DcaParams(job_id="x", dimension=4, clients=5, max_missing=1, epsilon=1, delta=1e-5, sensitivity=1, nodes=("a", "b"), validate="range")
    with pytest.raises(InvalidJob, match="validation"):
        _params("l2", clip_bounds=(2.0**20,))  # d·4^(b−1) ≥ p: the squared norm could wrap
    with pytest.raises(InvalidJob, match="d ≤"):
        DcaParams(job_id="x", dimension=limits.MAX_VALIDATED_DIMENSION + 1, clients=5, max_missing=1, epsilon=1, delta=1e-5, sensitivity=1,
                  nodes=("a", "b"), validate="range", noise="discrete-gaussian", frac_bits=8)
    widest = DcaParams(job_id="x", dimension=limits.MAX_VALIDATED_DIMENSION, clients=5, max_missing=1, epsilon=1, delta=1e-5, sensitivity=1,
                       nodes=("a", "b"), validate="range", noise="discrete-gaussian", frac_bits=8)
    assert widest.validation.share_len * 8 < 8 << 20  # one share message stays under 8 MiB
    prm = _params("l2")
    assert prm.validation.circuit.soundness_log2 <= -flp.SOUNDNESS_BITS
    assert prm.guarantee.delta <= 1e-5
    back = DcaParams.from_spec(prm.job_id, prm.to_spec())
    assert back.validate == "l2" and back.validation == prm.validation


def test_a_run_of_shares_is_verified_in_one_batch_with_the_same_outcome():
    """A router's stream (ComputeNodeMachine.receive_shares) verifies its run's proofs together; each share is still
    accepted or refused on its own, and the release is the same as one step per share."""
    from mpdp.driver import Wire
    from mpdp.protocol import CURATOR

    prm = _params("l2")
    ids = [f"client-{i:06d}" for i in range(N)]
    Z = _data("l2", np.random.default_rng(8))
    sends: dict[str, list[pb.ClientShare]] = {n: [] for n in prm.nodes}
    kept = []
    for i, cid in enumerate(ids):
        c = ClientMachine(prm, cid, Z[i], Drbg.from_seed(cid), keep_noise=True)
        for o in c.submit():
            if isinstance(o, Send):
                sends[o.to.name].append(o.message)
        kept.append(c.encoded.view(np.int64))
    forged = _attack(prm, {ids[2]: "huge-value", ids[6]: "altered-proof", ids[9]: "wrong-length"})
    wire = Wire()
    agg = AggregatorMachine(prm)
    wire.machines[CURATOR] = agg
    ann = agg.announce()
    for o in ann:
        wire.machines[o.to] = ComputeNodeMachine.from_announcement(o.to.name, o.message, report_every=4)
    for o in ann:
        wire.route(o.to, wire.machines[o.to].start())
    wire.pump()
    router = Peer("operator", "router")
    rejected = {}
    for n in prm.nodes:
        node = wire.machines[Peer("compute_node", n)]
        run = [forged(router, Peer("compute_node", n), m) for m in sends[n]]
        outs, refused = node.receive_shares(router, run)
        rejected[n] = [(run[j].client_id, e.problem) for j, e in refused]
        wire.route(node.me, outs[1:])
        wire.pump()
    assert rejected[prm.nodes[0]] == [(ids[9], Problem.MALFORMED)]
    wire.route(CURATOR, agg.close_submissions())
    wire.pump()
    r = agg.dp_sum()
    assert (r.clients_included, r.clients_rejected) == (N - 3, 2)
    noise = sum(discrete.node_noise(D, prm.discrete.sigma2, noise_rng(prm, name)) for name in prm.nodes)  # the seeded nodes' η_k
    assert np.array_equal(_released_units(r), np.sum([kept[i] for i in range(N) if i not in (2, 6, 9)], axis=0) + noise)


def test_a_votes_job_sums_one_vote_per_point_and_rejects_a_two_hot_point():
    """validate VOTES (C = 3 classes, 2 points per vector, a secure sum as the ensembles' soft/vote sums): honest
    one-vote-per-point vectors are accepted and summed exactly; a client whose point holds two votes, proven honestly,
    is rejected by every node, counted, never named, and the release is the honest sum. The client machine refuses to
    prove what is not one vote per point; vote_classes is set exactly for VOTES and must divide d."""
    C, Q = 3, 2
    prm = DcaParams(job_id="v-votes", dimension=C * Q, clients=N, max_missing=T, nodes=("n0", "n1", "n2"), epsilon=0.0, delta=0.0, sensitivity=0.0,
                    frac_bits=8, secure_sum=True, validate="votes", vote_classes=C, simulation_seed=b"validated")
    plan = prm.validation
    assert plan is not None and plan.kind == "votes" and plan.circuit.meas_len == C * Q
    rng = np.random.default_rng(4)  # public test data
    Z = np.stack([np.eye(C)[rng.integers(C, size=Q)].ravel() for _ in range(N)])
    ids = [f"client-{i:06d}" for i in range(N)]
    two_hot = Z[2].astype(np.int64)
    two_hot[:C] = [1, 1, 0]
    forged = [pb.ValidatedShare(measurement=s.measurement, proof=s.proof, share_seed=s.share_seed, blind=s.blind, joint_rand_parts=s.joint_rand_parts)
              for s in validation.client_shares(plan, prm.job_id, ids[2], two_hot.astype(np.uint64), prm.M, seeded=False)]

    def tamper(sender, recipient, msg):
        if isinstance(msg, pb.ClientShare) and msg.client_id == ids[2]:
            out = pb.ClientShare(job_id=msg.job_id, client_id=msg.client_id, spec_digest=msg.spec_digest)
            out.validated.CopyFrom(forged[prm.nodes.index(recipient.name)])
            return out
        return msg

    run = run_job(prm, Z, Drbg.from_seed(b"votes"), client_ids=ids, tamper=tamper, report_every=4)
    r = run.release
    assert run.error is None and r is not None
    assert (r.clients_included, r.clients_rejected) == (N - 1, 1) and ids[2] not in str(r)
    assert np.array_equal(np.asarray(r.values), np.delete(Z, 2, axis=0).sum(axis=0))
    with pytest.raises(InvalidJob):
        run_job(prm, np.vstack([Z[:-1], np.ones((1, C * Q))]), Drbg.from_seed(b"votes"), client_mode="machines")
    for bad in ({"vote_classes": 0}, {"vote_classes": 4}, {"validate": "range"}, {"validate": "none"}):
        with pytest.raises(InvalidJob):
            DcaParams(**{**{f: getattr(prm, f) for f in ("job_id", "dimension", "clients", "max_missing", "nodes", "epsilon", "delta", "sensitivity",
                                                          "frac_bits", "secure_sum", "validate", "vote_classes")}, **bad})


def _nodes(prm: DcaParams) -> tuple[AggregatorMachine, list[ComputeNodeMachine]]:
    agg = AggregatorMachine(prm)
    ann = [o for o in agg.announce() if isinstance(o, Send)]
    assert all(o.message.verify_key == b"" for o in ann)  # the curator holds no key: it never had one
    return agg, [ComputeNodeMachine.from_announcement(o.to.name, o.message) for o in ann]


def test_the_verify_key_is_the_nodes_own_hash_of_every_piece():
    prm = _params("range")
    _, nodes = _nodes(prm)
    assert not any(n.key_ready for n in nodes)
    sent = {n.me: n.start() for n in nodes}
    pieces = {n.k: o.message.piece for n in nodes for o in sent[n.me]}
    assert len(set(pieces.values())) == 3 and all(len(p) == validation.SEED for p in pieces.values())
    by_peer = {n.me: n for n in nodes}
    for src, outs in sent.items():
        for o in outs:
            by_peer[o.to].receive(src, o.message)
    want = validation.verify_key(prm.job_id, [pieces[k] for k in range(3)], prm.spec_digest)
    assert all(n.key_ready and n._verify_key == want for n in nodes)
    assert validation.verify_key(prm.job_id, [pieces[k] for k in (1, 0, 2)], prm.spec_digest) != want  # node order is part of the key
    assert validation.verify_key("another-job", [pieces[k] for k in range(3)], prm.spec_digest) != want
    assert validation.verify_key(prm.job_id, [pieces[k] for k in range(3)], bytes(32)) != want  # and the job's spec


def test_no_share_is_taken_before_the_key_and_a_bad_piece_fails_the_job():
    prm = _params("range")
    _, nodes = _nodes(prm)
    c = ClientMachine(prm, "client-000000", np.zeros(D), Drbg.from_seed("c"))
    share = next(o.message for o in c.submit() if isinstance(o, Send) and o.to == nodes[0].me)
    with pytest.raises(RemoteProtocolError) as e:
        nodes[0].receive(Peer("party", "client-000000"), share)
    assert e.value.problem == Problem.STEP_OUT_OF_ORDER and nodes[0].received == 0 and not nodes[0].failed
    peer = Peer("compute_node", prm.nodes[1])
    with pytest.raises(RemoteProtocolError) as e:
        nodes[0].receive(peer, pb.VerifyKeyPiece(job_id=prm.job_id, spec_digest=prm.spec_digest, piece=b"\x01" * 31))
    assert e.value.problem == Problem.MALFORMED and nodes[0].failed  # a participant's bad message fails the job
    _, nodes = _nodes(prm)
    nodes[0].receive(peer, pb.VerifyKeyPiece(job_id=prm.job_id, spec_digest=prm.spec_digest, piece=b"\x01" * 32))
    with pytest.raises(RemoteProtocolError) as e:  # a second piece (another key) from the same node
        nodes[0].receive(peer, pb.VerifyKeyPiece(job_id=prm.job_id, spec_digest=prm.spec_digest, piece=b"\x02" * 32))
    assert e.value.problem == Problem.REPLAY and nodes[0].failed
    with pytest.raises(InvalidJob):  # a key chosen by whoever announces the job is refused
        ComputeNodeMachine.from_announcement(prm.nodes[0], pb.DcaJobAnnouncement(job_id=prm.job_id, spec=prm.to_spec(), verify_key=b"\x03" * 32))
    unvalidated = DcaParams(job_id="plain", dimension=D, clients=N, max_missing=T, nodes=("n0", "n1", "n2"), epsilon=1.0, delta=1e-5, sensitivity=2.0)
    plain = ComputeNodeMachine(unvalidated, "n0")
    assert plain.start() == [] and plain.key_ready
