"""A compute node's backlog under a hostile load (ComputeNodeMachine, "Backlog"; the servicer's ``room``), over real
processes and mutual TLS with a raw load generator (the federation's operator certificate).

The nodes run with ``report_every = 4`` and a backlog of one byte: each takes at most 16 undecided clients (four
reports' worth) before submissions wait. Batches are of 16 clients.

- **Held calls released together.** Three batches held at a full node A are let in one at a time: when the peers'
  reports free A's backlog, one batch is taken and the other two wait again until its clients are decided.
- **Nodes fed in crossing orders** (each node's backlog full of clients the next node has not received, each
  holding the batch another one waits for) do not wait for the job's deadline: the stall rule frees every node and
  the job releases the exact sum.
- **A job that ends while calls are held** (the operator cancels it; the node's own deadline closes it) wakes them
  at once with the machine's refusal, long before the stall rule (40 s here) would have let them in.
- **A caller that gives up** (its deadline ends a held batch and a held stream) leaves the job unchanged: sent
  again, every client is accepted, none refused as a replay; with one process per node and with two.
- **A node of two processes** (``workers: 2``): calls held in the worker process wait for room side by side, not
  one after another behind the worker's per-job lock (before the fix, the second call began to wait only when the
  first had ended: up to the stall time each).
"""

from __future__ import annotations

import concurrent.futures

import grpc
import numpy as np
import pytest

from mpdp.dca.params import DcaParams
from mpdp.messages import common_pb2, dca_pb2, dca_pb2_grpc, operations_pb2_grpc
from mpdp_services.common.endpoints import Endpoints

from tests.adversarial.conftest import (job_host, dca_release, NODES, assert_all_serving, assert_status, channel, cohort_job, metric_total, operator_curator,
                                        refused, start_federation, submit_batch, until_metric, wait_dca)

D, BATCH = 3, 16
BASE = {"report_every": 4, "backlog_mib": 1e-6}
WAITS, STALLS = "mpdp_dca_backlog_waits_total", "mpdp_dca_backlog_stalls_total"


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    f = start_federation(tmp_path_factory.mktemp("held-calls"), node_options={**BASE, "backlog_stall_seconds": 2.0})
    yield f
    f.stop()


@pytest.fixture(scope="module")
def patient(tmp_path_factory):
    """Nodes whose stall rule waits 40 s: a held call ends earlier only for a reason of its own."""
    f = start_federation(tmp_path_factory.mktemp("held-calls-patient"), node_options={**BASE, "backlog_stall_seconds": 40.0})
    yield f
    f.stop()


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    """As ``patient``, each node of two processes (a coordinator and a worker sharing its port)."""
    f = start_federation(tmp_path_factory.mktemp("held-calls-workers"), node_options={**BASE, "backlog_stall_seconds": 40.0, "workers": 2})
    yield f
    f.stop()


# -- helpers ------------------------------------------------------------------------------------------------
def _job(fed, n: int, deadline: float = 120.0, max_missing: int = 8) -> tuple[str, DcaParams, list]:
    return cohort_job(fed, n, D, BATCH, deadline=deadline, max_missing=max_missing, seed=11)


def _stream(fed, k: int, batch, params: DcaParams, timeout: float = 90) -> dca_pb2.ShareReceipt:
    """The clients of a ShareBatch as one ClientShare each, on one SubmitShares stream."""
    shares = [dca_pb2.ClientShare(job_id=batch.job_id, spec_digest=batch.spec_digest, client_id=cid, masked_vector=batch.masked_vectors[D * 8 * j: D * 8 * (j + 1)])
              if batch.masked_vectors else dca_pb2.ClientShare(job_id=batch.job_id, spec_digest=batch.spec_digest, client_id=cid, mask_seed=batch.mask_seeds[32 * j: 32 * (j + 1)])
              for j, cid in enumerate(batch.client_ids)]
    with channel(fed, NODES[k], Endpoints.load(fed.workdir).tls) as ch:
        return dca_pb2_grpc.ComputeNodeStub(ch).SubmitShares(iter(shares), timeout=timeout)


def _released_exactly(fed, job: str, batches: list, n: int) -> None:
    st = wait_dca(fed, job)
    assert st.state == "RELEASED" and dca_release(fed, job).clients_included == n, st
    with operator_curator(fed) as ch:
        release = job_host(ch).GetRelease(common_pb2.JobRef(job_id=job), timeout=30).dca
    expected = sum((b.clipped + b.noise).sum(axis=0) for b in batches)
    assert np.allclose(release.values, expected, atol=1e-6)


# -- held calls released together --------------------------------------------------------------------------
def test_held_batches_are_let_in_one_at_a_time_not_all_at_once(patient):
    job, params, batches = _job(patient, 4 * BATCH)
    a = NODES[0]
    assert submit_batch(patient, 0, batches[0].batches[0]).accepted == BATCH  # A is full: 16 undecided clients
    waits = metric_total(patient, a, WAITS)
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        held = {pool.submit(submit_batch, patient, 0, b.batches[0]): b for b in batches[1:]}
        until_metric(patient, a, WAITS, waits + 3)  # all three held
        assert not any(h.done() for h in held)
        freed = batches[0]
        while held:  # the peers take the batch A took last and report it: A decides its 16 clients and takes one more
            for k in (1, 2):
                assert submit_batch(patient, k, freed.batches[k]).accepted == BATCH
            done, _ = concurrent.futures.wait(held, timeout=90, return_when=concurrent.futures.FIRST_COMPLETED)
            assert len(done) == 1, f"{len(done)} held batches taken at once"  # more would leave A over its limit
            first = done.pop()
            assert first.result().accepted == BATCH
            assert not any(h.done() for h in held if h is not first), "A took a second held batch before the first was decided"
            freed = held.pop(first)
    for k in (1, 2):
        assert submit_batch(patient, k, freed.batches[k]).accepted == BATCH
    _released_exactly(patient, job, batches, 4 * BATCH)
    assert_all_serving(patient)


# -- crossing orders ----------------------------------------------------------------------------------------
def test_nodes_fed_in_crossing_orders_are_freed_by_the_stall_rule_not_the_deadline(fed):
    job, params, batches = _job(fed, 3 * BATCH)
    stalls = [metric_total(fed, n, STALLS) for n in NODES]
    for k in range(3):  # node k takes batch k first: every node full of clients no other node holds
        assert submit_batch(fed, k, batches[k].batches[k]).accepted == BATCH
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        for shift in (1, 2):  # each node is then sent the batch the next node took first: every one waits on the others
            round_ = [pool.submit(submit_batch, fed, k, batches[(k + shift) % 3].batches[k]) for k in range(3)]
            assert all(r.result(timeout=90).accepted == BATCH for r in round_)
    assert all(metric_total(fed, n, STALLS) > s for n, s in zip(NODES, stalls))
    _released_exactly(fed, job, batches, 3 * BATCH)
    assert_all_serving(fed)


# -- a job that ends while calls are held -------------------------------------------------------------------------
def test_a_cancelled_job_wakes_its_held_calls_at_once_and_takes_nothing(patient):
    job, params, batches = _job(patient, 3 * BATCH)
    a = NODES[0]
    assert submit_batch(patient, 0, batches[0].batches[0]).accepted == BATCH
    waits = metric_total(patient, a, WAITS)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        batch = pool.submit(submit_batch, patient, 0, batches[1].batches[0], 30)
        stream = pool.submit(_stream, patient, 0, batches[2].batches[0], params, 30)
        until_metric(patient, a, WAITS, waits + 2)
        with operator_curator(patient) as ch:
            operations_pb2_grpc.JobOperationsStub(ch).CancelJob(common_pb2.JobRef(job_id=job), timeout=30)
        # both answered well inside their 30 s deadline (the stall rule would have waited 40 s): refused, not taken
        e = refused(lambda: batch.result(timeout=60))
        assert e.code() in (grpc.StatusCode.ABORTED, grpc.StatusCode.FAILED_PRECONDITION), e
        try:
            receipt = stream.result(timeout=60)
        except grpc.RpcError as err:
            assert err.code() in (grpc.StatusCode.ABORTED, grpc.StatusCode.FAILED_PRECONDITION), err
        else:
            assert receipt.accepted == 0 and len(receipt.rejected) == BATCH, receipt
    st = wait_dca(patient, job)
    assert st.state == "FAILED" and st.problem == common_pb2.CANCELLED, st
    assert_all_serving(patient)


def test_the_node_s_own_deadline_wakes_its_held_calls_with_its_refusal(patient):
    job, params, batches = _job(patient, 3 * BATCH, deadline=8.0)
    a = NODES[0]
    assert submit_batch(patient, 0, batches[0].batches[0]).accepted == BATCH
    waits = metric_total(patient, a, WAITS)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        held = pool.submit(submit_batch, patient, 0, batches[1].batches[0], 35)
        until_metric(patient, a, WAITS, waits + 1)
        e = refused(lambda: held.result(timeout=60))  # the node closed at 8 s; the stall rule would have waited 40 s
    assert_status(e, grpc.StatusCode.FAILED_PRECONDITION)
    assert "closed" in e.details() or "STEP_OUT_OF_ORDER" in e.details(), e.details()
    wait_dca(patient, job)
    assert_all_serving(patient)


@pytest.mark.parametrize("federation", ["patient", "two_processes"])
def test_a_held_call_whose_caller_gives_up_takes_nothing(federation, request):
    """The caller's deadline (3 s) ends a held batch and a held stream: none of their clients counts as received at A
    (sent again, every one is accepted, not refused as a replay), and the job releases the exact sum."""
    fed = request.getfixturevalue(federation)
    job, params, batches = _job(fed, 3 * BATCH)
    a = NODES[0]
    assert submit_batch(fed, 0, batches[0].batches[0]).accepted == BATCH
    waits = metric_total(fed, a, WAITS)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        gone = [pool.submit(submit_batch, fed, 0, batches[1].batches[0], 3), pool.submit(_stream, fed, 0, batches[2].batches[0], params, 3)]
        for g in gone:
            assert_status(refused(lambda: g.result(timeout=60)), grpc.StatusCode.DEADLINE_EXCEEDED)
    assert metric_total(fed, a, WAITS) >= waits + 1
    for k in (1, 2):  # A's 16 clients decided: A has room again
        assert submit_batch(fed, k, batches[0].batches[k]).accepted == BATCH
    assert submit_batch(fed, 0, batches[1].batches[0]).accepted == BATCH
    for k in (1, 2):
        assert submit_batch(fed, k, batches[1].batches[k]).accepted == BATCH
    assert _stream(fed, 0, batches[2].batches[0], params).accepted == BATCH
    for k in (1, 2):
        assert submit_batch(fed, k, batches[2].batches[k]).accepted == BATCH
    _released_exactly(fed, job, batches, 3 * BATCH)
    assert_all_serving(fed)


# -- a node of two processes ---------------------------------------------------------------------------------------
HELD = 6  # held calls on as many connections: the kernel puts at least two in one process (SO_REUSEPORT), mostly the worker


def test_calls_held_in_a_worker_process_wait_side_by_side_not_one_after_another(two_processes):
    """Each held call waits for room on its own: none queues behind another's wait in A's worker process (where the
    next call would only start waiting once the previous one ended, up to HELD times the longest wait). As the peers
    take what A took, A takes the held calls one after another; the job releases the exact sum."""
    job, params, batches = _job(two_processes, (HELD + 2) * BATCH)
    a = NODES[0]
    assert submit_batch(two_processes, 0, batches[0].batches[0]).accepted == BATCH  # A is full (whichever of its processes took it)
    waits = metric_total(two_processes, a, WAITS)
    with concurrent.futures.ThreadPoolExecutor(HELD) as pool:
        held = {pool.submit(submit_batch if j % 2 else _stream, two_processes, 0, batches[j].batches[0], *(() if j % 2 else (params,))): batches[j]
                for j in range(1, HELD + 1)}
        until_metric(two_processes, a, WAITS, waits + HELD)  # all waiting at once (the stall rule waits 40 s)
        assert not any(h.done() for h in held)
        freed = [batches[0]]
        while held:  # the peers take what A took (each node holds one batch of undecided clients at most): A takes more
            for b in freed:
                for k in (1, 2):
                    assert submit_batch(two_processes, k, b.batches[k]).accepted == BATCH
            done, _ = concurrent.futures.wait(held, timeout=90, return_when=concurrent.futures.FIRST_COMPLETED)
            assert done
            assert all(d.result().accepted == BATCH for d in done)
            freed = [held.pop(d) for d in done]
    for b in freed:
        for k in (1, 2):
            assert submit_batch(two_processes, k, b.batches[k]).accepted == BATCH
    for k in range(3):
        assert submit_batch(two_processes, k, batches[HELD + 1].batches[k]).accepted == BATCH
    _released_exactly(two_processes, job, batches, (HELD + 2) * BATCH)
    assert_all_serving(two_processes)
