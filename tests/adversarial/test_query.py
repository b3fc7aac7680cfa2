"""DP queries against hostile inputs, over real processes and mutual TLS (curator, 3 parties, 3 compute nodes, T = 1).

* Mallory holds a PARTY certificate for the roster's third slot and proves, honestly, a vector that claims more than
  its public row bound allows — a count of ROWS + 1 rows in one group, or a sum above ROWS × the column's bound (a
  value outside the schema's bounds) — through a raw stub: every node rejects her, the query's sum releases the two
  honest parties' vectors within the noise, the release counts one rejection; she moves nothing.
* A curator cannot loosen a query's proven row bound or weaken its noise: each party refuses (INVALID_ARGUMENT) and
  spends nothing.
* A query naming a column the schema does not hold, or a data-dependent bin, is refused by the curator (raw
  SubmitJob of the job host) and by each party (raw Contribute, as the curator asks) before any spend: every ledger unchanged.
"""

from __future__ import annotations

import dataclasses
import math

import grpc
import numpy as np
import pytest

from mpdp.dca import validation
from mpdp.dca.params import DcaParams
from mpdp.math import field as F
from mpdp.messages import common_pb2, contribution_pb2, contribution_pb2_grpc, dca_pb2, dca_pb2_grpc, learner_pb2, operations_pb2, operations_pb2_grpc, query_pb2
from mpdp.query.evaluate import batch_vector
from mpdp.query.plan import compile_query
from mpdp.query.release import dca_params
from mpdp.schema import Schema
from mpdp_services.launcher.federation import LocalFederation

from tests.adversarial.conftest import (
    job_host,
    NODES,
    PARTIES,
    assert_all_serving,
    assert_status,
    channel,
    create_dca,
    ledger,
    ledger_job_ids,
    mint,
    operator_curator,
    refused,
    wait_dca,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
T = 1
ROWS = 100  # the public bound on one party's rows (the parties hold 40, 50 and 60)
HONEST, MALLORY = PARTIES[:2], PARTIES[2]
SCHEMA_YAML = """\
mpdp_schema: 1
version: 1
features:
  - {name: age, type: numeric, bounds: [0, 100]}
  - {name: ward, type: categorical, vocabulary: [a, b, c]}
label: {column: outcome, positive: [yes], negative: [no]}
"""
SQL = "SELECT ward, COUNT(*) AS n, SUM(age) AS s FROM toy GROUP BY ward"


def _rows(n: int, seed: int) -> tuple[list[str], list[str], list[str]]:
    g = np.random.default_rng(seed)
    age = [f"{v:.1f}" for v in g.uniform(-20, 130, size=n)]  # some outside the public bounds: clamped
    return age, list(g.choice(["a", "b", "c"], size=n)), list(g.choice(["yes", "no"], size=n))


@pytest.fixture(scope="module")
def qfed(tmp_path_factory):
    root = tmp_path_factory.mktemp("query")
    (root / "schema.yaml").write_text(SCHEMA_YAML)
    ds = {}
    for j, p in enumerate(PARTIES):
        age, ward, out = _rows(40 + 10 * j, j)
        f = root / f"{p}.csv"
        f.write_text("age,ward,outcome\n" + "".join(f"{a},{w},{o}\n" for a, w, o in zip(age, ward, out)))
        ds[p] = {"toy": {"path": str(f), "format": "csv", "schema": str(root / "schema.yaml")}}
    fed = LocalFederation(root / "fed", PARTIES, ds, test_mode=True, paillier_bits=768, dgk_bits=768, compute_nodes=list(NODES), budget_epsilon=100.0)
    try:
        fed.start()
    except BaseException:
        fed.stop()
        raise
    fed.schema = Schema.load(root / "schema.yaml")  # type: ignore[attr-defined]
    yield fed
    fed.stop()


def _spec(fed, sql: str = SQL) -> query_pb2.QueryJobSpec:
    return query_pb2.QueryJobSpec(sql=sql, schema_json=fed.schema.canonical().decode(), epsilon=1.0, delta=1e-6)


def _params(fed) -> DcaParams:
    plan = compile_query(SQL, fed.schema, "toy")
    return dca_params(plan, "pending", PARTIES, NODES, epsilon=1.0, delta=1e-6, records_per_party=ROWS, max_missing=T, deadline_seconds=40.0)


def _request(fed, dca_job: str, sql: str = SQL) -> contribution_pb2.StatisticRequest:
    return contribution_pb2.StatisticRequest(dca_job_id=dca_job, dataset="toy", statistic="query", records_per_client=ROWS, parties=PARTIES,
                                             schema_sha256=fed.schema.sha256(), query=_spec(fed, sql))


def _ask(fed, party: str, req: contribution_pb2.StatisticRequest):
    with channel(fed, party, mint(fed, "curator", "curator")) as ch:  # as the curator asks each party
        return contribution_pb2_grpc.ContributionPartyStub(ch).Contribute(req, timeout=120)


def _mallory(fed, job: str, attack: str) -> None:
    """Mallory's vector, honestly proven: an honest (zero) vector with one coordinate raised past the row bound."""
    tls = mint(fed, "party", MALLORY)
    with channel(fed, "curator", tls) as ch:
        ann = dca_pb2_grpc.DcaCuratorStub(ch).GetJob(common_pb2.JobRef(job_id=job), timeout=30)
    params = DcaParams.from_spec(job, ann.spec)
    vp = params.validation
    assert vp is not None and vp.kind == "range"
    zero = np.zeros(params.dimension, dtype=np.int64)
    meas = validation.encode_input(vp, zero).astype(np.uint64)
    over = (ROWS + 1) * 2**params.frac_bits  # ROWS + 1 rows in group a (count), or a sum of ROWS + 1 rows at the bound
    coord = 0 if attack == "count" else 3  # the count part, then the sum part (scaled by B = 100: one row at most 1)
    bits = vp.circuit.predicates[0].bits
    meas[coord * bits] = F.scalar(over + int(meas[coord * bits]))
    shares = validation.client_shares(vp, job, MALLORY, meas, params.M, seeded=params.seed_compressed)
    for node, s in zip(params.nodes, shares):
        msg = dca_pb2.ClientShare(job_id=job, client_id=MALLORY, spec_digest=params.spec_digest, validated=dca_pb2.ValidatedShare(
            measurement=s.measurement, proof=s.proof, share_seed=s.share_seed, blind=s.blind, joint_rand_parts=s.joint_rand_parts))
        with channel(fed, node, tls) as ch:
            receipt = dca_pb2_grpc.ComputeNodeStub(ch).SubmitShares(iter([msg]), timeout=30)
        assert receipt.accepted == 1, receipt  # well formed: only the proof can reject it


def _honest_vector(fed) -> np.ndarray:
    plan = compile_query(SQL, fed.schema, "toy")
    z = np.zeros(plan.dimension)
    for j, _ in enumerate(HONEST):
        age, ward, out = _rows(40 + 10 * j, j)
        cols = {"age": np.array(age, dtype=object), "ward": np.array(ward, dtype=object), "outcome": np.array(out, dtype=object)}
        z += batch_vector(plan, cols, len(age))
    return z


@pytest.mark.parametrize("attack", ["count", "sum"])
def test_a_party_claiming_more_than_its_row_bound_is_rejected_by_the_proofs_and_moves_nothing(qfed, attack):
    params = _params(qfed)
    dca_job = create_dca(qfed, params.to_spec())
    _mallory(qfed, dca_job, attack)
    for p in HONEST:
        assert _ask(qfed, p, _request(qfed, dca_job)).party == p
    st = wait_dca(qfed, dca_job, timeout=180)
    assert st.state == "RELEASED", st
    with operator_curator(qfed) as ch:
        r = job_host(ch).GetRelease(common_pb2.JobRef(job_id=dca_job), timeout=30).dca
    assert (r.clients_included, r.clients_rejected, r.validate) == (2, 1, dca_pb2.VALIDATE_RANGE)
    err = np.asarray(r.values) - _honest_vector(qfed)
    assert np.max(np.abs(err)) <= 6 * math.sqrt(r.noise_variance) + 2 * 2.0**-params.frac_bits, (err, r.noise_variance)
    for p in HONEST:
        assert dca_job in ledger_job_ids(qfed, p)
    assert_all_serving(qfed)


@pytest.mark.parametrize("change", ["looser", "less-noise"])
def test_a_curator_cannot_loosen_a_querys_row_bound_or_its_noise(qfed, change):
    good = _params(qfed)
    bad = (dataclasses.replace(good, clip_bounds=(10.0 * ROWS,)) if change == "looser"
           else dataclasses.replace(good, sensitivity=good.sensitivity / 4))
    dca_job = create_dca(qfed, bad.to_spec())
    for p in HONEST:
        before = len(ledger(qfed, p)["entries"])
        e = refused(lambda: _ask(qfed, p, _request(qfed, dca_job)))
        assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
        assert ("bounds" if change == "looser" else "Δ₂") in (e.details() or "")
        assert len(ledger(qfed, p)["entries"]) == before


@pytest.mark.parametrize("sql, what", [
    ("SELECT SUM(salary) FROM toy", "not in the federation's schema"),
    ("SELECT COUNT(*) FROM toy GROUP BY NTILE(4) OVER (ORDER BY age)", "never from the data"),
    ("SELECT COUNT(*) FROM toy GROUP BY BIN(age, (SELECT MAX(age) FROM toy))", "literal"),
])
def test_a_non_schema_column_or_data_dependent_bin_is_refused_before_any_spend(qfed, sql, what):
    before = {p: ledger(qfed, p)["entries"] for p in PARTIES}
    spec = learner_pb2.LearnerJobSpec(dataset="toy", parties=PARTIES, compute_nodes=NODES, records_per_party=ROWS, schema_sha256=qfed.schema.sha256(),
                                      query=_spec(qfed, sql))
    with operator_curator(qfed) as ch:
        e = refused(lambda: operations_pb2_grpc.JobOperationsStub(ch).SubmitJob(operations_pb2.JobSubmission(learner=spec), timeout=30))
    assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
    assert what in (e.details() or "")
    dca_job = create_dca(qfed, _params(qfed).to_spec())  # a curator that skips its own check: the party refuses too
    for p in HONEST:
        e = refused(lambda: _ask(qfed, p, _request(qfed, dca_job, sql)))
        assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
        assert what in (e.details() or "")
    assert {p: ledger(qfed, p)["entries"] for p in PARTIES} == before
    assert_all_serving(qfed)


def test_a_party_contributes_to_a_querys_dca_job_once(qfed):
    dca_job = create_dca(qfed, _params(qfed).to_spec())
    assert _ask(qfed, HONEST[0], _request(qfed, dca_job)).party == HONEST[0]
    entries = len(ledger(qfed, HONEST[0])["entries"])
    e = refused(lambda: _ask(qfed, HONEST[0], _request(qfed, dca_job)))
    assert_status(e, grpc.StatusCode.ALREADY_EXISTS)
    assert len(ledger(qfed, HONEST[0])["entries"]) == entries


# -- evaluating a released model (docs/protocols/query.md, "Evaluating a released model") ------------------------------
def _evaluation(weights: list[float], bins: int = 20) -> query_pb2.QueryJobSpec:
    ev = query_pb2.EvaluationSpec(model_job="pk-0123456789ab", protocol="pathak2010", weights=weights, score_bins=bins)
    return query_pb2.QueryJobSpec(sql="EVALUATE pk-0123456789ab ON toy", epsilon=1.0, delta=1e-6, evaluation=ev)


def _evaluation_params(weights: list[float]) -> DcaParams:
    from mpdp.query.evaluation import evaluation_of, evaluation_plan

    plan = evaluation_plan(evaluation_of(_evaluation(weights).evaluation), "toy")
    return dca_params(plan, "pending", PARTIES, NODES, epsilon=1.0, delta=1e-6, records_per_party=ROWS, max_missing=T, deadline_seconds=40.0)


@pytest.mark.parametrize("case, what", [
    ("nan-weight", "weights"),  # a malformed model: the spec's range check
    ("feature-count", "feature count"),  # a model that does not fit the party's rows
    ("other-job", "sums"),  # the DCA job is another plan's (the SQL query's dimension)
    ("less-noise", "Δ₂"),  # the DCA job's Δ₂ is below the evaluation's 2
])
def test_a_curator_cannot_have_a_party_evaluate_a_bad_model_or_under_a_weaker_job(qfed, case, what):
    d = 4  # age, then ward one-hot over [a, b, c]: the schema's encoding
    weights = [0.1] * d
    params = _evaluation_params(weights)
    if case == "nan-weight":
        weights = [math.nan] * d
    elif case == "feature-count":
        weights = [0.1] * (d + 3)
        params = _evaluation_params(weights)
    elif case == "other-job":
        params = _params(qfed)
    else:
        params = dataclasses.replace(params, sensitivity=params.sensitivity / 4)
    dca_job = create_dca(qfed, params.to_spec())
    for p in HONEST:
        before = len(ledger(qfed, p)["entries"])
        req = contribution_pb2.StatisticRequest(dca_job_id=dca_job, dataset="toy", statistic="query", records_per_client=ROWS, parties=PARTIES,
                                                schema_sha256=qfed.schema.sha256(), query=_evaluation(weights))
        e = refused(lambda: _ask(qfed, p, req))
        assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
        assert what in (e.details() or ""), e.details()
        assert len(ledger(qfed, p)["entries"]) == before
    assert_all_serving(qfed)


def test_an_evaluation_of_a_model_no_job_released_is_refused_by_the_curator(qfed):
    before = {p: ledger(qfed, p)["entries"] for p in PARTIES}
    spec = learner_pb2.LearnerJobSpec(dataset="toy", parties=PARTIES, compute_nodes=NODES, records_per_party=ROWS, schema_sha256=qfed.schema.sha256(),
                                      query=_evaluation([0.1] * 4))
    with operator_curator(qfed) as ch:
        e = refused(lambda: operations_pb2_grpc.JobOperationsStub(ch).SubmitJob(operations_pb2.JobSubmission(learner=spec), timeout=30))
    assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
    assert "not a valid evaluation" in (e.details() or "")
    assert {p: ledger(qfed, p)["entries"] for p in PARTIES} == before
