"""A compute node's backlog (ComputeNodeMachine, "Backlog"): the clients received here and not yet decided.

* the limit is about ``backlog_bytes`` of pending rows (and, validated, M verifier records) a client, never fewer than
  four reports' worth of clients;
* a node fed ahead of its peers has no room once the limit is reached, and has room again as soon as the peers'
  reports decide its clients; the shares it took are summed as usual;
* clients that never reach every node: ``presume_stuck`` raises the limit above them;
* once the node stops taking shares, it always "has room" (the machine refuses late shares itself);
* a validated client rejected by its proof is decided, in one process or in workers.
"""

from __future__ import annotations

import pytest
from mpdp.dca.compute_node import ComputeNodeMachine
from mpdp.dca.params import DcaParams
from mpdp.protocol import Peer

from tests.dca.helpers import NODES, make_params
from tests.dca.test_dca_machines import client_messages, deliver_all
from tests.dca.test_dca_validated_workers import NODES as VNODES, _params, _run, _shares

REPORT_EVERY = 2


def _nodes(p: DcaParams, backlog_bytes: int = 1) -> dict[str, ComputeNodeMachine]:
    return {n: ComputeNodeMachine(p, n, report_every=REPORT_EVERY, backlog_bytes=backlog_bytes) for n in NODES}


def _feed(nodes: dict[str, ComputeNodeMachine], to: list[str], clients: range, p: DcaParams) -> None:
    """Clients' shares to the nodes ``to`` only; every report that follows is delivered among the nodes."""
    for i in clients:
        msgs = client_messages(p, i)
        for n in to:
            outs = nodes[n].receive(Peer("party", f"client-{i:06d}"), msgs[n])
            deliver_all(nodes, outs, nodes[n].me)


def test_the_limit_follows_the_bytes_a_client_costs():
    p = make_params(clients=100_000, dimension=1000)
    node = ComputeNodeMachine(p, NODES[0], report_every=REPORT_EVERY, backlog_bytes=64 << 20)
    assert node.undecided_bytes == 8 * 1000 + 64
    assert node.backlog_limit == (64 << 20) // node.undecided_bytes
    assert ComputeNodeMachine(p, NODES[0], report_every=REPORT_EVERY, backlog_bytes=1).backlog_limit == 4 * REPORT_EVERY


def test_a_validated_client_costs_its_m_verifier_records_too():
    p = make_params(clients=100, dimension=10, validate="range", noise="discrete-gaussian", frac_bits=16)
    node = ComputeNodeMachine(p, NODES[0], report_every=REPORT_EVERY)
    assert p.validation is not None
    assert node.undecided_bytes == 8 * 10 + p.M * p.validation.record_bytes + 64


def test_a_node_ahead_of_its_peers_has_no_room_until_they_report():
    p = make_params(clients=20, max_missing=3)
    nodes = _nodes(p)
    a = nodes[NODES[0]]
    limit = a.backlog_limit
    assert limit == 8
    _feed(nodes, [NODES[0]], range(limit - 1), p)
    assert a.has_room and a.undecided == limit - 1
    _feed(nodes, [NODES[0]], range(limit - 1, limit), p)
    assert not a.has_room and a.undecided == limit and a.decided == 0
    _feed(nodes, NODES[1:], range(limit), p)  # the peers catch up and report: every client decided at a
    for n in NODES:  # reports of fewer than report_every clients go on the servicer's timer
        deliver_all(nodes, nodes[n].flush_reports(), nodes[n].me)
    assert a.has_room and a.undecided == 0 and a.decided == limit
    # the rest of the job as usual: every node ends with all 20 clients agreed
    _feed(nodes, list(NODES), range(limit, p.clients), p)
    assert all(nodes[n].state != "AWAIT_SHARES" for n in NODES)
    assert all(m.confirmed == p.clients for m in nodes.values())


def test_clients_that_never_reach_every_node_are_presumed_stuck():
    p = make_params(clients=20, max_missing=10)
    nodes = _nodes(p)
    a = nodes[NODES[0]]
    _feed(nodes, [NODES[0]], range(8), p)
    assert not a.has_room
    assert a.presume_stuck() == 8
    assert a.has_room and a.backlog_limit == 16
    _feed(nodes, [NODES[0]], range(8, 16), p)
    assert not a.has_room
    assert a.presume_stuck() == 16 and a.backlog_limit == 24


def test_a_closed_node_always_has_room_its_machine_refuses_late_shares():
    p = make_params(clients=20, max_missing=10)
    nodes = _nodes(p)
    a = nodes[NODES[0]]
    _feed(nodes, [NODES[0]], range(8), p)
    assert not a.has_room
    a.close()
    assert a.state != "AWAIT_SHARES" and a.has_room
    assert a.undecided == 8


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_clients_rejected_by_their_proofs_count_as_decided_in_one_process_and_in_workers():
    """A validated job: clients whose proof fails are decided (never summed), on every node and however many processes
    took them; only a client missing at some node stays undecided at the nodes that hold it (never below zero)."""
    prm = _params("range")
    shares = _shares(prm, bad={1, 6})
    for W, batched in ((1, False), (2, False), (3, True)):
        coords, partials = _run(prm, shares, W, {(9, 2)}, batched)  # client 9 never reaches the third node
        assert {p.clients_rejected for p in partials.values()} == {2}
        for k, n in enumerate(VNODES):
            m = coords[n]
            assert m.rejected == 2 and m.decided == m.confirmed + 2
            assert m.undecided == (0 if k == 2 else 1), (W, n, m.received, m.decided)
