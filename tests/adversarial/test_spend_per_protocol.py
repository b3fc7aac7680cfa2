"""The spend rule for every protocol that spends, over real processes and mutual TLS, with raw job-host clients.

For Pathak 2010, LMGC, HCB16 ensembles and the learners (dp-gd, regression, DP query; an evaluation is a DP query
job), an operator:

(a) submits four jobs at once where only two fit the parties' budgets: exactly two publish, the other two fail
    BUDGET_EXCEEDED and no party keeps a charge (a ledger entry that is not voided) for them;
(b) names a provisioned, registered member (party-4) that is not running and has no link: the job fails naming it,
    and no party keeps a charge for it;
(c) sends one submission twice with one idempotency key: one job, one charge at each party.

One federation for the module (3 parties, 3 compute nodes, 512-bit keys, budget ε = BUDGET at every party). Each
test starts from empty ledgers: while no job runs, the test moves every party's ledger file aside under the
ledger's own lock (a party re-reads its ledger under that lock at every step), so each protocol's budget test
starts from the same known spend; the files moved aside stay in the party's state folder.
"""

from __future__ import annotations

import fcntl
import json
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import pytest

from mpdp.dpgd.model import Task
from mpdp.dpgd.plan import DpgdPlan
from mpdp.ledger import VOIDED, composition
from mpdp.messages import common_pb2, hamm2016_pb2 as hm, learner_pb2, local_release_pb2 as lr, pathak2010_pb2 as pk, query_pb2
from mpdp.messages import operations_pb2 as ops, operations_pb2_grpc as ops_grpc
from mpdp.schema import Schema
from mpdp_services.operator.dpgd import dpgd_spec

from .conftest import D, NODES, PARTIES, assert_all_serving, channel, host_wait, ledger, mint, operator_curator, pathak_spec, start_federation

pytestmark = pytest.mark.integration

BUDGET = 10.0
OFFLINE = "party-4"  # a provisioned member that registers (in the fixture) and never runs
ROWS = 100  # the query's public bound on one party's rows
DEADLINE = 40.0  # every job's spec deadline (s)
SCHEMA_YAML = """\
mpdp_schema: 1
version: 1
features:
  - {name: age, type: numeric, bounds: [0, 100]}
  - {name: ward, type: categorical, vocabulary: [a, b, c]}
label: {column: outcome, positive: [yes], negative: [no]}
"""
SQL = "SELECT ward, COUNT(*) AS n FROM toy GROUP BY ward"


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    root = tmp_path_factory.mktemp("spend")
    schema = root / "schema.yaml"
    schema.write_text(SCHEMA_YAML)
    extra = {}
    for j, p in enumerate(PARTIES):
        f = root / f"toy-{p}.csv"
        f.write_text("age,ward,outcome\n" + "".join(f"{(7 * i + j) % 90},{'abc'[i % 3]},{('yes', 'no')[i % 2]}\n" for i in range(30 + 5 * j)))
        extra[p] = {"toy": {"path": str(f), "format": "csv", "schema": str(schema)}}
    f = start_federation(root, budget=BUDGET, key_bits=512, members=[*PARTIES, OFFLINE], extra_datasets=extra,
                         curator_options={"max_live_jobs_federation": 100, "max_live_jobs_per_operator": 100})
    f.schema = Schema.load(schema)  # type: ignore[attr-defined]
    with channel(f, "curator", mint(f, "party", OFFLINE)) as ch:  # registered, then gone: it never opens a link
        ch.unary_unary("/mpdp.messages.Curator/RegisterParty", request_serializer=pk.PartyRegistration.SerializeToString,
                       response_deserializer=pk.CuratorKeys.FromString)(pk.PartyRegistration(), timeout=30)
    yield f
    f.stop()


# -- one submission builder per protocol: (ε, parties, seed) → the JobSubmission's fields ------------------------------
def _pathak(fed, eps: float, parties: list[str], seed: bytes) -> dict:
    return {"pathak2010": pathak_spec(parties=parties, epsilon=eps, seed=seed, deadline=DEADLINE, noise=pk.SMALLEST_PARTY)}


def _lmgc(fed, eps: float, parties: list[str], seed: bytes) -> dict:
    spec = lr.LocalModelJobSpec(dataset="synthetic", model="lmgc", epsilon=eps, parties=parties, mode=common_pb2.CORRECTED, ridge=1e-3, data_norm=1.0,
                                simulation_seed=seed)
    setattr(spec, "lambda", 1e-3)
    return {"lmgc": spec}


def _hamm2016(fed, eps: float, parties: list[str], seed: bytes) -> dict:
    return {"hamm2016": hm.EnsembleJobSpec(dataset="synthetic", auxiliary="aux", method="soft", lam=1e-2, epsilon=eps, classes=["-1", "1"], parties=parties,
                                           compute_nodes=NODES, local_lam=1e-2, simulation_seed=seed)}


def _dpgd(fed, eps: float, parties: list[str], seed: bytes) -> dict:
    plan = DpgdPlan(Task("binary"), D, eps, 1e-6, lam=1e-2, rounds=0, total_records=141)
    return {"learner": dpgd_spec("synthetic", list(parties), list(NODES), plan, 60, seed=seed, deadline=DEADLINE)}


def _regression(fed, eps: float, parties: list[str], seed: bytes) -> dict:
    return {"learner": learner_pb2.LearnerJobSpec(
        dataset="synthetic", parties=parties, compute_nodes=NODES, records_per_party=60, simulation_seed=seed, deadline_seconds=DEADLINE,
        regression=learner_pb2.RegressionJobSpec(bounds=[1.0] * (D + 1), epsilon=eps, delta=1e-6, total_records=141, mode=common_pb2.CORRECTED,
                                                 grid_repeats_x=2, grid_repeats_y=2, unvalidated=True))}


def _query(fed, eps: float, parties: list[str], seed: bytes) -> dict:
    q = query_pb2.QueryJobSpec(sql=SQL, schema_json=fed.schema.canonical().decode(), epsilon=eps, delta=1e-6)
    return {"learner": learner_pb2.LearnerJobSpec(dataset="toy", parties=parties, compute_nodes=NODES, records_per_party=ROWS, simulation_seed=seed,
                                                  deadline_seconds=DEADLINE, schema_sha256=fed.schema.sha256(), query=q)}


# protocol → (builder, ε of a job of which two fit BUDGET and three do not). Pure ε (Pathak with the smallest party's
# noise, LMGC, soft-label ensembles): 4. The Gaussian learners compose below Σε, so their jobs are larger: under the
# parties' accountant (mpdp.ledger.composition, budget δ 1e-3) two dp-gd jobs of ε = 7.75 compose to 8.13 and three
# to 10.66, two queries to 8.40 and three to 10.94; each budget test checks this on the entries the parties wrote.
PROTOCOLS: dict[str, tuple[Callable[..., dict], float]] = {
    "pathak2010": (_pathak, 4.0),
    "lmgc": (_lmgc, 4.0),
    "hamm2016": (_hamm2016, 4.0),
    "dpgd": (_dpgd, 7.75),
    "regression": (_regression, 4.0),
    "query": (_query, 7.75),
}
DONE = {"PUBLISHED", "DONE", "RELEASED"}


# -- ledgers ---------------------------------------------------------------------------------------------------------
def fresh_ledgers(fed, label: str) -> None:
    """Move every party's ledger file aside (to ``ledger.json.<label>``) under the ledger's lock, while no job runs."""
    for p in fed.parties:
        path = fed.workdir / p / "state" / "ledger.json"
        if not path.exists():
            continue
        fd = os.open(path.with_name("ledger.json.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.replace(path, path.with_name(f"ledger.json.{label}"))
        finally:
            os.close(fd)


def charges(fed) -> dict[str, list[dict]]:
    """Party → its entries that charge something (not voided, ε or δ above 0)."""
    return {p: [e for e in ledger(fed, p)["entries"] if e.get("status") != VOIDED and (e.get("epsilon", 0) > 0 or e.get("delta", 0) > 0)]
            for p in fed.parties}


def shown(entries: dict[str, list[dict]]) -> str:
    return json.dumps({p: [(e.get("protocol"), e.get("job_id"), e.get("status"), e.get("epsilon")) for e in es] for p, es in entries.items()})


def submit(fed, fields: dict, key: str = "") -> ops.JobSummary:
    with operator_curator(fed) as ch:
        return ops_grpc.JobOperationsStub(ch).SubmitJob(ops.JobSubmission(idempotency_key=key, **fields), timeout=60)


def ended(summary: ops.JobSummary) -> tuple[str, str, str]:
    return summary.state, common_pb2.Problem.Name(summary.problem), summary.detail[:160]


# -- (a) four jobs at once, two fit -------------------------------------------------------------------------------------
WHOLE_JOB_CHARGE = pytest.mark.xfail(strict=True, reason="a regression job spends round by round (its std round, then its main round): "
                                     "four std rounds fit where only two whole jobs do, and the std releases keep their charges")


@pytest.mark.parametrize("protocol", [pytest.param(p, marks=WHOLE_JOB_CHARGE) if p == "regression" else p for p in PROTOCOLS])
def test_four_jobs_at_once_of_which_two_fit_publish_two_and_charge_for_two(fed, protocol):
    fresh_ledgers(fed, f"{protocol}-fit")
    build, eps = PROTOCOLS[protocol]
    with ThreadPoolExecutor(4) as pool:
        ids = list(pool.map(lambda i: submit(fed, build(fed, eps, list(PARTIES), f"fit-{protocol}-{i}".encode())).job_id, range(4)))
    ends = {j: host_wait(fed, j, timeout=300) for j in ids}
    published = [j for j in ids if ends[j].state in DONE]
    failed = {j: ended(s) for j, s in ends.items() if j not in published}
    kept = charges(fed)
    assert len(published) == 2, ({j: ended(s) for j, s in ends.items()}, shown(kept))
    assert all(problem == "BUDGET_EXCEEDED" for _, problem, _ in failed.values()), failed
    per_party = {p: len(es) for p, es in kept.items()}
    rounds = 2 if protocol == "regression" else 1  # charged entries per job
    assert per_party == {p: 2 * rounds for p in fed.parties}, f"charges kept for the jobs that failed: {shown(kept)}"
    for p, es in kept.items():  # the premise: the parties' accountant takes two of these jobs and not three
        assert composition(es, fed.budget_delta, BUDGET).epsilon <= BUDGET < composition(es + es[:rounds], fed.budget_delta, BUDGET).epsilon, p
    assert_all_serving(fed)


# -- (b) a named member offline ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_a_named_member_offline_fails_the_job_and_charges_nobody(fed, protocol):
    fresh_ledgers(fed, f"{protocol}-offline")
    build, _ = PROTOCOLS[protocol]
    job = submit(fed, build(fed, 1.0, [*PARTIES, OFFLINE], f"offline-{protocol}".encode())).job_id
    end = host_wait(fed, job, timeout=300)
    assert end.state not in DONE and end.terminal, ended(end)
    assert OFFLINE in end.detail, ended(end)
    kept = charges(fed)
    assert kept == {p: [] for p in fed.parties}, f"a party keeps a charge for a job that could never run: {shown(kept)}"
    assert_all_serving(fed)


# -- (c) one submission sent twice under one key --------------------------------------------------------------------------
@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_one_submission_sent_twice_under_one_key_is_one_job_and_one_charge(fed, protocol):
    fresh_ledgers(fed, f"{protocol}-key")
    build, _ = PROTOCOLS[protocol]
    fields = build(fed, 1.0, list(PARTIES), f"key-{protocol}".encode())
    with ThreadPoolExecutor(2) as pool:  # the first answer "was lost": the retry races the first submit
        firsts = list(pool.map(lambda _: submit(fed, fields, key=f"twice-{protocol}"), range(2)))
    assert firsts[0].job_id == firsts[1].job_id, [s.job_id for s in firsts]
    end = host_wait(fed, firsts[0].job_id, timeout=300)
    assert end.state in DONE, ended(end)
    again = submit(fed, fields, key=f"twice-{protocol}")  # a retry after the job ended
    assert again.job_id == firsts[0].job_id and again.terminal
    kept = charges(fed)
    counts = {p: len(es) for p, es in kept.items()}
    assert len(set(counts.values())) == 1 and counts[PARTIES[0]] == (2 if protocol == "regression" else 1), shown(kept)  # regression: its 2 rounds
    assert_all_serving(fed)
