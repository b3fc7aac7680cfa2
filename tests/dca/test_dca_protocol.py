"""Whole DCA jobs through the in-memory driver (Heikkilä et al. 2017, Algorithm 1 and
fault tolerance)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from mpdp.dca import sharing
from mpdp.dca.aggregator import AggregatorMachine
from mpdp.dca.compute_node import DEFAULT_REPORT_EVERY
from mpdp.dca.driver import run_job
from mpdp.dca.errors import InsufficientNoise
from mpdp.math.drbg import Drbg
from mpdp.math.fixedpoint import decode_u64
from mpdp.messages import common_pb2, dca_pb2 as pb
from mpdp.protocol import Peer, Problem, ProtocolError, Publish, Send

from tests.dca.helpers import NODES, data, make_params


def expected_sum(run, include):
    return (run.clipped[include] + run.noise[include]).sum(axis=0)


@pytest.mark.parametrize("client_mode", ["machines", "cohort"])
@pytest.mark.parametrize("seed_compressed", [False, True])
def test_release_decodes_to_the_noisy_sum(client_mode, seed_compressed):
    """Σ_k q_k decodes to Σ_i (z_i + η_i) within N·2^−f, with clipping applied by the clients."""
    p = make_params(dimension=6, clients=30, seed_compressed=seed_compressed, clip_bounds=(1.0, 1.0, 1.0, 0.5, 0.5, 0.5))
    Z = data(30, 6, scale=1.5)  # some values beyond the clip bounds
    run = run_job(p, Z, Drbg.from_seed("release"), client_mode=client_mode, keep_noise=True, batch_size=7, report_every=5)
    assert run.error is None and run.release is not None
    assert np.all(np.abs(run.clipped) <= p.clip_vector())
    got = np.array(run.release.values)
    assert np.max(np.abs(got - expected_sum(run, list(range(30))))) <= 30 * 2.0**-p.frac_bits
    assert run.release.clients_included == 30 and run.release.seeded and run.release.seed_compressed == seed_compressed
    assert run.release.guarantee.epsilon == p.epsilon and run.release.guarantee.norm == "l2"
    assert run.release.sigma_client == p.sigma_client
    enc = sharing.unpack_u64(run.release.encoded_sum, 6)
    assert np.array_equal(decode_u64(enc, p.frac_bits), got)
    # every client recorded the release in its ledger
    assert len(run.ledger) == 30 and all(e[0]["job_id"] == "job-1" for e in run.ledger.values())


def test_a_released_job_reports_every_node_s_partial_sum():
    """The status of a released job counts the M partial sums it was added up from (the sums themselves are dropped
    once added: the count comes from the release)."""
    p = make_params()
    run = run_job(p, data(20, 4), Drbg.from_seed("status"), record=False)
    st = run.aggregator.status()
    assert st.state == "RELEASED" and st.terminal
    assert st.nodes_reported == p.M == len(NODES) and st.clients_included == 20


def test_same_seed_same_release_other_seed_other_noise():
    p = make_params()
    Z = data(20, 4)
    a = run_job(p, Z, Drbg.from_seed("s1"), record=False)
    b = run_job(p, Z, Drbg.from_seed("s1"), record=False)
    c = run_job(p, Z, Drbg.from_seed("s2"), record=False)
    assert list(a.release.values) == list(b.release.values) != list(c.release.values)


@pytest.mark.parametrize("client_mode", ["machines", "cohort"])
def test_partial_loss_is_excluded_at_every_node(client_mode):
    """A client whose message reached some nodes but not all is summed by none (the agreed set A)."""
    p = make_params(clients=20, max_missing=3)
    Z = data(20, 4)
    lost = {(2, 0), (5, 1), (9, 2)}  # three clients, each missing at one node
    run = run_job(p, Z, Drbg.from_seed("loss"), client_mode=client_mode, lost=lost, keep_noise=True, batch_size=6, report_every=4)
    assert run.error is None
    include = [i for i in range(20) if i not in (2, 5, 9)]
    assert run.included() == include
    assert np.max(np.abs(np.array(run.release.values) - expected_sum(run, include))) <= 20 * 2.0**-32
    assert all(n.agreed_ids == run.nodes[NODES[0]].agreed_ids for n in run.nodes.values())
    assert run.release.clients_included == 17 and run.release.noise_variance == pytest.approx(17 * p.sigma_client**2)


@pytest.mark.parametrize("missing", [0, 1, 3])
def test_up_to_T_dropouts_are_released_with_enough_noise(missing):
    p = make_params(clients=20, max_missing=3)
    run = run_job(p, data(20, 4), Drbg.from_seed(f"drop{missing}"), drop=range(missing), keep_noise=True)
    assert run.error is None and run.release.clients_included == 20 - missing
    # worst case among the included: T − missing colluders and the target removed, N − T − 1 honest others remain
    honest_others = run.release.clients_included - (p.max_missing - missing) - 1
    assert honest_others * p.sigma_client**2 == pytest.approx(p.sigma_std**2)


@pytest.mark.parametrize("client_mode", ["machines", "cohort"])
def test_more_than_T_missing_is_refused(client_mode):
    p = make_params(clients=20, max_missing=3)
    run = run_job(p, data(20, 4), Drbg.from_seed("refuse"), client_mode=client_mode, drop=[0, 1], lost={(4, 1), (7, 2)})
    assert run.release is None
    assert isinstance(run.error, InsufficientNoise) and run.error.problem == Problem.INSUFFICIENT_NOISE
    with pytest.raises(InsufficientNoise):
        run.aggregator.dp_sum()
    assert run.aggregator.failed and all(n.failed for n in run.nodes.values())
    # no node let a partial sum out: Charlie's transcript holds only abort notices
    assert all(isinstance(m, common_pb2.JobAbort) for _, m in run.aggregator.transcript)
    for n in run.nodes.values():
        with pytest.raises(InsufficientNoise):
            n.partial_sum()


def _partial(job, digest, included, d=4, value=0):
    return pb.PartialSum(job_id=job, partial_sum=sharing.pack_u64(np.full(d, value, dtype=np.uint64)), clients_included=included, agreed_set_digest=digest)


def test_aggregator_refuses_too_few_clients_itself():
    """Defence in depth: even if nodes sent q_k over |A| < N − T, Charlie releases nothing."""
    p = make_params(clients=20, max_missing=3)
    agg = AggregatorMachine(p)
    agg.announce()
    outs = []
    for name in NODES:
        outs += agg.receive(Peer("compute_node", name), _partial("job-1", b"\x01" * 32, 16))
    assert not any(isinstance(o, Publish) for o in outs)
    assert agg.failed and isinstance(agg.error, InsufficientNoise)
    assert [o.to.name for o in outs if isinstance(o, Send)] == list(NODES)  # abort notices
    with pytest.raises(InsufficientNoise):
        agg.dp_sum()
    with pytest.raises(ProtocolError) as e:
        agg.receive(Peer("compute_node", NODES[0]), _partial("job-1", b"\x01" * 32, 20))
    assert e.value.problem == Problem.INSUFFICIENT_NOISE and "has failed" in e.value.detail


def test_aggregator_refuses_when_nodes_disagree():
    p = make_params(clients=20, max_missing=3)
    agg = AggregatorMachine(p)
    agg.announce()
    agg.receive(Peer("compute_node", NODES[0]), _partial("job-1", b"\x01" * 32, 20))
    agg.receive(Peer("compute_node", NODES[1]), _partial("job-1", b"\x01" * 32, 20))
    outs = agg.receive(Peer("compute_node", NODES[2]), _partial("job-1", b"\x02" * 32, 20))
    assert agg.failed and agg.error.problem == Problem.JOB_FAILED and not any(isinstance(o, Publish) for o in outs)


@pytest.mark.parametrize("seed", range(3))
def test_random_delivery_order(seed):
    p = make_params(clients=15, max_missing=2)
    run = run_job(p, data(15, 4), Drbg.from_seed("ord"), client_mode="machines", order=Drbg.from_seed(seed), lost={(3, 1)}, keep_noise=True, report_every=2)
    assert run.error is None
    include = [i for i in range(15) if i != 3]
    assert np.max(np.abs(np.array(run.release.values) - expected_sum(run, include))) <= 15 * 2.0**-32


def test_close_by_deadline_before_all_clients():
    """The curator's SubmissionsClose (deadline) closes nodes that never reach N clients."""
    p = make_params(clients=20, max_missing=3)
    run = run_job(p, data(20, 4), Drbg.from_seed("deadline"), drop=[19], client_mode="machines", keep_noise=True)
    assert run.error is None and run.release.clients_included == 19
    assert any(isinstance(m, pb.SubmissionsClose) for n in run.nodes.values() for _, m in n.transcript)
    stuck = run_job(p, data(20, 4), Drbg.from_seed("deadline"), drop=[19], close=False)
    assert stuck.release is None and stuck.error is None
    assert all(n.state == "AWAIT_SHARES" for n in stuck.nodes.values())
    assert stuck.aggregator.status().state == "AWAIT_PARTIAL_SUMS"


def test_without_all_partial_sums_the_sum_cannot_be_rebuilt():
    """Any M−1 of the q_k sum to a uniform vector in Z_2^64, whatever the data."""
    d = 4096
    p = make_params(dimension=d, clients=5, max_missing=0)
    run = run_job(p, np.zeros((5, d)), Drbg.from_seed("m-1"))
    q = [sharing.unpack_u64(n.partial_sum().partial_sum, d) for n in run.nodes.values()]
    for subset in itertools.combinations(range(3), 2):
        part = sharing.ring_sum(np.stack([q[k] for k in subset]))
        counts = np.bincount((part >> np.uint64(60)).astype(np.int64), minlength=16)
        assert stats.chisquare(counts).pvalue > 1e-4
    total = sharing.ring_sum(np.stack(q))
    counts = np.bincount((total >> np.uint64(60)).astype(np.int64), minlength=16)
    assert stats.chisquare(counts).pvalue < 1e-12  # all M together: the small noisy sum, far from uniform


def test_pending_memory_stays_bounded_with_reports():
    """With reports once report_every clients are unreported, a node holds back at most one reporting window plus
    one batch, not N clients (memory O(d))."""
    p = make_params(dimension=8, clients=5000, max_missing=10)
    run = run_job(p, data(5000, 8), Drbg.from_seed("mem"), batch_size=250, record=False)
    assert run.error is None
    for n in run.nodes.values():
        assert n.peak_pending <= DEFAULT_REPORT_EVERY + 250 and n.pending == 0
