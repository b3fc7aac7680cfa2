"""One failure policy for every engine (mpdp/protocol.py): an outsider cannot kill a job.

Invariants checked here, on the real Pathak machines and the real DCA machines:
* a message from an outsider (not a participant of the job) or naming another job is refused with its
  Problem (WRONG_ROLE, UNKNOWN_JOB) and touches nothing: state, inbox, seen-set, transcript and error are
  identical before and after, and the job then completes with exactly the release it would have had;
* a replay from a participant fails the job closed: FAILED, abort notices to the others, nothing published;
* DCA keeps its own promise: a client cannot fail a job.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from mpdp.dca.aggregator import AggregatorMachine
from mpdp.dca.client import ClientMachine
from mpdp.dca.compute_node import ComputeNodeMachine
from mpdp.dca.driver import run_job as run_dca
from mpdp.math.drbg import Drbg
from mpdp.messages import common_pb2, dca_pb2, pathak2010_pb2 as pb
from mpdp.pathak2010.driver import JobResult, make_spec
from tests.pathak_helpers import run_test_job as run_job
from mpdp.protocol import CURATOR, Machine, Peer, Problem, ProtocolError, Publish, Send
from tests.dca.helpers import NODES, data, make_params

OUTSIDER = Peer("party", "p9")  # a party of the federation that is not in the job


def _data(sizes, d=3, seed=0):
    g = np.random.default_rng(seed)
    return {f"p{i + 1}": (g.normal(size=(n, d)), np.where(g.normal(size=n) > 0, 1.0, -1.0)) for i, n in enumerate(sizes)}


def _pathak_snapshot(m: Machine):
    return (m.state, m.error, dict(m._inbox), set(m._seen), list(m.transcript))


def _outsider_messages(job_id: str) -> list[tuple[Peer, object]]:
    """What an outsider (or a confused participant) can send with the job id, to either role."""
    abort = common_pb2.JobAbort(job_id=job_id, problem=Problem.JOB_FAILED, detail="kill", reported_by=OUTSIDER.name)
    return [
        (OUTSIDER, pb.JobAcceptance(job_id=job_id, dimension=3)),
        (OUTSIDER, pb.PartySecrets(job_id=job_id)),
            (OUTSIDER, pb.Pi1Reveal(job_id=job_id, nonce=bytes(32))),
        (OUTSIDER, pb.ResharePiece(job_id=job_id, piece=b"\x00" * 48)),
        (OUTSIDER, pb.PublishedShare(job_id=job_id, share=b"\x00" * 48)),
        (OUTSIDER, abort),
        (Peer("compute_node", "p1"), pb.SizeShare(job_id=job_id, a=b"\x01")),  # a participant's name, another role
        (Peer("party", "p1"), pb.JobAcceptance(job_id="other-job", dimension=3)),  # another job's message
    ]


def _attack_all(result: JobResult, log: list[int]) -> None:
    """Send every outsider message to every machine built so far; each must be refused and touch nothing."""
    for m in [result.curator, *result.parties.values()]:
        for sender, msg in _outsider_messages(m.job_id):
            before = _pathak_snapshot(m)
            with pytest.raises(ProtocolError) as e:
                m.receive(sender, msg)
            expected = Problem.UNKNOWN_JOB if getattr(msg, "job_id", "") == "other-job" else Problem.WRONG_ROLE
            assert e.value.problem == expected, (type(msg).__name__, e.value.detail)
            assert e.value.notices == []
            assert _pathak_snapshot(m) == before, type(msg).__name__
            log.append(e.value.problem)


def test_pathak_outsider_cannot_touch_a_job_which_then_publishes_the_same_model(small_secrets):
    data_ = _data([20, 31, 26])
    spec = make_spec(list(data_), 1.0, 0.1, "corrected", b"policy")
    clean = run_job(data_, spec, small_secrets, party_key_bits=768, job_id="job-7")
    refused: list[int] = []
    attacked = run_job(data_, spec, small_secrets, party_key_bits=768, job_id="job-7", before_each=lambda r: _attack_all(r, refused))
    assert clean.error is None and clean.model is not None
    assert attacked.error is None and attacked.model is not None
    assert attacked.curator.state == "PUBLISHED" and all(p.state == "DONE" for p in attacked.parties.values())
    assert list(attacked.model.shares) == list(clean.model.shares)  # the seeded job released exactly the same shares
    assert refused.count(Problem.WRONG_ROLE) > 50 and Problem.UNKNOWN_JOB in refused  # every step was attacked


def test_pathak_outsider_accept_job_leaves_the_curator_waiting_not_failed(small_secrets):
    """The reported case: a party not in the job sends AcceptJob with the job id."""
    data_ = _data([12, 15])
    spec = make_spec(list(data_), 1.0, 0.1, "corrected", b"accept")
    first = []

    def once(r: JobResult) -> None:
        if not first:
            first.append(1)
            with pytest.raises(ProtocolError) as e:
                r.curator.receive(OUTSIDER, pb.JobAcceptance(job_id=r.curator.job_id, dimension=3))
            assert e.value.problem == Problem.WRONG_ROLE and r.curator.state == "AWAIT_ACCEPTANCES" and r.curator.error is None

    r = run_job(data_, spec, small_secrets, party_key_bits=768, before_each=once)
    assert first and r.error is None and r.curator.state == "PUBLISHED"


@pytest.mark.parametrize("victim", ["curator", "party"])
def test_pathak_participant_replay_fails_the_job_closed(small_secrets, victim):
    data_ = _data([14, 18, 16])
    spec = make_spec(list(data_), 1.0, 0.1, "corrected", b"replay")
    delivered: list = []

    def before(r: JobResult) -> None:
        m = r.curator if victim == "curator" else r.parties.get("p2")
        if m is None or delivered or m.terminal:
            return
        last = next(((s, x) for s, x in reversed(m.transcript) if isinstance(x, (pb.EncryptedSizeShare, pb.SizeShare, pb.JobAcceptance, pb.ProtocolStart))), None)
        if last is None:
            return
        delivered.append(last)
        with pytest.raises(ProtocolError) as e:
            m.receive(*last)
        assert e.value.problem in (Problem.REPLAY, Problem.STEP_OUT_OF_ORDER)
        assert m.state == "FAILED" and m.error is not None
        assert e.value.notices and all(isinstance(n, Send) and isinstance(n.message, common_pb2.JobAbort) for n in e.value.notices)
        notices.extend(e.value.notices)

    notices: list[Send] = []
    r = run_job(data_, spec, small_secrets, party_key_bits=768, before_each=before)
    assert delivered, "the replay was never attempted"
    assert r.model is None
    if victim == "curator":
        assert r.curator.state == "FAILED" and {n.to.name for n in notices} == set(data_)
    else:  # the party failed; its abort notice is addressed to Charlie (this test holds it back from the driver)
        assert r.parties["p2"].state == "FAILED" and [n.to for n in notices] == [CURATOR]


# -- DCA ---------------------------------------------------------------------------------------------


def _node_snapshot(node: ComputeNodeMachine):
    return (node.state, node.error, node.received, node.confirmed, node.pending, node._running.copy(), list(node._unreported),
            node._sent_seq, {k: set(v) for k, v in node._peer_seqs.items()}, list(node.transcript or []))


def _same(a, b) -> bool:
    return all(np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y for x, y in zip(a, b, strict=True))


def _dca_outsiders(job_id: str, cid: str, peer: str, digest: bytes) -> list[tuple[Peer, object, int]]:
    abort = common_pb2.JobAbort(job_id=job_id, problem=Problem.JOB_FAILED, detail="kill")
    return [
        (Peer("compute_node", "node-z"), dca_pb2.ReceivedClients(job_id=job_id, spec_digest=digest, sequence=0, client_ids=[cid], final=True, total=1, digest=b"\0" * 32), Problem.WRONG_ROLE),
        (Peer("compute_node", "node-z"), abort, Problem.WRONG_ROLE),
        (Peer("party", cid), abort, Problem.WRONG_ROLE),  # a client may not abort a job
        (Peer("party", cid), dca_pb2.SubmissionsClose(job_id=job_id), Problem.WRONG_ROLE),  # nor close it
        (Peer("operator", "router-0"), dca_pb2.ReceivedClients(job_id=job_id, spec_digest=digest, sequence=0), Problem.WRONG_ROLE),
        (Peer("party", "p9"), dca_pb2.ClientShare(job_id=job_id, spec_digest=digest, client_id="p9", masked_vector=b"\0" * 31), Problem.MALFORMED),  # a bad share (late: STEP_OUT_OF_ORDER)
        (Peer("compute_node", peer), dca_pb2.ReceivedClients(job_id="other-job", sequence=0), Problem.UNKNOWN_JOB),
        # bound to another spec of the job (spec digest): refused, the job untouched, whether a client's or a node's
        (Peer("party", cid), dca_pb2.ClientShare(job_id=job_id, spec_digest=bytes(32), client_id=cid, masked_vector=b"\0" * 32), Problem.INVALID_JOB),
        (Peer("operator", "router-0"), dca_pb2.ShareBatch(job_id=job_id, client_ids=[cid], masked_vectors=b"\0" * 32), Problem.INVALID_JOB),
        (Peer("compute_node", peer), dca_pb2.ReceivedClients(job_id=job_id, spec_digest=digest[::-1], sequence=0, client_ids=[cid]), Problem.INVALID_JOB),
    ]


def test_dca_outsiders_and_clients_cannot_touch_a_job_which_then_releases_the_same_sum():
    p = make_params(clients=6, max_missing=1, dimension=4)
    Z = data(6, p.dimension)
    clean = run_dca(p, Z, Drbg.from_seed(3), client_mode="machines")
    refused: list[int] = []

    def attack(sender: Peer, to: Peer, msg):
        machine = attacked_nodes.get(to.name)
        if machine is not None and not machine.terminal:
            for s, m, problem in _dca_outsiders(p.job_id, "client-000001", next(n for n in NODES if n != to.name), p.spec_digest):
                before = _node_snapshot(machine)
                with pytest.raises(ProtocolError) as e:
                    machine.receive(s, m)
                late = machine.state != "AWAIT_SHARES" and isinstance(m, dca_pb2.ClientShare) and problem != Problem.INVALID_JOB
                assert e.value.problem == (Problem.STEP_OUT_OF_ORDER if late else problem), e.value.detail
                assert _same(before, _node_snapshot(machine)) and not machine.failed
                refused.append(problem)
        return msg

    # the driver builds the node machines on announcement: wrap the class to keep a handle on them
    attacked_nodes: dict[str, ComputeNodeMachine] = {}
    original = ComputeNodeMachine.from_announcement

    def keep(name, announcement, **kw):
        m = original(name, announcement, **kw)
        attacked_nodes[name] = m
        return m

    ComputeNodeMachine.from_announcement = staticmethod(keep)
    try:
        run = run_dca(p, Z, Drbg.from_seed(3), client_mode="machines", tamper=attack)
    finally:
        ComputeNodeMachine.from_announcement = original
    assert clean.release is not None and run.release is not None and run.error is None
    assert list(run.release.encoded_sum) == list(clean.release.encoded_sum)
    assert len(refused) > 20


def test_dca_aggregator_refuses_outsiders_untouched_and_fails_on_a_node_replay():
    p = make_params(clients=3, max_missing=0)
    agg = AggregatorMachine(p)
    agg.announce()
    q = dca_pb2.PartialSum(job_id=p.job_id, partial_sum=b"\0" * 8 * p.dimension, clients_included=3, agreed_set_digest=b"\1" * 32)
    for sender, msg, problem in [
        (Peer("compute_node", "node-z"), q, Problem.WRONG_ROLE),
        (Peer("compute_node", "node-z"), common_pb2.JobAbort(job_id=p.job_id, problem=Problem.JOB_FAILED), Problem.WRONG_ROLE),
        (Peer("party", "client-000001"), q, Problem.WRONG_ROLE),
        (Peer("compute_node", NODES[0]), dca_pb2.PartialSum(job_id="other-job"), Problem.UNKNOWN_JOB),
    ]:
        before = (agg.state, agg.error, dict(agg._sums), list(agg.transcript))
        with pytest.raises(ProtocolError) as e:
            agg.receive(sender, msg)
        assert e.value.problem == problem and e.value.notices == []
        assert (agg.state, agg.error, dict(agg._sums), list(agg.transcript)) == before
    a = Peer("compute_node", NODES[0])
    assert agg.receive(a, q) == []
    assert agg.receive(a, copy.deepcopy(q)) == [] and not agg.failed  # the same q_k again (push + pull): nothing new
    other = dca_pb2.PartialSum(job_id=p.job_id, partial_sum=b"\1" * 8 * p.dimension, clients_included=3, agreed_set_digest=b"\1" * 32)
    with pytest.raises(ProtocolError) as e:
        agg.receive(a, other)
    assert e.value.problem == Problem.REPLAY and agg.failed
    assert {n.to.name for n in e.value.notices} == set(NODES)
    assert not any(isinstance(o, Publish) for o in e.value.notices)


def test_dca_node_replay_fails_but_a_client_replay_does_not():
    p = make_params(clients=4, max_missing=1)
    a = ComputeNodeMachine(p, NODES[0], report_every=1)
    outs = ClientMachine(p, "client-000000", np.zeros(p.dimension), Drbg.from_seed(1)).submit()
    share = next(o.message for o in outs if isinstance(o, Send) and o.to.name == NODES[0])
    a.receive(Peer("party", "client-000000"), share)
    with pytest.raises(ProtocolError) as e:
        a.receive(Peer("party", "client-000000"), share)
    assert e.value.problem == Problem.REPLAY and not a.failed
    b = Peer("compute_node", NODES[1])
    a.receive(b, dca_pb2.ReceivedClients(job_id=p.job_id, spec_digest=p.spec_digest, sequence=0, client_ids=["client-000000"]))
    with pytest.raises(ProtocolError) as e:
        a.receive(b, dca_pb2.ReceivedClients(job_id=p.job_id, spec_digest=p.spec_digest, sequence=0, client_ids=["client-000001"]))
    assert e.value.problem == Problem.REPLAY and a.failed
    assert {n.to for n in e.value.notices} == {CURATOR, b, Peer("compute_node", NODES[2])}
