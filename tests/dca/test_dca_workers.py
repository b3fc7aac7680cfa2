"""One compute node as W processes (mpdp.dca.worker + ComputeNodeMachine(workers=W)), in memory: the coordinator
accounts every client, the workers keep and sum the shares, and the node releases the same q_k over the same A as
a node of one process (the integration test runs the same with real processes)."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from mpdp.dca.aggregator import AggregatorMachine
from mpdp.dca.client import ClientCohort
from mpdp.dca.compute_node import ComputeNodeMachine
from mpdp.dca.errors import InsufficientNoise
from mpdp.dca.worker import WorkerShares
from mpdp.math.drbg import Drbg
from mpdp.messages import common_pb2, dca_pb2 as pb
from mpdp.protocol import CURATOR, Peer, Problem, ProtocolError, Publish, Reply, Send

from tests.dca.helpers import NODES, data, make_params

ROUTER = Peer("operator", "router-0")


class Node0:
    """Node 0 as a coordinator and W − 1 workers; batches are spread over the W processes round-robin."""

    def __init__(self, p, W):
        self.coord = ComputeNodeMachine(p, NODES[0], workers=W, report_every=4)
        self.workers = {w: WorkerShares(p, NODES[0]) for w in range(1, W)}
        self.W = W
        self.turn = 0
        self.where = collections.Counter()

    def batch(self, msg, sender=ROUTER):
        w = self.turn % self.W
        self.turn += 1
        return self.to(w, msg, sender)

    def to(self, w, msg, sender=ROUTER):
        """Outputs, receipt."""
        if w == 0:
            outs = self.coord.receive(sender, msg)
            return [o for o in outs if not isinstance(o, Reply)], next(o.message for o in outs if isinstance(o, Reply))
        ws = self.workers[w]
        parsed = ws.parse_batch(sender.role, sender.name, msg) if isinstance(msg, pb.ShareBatch) else ws.parse_shares(sender.role, sender.name, [msg])
        outs = self.coord.receive(Peer("worker", str(w)), parsed.claim)
        reply = next(o.message for o in outs if isinstance(o, Reply))
        accepted, rejected = ws.apply(parsed, reply)
        self.where[w] += accepted
        r = pb.ShareReceipt(job_id=msg.job_id, accepted=accepted, rejected=[x for _, x in sorted(rejected, key=lambda t: t[0])])
        return [o for o in outs if not isinstance(o, Reply)], r


def run(p, W, Z, lost=(), batch=4):
    agg = AggregatorMachine(p)
    node0 = Node0(p, W)
    others = {n: ComputeNodeMachine(p, n, report_every=4) for n in NODES[1:]}
    queue = collections.deque()
    releases = []

    def route(sender, outs):
        for o in outs:
            if isinstance(o, Send):
                queue.append((sender, o.to, o.message))
            elif isinstance(o, Publish):
                releases.append(o.release)

    def pump():
        while queue:
            try:
                step(*queue.popleft())
            except ProtocolError as e:  # a refusal (e.g. too few clients) fails the job: route its abort notices
                route(Peer("compute_node", NODES[0]), e.notices)

    def step(sender, to, msg):
        if to == CURATOR:
            route(CURATOR, agg.receive(sender, msg))
        elif to.role == "worker":
            route(Peer("compute_node", NODES[0]), node0.coord.receive(Peer("worker", to.name), node0.workers[int(to.name)].finish(msg)))
        elif to.name == NODES[0]:
            route(Peer("compute_node", NODES[0]), node0.coord.receive(sender, msg))
        else:
            route(Peer("compute_node", to.name), others[to.name].receive(sender, msg))

    agg.announce()
    cohort = ClientCohort(p, [f"c{i:02d}" for i in range(Z.shape[0])], Z, Drbg.from_seed("workers"), keep_noise=True)
    clipped, noise = [], []
    for b in cohort.batches(batch, set(lost)):
        clipped.append(b.clipped)
        noise.append(b.noise)
        outs, receipt = node0.batch(b.batches[0])
        assert not receipt.rejected
        route(Peer("compute_node", NODES[0]), outs)
        for k, n in enumerate(NODES[1:], 1):
            route(Peer("compute_node", n), others[n].receive(ROUTER, b.batches[k]))
        pump()
    route(CURATOR, agg.close_submissions())
    pump()
    return agg, node0, others, releases, np.concatenate(clipped) + np.concatenate(noise)


@pytest.mark.parametrize("roster", [True, False])
@pytest.mark.parametrize("seed_compressed", [False, True])
@pytest.mark.parametrize("W", [2, 3])
def test_workers_release_the_same_sum_over_the_same_agreed_set(W, seed_compressed, roster):
    p = make_params(clients=30, max_missing=4, seed_compressed=seed_compressed, **({"roster_range": ("c", 2)} if roster else {}))
    lost = {(3, 0), (17, 0), (8, 2)}  # two clients lost at node 0 (on different processes), one at node 2
    agg, node0, others, releases, contrib = run(p, W, data(30, 4), lost)
    assert agg.error is None and len(releases) == 1, agg.error
    include = [i for i in range(30) if i not in (3, 17, 8)]
    assert releases[0].clients_included == 27
    assert np.max(np.abs(np.array(releases[0].values) - contrib[include].sum(axis=0))) <= 30 * 2.0**-32
    assert node0.coord.agreed_ids == others[NODES[1]].agreed_ids
    assert all(node0.where[w] > 0 for w in range(1, W))  # every worker took clients
    assert all(ws.pending == 0 and ws.finished for ws in node0.workers.values())


def test_a_client_is_accepted_once_per_node_across_workers():
    p = make_params(clients=20, max_missing=2, roster_range=("c", 2))
    node0 = Node0(p, 3)
    cohort = ClientCohort(p, [p.roster_id(i) for i in range(10)], data(10, 4), Drbg.from_seed("dup"))
    b = next(cohort.batches(10)).batches[0]
    _, r = node0.to(1, b)
    assert r.accepted == 10
    _, r = node0.to(2, b)  # the same batch at another worker of the same node
    assert r.accepted == 0 and {x.problem for x in r.rejected} == {Problem.REPLAY}
    # a party's own share at a worker: only for itself, only on the roster
    share = pb.ClientShare(job_id="job-1", spec_digest=p.spec_digest, client_id="c01", masked_vector=b"\0" * 32)
    _, r = node0.to(1, share, Peer("party", "c02"))
    assert r.accepted == 0 and r.rejected[0].problem == Problem.WRONG_ROLE
    short = pb.ClientShare(job_id="job-1", spec_digest=p.spec_digest, client_id="c02", masked_vector=b"\0" * 31)
    _, r = node0.to(2, short, Peer("party", "c02"))
    assert r.accepted == 0 and r.rejected[0].problem == Problem.MALFORMED
    assert not node0.coord.failed
    # once the node holds N clients it is closed: a claim is refused as a whole, each client rejected
    rest = next(ClientCohort(p, [p.roster_id(i) for i in range(10, 20)], data(10, 4), Drbg.from_seed("rest")).batches(10)).batches[0]
    _, r = node0.to(0, rest)
    assert r.accepted == 10 and node0.coord.state == "AWAIT_RECEIVED_SETS"
    ws = node0.workers[1]
    parsed = ws.parse_shares("party", "c03", [share])
    with pytest.raises(ProtocolError) as e:
        node0.coord.receive(Peer("worker", "1"), parsed.claim)
    assert e.value.problem == Problem.STEP_OUT_OF_ORDER and not node0.coord.failed
    assert [x.problem for _, x in ws.refused(parsed, e.value.problem, e.value.detail)] == [Problem.STEP_OUT_OF_ORDER]


def test_too_few_clients_is_refused_with_workers():
    p = make_params(clients=20, max_missing=2, roster_range=("c", 2))
    lost = {(1, 0), (5, 1), (9, 2)}
    agg, node0, *_ = run(p, 2, data(20, 4), lost)
    assert isinstance(agg.error, InsufficientNoise)


def test_a_wrong_worker_sum_fails_the_job():
    p = make_params(clients=10, max_missing=2, roster_range=("c", 2))
    m = ComputeNodeMachine(p, NODES[0], workers=2)
    with pytest.raises(ProtocolError):
        m.receive(Peer("worker", "5"), pb.WorkerSum(job_id="job-1"))  # no such worker: refused, nothing changes
    assert not m.failed
    with pytest.raises(ProtocolError) as e:
        m.receive(Peer("worker", "1"), pb.WorkerSum(job_id="job-1", partial_sum=b"\0" * 32, clients_summed=3))
    assert e.value.problem == Problem.STEP_OUT_OF_ORDER  # not before agreement
    assert common_pb2.JobAbort  # (aborts go to the participants as for any failure)
