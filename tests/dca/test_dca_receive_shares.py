"""ComputeNodeMachine.receive_shares (a stream's backlog in one step) against receive() share by share.

Invariant: for any run of ClientShare messages — clean, or with replays, wrong dimensions, wrong kinds,
foreign jobs, wrong senders, ids off the roster, more than N clients, or a failed machine — the machine ends
in exactly the state it reaches when the same shares are received one at a time, accepts the same shares,
and rejects the same ones with the same Problem kinds.
"""

from __future__ import annotations

import numpy as np
import pytest

from mpdp.dca.client import ClientMachine
from mpdp.dca.compute_node import ComputeNodeMachine
from mpdp.dca.engine import Reply
from mpdp.math.drbg import Drbg
from mpdp.messages import dca_pb2 as pb
from mpdp.protocol import Peer, Problem, ProtocolError, Send

from tests.dca.helpers import NODES, make_params

ROUTER = Peer("operator", "router-0")


def shares_for(p, node: str, ids: list[str]) -> list[pb.ClientShare]:
    out = []
    for cid in ids:
        outs = ClientMachine(p, cid, np.zeros(p.dimension), Drbg.from_seed(f"s/{cid}")).submit()
        out += [o.message for o in outs if isinstance(o, Send) and o.to.name == node]
    return out


def state(m: ComputeNodeMachine):
    return (m.state, m.received, m.confirmed, m.pending, m._running.tolist(), sorted(m._book.holders(m._bit)), m.failed)


def sequential(m, sender, shares):
    accepted, problems, sent = 0, [], []
    for j, s in enumerate(shares):
        try:
            for o in m.receive(sender, s):
                if isinstance(o, Reply):
                    accepted += o.message.accepted
                elif isinstance(o, Send):
                    sent.append(o.message)
        except ProtocolError as e:
            problems.append((j, e.problem))
    return accepted, problems, sent


def chunked(m, sender, shares):
    out, rejected = m.receive_shares(sender, shares)
    accepted = sum(o.message.accepted for o in out if isinstance(o, Reply))
    return accepted, [(j, e.problem) for j, e in rejected], [o.message for o in out if isinstance(o, Send)]


def unreported(m):
    """Ids of the clients a node received but has not reported yet."""
    return [c for idx in m._unreported for c in m._book.roster.names(idx)]


def both(p, node, sender, runs, outcomes=None):
    """Feed ``runs`` both ways and check they agree; ``outcomes`` collects each run's (accepted, [(position, Problem)])."""
    a, b = ComputeNodeMachine(p, node, report_every=3), ComputeNodeMachine(p, node, report_every=3)
    reported_a, reported_b = [], []
    for shares in runs:
        ra, rb = sequential(a, sender, shares), chunked(b, sender, shares)
        assert ra[:2] == rb[:2]
        if outcomes is not None:
            outcomes.append(ra[:2])
        assert state(a) == state(b)
        reported_a += [c for m in ra[2] if isinstance(m, pb.ReceivedClients) for c in m.client_ids]
        reported_b += [c for m in rb[2] if isinstance(m, pb.ReceivedClients) for c in m.client_ids]
        # the same clients reported or awaiting report (a run's reports may be cut differently)
        assert sorted(reported_a + unreported(a) * 2) == sorted(reported_b + unreported(b) * 2)
    return a, b


@pytest.mark.parametrize("seed_compressed", [False, True])
@pytest.mark.parametrize("node", [0, 1])
def test_clean_runs_take_the_fast_path_and_match(seed_compressed, node):
    p = make_params(clients=40, max_missing=2, seed_compressed=seed_compressed)
    ids = [f"c{i}" for i in range(40)]
    s = shares_for(p, NODES[node], ids)
    a, b = both(p, NODES[node], ROUTER, [s[:1], s[1:17], s[17:39], s[39:]])
    assert b.received == 40 and b.state == "AWAIT_RECEIVED_SETS"  # N in: closed, final report sent


def test_bad_runs_fall_back_and_match():
    p = make_params(clients=12, max_missing=2)
    good = shares_for(p, NODES[0], [f"c{i}" for i in range(14)])
    wrong_dim = pb.ClientShare(job_id=p.job_id, spec_digest=p.spec_digest, client_id="w", masked_vector=b"\x00" * 8)
    seed_kind = pb.ClientShare(job_id=p.job_id, spec_digest=p.spec_digest, client_id="k", mask_seed=b"\x00" * 32)
    foreign = pb.ClientShare(job_id="other", client_id="f", masked_vector=good[0].masked_vector)
    other_spec = pb.ClientShare(job_id=p.job_id, spec_digest=bytes(32), client_id="o", masked_vector=good[0].masked_vector)
    runs = [good[:3], [good[3], good[3], wrong_dim, seed_kind, foreign, other_spec, good[4]], good[2:5], good[5:14]]  # replays, too many
    a, b = both(p, NODES[0], ROUTER, runs)
    assert b.received == 12 and not b.failed


def test_party_sender_and_roster():
    ids = [f"c{i}" for i in range(6)]
    p = make_params(clients=6, max_missing=1, roster=tuple(ids))
    s = shares_for(p, NODES[0], ids)
    seen: list = []
    a, _ = both(p, NODES[0], Peer("party", "c0"), [s[:1], s[1:3]], seen)  # a party may only submit its own share
    assert seen == [(1, []), (0, [(0, Problem.WRONG_ROLE), (1, Problem.WRONG_ROLE)])] and a.received == 1 and not a.failed
    seen = []
    a, _ = both(p, NODES[0], ROUTER, [s[2:4]], seen)  # a named roster's slots are its clients' own: nobody relays (squatting)
    assert seen == [(0, [(0, Problem.WRONG_ROLE), (1, Problem.WRONG_ROLE)])] and a.received == 0 and not a.failed
    r = make_params(clients=6, max_missing=1, roster_range=("c", 1))  # a range roster (simulated clients) may be relayed
    ranged = shares_for(r, NODES[0], [r.roster_id(i) for i in range(6)])
    outsider = shares_for(make_params(clients=7, max_missing=1), NODES[0], ["zz"])
    outsider[0].spec_digest = r.spec_digest  # the roster, not the spec, refuses it here
    seen = []
    a, _ = both(r, NODES[0], ROUTER, [outsider + ranged[2:4]], seen)  # off the roster
    assert seen == [(2, [(0, Problem.WRONG_ROLE)])] and a.received == 2 and not a.failed


def test_failed_machine_rejects_every_share():
    p = make_params(clients=10, max_missing=1)
    s = shares_for(p, NODES[0], [f"c{i}" for i in range(4)])
    m = ComputeNodeMachine(p, NODES[0])
    m.fail(1, "test")
    out, rejected = m.receive_shares(ROUTER, s)
    assert [j for j, _ in rejected] == [0, 1, 2, 3] and sum(o.message.accepted for o in out if isinstance(o, Reply)) == 0
