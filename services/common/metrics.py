"""Prometheus metrics of one role process, served over HTTP on a separate port.

Each role is its own OS process, so this module's registry is that role's. What is exported (names prefixed
``mpdp_``): RPCs served by method and final gRPC status, refusals by Problem, jobs that ended by protocol and state,
job durations (histogram), live jobs by protocol, process metrics, and at a party its ledger (composed ε spent,
budget). Nothing a role must not reveal leaves through here: no dataset size, no value, no job content; a party's
ledger figures only at that party's own endpoint.

The role's HTTP endpoint (:mod:`mpdp_services.common.web`: loopback by default, ``http_listen`` in the role's
config, ``""`` disables it; a token when bound elsewhere) serves ``GET /metrics`` in the Prometheus text format beside
the role's pages. To let an institution's Prometheus scrape it, bind the address of an internal interface with
``http_token_file`` set (docs/deploy.md §4) — never a public one.
"""

from __future__ import annotations

import logging
from typing import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest

from mpdp_services.common import web

log = logging.getLogger("mpdp.metrics")

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)

RPCS = Counter("mpdp_rpcs", "RPCs this role served, by method and final gRPC status", ["method", "code"], registry=REGISTRY)
REFUSALS = Counter("mpdp_refusals", "RPCs this role refused, by Problem (services/common/errors.py)", ["problem"], registry=REGISTRY)
JOBS = Counter("mpdp_jobs", "jobs that reached a terminal state at this role, by protocol and state", ["protocol", "state"], registry=REGISTRY)
JOB_SECONDS = Histogram("mpdp_job_seconds", "seconds from a job's admission to its terminal state", ["protocol", "state"],
                        buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600), registry=REGISTRY)
STAGE_SECONDS = Histogram("mpdp_stage_seconds", "seconds a job spent in each state at this role (observed when it ends)", ["protocol", "stage"],
                          buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900), registry=REGISTRY)
DCA_RECEIVED = Counter("mpdp_dca_clients_received", "DCA clients whose shares this compute node received, over its ended jobs", registry=REGISTRY)
DCA_INCLUDED = Counter("mpdp_dca_clients_included", "DCA clients this compute node included in a released partial sum (the agreed set)", registry=REGISTRY)
DCA_BACKLOG_WAITS = Counter("mpdp_dca_backlog_waits", "DCA submissions this compute node held until its peers had decided enough of its clients", registry=REGISTRY)
DCA_BACKLOG_STALLS = Counter("mpdp_dca_backlog_stalls", "times this compute node took shares beside undecided clients none of which was decided for a while", registry=REGISTRY)
_LEDGER: list[Gauge] = []  # created by watch_ledger, at a party only
_POOLS: list[Gauge] = []  # created by watch_pools, at a party only
QUEUE_SECONDS = Histogram("mpdp_admission_queue_seconds", "seconds a job waited for an admission slot at the curator, by outcome "
                          "(started, or dropped: cancelled or past its deadline while queued)", ["outcome"],
                          buckets=(0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600), registry=REGISTRY)
QUEUED = Gauge("mpdp_admission_queued", "jobs waiting for an admission slot at the curator", registry=REGISTRY)
JOBS_LIVE = Gauge("mpdp_jobs_live", "jobs admitted and not yet terminal, by protocol", ["protocol"], registry=REGISTRY)


def rpc_done(method: str, code: str) -> None:
    RPCS.labels(method, code).inc()


def refused(method: str, problem: str, code: str) -> None:
    REFUSALS.labels(problem).inc()
    RPCS.labels(method, code).inc()


def job_ended(protocol: str, state: str, seconds: float) -> None:
    JOBS.labels(protocol, state).inc()
    JOB_SECONDS.labels(protocol, state).observe(max(0.0, seconds))


def queue_ended(outcome: str, seconds: float) -> None:
    QUEUE_SECONDS.labels(outcome).observe(max(0.0, seconds))


def watch_queue(count: Callable[[], int]) -> None:
    QUEUED.set_function(lambda: float(count()))


def stages_ended(protocol: str, seconds: dict[str, float]) -> None:
    for stage, secs in seconds.items():
        STAGE_SECONDS.labels(protocol, stage).observe(max(0.0, secs))


def dca_node_job_ended(received: int, included: int) -> None:
    DCA_RECEIVED.inc(max(0, received))
    DCA_INCLUDED.inc(max(0, included))


def watch_pools(levels: Callable[[], dict[str, int]], targets: Callable[[], dict[str, int]]) -> None:
    """A party's precomputed-randomness pools (services/party/precompute.py): level and target per kind."""
    if not _POOLS:
        _POOLS.extend([
            Gauge("mpdp_precompute_pool", "precomputed items ready at this party, by kind", ["kind"], registry=REGISTRY),
            Gauge("mpdp_precompute_pool_target", "the level this party's precompute thread fills each pool to, by kind", ["kind"], registry=REGISTRY),
        ])
    def reader(read: Callable[[], dict[str, int]], kind: str) -> Callable[[], float]:
        return lambda: float(read().get(kind, 0))

    for kind in levels():
        _POOLS[0].labels(kind).set_function(reader(levels, kind))
        _POOLS[1].labels(kind).set_function(reader(targets, kind))


def watch_live_jobs(protocol: str, count: Callable[[], int]) -> None:
    JOBS_LIVE.labels(protocol).set_function(count)


def watch_ledger(read: Callable[[], tuple[float, float, int]]) -> None:
    """``read()`` → (composed ε spent, ε budget, entries), evaluated at each scrape; a failing read exports NaN."""

    def part(i: int) -> Callable[[], float]:
        def value() -> float:
            try:
                return float(read()[i])
            except Exception:  # noqa: BLE001 - a ledger that cannot be read must not break the scrape
                log.warning("metrics: the ledger could not be read")
                return float("nan")
        return value

    # registered only at a party (the process that calls this): other roles export no ledger figures at all
    if not _LEDGER:
        _LEDGER.extend([
            Gauge("mpdp_ledger_spent_epsilon", "this party's composed ε spent (accountant, at the budget δ)", registry=REGISTRY),
            Gauge("mpdp_ledger_budget_epsilon", "this party's ε budget", registry=REGISTRY),
            Gauge("mpdp_ledger_entries", "entries in this party's ledger", registry=REGISTRY),
        ])
    for i, gauge in enumerate(_LEDGER):
        gauge.set_function(part(i))


def _metrics_page(rest: str, query: dict[str, str]) -> web.Response:
    return web.Response(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)


web.add_page("/metrics", _metrics_page)
