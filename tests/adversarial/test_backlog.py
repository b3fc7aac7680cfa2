"""A compute node fed ahead of its peers holds new submissions instead of holding its undecided clients, over real
processes and mutual TLS (ComputeNodeMachine, "Backlog"; the servicer's ``room``).

The nodes run with ``report_every = 4`` and a backlog of one byte, so each holds at most 16 undecided clients
(four reports' worth). A raw load generator (the federation's operator certificate) sends ShareBatch messages of 16
clients:

- to node A only: A takes the batch; the next batch to A is held (``mpdp_dca_backlog_waits_total`` rises on A's
  /metrics page) until B and C take the first batch and report it; then A takes it, and the job releases exactly the
  sum of all 48 clients' contributions;
- to node A only, not (yet) to the others: after ``backlog_stall_seconds`` with none of them decided, A takes the next
  batch beside them (``mpdp_dca_backlog_stalls_total`` rises); when those clients do reach B and C, the job releases;
- with at most two submissions held per job (``backlog_held_calls``), a third is refused RESOURCE_EXHAUSTED at once,
  nothing of it taken; sent again later it is taken whole.
"""

from __future__ import annotations

import concurrent.futures

import grpc
import numpy as np
import pytest

from mpdp.dca.params import DcaParams
from mpdp.messages import common_pb2

from tests.adversarial.conftest import (job_host, dca_release, NODES, assert_all_serving, assert_status, cohort_job, metric_total, operator_curator, refused,
                                        start_federation, submit_batch, until_metric, wait_dca)

N, D, BATCH = 48, 3, 16
NODE_OPTIONS = {"report_every": 4, "backlog_mib": 1e-6, "backlog_stall_seconds": 2.0}
CAPPED = {"report_every": 4, "backlog_mib": 1e-6, "backlog_stall_seconds": 40.0, "backlog_held_calls": 2}


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    f = start_federation(tmp_path_factory.mktemp("backlog"), node_options=NODE_OPTIONS)
    yield f
    f.stop()


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    """Nodes that hold at most two submissions of a job at once, and wait 40 s before presuming clients stuck."""
    f = start_federation(tmp_path_factory.mktemp("backlog-capped"), node_options=CAPPED)
    yield f
    f.stop()


def _job(fed, n: int = N) -> tuple[str, DcaParams, list]:
    return cohort_job(fed, n, D, BATCH)


def test_a_node_ahead_of_its_peers_holds_submissions_until_they_report(fed):
    job, params, batches = _job(fed)
    assert submit_batch(fed, 0, batches[0].batches[0]).accepted == BATCH  # A now holds 16 undecided clients: its limit
    waits = metric_total(fed, NODES[0], "mpdp_dca_backlog_waits_total")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        held = pool.submit(submit_batch, fed, 0, batches[1].batches[0])
        until_metric(fed, NODES[0], "mpdp_dca_backlog_waits_total", waits + 1)
        assert not held.done()  # held: none of A's clients is decided yet
        for k in (1, 2):
            assert submit_batch(fed, k, batches[0].batches[k]).accepted == BATCH
        assert held.result(timeout=90).accepted == BATCH
    for b in batches[1:]:
        for k in range(params.M):
            if (b, k) != (batches[1], 0):
                assert submit_batch(fed, k, b.batches[k]).accepted == BATCH
    st = wait_dca(fed, job)
    assert st.state == "RELEASED" and dca_release(fed, job).clients_included == N, st
    with operator_curator(fed) as ch:
        release = job_host(ch).GetRelease(common_pb2.JobRef(job_id=job), timeout=30).dca
    expected = sum((b.clipped + b.noise).sum(axis=0) for b in batches)
    assert np.allclose(release.values, expected, atol=1e-6)
    assert_all_serving(fed)


def test_clients_that_never_reach_the_other_nodes_do_not_stall_a_node(fed):
    job, _, batches = _job(fed)
    assert submit_batch(fed, 0, batches[0].batches[0]).accepted == BATCH
    stalls = metric_total(fed, NODES[0], "mpdp_dca_backlog_stalls_total")
    assert submit_batch(fed, 0, batches[1].batches[0]).accepted == BATCH  # taken after the stall, beside the 16 stuck ones
    assert metric_total(fed, NODES[0], "mpdp_dca_backlog_stalls_total") == stalls + 1
    for b in batches[:2]:  # the stuck clients reach the others after all: the job releases them all
        for k in (1, 2):
            assert submit_batch(fed, k, b.batches[k]).accepted == BATCH
    for k in range(3):
        assert submit_batch(fed, k, batches[2].batches[k]).accepted == BATCH
    st = wait_dca(fed, job)
    assert st.state == "RELEASED" and dca_release(fed, job).clients_included == N, st
    assert_all_serving(fed)


def test_a_node_holds_a_bounded_number_of_submissions_and_refuses_more(capped):
    """Each held call keeps its request in memory: past ``backlog_held_calls`` a submission is refused OVERLOADED at once
    and nothing of it is taken; sent again once there is room, it is taken, and the job releases every client."""
    fed = capped
    job, params, batches = _job(fed, 4 * BATCH)
    assert submit_batch(fed, 0, batches[0].batches[0]).accepted == BATCH
    waits = metric_total(fed, NODES[0], "mpdp_dca_backlog_waits_total")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        held = [pool.submit(submit_batch, fed, 0, b.batches[0]) for b in batches[1:3]]
        until_metric(fed, NODES[0], "mpdp_dca_backlog_waits_total", waits + 2)  # both held
        assert_status(refused(lambda: submit_batch(fed, 0, batches[3].batches[0])), grpc.StatusCode.RESOURCE_EXHAUSTED)
        for b in batches[:3]:  # the peers catch up, batch by batch
            for k in (1, 2):
                assert submit_batch(fed, k, b.batches[k]).accepted == BATCH
        assert [h.result(timeout=90).accepted for h in held] == [BATCH, BATCH]
    for k in range(params.M):  # the refused batch again: nothing of it was taken, so none of it is a replay
        assert submit_batch(fed, k, batches[3].batches[k]).accepted == BATCH
    st = wait_dca(fed, job)
    assert st.state == "RELEASED" and dca_release(fed, job).clients_included == 4 * BATCH, st
    assert_all_serving(fed)
