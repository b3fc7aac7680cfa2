"""Load and budget liveness: many jobs at once, a party at a dead address, jobs that do not all fit.

Models an operator with raw gRPC clients who (a) submits more Pathak jobs at once than the old per-job health
streams could carry on one connection (130 stalled the federation until the deadlines), (b) names a registered
party whose address is dead, (c) submits concurrent jobs of which only some fit the parties' budgets, and (d)
submits past the curator's admission bounds. Invariants:

* every job ends (published or failed) well before its deadline; none hangs;
* no party keeps a charge (a ledger entry that is not voided) for a job that published nothing because a party was
  unreachable or a job before it in the spend order took the budget;
* a submission past the federation's or the operator's bound of live jobs waits in the admission queue, told to no
  party; past the queue's bounds (the whole, or the operator's share, whatever the job's protocol) it is refused
  OVERLOADED (RESOURCE_EXHAUSTED) before any party hears of it.
"""

from __future__ import annotations

import asyncio
import os
import signal
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from mpdp.ledger import VOIDED
from mpdp.messages import common_pb2, local_release_pb2, pathak2010_pb2 as pk
from mpdp.messages import operations_pb2 as ops, operations_pb2_grpc as ops_grpc
from mpdp_services.common.rpc import TlsFiles

from .conftest import (
    job_host,
    PARTIES,
    PATHAK_SERVICE,
    address,
    assert_all_serving,
    assert_clean,
    assert_ledgers_within_budget,
    channel,
    host_submit,
    ledger,
    mint,
    operator_curator,
    pathak_published,
    pathak_spec,
    refused,
    site_tls,
    start_federation,
    wait_pathak,
)

STALL_JOBS = 150  # above what one connection's 256 streams carried with one health stream per job per party (130 stalled)


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    """Small keys, no compute nodes, a large budget and admission bounds above STALL_JOBS; party-4 is a provisioned
    member that is not running (the dead-address test registers it)."""
    f = start_federation(tmp_path_factory.mktemp("load"), budget=1000.0, nodes=[], key_bits=512,
                         curator_options={"max_live_jobs_federation": 1000, "max_live_jobs_per_operator": 1000}, members=[*PARTIES, "party-4"])
    yield f
    f.stop()


@pytest.fixture(scope="module")
def tight(tmp_path_factory):
    """Budget 10 at every party: two jobs of ε = 4 (pure ε: corrected mode, the smallest party's noise) fit, a third does not."""
    f = start_federation(tmp_path_factory.mktemp("tight"), budget=10.0, nodes=[], key_bits=512)
    yield f
    f.stop()


@pytest.fixture(scope="module")
def bounded(tmp_path_factory):
    """At most 3 live jobs in the federation and 2 per operator; at most 2 queued jobs, 1 per operator."""
    f = start_federation(tmp_path_factory.mktemp("bounded"), budget=1000.0, nodes=[], key_bits=512,
                         curator_options={"max_live_jobs_federation": 3, "max_live_jobs_per_operator": 2,
                                          "max_queued_jobs": 2, "max_queued_jobs_per_operator": 1})
    yield f
    f.stop()


def charges(fed, job_ids) -> dict[str, list[str]]:
    """Party → the given jobs it keeps a charge for (entries that are not voided)."""
    ids = set(job_ids)
    return {p: [e["job_id"] for e in ledger(fed, p)["entries"] if e["job_id"] in ids and e.get("status") != VOIDED] for p in fed.parties}


async def _submit_and_follow(fed, specs: list[pk.PathakJobSpec], tls: TlsFiles | None = None) -> tuple[list[str], list[grpc.aio.AioRpcError], dict[str, ops.JobSummary]]:
    """Submit every spec at once on one connection, then follow every admitted job's watch stream to its end."""
    tls = tls or site_tls(fed, "operator")
    async with grpc.aio.secure_channel(address(fed, "curator"), tls.channel_credentials(), options=[("grpc.ssl_target_name_override", "curator")]) as ch:
        stub = ops_grpc.JobOperationsStub(ch)

        async def submit(s):
            try:
                return (await stub.SubmitJob(ops.JobSubmission(pathak2010=s), timeout=120)).job_id
            except grpc.aio.AioRpcError as e:
                return e

        got = await asyncio.gather(*(submit(s) for s in specs))
        ids = [g for g in got if isinstance(g, str)]
        errors = [g for g in got if not isinstance(g, str)]

        async def follow(job_id):
            last = None
            async for st in stub.WatchJob(common_pb2.JobRef(job_id=job_id), timeout=170):
                last = st
                if st.terminal:
                    break
            return last

        ends = await asyncio.gather(*(follow(j) for j in ids))
    return ids, errors, dict(zip(ids, ends))


def test_more_jobs_than_one_connection_has_streams_all_end(fed):
    """150 Pathak jobs at once (deadline 150 s): all publish. With one health stream per job per party, the curator's
    connection to each party ran out of streams and the announcements queued behind watches that end only with
    their jobs: the jobs failed at their deadlines."""
    specs = [pathak_spec(seed=f"load-{i}".encode(), deadline=150.0) for i in range(STALL_JOBS)]
    ids, errors, ends = asyncio.run(_submit_and_follow(fed, specs))
    assert not errors, [(e.code().name, e.details()) for e in errors[:3]]
    assert all(st is not None and st.terminal for st in ends.values()), "a job did not end"
    failed = {j: (common_pb2.Problem.Name(st.problem), st.detail) for j, st in ends.items() if st.state != "PUBLISHED"}
    assert not failed, f"{len(failed)} of {len(ids)} jobs failed, e.g. {next(iter(failed.items()))}"
    assert_ledgers_within_budget(fed)
    assert_all_serving(fed)


def test_a_party_without_a_link_costs_nobody_anything(fed):
    """A registered party-4 that never links (it registered, then went away), named in 8 jobs at once: every job fails
    PEER_UNREACHABLE and no party keeps a charge for any of them (the spend step waits until every party has accepted
    the job)."""
    with channel(fed, "curator", mint(fed, "party", "party-4")) as ch:
        ch.unary_unary(f"/{PATHAK_SERVICE}/RegisterParty", request_serializer=pk.PartyRegistration.SerializeToString,
                       response_deserializer=pk.CuratorKeys.FromString)(pk.PartyRegistration(), timeout=30)
    specs = [pathak_spec(parties=[*PARTIES, "party-4"], seed=f"dead-{i}".encode(), deadline=120.0) for i in range(8)]
    ids, errors, ends = asyncio.run(_submit_and_follow(fed, specs))
    assert not errors and len(ids) == 8, [(e.code().name, e.details()) for e in errors[:3]]
    for j, st in ends.items():
        assert st.state == "FAILED" and st.problem == common_pb2.PEER_UNREACHABLE, (j, st)
        assert "party-4" in st.detail, st.detail
        assert not pathak_published(fed, j)
    assert charges(fed, ids) == {p: [] for p in fed.parties}, "a party was charged for a job that could never run"
    assert_all_serving(fed)


def test_concurrent_jobs_that_do_not_all_fit_waste_no_charge(tight):
    """Budget 10, four jobs of ε = 4 at once: exactly two publish (every party sees the spends in one order), the
    other two fail BUDGET_EXCEEDED and no party keeps a charge for them."""
    def one(i: int) -> str:
        with operator_curator(tight) as ch:
            return job_host(ch).SubmitJob(ops.JobSubmission(pathak2010=pathak_spec(epsilon=4.0, seed=f"fit-{i}".encode(), deadline=120.0, noise=pk.SMALLEST_PARTY)), timeout=60).job_id

    with ThreadPoolExecutor(4) as pool:
        ids = list(pool.map(one, range(4)))
    ends = {j: wait_pathak(tight, j) for j in ids}
    published = [j for j, st in ends.items() if st.state == "PUBLISHED"]
    losers = [j for j in ids if j not in published]
    assert len(published) == 2, {j: (st.state, common_pb2.Problem.Name(st.problem), st.detail) for j, st in ends.items()}
    for j in losers:
        assert ends[j].problem == common_pb2.BUDGET_EXCEEDED, (j, ends[j])
    assert charges(tight, losers) == {p: [] for p in tight.parties}, "a party keeps a wasted charge"
    for p in tight.parties:
        assert sorted(charges(tight, published)[p]) == sorted(published), (p, ledger(tight, p))
    assert_ledgers_within_budget(tight)
    assert_all_serving(tight)


def test_submissions_past_the_admission_bounds_queue_then_are_overloaded_before_any_spend(bounded):
    """Bounds 3 live jobs per federation, 2 per operator, 2 queued (1 per operator). With party-3 paused (its jobs
    stay live, awaiting its acceptance), the operator's third submission and a second operator's second are queued,
    the next of each (and a third operator's first: the queue is full) refused OVERLOADED, and so is an LMGC job of the
    first operator (the queue is every protocol's: its share is full); no party ever hears of the refused ones; once
    party-3 runs again the admitted and the queued jobs publish and the bounds are free again."""
    other, third_operator = mint(bounded, "operator", "operator-2"), mint(bounded, "operator", "operator-3")
    proc = bounded.procs["party-3"].popen
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        with operator_curator(bounded) as ch:
            stub = job_host(ch)
            first = [stub.SubmitJob(ops.JobSubmission(pathak2010=pathak_spec(seed=f"adm-{i}".encode(), deadline=120.0)), timeout=60).job_id for i in range(3)]  # the third queued
            e = refused(lambda: stub.SubmitJob(ops.JobSubmission(pathak2010=pathak_spec(seed=b"adm-over-operator", deadline=120.0)), timeout=60))
        assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "OVERLOADED" in (e.details() or ""), (e.code(), e.details())
        assert_clean(e)
        # the queue is the federation's, not one protocol's: an LMGC job of the same operator finds its share full
        lmgc = local_release_pb2.LocalModelJobSpec(dataset="synthetic", model="lmgc", mode=common_pb2.CORRECTED, epsilon=1.0, parties=["party-1"],
                                                   ridge=1e-3, data_norm=1.0, simulation_seed=b"adm-lmgc")
        setattr(lmgc, "lambda", 1e-3)
        e = refused(lambda: host_submit(bounded, timeout=60, lmgc=lmgc))
        assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "OVERLOADED" in (e.details() or "") and "waiting for a slot" in (e.details() or ""), (e.code(), e.details())
        with channel(bounded, "curator", other) as ch:
            stub = job_host(ch)
            third = [stub.SubmitJob(ops.JobSubmission(pathak2010=pathak_spec(seed=f"adm-other-{i}".encode(), deadline=120.0)), timeout=60).job_id for i in range(2)]  # the second queued
            e = refused(lambda: stub.SubmitJob(ops.JobSubmission(pathak2010=pathak_spec(seed=b"adm-over-federation", deadline=120.0)), timeout=60))
        assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "OVERLOADED" in (e.details() or ""), (e.code(), e.details())
        with channel(bounded, "curator", third_operator) as ch:
            e = refused(lambda: job_host(ch).SubmitJob(ops.JobSubmission(pathak2010=pathak_spec(seed=b"adm-queue-full", deadline=120.0)), timeout=60))
        assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "OVERLOADED" in (e.details() or ""), (e.code(), e.details())
        for p in ("party-1", "party-2"):  # the queued jobs are told to no party while they wait
            assert not {first[2], third[1]} & {e["job_id"] for e in ledger(bounded, p)["entries"]}, p
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    admitted = [*first, *third]
    for j in first:
        assert wait_pathak(bounded, j).state == "PUBLISHED"
    for j in third:
        assert wait_pathak(bounded, j, tls=other).state == "PUBLISHED"  # only its owner (or an admin) may follow it
    for p in bounded.parties:  # only the admitted and queued jobs ever reached a party
        assert sorted(e["job_id"] for e in ledger(bounded, p)["entries"]) == sorted(admitted), (p, ledger(bounded, p))
    job = job_host(operator_curator(bounded)).SubmitJob(ops.JobSubmission(pathak2010=pathak_spec(seed=b"adm-after", deadline=120.0)), timeout=60).job_id
    assert wait_pathak(bounded, job).state == "PUBLISHED"  # the ended jobs left the bound
    assert_all_serving(bounded)
