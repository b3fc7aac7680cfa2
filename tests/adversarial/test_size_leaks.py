"""Values computed from a party's records never leave it through a refusal, a job's status or the job listing.

Models an operator (raw gRPC client, operator certificate) that submits jobs chosen to be refused by the
parties' own data checks, hoping the refusal names what it checked: a Pathak job with ``size_bits = 1``
(one row at most), a learner job (regression, dp-gd) whose rounds bound each party to one record, a regression
job whose clip box misses columns, a dp-gd job whose plan has another dimension, an ensemble whose classes
are not the parties' labels or whose auxiliary data have another dimension, and Pathak jobs whose λ is so
small that the noise (a function of the party's n_j) overflows its encoding. It reads everything the curator
shows it: the refusal's status details, the job's status (watch), and the curator's job listing.

Invariants, for every party:

* its row count n_j, its count of +1 labels and its count of −1 labels never appear as numbers;
* where a job asks for another dimension, the party's own feature count (no schema: not public) does not appear;
* no label value read from its file appears (the ensemble's classes are "a" and "b");
* no number computed from its records (a noise scale, a model coefficient) appears in a failure's detail;
* a local release's published guarantee carries neither n_j nor the ridge Δ computed from it;
* a refusal before the spend leaves every ledger as it was.

The parties' files here have 173, 219 and 286 rows of d = 6 features: numbers nothing public in these jobs uses.
"""

from __future__ import annotations

import math
import re
import time

import numpy as np
import pytest

from mpdp.dpgd.model import Task
from mpdp.dpgd.plan import DpgdPlan
from mpdp.lmgc.privacy import ridge_for_jacobian_budget
from mpdp.messages import (
    common_pb2,
    hamm2016_pb2,
    learner_pb2,
    local_release_pb2,
    operations_pb2,
    operations_pb2_grpc,
    pathak2010_pb2 as pk,
)
from mpdp_services.launcher.federation import LocalFederation

from .conftest import (
    job_host,
    NODES,
    PARTIES,
    assert_clean,
    assert_ledgers_within_budget,
    host_release,
    host_submit,
    host_wait,
    ledger,
    operator_curator,
    pathak_spec,
    refused,
    submit_pathak,
    wait_pathak,
)

SIZES = {"party-1": 173, "party-2": 219, "party-3": 286}
DIM = 6  # the parties' feature count; no schema is configured, so it is not public
NARROW = 5  # the second auxiliary set's dimension
SEED = b"size-leaks"
LMGC_EPSILON = 1.0


def _rows(n: int, seed: int, d: int, flip: float = 0.25) -> tuple[np.ndarray, np.ndarray]:
    """Rows in the unit ball and ±1 labels from a linear rule with a quarter flipped: no separating
    hyperplane, so an almost unregularised logistic regression still has a finite minimiser."""
    g = np.random.default_rng(seed)
    X = g.normal(size=(n, d))
    X /= 1.2 * np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    y = np.where(X @ np.linspace(1.0, -0.5, d) > 0, 1.0, -1.0)
    y[g.random(n) < flip] *= -1.0
    return X, y


@pytest.fixture(scope="module")
def leaky(tmp_path_factory):
    root = tmp_path_factory.mktemp("leaks")
    datasets, secrets = {}, {}
    for j, (p, n) in enumerate(SIZES.items()):
        X, y = _rows(n, 10 + j, DIM)
        f = root / "data" / f"{p}.csv"
        f.parent.mkdir(parents=True, exist_ok=True)
        np.savetxt(f, np.column_stack([X, y]), delimiter=",", fmt="%.17g")
        datasets[p] = {"synthetic": {"path": str(f), "format": "csv"}}
        secrets[p] = {n, int(np.sum(y > 0)), int(np.sum(y < 0))}
    aux = {}
    for name, d in (("aux", DIM), ("aux_narrow", NARROW)):
        X, _ = _rows(40, 99 + d, d)
        f = root / "data" / f"{name}.csv"
        np.savetxt(f, np.column_stack([X, np.zeros(len(X))]), delimiter=",", fmt="%.17g")
        aux[name] = {"path": str(f), "format": "csv"}
    values = set().union(*secrets.values())
    assert min(values) > 20 and len(values) == 9, f"pick other sizes: secrets {secrets} collide or are too small"
    fed = LocalFederation(root / "fed", PARTIES, datasets, test_mode=True, paillier_bits=768, dgk_bits=768, budget_epsilon=100.0,
                          compute_nodes=list(NODES), auxiliary=aux)
    try:
        fed.start()
        fed.secrets = secrets  # type: ignore[attr-defined]
        yield fed
    finally:
        fed.stop()


# -- what the operator sees ----------------------------------------------------------------------------------
def _number(value: int) -> re.Pattern:
    """``value`` as a number of its own (not part of an id, a longer number or a decimal)."""
    return re.compile(rf"(?<![\w.]){value}(?!\w|\.\d)")


FLOAT = re.compile(r"(?<!\w)\d+(\.\d+)?[eE][+-]?\d+(?!\w)|(?<![\w.])\d+\.\d+")  # 1.5, 2e+11; not inside an id


def assert_no_secret(fed, texts: list[str], *, dimension: bool = False) -> None:
    """No party's n_j or label counts (and, with ``dimension``, no feature count d = 6 or d + 1 = 7) in ``texts``."""
    assert texts, "nothing was read"
    for p, values in fed.secrets.items():
        for v in sorted(values):
            for t in texts:
                assert not _number(v).search(t), f"{p}'s private count {v} appears in {t[:200]!r}"
    if dimension:
        for v in (DIM, DIM + 1):
            for t in texts:
                assert not _number(v).search(t), f"the parties' feature count ({v}) appears in {t[:200]!r}"


def job_ids(fed) -> set[str]:
    with operator_curator(fed) as ch:
        return {j.job_id for j in operations_pb2_grpc.JobOperationsStub(ch).ListJobs(operations_pb2.JobQuery(limit=1000), timeout=30).jobs}


def listing(fed, since: set[str] = frozenset()) -> list[str]:
    """The curator's job listing (all protocols) and each job's summary, for the jobs not in ``since``."""
    with operator_curator(fed) as ch:
        stub = operations_pb2_grpc.JobOperationsStub(ch)
        jobs = [j for j in stub.ListJobs(operations_pb2.JobQuery(limit=1000), timeout=30).jobs if j.job_id not in since]
        out = [f"{j.job_id} {j.state} {j.detail}" for j in jobs]
        out += [stub.GetJob(common_pb2.JobRef(job_id=j.job_id), timeout=30).detail for j in jobs]
    return out


def ledgers(fed) -> dict[str, list]:
    return {p: ledger(fed, p)["entries"] for p in PARTIES}


def pathak_status_texts(fed, job: str) -> list[str]:
    seen = []
    with operator_curator(fed) as ch:
        for st in job_host(ch).WatchJob(common_pb2.JobRef(job_id=job), timeout=240):
            seen.append(f"{st.state} {st.stage} {st.detail}")
            if st.terminal:
                break
    return seen


def learner_failed(fed, spec: learner_pb2.LearnerJobSpec) -> tuple[operations_pb2.JobSummary, list[str]]:
    """Run a learner job through the job host to its end; its last summary and every text the operator was shown
    (each summary's state, stage and detail)."""
    job = host_submit(fed, timeout=60, learner=spec).job_id
    seen = []
    with operator_curator(fed) as ch:
        for st in operations_pb2_grpc.JobOperationsStub(ch).WatchJob(common_pb2.JobRef(job_id=job), timeout=300):
            seen.append(f"{st.state} {st.stage} {st.detail}")
            if st.terminal:
                break
    final = host_wait(fed, job)
    assert final.state == "FAILED", final
    return final, seen


def regression_spec(bounds: tuple[float, ...], records_per_party: int) -> learner_pb2.LearnerJobSpec:
    return learner_pb2.LearnerJobSpec(dataset="synthetic", parties=PARTIES, compute_nodes=NODES, records_per_party=records_per_party, simulation_seed=SEED,
                                      deadline_seconds=30.0, regression=learner_pb2.RegressionJobSpec(
                                          bounds=list(bounds), epsilon=5.0, delta=1e-4, total_records=1000, mode=common_pb2.CORRECTED, grid_repeats_x=2, grid_repeats_y=2,
                                          unvalidated=True))


def dca_status(fed, job: str) -> str:
    with operator_curator(fed) as ch:
        for st in job_host(ch).WatchJob(common_pb2.JobRef(job_id=job), timeout=30):
            return f"{st.state} {st.detail}"
    return ""


# -- refusals before any ε counts (none spent, or the charge voided) ---------------------------------------------
SMALLEST, DISTRIBUTED = pk.SMALLEST_PARTY, pk.DISTRIBUTED_GAUSSIAN
NOISES = [(common_pb2.CORRECTED, SMALLEST), (common_pb2.CORRECTED, DISTRIBUTED), (common_pb2.PAPER, SMALLEST)]


@pytest.mark.parametrize("mode,noise", NOISES, ids=["corrected", "gaussian", "paper"])
def test_pathak_size_bound_refusal_names_no_size(leaky, mode, noise):
    before, known = ledgers(leaky), job_ids(leaky)
    job = submit_pathak(leaky, pathak_spec(seed=SEED, mode=mode, noise=noise, size_bits=1))
    seen = pathak_status_texts(leaky, job)
    final = wait_pathak(leaky, job)
    assert final.state == "FAILED" and final.problem == common_pb2.INVALID_JOB, final
    assert_no_secret(leaky, seen + [final.detail] + listing(leaky, known))
    assert "size_bits" in final.detail, final.detail  # it still says which public bound refused the job
    # The bound is checked after the spend (a party accepts before it reads its records, so that the acceptance's
    # timing shows nothing of them): nothing computed from the records left, so every party's charge is voided.
    # (A party the abort reaches before its ProtocolStart has not spent at all.) Each party settles its entry once it
    # hears of the failure, which may be after the curator reports it.
    end = time.monotonic() + 60
    while any(e["job_id"] == job and e["status"] == "spent" for p in PARTIES for e in ledger(leaky, p)["entries"]) and time.monotonic() < end:
        time.sleep(0.1)
    after, voided = ledgers(leaky), 0
    for p in PARTIES:
        assert after[p][: len(before[p])] == before[p]
        new = after[p][len(before[p]):]
        assert [(e["job_id"], e["status"]) for e in new] in ([], [(job, "voided")]), new
        voided += len(new)
    assert voided >= 1  # the party that failed at the bound had spent


def test_regression_round_records_bound_refusal_names_no_size(leaky):
    before, known = ledgers(leaky), job_ids(leaky)
    final, seen = learner_failed(leaky, regression_spec((1.0,) * (DIM + 1), records_per_party=1))
    assert_no_secret(leaky, seen + [final.detail] + listing(leaky, known))
    assert "records_per_client" in final.detail, final.detail
    assert ledgers(leaky) == before


def test_regression_round_with_a_short_clip_box_names_no_dimension(leaky):
    before, known = ledgers(leaky), job_ids(leaky)
    final, seen = learner_failed(leaky, regression_spec((1.0,) * 4, records_per_party=1000))  # d = 3 where the data have 6 features
    assert_no_secret(leaky, seen + [final.detail] + listing(leaky, known), dimension=True)
    assert ledgers(leaky) == before


@pytest.mark.parametrize("case", ["records", "dimension"])
def test_dpgd_round_refusal_names_no_size_or_dimension(leaky, case):
    from mpdp_services.operator.dpgd import dpgd_spec

    before, known = ledgers(leaky), job_ids(leaky)
    d, bound = (DIM, 1) if case == "records" else (3, 1000)
    plan = DpgdPlan(Task("binary"), d, 1.0, 1e-6, lam=1e-2, rounds=1, total_records=1000)
    final, seen = learner_failed(leaky, dpgd_spec("synthetic", PARTIES, NODES, plan, bound, seed=SEED, deadline=30.0))
    assert_no_secret(leaky, seen + [final.detail] + listing(leaky, known), dimension=case == "dimension")
    if case == "records":
        assert "records_per_client" in final.detail, final.detail
    assert ledgers(leaky) == before


@pytest.mark.parametrize("case", ["classes", "dimension"])
def test_ensemble_refusal_names_no_label_size_or_dimension(leaky, case):
    before, known = ledgers(leaky), job_ids(leaky)
    classes, aux = (["a", "b"], "aux") if case == "classes" else (["-1", "1"], "aux_narrow")
    spec = hamm2016_pb2.EnsembleJobSpec(dataset="synthetic", auxiliary=aux, method="soft", lam=0.1, epsilon=1.0, classes=classes,
                                        parties=PARTIES, compute_nodes=NODES, deadline_seconds=30.0, simulation_seed=SEED)
    job = host_submit(leaky, timeout=60, hamm2016=spec).job_id
    final = host_wait(leaky, job, timeout=240)
    assert final.state == "FAILED", final
    e = refused(lambda: host_release(leaky, job))
    assert_clean(e)
    texts = [final.detail, e.details() or ""] + listing(leaky, known)
    assert_no_secret(leaky, texts, dimension=case == "dimension")
    if case == "classes":  # the labels in the parties' files are -1 and 1, the job's classes "a" and "b"
        for t in texts:
            assert not re.search(r"(?<![\w.])-?1\.0\b|'-1'|'1'|\"-1\"|\"1\"", t), f"a label value of a party's file appears in {t[:200]!r}"
    assert ledgers(leaky) == before


# -- failures after the spend: the detail still carries nothing computed from the records -----------------------------
@pytest.mark.parametrize("noise", [SMALLEST, DISTRIBUTED], ids=["corrected", "gaussian"])
def test_pathak_noise_overflow_names_no_noise_scale(leaky, noise):
    """λ = 10⁻¹³: the noise each party computes from its own n_j cannot be encoded, and the job fails."""
    known = job_ids(leaky)
    spec = pathak_spec(seed=SEED + bytes([noise]), noise=noise)
    setattr(spec, "lambda", 1e-13)
    job = submit_pathak(leaky, spec)
    seen = pathak_status_texts(leaky, job)
    final = wait_pathak(leaky, job)
    assert final.state == "FAILED", final
    assert final.problem in (common_pb2.INSUFFICIENT_NOISE, common_pb2.INVALID_JOB), final
    texts = seen + [final.detail] + listing(leaky, known)
    assert_no_secret(leaky, texts)
    for t in texts:
        assert not FLOAT.search(t), f"a number computed from a party's records appears in {t[:200]!r}"
    assert_ledgers_within_budget(leaky)


def test_local_release_guarantee_carries_no_size(leaky):
    """A local release (LMGC) publishes θ and its guarantee; the ridge Δ is a function of n_j and stays home."""
    known = job_ids(leaky)
    spec = local_release_pb2.LocalModelJobSpec(dataset="synthetic", model="lmgc", mode=common_pb2.CORRECTED, epsilon=LMGC_EPSILON, parties=PARTIES,
                                               ridge=1e-3, data_norm=1.0, huber_h=0.5, simulation_seed=SEED)
    setattr(spec, "lambda", 1e-3)
    job = host_submit(leaky, timeout=60, lmgc=spec).job_id
    assert host_wait(leaky, job, timeout=600).state == "PUBLISHED"
    published = host_release(leaky, job).lmgc
    assert len(published.releases) == len(PARTIES)
    text = str(published)
    assert_no_secret(leaky, [text] + listing(leaky, known))
    for p, n in SIZES.items():
        ridge = max(1e-3, ridge_for_jacobian_budget(0.5 * LMGC_EPSILON, n, 2, 0.5, math.sqrt(2.0)))
        assert f"{ridge:.6g}" not in text and f"{ridge:.4g}" not in text, f"{p}'s ridge Δ (a function of its n_j) is published"
    assert_ledgers_within_budget(leaky)


def test_the_whole_listing_names_no_private_value(leaky):
    """Last: once every job above has ended, the curator's listing of all of them still names nothing private."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with operator_curator(leaky) as ch:
            jobs = operations_pb2_grpc.JobOperationsStub(ch).ListJobs(operations_pb2.JobQuery(limit=1000), timeout=30).jobs
        if all(j.terminal for j in jobs):
            break
        time.sleep(1.0)
    assert_no_secret(leaky, listing(leaky))
    assert_ledgers_within_budget(leaky)
