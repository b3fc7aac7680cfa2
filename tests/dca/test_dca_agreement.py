"""Agreement by roster index (mpdp.dca.agreement; docs/protocols/dca.md "Agreement"): the compact wire form of a
set of clients, the id ↔ index maps, and whole jobs with a listed roster, a roster range and no roster giving the
same agreed set A, the same refusals and the same release."""

from __future__ import annotations

import numpy as np
import pytest

from mpdp.dca import agreement
from mpdp.dca.agreement import ListRoster, OpenIds, RangeRoster, decode_indices, encode_indices
from mpdp.dca.compute_node import ComputeNodeMachine
from mpdp.dca.driver import run_job
from mpdp.dca.errors import InsufficientNoise, InvalidJob
from mpdp.math.drbg import Drbg
from mpdp.messages import dca_pb2 as pb
from mpdp.protocol import Peer, Problem, ProtocolError, Reply, Send

from tests.dca.helpers import NODES, data, make_params

IDS = [f"client-{i:06d}" for i in range(20)]
ROSTERS = {
    "open": {},
    "list": {"roster": tuple(reversed(IDS))},  # roster order ≠ arrival order
    "range": {"roster_range": ("client-", 6)},
}


@pytest.mark.parametrize("idx", [[], [0], [5, 6, 7, 8], [3, 90, 17, 1000, 4, 5], list(range(0, 4000, 3)), list(range(64, 200)) + [999]])
def test_index_sets_round_trip_and_pick_the_shorter_form(idx):
    a = np.array(idx, dtype=np.int64)
    runs, start, bitmap = encode_indices(a)
    assert not (runs and bitmap)
    assert np.array_equal(decode_indices(runs, start, bitmap, 5000), np.sort(a))
    other_runs = 2 * len(np.flatnonzero(np.diff(np.sort(a)) != 1)) + 2 if a.size else 0
    assert len(runs) <= other_runs  # runs when they are shorter; a bitmap never holds more bytes than 3 runs
    assert len(bitmap) <= max(3 * other_runs, 1)


@pytest.mark.parametrize(
    "runs,start,bitmap",
    [
        ([1], 0, b""),  # not a pair
        ([5, 0], 0, b""),  # empty run
        ([5, 3, 6, 1], 0, b""),  # overlapping
        ([5, 3, 1, 1], 0, b""),  # not increasing
        ([95, 6], 0, b""),  # beyond N = 100
        ([1, 1], 0, b"\x01"),  # both forms
        ([], 3, b"\x01"),  # start not a multiple of 8
        ([], 96, b"\x10"),  # bit 100 ≥ N
        ([], 96, b"\x01\x00"),  # ends beyond the roster
    ],
)
def test_malformed_index_sets_are_refused(runs, start, bitmap):
    with pytest.raises(ValueError):
        decode_indices(runs, start, bitmap, 100)


def test_roster_maps():
    r = RangeRoster("c-", 3, 120)
    got = r.lookup(["c-000", "c-119", "c-120", "c-07", "c-0070", "x-001", "c-\u0661\u0662\u0663", "c-+12"]).tolist()
    assert got == [0, 119, -1, -1, -1, -1, -1, -1] and r.name(7) == "c-007"
    lr = ListRoster(("b", "a", "zz"))
    assert lr.lookup(["a", "zz", "b", "q", ""]).tolist() == [1, 2, 0, -1, -1] and lr.name(2) == "zz"
    o = OpenIds()
    idx = o.admit(["x", "y"], o.lookup(["x", "y"]))
    assert idx.tolist() == [0, 1] and o.lookup(["y", "z"]).tolist() == [1, -1]
    assert agreement.mask_dtype(10) is np.uint16 and agreement.mask_dtype(8) is np.uint8 and agreement.mask_dtype(63) is np.uint64


def test_range_roster_batch_lookup_is_the_per_id_rule():
    """The vectorised path (≥ 16 ids of the roster's width) agrees with the per-id parse on hostile ids."""
    r = RangeRoster("c-", 3, 120)
    hostile = ["c-000", "c-119", "c-120", "c-999", "x-001", "c-+12", "c- 12", "c-1 2", "c-/00", "c-:00", "C-001", "cc001",
               "c-\u0661\u0662\u0663", "c-0\u00e9", "c-07", "c-0070", "", "c-042", "c-\x0012", "-c-01"]
    rng = np.random.default_rng(5)
    five = [c for c in hostile if len(c) == 5]  # the roster's width: these take the vectorised path
    assert len(five) >= 12
    for pool in (hostile, five):
        for _ in range(50):
            ids = [pool[i] for i in rng.integers(0, len(pool), size=int(rng.integers(16, 40)))]
            assert r.lookup(ids).tolist() == [r._one(c) for c in ids]
    same_width = [f"c-{i:03d}" for i in range(100, 120)] + ["c-1a0", "d-100", "c-\u00e90"[:5]]
    assert r.lookup(same_width).tolist() == [r._one(c) for c in same_width] == list(range(100, 120)) + [-1, -1, -1]
    assert RangeRoster("\u00e9-", 2, 50).lookup(["ab-01"] * 16).tolist() == [-1] * 16


# A named roster's clients each submit over their own certificate (machines); only open and range jobs take a router's cohort.
@pytest.mark.parametrize("kind,client_mode", [(k, m) for k in ROSTERS for m in ("machines", "cohort") if (k, m) != ("list", "cohort")])
def test_partial_loss_and_dropouts_give_the_same_agreed_set(kind, client_mode):
    p = make_params(clients=20, max_missing=4, **ROSTERS[kind])
    lost = {(2, 0), (5, 1), (9, 2)}
    run = run_job(p, data(20, 4), Drbg.from_seed("roster"), client_ids=IDS, client_mode=client_mode, drop=[11], lost=lost,
                  keep_noise=True, batch_size=6, report_every=4)
    assert run.error is None, run.error
    include = [i for i in range(20) if i not in (2, 5, 9, 11)]
    assert run.included() == include
    expect = (run.clipped[include] + run.noise[include]).sum(axis=0)
    assert np.max(np.abs(np.array(run.release.values) - expect)) <= 20 * 2.0**-32
    assert run.release.clients_included == 16
    digests = {n.partial_sum().agreed_set_digest for n in run.nodes.values()}
    assert len(digests) == 1 and all(n.pending == 0 for n in run.nodes.values())
    if kind != "open":  # the nodes named clients by index only
        for n in run.nodes.values():
            assert n.by_index and all(not m.client_ids for _, m in n.transcript if isinstance(m, pb.ReceivedClients))
            assert not n._book._seeds and bool(np.all(n._book._row == -1))  # no pending entry outlives its share


def test_a_router_cannot_fill_a_named_roster():
    """A named roster's slots are its clients' own: a router's cohort is refused share by share, nothing is summed."""
    p = make_params(clients=20, max_missing=4, **ROSTERS["list"])
    run = run_job(p, data(20, 4), Drbg.from_seed("roster"), client_ids=IDS, client_mode="cohort", batch_size=6)
    assert run.release is None and isinstance(run.error, InsufficientNoise)
    assert all(n.received == 0 for n in run.nodes.values())


@pytest.mark.parametrize("kind", ["list", "range"])
def test_more_than_T_missing_is_refused_with_a_roster(kind):
    p = make_params(clients=20, max_missing=3, **ROSTERS[kind])
    run = run_job(p, data(20, 4), Drbg.from_seed("refuse"), client_ids=IDS, drop=[0, 1], lost={(4, 1), (7, 2)})
    assert run.release is None and isinstance(run.error, InsufficientNoise)


def test_roster_range_params():
    p = make_params(clients=1000, roster_range=("c", 3))
    assert p.has_roster and p.roster_id(42) == "c042"
    back = type(p).from_spec("job-1", p.to_spec())
    assert back.roster_range == ("c", 3)
    with pytest.raises(InvalidJob):
        make_params(clients=1001, roster_range=("c", 3))  # index 1000 needs 4 digits
    with pytest.raises(InvalidJob):
        make_params(clients=20, roster=tuple(IDS), roster_range=("client-", 6))
    with pytest.raises(InvalidJob):
        make_params(clients=20, roster_range=("c", 13))


def _batch(p, idx, d=4):
    return pb.ShareBatch(job_id="job-1", spec_digest=p.spec_digest, client_indices=np.asarray(idx, dtype="<u4").tobytes(), masked_vectors=b"\x01" * (8 * d * len(idx)))


def test_batches_by_index_are_accounted_per_client():
    p = make_params(clients=20, max_missing=4, roster_range=("client-", 6))
    a = ComputeNodeMachine(p, NODES[0])
    router = Peer("operator", "router-0")
    [r] = [o.message for o in a.receive(router, _batch(p, [0, 1, 2])) if isinstance(o, Reply)]
    assert r.accepted == 3 and not r.rejected
    [r] = [o.message for o in a.receive(router, _batch(p, [2, 3, 3, 20, 4])) if isinstance(o, Reply)]
    assert r.accepted == 2
    assert [(x.client_id, x.problem) for x in r.rejected] == [("client-000002", Problem.REPLAY), ("client-000003", Problem.REPLAY), ("#20", Problem.WRONG_ROLE)]
    # a party's single share by its certificate name maps to the same index: a replay of a batched client
    with pytest.raises(ProtocolError) as e:
        a.receive(Peer("party", "client-000004"), pb.ClientShare(job_id="job-1", spec_digest=p.spec_digest, client_id="client-000004", masked_vector=b"\0" * 32))
    assert e.value.problem == Problem.REPLAY
    with pytest.raises(ProtocolError) as e:  # an outsider
        a.receive(Peer("party", "client-x"), pb.ClientShare(job_id="job-1", spec_digest=p.spec_digest, client_id="client-x", masked_vector=b"\0" * 32))
    assert e.value.problem == Problem.WRONG_ROLE
    # both names at once, and indices in a job without a roster, are malformed
    both = _batch(p, [5])
    both.client_ids.append("client-000005")
    with pytest.raises(ProtocolError) as e:
        a.receive(router, both)
    assert e.value.problem == Problem.MALFORMED
    plain = make_params(clients=20, max_missing=4)
    b = ComputeNodeMachine(plain, NODES[0])
    with pytest.raises(ProtocolError) as e:
        b.receive(router, _batch(plain, [5]))
    assert e.value.problem == Problem.MALFORMED
    assert not b.failed and not a.failed  # a router's bad batch fails nobody


def test_reports_by_index_are_checked():
    p = make_params(clients=20, max_missing=4, roster_range=("client-", 6))
    B = Peer("compute_node", NODES[1])
    a = ComputeNodeMachine(p, NODES[0])
    a.receive(B, pb.ReceivedClients(job_id="job-1", spec_digest=p.spec_digest, sequence=0, index_runs=[0, 5]))
    with pytest.raises(ProtocolError) as e:
        a.receive(B, pb.ReceivedClients(job_id="job-1", spec_digest=p.spec_digest, sequence=1, bitmap_start=0, bitmap=b"\x10"))  # index 4 again
    assert e.value.problem == Problem.MALFORMED and a.failed
    c = ComputeNodeMachine(p, NODES[0])
    with pytest.raises(ProtocolError) as e:
        c.receive(B, pb.ReceivedClients(job_id="job-1", spec_digest=p.spec_digest, sequence=0, client_ids=["client-000001"]))  # ids in a roster job
    assert e.value.problem == Problem.MALFORMED and c.failed


def test_reports_are_small_and_final_digests_match():
    """A node's reports for 10^4 clients sent in roster order are a few runs, not 10^4 ids."""
    n = 10_000
    p = make_params(clients=n, max_missing=10, roster_range=("c", 5), dimension=2)
    a = ComputeNodeMachine(p, NODES[0], record=False)
    router = Peer("operator", "router-0")
    sent = []
    for s in range(0, n, 1000):
        sent += [o.message for o in a.receive(router, _batch(p, range(s, s + 1000), d=2)) if isinstance(o, Send)]
    reports = [m for m in sent if isinstance(m, pb.ReceivedClients)]
    assert reports[-1].final and reports[-1].total == n
    assert sum(m.ByteSize() for m in reports) < 100 * len(reports)
    b = ComputeNodeMachine(p, NODES[1], record=False)
    A = Peer("compute_node", NODES[0])
    seen = set()
    for m in reports:
        if id(m) not in seen:
            seen.add(id(m))
            b.receive(A, m)
    assert 0 in b._peer_done and b._book.count(1) == n
