"""Role machines against the transition table (Heikkilä et al. 2017, Algorithm 1): table tests and fuzzing.

Invariants checked here:
* a submission a node refuses (replay, wrong dimension, unknown job, wrong sender, late) raises a ProtocolError
  with its Problem kind and leaves the machine exactly as it was; the job still releases correctly afterwards;
* a bad message from another compute node fails the job and emits abort notices; a FAILED machine raises
  its failure's own Problem on every call ("job … has failed: …") and never emits a share or a release;
* any input gives outputs or a ProtocolError, never another exception (fuzz).
"""

from __future__ import annotations

from pathlib import Path

import ast
import pathlib

import numpy as np
import pytest

from mpdp.dca import sharing, states
from mpdp.dca.aggregator import AggregatorMachine
from mpdp.dca.client import ClientMachine
from mpdp.dca.compute_node import ComputeNodeMachine
from mpdp.dca.engine import Reply
from mpdp.dca.errors import InvalidJob
from mpdp.math.drbg import Drbg
from mpdp.messages import common_pb2, dca_pb2 as pb
from mpdp.protocol import CURATOR, LocalProtocolError, Peer, Problem, ProtocolError, Publish, Send, check_table

from tests.dca.helpers import NODES, data, make_params

A, B, C = (Peer("compute_node", n) for n in NODES)


def client_messages(p, i: int, z=None) -> dict[str, pb.ClientShare]:
    cid = f"client-{i:06d}"
    z = np.zeros(p.dimension) if z is None else z
    outs = ClientMachine(p, cid, z, Drbg.from_seed(f"c{i}")).submit()
    return {o.to.name: o.message for o in outs if isinstance(o, Send)}


def snapshot(node: ComputeNodeMachine):
    return (node.state, node.received, node.confirmed, node.pending, node._running.copy(), list(node._unreported), node._sent_seq)


def same(a, b) -> bool:
    return all(np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y for x, y in zip(a, b))


def refused(node, sender, msg, problem):
    before = snapshot(node)
    with pytest.raises(ProtocolError) as e:
        node.receive(sender, msg)
    assert e.value.problem == problem, e.value.detail
    assert same(before, snapshot(node)) and not node.failed
    return e.value


@pytest.fixture
def job():
    p = make_params(clients=5, max_missing=1)
    nodes = {n: ComputeNodeMachine(p, n, report_every=1) for n in NODES}
    return p, nodes


def deliver_all(nodes, outs, sender):
    """Route node-to-node outputs until quiet; returns what went to the curator."""
    to_curator = []
    queue = [(sender, o) for o in outs if isinstance(o, Send)]
    while queue:
        frm, o = queue.pop(0)
        if o.to == CURATOR:
            to_curator.append(o.message)
            continue
        queue += [(o.to, x) for x in nodes[o.to.name].receive(frm, o.message) if isinstance(x, Send)]
    return to_curator


def test_replay_wrong_dimension_unknown_job_wrong_sender(job):
    p, nodes = job
    a = nodes[NODES[0]]
    m = client_messages(p, 0)[NODES[0]]
    me = Peer("party", m.client_id)
    outs = a.receive(me, m)
    assert isinstance(outs[0], Reply) and outs[0].message.accepted == 1
    refused(a, me, m, Problem.REPLAY)
    other = client_messages(p, 1)[NODES[0]]
    short = pb.ClientShare(job_id="job-1", spec_digest=p.spec_digest, client_id=other.client_id, masked_vector=other.masked_vector[:-8])
    e = refused(a, Peer("party", other.client_id), short, Problem.MALFORMED)
    assert "dimension" in e.detail
    refused(a, Peer("party", other.client_id), pb.ClientShare(job_id="job-2", client_id=other.client_id, masked_vector=other.masked_vector), Problem.UNKNOWN_JOB)
    refused(a, Peer("party", "client-999999"), other, Problem.WRONG_ROLE)  # submitting for someone else
    refused(a, Peer("party", other.client_id), pb.ClientShare(job_id="job-1", spec_digest=p.spec_digest, client_id=other.client_id, mask_seed=b"s" * 32), Problem.MALFORMED)
    refused(a, Peer("compute_node", "stranger"), other, Problem.WRONG_ROLE)
    refused(a, Peer("party", other.client_id), pb.PartialSum(job_id="job-1"), Problem.WRONG_ROLE)  # a node never takes q_k
    refused(a, Peer("party", other.client_id), pb.ShareBatch(job_id="job-1", spec_digest=p.spec_digest), Problem.WRONG_ROLE)  # batches come from routers
    a.receive(Peer("party", other.client_id), other)  # the well-formed share is still taken
    assert a.received == 2


def test_late_submission_after_close(job):
    p, nodes = job
    a = nodes[NODES[0]]
    a.close()
    assert a.state == "AWAIT_RECEIVED_SETS"
    m = client_messages(p, 0)[NODES[0]]
    refused(a, Peer("party", m.client_id), m, Problem.STEP_OUT_OF_ORDER)
    assert a.close() == []  # closing twice is harmless


def test_roster_and_seed_nodes():
    roster = tuple(f"client-{i:06d}" for i in range(5))
    p = make_params(clients=5, max_missing=1, roster=roster, seed_compressed=True)
    a, b = ComputeNodeMachine(p, NODES[0]), ComputeNodeMachine(p, NODES[1])
    m = client_messages(p, 0)
    assert m[NODES[0]].WhichOneof("share") == "masked_vector" and m[NODES[1]].WhichOneof("share") == "mask_seed"
    b.receive(Peer("party", roster[0]), m[NODES[1]])
    refused(b, Peer("party", roster[1]), pb.ClientShare(job_id="job-1", spec_digest=p.spec_digest, client_id=roster[1], masked_vector=m[NODES[0]].masked_vector), Problem.MALFORMED)
    refused(a, Peer("party", roster[0]), pb.ClientShare(job_id="job-1", spec_digest=p.spec_digest, client_id=roster[0], mask_seed=b"x" * 31), Problem.MALFORMED)
    refused(a, Peer("party", "intruder"), pb.ClientShare(job_id="job-1", spec_digest=p.spec_digest, client_id="intruder", masked_vector=m[NODES[0]].masked_vector), Problem.WRONG_ROLE)
    with pytest.raises(InvalidJob, match="roster"):
        ClientMachine(p, "intruder", np.zeros(p.dimension), Drbg.from_seed(0))


def test_batch_accounts_per_client(job):
    p, nodes = job
    a = nodes[NODES[0]]
    msgs = [client_messages(p, i)[NODES[0]] for i in range(4)]
    a.receive(Peer("party", msgs[0].client_id), msgs[0])
    ids = [msgs[0].client_id, msgs[1].client_id, msgs[1].client_id, "", msgs[2].client_id, msgs[3].client_id]
    vecs = [msgs[0].masked_vector, msgs[1].masked_vector, msgs[1].masked_vector, msgs[1].masked_vector, msgs[2].masked_vector, msgs[3].masked_vector]
    outs = a.receive(Peer("operator", "router-0"), pb.ShareBatch(job_id="job-1", spec_digest=p.spec_digest, client_ids=ids, masked_vectors=b"".join(vecs)))
    receipt = outs[0].message
    assert receipt.accepted == 3
    assert [(r.client_id, r.problem) for r in receipt.rejected] == [
        (msgs[0].client_id, Problem.REPLAY),
        (msgs[1].client_id, Problem.REPLAY),
        ("", Problem.MALFORMED),
    ]
    assert a.received == 4 and not a.failed
    # a batch whose length does not match its ids is refused whole, without change
    refused(a, Peer("operator", "router-0"), pb.ShareBatch(job_id="job-1", spec_digest=p.spec_digest, client_ids=["client-x"], masked_vectors=b"\x00" * 8), Problem.MALFORMED)
    # more than N clients: the surplus is refused as late (N = 5 and 4 are in)
    more = pb.ShareBatch(job_id="job-1", spec_digest=p.spec_digest, client_ids=["client-y", "client-z"], masked_vectors=b"\x00" * (16 * p.dimension))
    receipt = a.receive(Peer("operator", "router-0"), more)[0].message
    assert receipt.accepted == 1 and receipt.rejected[0].problem == Problem.STEP_OUT_OF_ORDER
    assert a.state == "AWAIT_RECEIVED_SETS"  # N reached: the node closed by itself


def test_empty_batch_must_be_empty(job):
    p, nodes = job
    a = nodes[NODES[0]]
    assert a.receive(Peer("operator", "r"), pb.ShareBatch(job_id="job-1", spec_digest=p.spec_digest))[0].message.accepted == 0
    refused(a, Peer("operator", "r"), pb.ShareBatch(job_id="job-1", spec_digest=p.spec_digest, masked_vectors=b"\x00" * 8 * p.dimension), Problem.MALFORMED)


def test_fail_from_outside_notifies_and_never_releases(job):
    p, nodes = job
    agg = AggregatorMachine(p)
    agg.announce()
    notices = agg.fail(Problem.PEER_UNREACHABLE, "node-b did not answer before the deadline")
    assert {o.to.name for o in notices} == set(NODES) and agg.failed
    assert agg.fail(Problem.JOB_FAILED, "again") == []
    with pytest.raises(ProtocolError) as e:
        agg.dp_sum()
    assert e.value.problem == Problem.PEER_UNREACHABLE
    assert agg.status().terminal and agg.status().problem == Problem.PEER_UNREACHABLE


def test_job_releases_after_rejections(job):
    """Refused submissions leave the machines intact: the job still releases the right sum."""
    p, nodes = job
    agg = AggregatorMachine(p)
    agg.announce()
    Z = data(5, p.dimension)
    sent = {}
    for i in range(5):
        msgs = client_messages(p, i, Z[i])
        for name, m in msgs.items():
            cl = Peer("party", m.client_id)
            sent[name] = deliver_all(nodes, nodes[name].receive(cl, m), Peer("compute_node", name))
            with pytest.raises(ProtocolError):
                nodes[name].receive(cl, m)  # replay
    partials = [nodes[n].partial_sum() for n in NODES]
    released = [o for n, q in zip(NODES, partials) for o in agg.receive(Peer("compute_node", n), q) if isinstance(o, Publish)]
    assert len(released) == 1
    assert np.allclose(released[0].release.values, Z.sum(axis=0), atol=6 * p.sigma_client * np.sqrt(5))


def test_peer_misbehaviour_fails_the_job_and_failed_never_releases(job):
    p, nodes = job
    a = nodes[NODES[0]]
    a.receive(B, pb.ReceivedClients(job_id="job-1", spec_digest=p.spec_digest, sequence=1, client_ids=["client-000001"]))
    refused(a, Peer("compute_node", "stranger"), pb.ReceivedClients(job_id="job-1", spec_digest=p.spec_digest, sequence=2), Problem.WRONG_ROLE)  # not a node of the job
    refused(a, B, pb.ReceivedClients(job_id="job-2", sequence=2), Problem.UNKNOWN_JOB)  # another job's message
    with pytest.raises(ProtocolError) as e:
        a.receive(B, pb.ReceivedClients(job_id="job-1", spec_digest=p.spec_digest, sequence=3, client_ids=["client-000001"]))  # same client twice
    assert e.value.problem == Problem.MALFORMED and a.failed
    notices = e.value.notices
    assert {o.to for o in notices} == {CURATOR, B, C} and all(isinstance(o.message, common_pb2.JobAbort) for o in notices)
    m = client_messages(p, 3)[NODES[0]]
    with pytest.raises(ProtocolError) as e:
        a.receive(Peer("party", m.client_id), m)
    assert e.value.problem == Problem.MALFORMED and "has failed" in e.value.detail  # the failure's own cause
    with pytest.raises(ProtocolError):
        a.partial_sum()
    with pytest.raises(ProtocolError):
        a.close()


def test_a_node_replaying_its_report_fails_the_job(job):
    """A participant's replay fails the job closed (one failure policy, mpdp.protocol)."""
    p, nodes = job
    a = nodes[NODES[0]]
    a.receive(B, pb.ReceivedClients(job_id="job-1", spec_digest=p.spec_digest, sequence=0, client_ids=["client-000001"]))
    with pytest.raises(ProtocolError) as e:
        a.receive(B, pb.ReceivedClients(job_id="job-1", spec_digest=p.spec_digest, sequence=0, client_ids=["client-000002"]))
    assert e.value.problem == Problem.REPLAY and a.failed and a.error.problem == Problem.REPLAY


def test_final_set_must_match_its_digest(job):
    p, nodes = job
    a = nodes[NODES[0]]
    with pytest.raises(ProtocolError) as e:
        a.receive(B, pb.ReceivedClients(job_id="job-1", spec_digest=p.spec_digest, sequence=0, client_ids=["client-000001"], final=True, total=1, digest=b"\x00" * 32))
    assert e.value.problem == Problem.MALFORMED and a.failed


def test_abort_from_the_curator(job):
    p, nodes = job
    a = nodes[NODES[0]]
    assert a.receive(CURATOR, common_pb2.JobAbort(job_id="job-1", problem=Problem.JOB_FAILED, detail="deadline")) == []
    assert a.failed and a.error.problem == Problem.JOB_FAILED


def test_client_machine_order_and_inputs():
    p = make_params()
    c = ClientMachine(p, "client-1", np.zeros(p.dimension), Drbg.from_seed(1))
    outs = c.submit()
    assert c.state == "DONE" and len([o for o in outs if isinstance(o, Send)]) == p.M
    with pytest.raises(LocalProtocolError) as e:
        c.submit()
    assert e.value.problem == Problem.STEP_OUT_OF_ORDER and c.state == "DONE"
    with pytest.raises(InvalidJob, match="shape"):
        ClientMachine(p, "client-2", np.zeros(p.dimension + 1), Drbg.from_seed(1))
    with pytest.raises(InvalidJob, match="non-private"):
        ClientMachine(make_params(simulation_seed=b""), "client-3", np.zeros(p.dimension), Drbg.from_seed(1))
    with pytest.raises(InvalidJob):
        ClientMachine(p, "", np.zeros(p.dimension), Drbg.from_seed(1))


def test_table_lookup():
    for machine in (ClientMachine, ComputeNodeMachine, AggregatorMachine):
        check_table(machine)
        for st in machine.STATES:
            if st not in machine.TERMINAL:
                assert any(r.state == st for r in machine.TABLE)
    with pytest.raises(ProtocolError) as e:
        ComputeNodeMachine.lookup("AWAIT_SHARES", "PartialSum")
    assert e.value.problem == Problem.WRONG_ROLE
    with pytest.raises(ProtocolError) as e:
        ComputeNodeMachine.lookup("AWAIT_RECEIVED_SETS", "ClientShare")
    assert e.value.problem == Problem.STEP_OUT_OF_ORDER
    with pytest.raises(ProtocolError):
        ComputeNodeMachine.lookup("RELEASED", "JobAbort")  # terminal: nothing moves it
    assert ComputeNodeMachine.lookup("AWAIT_RECEIVED_SETS", "JobAbort").next == (states.FAILED,)  # * rows


def _mutations(rng: Drbg, p, base: list[tuple[Peer, object]]):
    senders = [Peer("party", "client-000001"), Peer("operator", "r"), B, C, CURATOR, Peer("compute_node", "zz"), Peer("party", "x")]
    kinds = [pb.ClientShare, pb.ShareBatch, pb.ReceivedClients, pb.SubmissionsClose, pb.PartialSum, pb.DcaJobAnnouncement, common_pb2.JobAbort]
    for _ in range(400):
        r = rng.randbelow(3)
        if r == 0:  # a real message, from someone
            sender, msg = base[rng.randbelow(len(base))]
            yield senders[rng.randbelow(len(senders))] if rng.randbelow(2) else sender, msg
        elif r == 1:  # random bytes parsed as some message type
            t = kinds[rng.randbelow(len(kinds))]
            try:
                msg = t.FromString(rng.random_bytes(rng.randbelow(80)))
            except Exception:
                continue
            yield senders[rng.randbelow(len(senders))], msg
        else:  # a real message with one field tweaked
            sender, msg = base[rng.randbelow(len(base))]
            m = type(msg)()
            m.CopyFrom(msg)
            if isinstance(m, pb.ClientShare):
                m.masked_vector = rng.random_bytes(rng.randbelow(3) * 8 * p.dimension + rng.randbelow(2))
            elif isinstance(m, pb.ReceivedClients):
                m.sequence = rng.randbelow(4)
                m.final = bool(rng.randbelow(2))
            yield sender, m


@pytest.mark.parametrize("seed", range(3))
def test_fuzz_any_input_gives_outputs_or_a_protocol_error(seed):
    p = make_params(clients=6, max_missing=1)
    base = []
    for i in range(6):
        m = client_messages(p, i)[NODES[0]]
        base.append((Peer("party", m.client_id), m))
    base += [
        (B, pb.ReceivedClients(job_id="job-1", spec_digest=p.spec_digest, sequence=0, client_ids=["client-000001", "client-000002"])),
        (C, pb.ReceivedClients(job_id="job-1", spec_digest=p.spec_digest, sequence=0, client_ids=["client-000003"], final=True, total=1, digest=sharing.set_digest(["client-000003"]))),
        (CURATOR, pb.SubmissionsClose(job_id="job-1")),
    ]
    a = ComputeNodeMachine(p, NODES[0], report_every=2)
    agg = AggregatorMachine(p)
    agg.announce()
    rng = Drbg.from_seed(f"fuzz{seed}")
    for sender, msg in _mutations(rng, p, base):
        for machine in (a, agg):
            try:
                outs = machine.receive(sender, msg)
            except ProtocolError as e:
                assert e.problem != Problem.PROBLEM_UNSPECIFIED
                outs = e.notices
            if machine.failed:
                assert not any(isinstance(o, Publish) or isinstance(getattr(o, "message", None), pb.PartialSum) for o in outs)
    # the aggregator never published from fuzzed input
    assert agg._release is None


def test_core_imports_no_network():
    """Sans-IO: the core may import generated message classes, never grpc, stubs, sockets or asyncio."""
    root = pathlib.Path(__file__).resolve().parents[2] / "mpdp" / "dca"
    banned = {"grpc", "asyncio", "socket", "socketserver", "ssl", "http", "urllib", "requests"}
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for n in names:
                assert n.split(".")[0] not in banned, f"{path.name} imports {n}"
                assert not n.endswith("_pb2_grpc"), f"{path.name} imports the generated stubs {n}"
