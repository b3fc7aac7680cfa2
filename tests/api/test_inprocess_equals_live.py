"""One spine: the same seeded job through ``Federation.in_process`` and through ``Federation.connect`` on a live test
federation (curator, 3 parties, 3 DCA compute nodes as separate processes over mutual TLS) gives the same release and
the same ledger entries, and a job over a party's budget fails with the same error in both.

Both backends derive the n-th job's simulation seed from the federation's seed alike (:func:`mpdp.inprocess.job_seed`),
so each test makes a fresh federation object on each side and runs its one seeded job on both. Bit for bit equal:
Pathak (its noise is drawn from the spec's seed, whatever the keys), LMGC, regression and dp-gd (a seeded learner
job is named from its seed and its rounds' DCA jobs from the job, in-process and at the curator alike) and the
ensemble. A DCA sum is not: see its test. Ledger entries are compared on what the accountant composes (protocol,
ε, δ, accounting record); only the job ids of Pathak and LMGC jobs differ, which the curator chooses.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import mpdp
from mpdp.results import Result
from mpdp_services.launcher.federation import LocalFederation

pytestmark = pytest.mark.integration
PARTIES = ["party-1", "party-2", "party-3"]
NODES = ["node-1", "node-2", "node-3"]
KEY_BITS = 512
BUDGET = 40.0  # every party's budget ε, live and in-process: the module's jobs fit, an ε = 100 job does not
SIZES = (40, 50, 60)


def _write(path, X, y) -> dict:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savetxt(path, np.column_stack([X, y]), delimiter=",", fmt="%.17g")  # %.17g: the floats read back bit for bit
    return {"path": str(path), "format": "csv"}


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    root = tmp_path_factory.mktemp("spine")
    g = np.random.default_rng(7)  # public simulation data
    w = np.array([1.5, -1.0, 0.5])
    ds: dict[str, dict[str, dict]] = {p: {} for p in PARTIES}
    parts = []
    for p, n in zip(PARTIES, SIZES):
        X = np.clip(g.normal(size=(n, 3)), -2, 2)
        y = (X @ w + 0.3 * g.normal(size=n) > 0).astype(np.int64)
        ds[p]["syn"] = _write(root / "data" / p / "syn.csv", X, y)
        parts.append((X, y))
    aux = np.clip(g.normal(size=(30, 3)), -2, 2)  # the curator's public auxiliary points (ensembles)
    auxiliary = {"aux": _write(root / "data" / "aux.csv", aux, np.zeros(len(aux)))}
    fed = LocalFederation(root / "fed", PARTIES, ds, test_mode=True, paillier_bits=KEY_BITS, dgk_bits=KEY_BITS, compute_nodes=NODES,
                          auxiliary=auxiliary, budget_epsilon=BUDGET)
    with fed:
        yield fed, parts, aux


def _pair(live, seed: bytes) -> tuple[mpdp.Federation, mpdp.Federation]:
    fed, parts, _ = live
    here = mpdp.Federation.in_process(parties=parts, key_bits=KEY_BITS, seed=seed, names=PARTIES, budget_epsilon=BUDGET)
    there = mpdp.Federation.connect(fed.workdir, dataset="syn", seed=seed)
    return here, there


def _charges(entries: list[dict], job_id: str) -> list[dict]:
    """What the accountant composes of a job's entries (its own job id aside): protocol, ε, δ, accounting record."""
    return [{k: e.get(k) for k in ("protocol", "epsilon", "delta", "accounting")} for e in entries if e.get("job_id") == job_id]


def _live_entries(live, party: str) -> list[dict]:
    path = live[0].workdir / party / "state" / "ledger.json"  # written at the party's first spend
    return json.loads(path.read_text())["entries"] if path.exists() else []


def _same_ledgers(live, here: mpdp.Federation, mine: Result, theirs: Result) -> None:
    for p in PARTIES:
        got, want = _charges(here._backend.ledger[p], mine.job_id), _charges(_live_entries(live, p), theirs.job_id)
        assert got and got == want, (p, got, want)


def test_pathak_same_release_and_ledger(live):
    here, there = _pair(live, b"spine-pathak")
    mine = here.logistic_regression(epsilon=1.0, lam=0.1, classes=[0, 1])
    theirs = there.logistic_regression(epsilon=1.0, lam=0.1, classes=[0, 1])
    assert mine.seeded and theirs.seeded
    assert np.array_equal(mine.model.coef, theirs.model.coef), (mine.model.coef, theirs.model.coef)
    assert mine.guarantee == theirs.guarantee
    _same_ledgers(live, here, mine, theirs)


def test_lmgc_same_release_and_ledger(live):
    here, there = _pair(live, b"spine-lmgc")
    mine = here.lmgc(epsilon=2.0, data_norm=4.0)
    theirs = there.lmgc(epsilon=2.0, data_norm=4.0)
    assert mine.seeded and theirs.seeded
    assert np.array_equal(mine.model.theta, theirs.model.theta)
    assert mine.details["releases"] == theirs.details["releases"]
    _same_ledgers(live, here, mine, theirs)


def test_regression_same_release_and_ledger(live):
    """Two validated DCA rounds: the nodes' discrete Gaussian noise is keyed by each round's DCA job id, which a
    seeded job's curator derives from the job (``mpdp.registry.round_dca_job_id``) as the in-memory driver does."""
    here, there = _pair(live, b"spine-regression")
    kw = dict(bounds=(2.0, 2.0, 2.0, 1.0), epsilon=4.0, total_records=sum(SIZES), records_per_party=max(SIZES), grid_repeats=(2, 2))
    mine = here.linear_regression(**kw)
    theirs = there.linear_regression(dataset="syn", **kw)
    assert mine.job_id == theirs.job_id and mine.details["dca_jobs"] == theirs.details["dca_jobs"]
    assert np.array_equal(mine.model.coef, theirs.model.coef) and np.array_equal(mine.model.precision, theirs.model.precision)
    assert mine.details["thresholds"] == theirs.details["thresholds"] and mine.guarantee == theirs.guarantee
    for p in PARTIES:  # one charge per round, keyed by the round's DCA job
        for job in mine.details["dca_jobs"]:
            got, want = _charges(here._backend.ledger[p], job), _charges(_live_entries(live, p), job)
            assert got and got == want, (p, job, got, want)


def test_dpgd_same_release_and_ledger(live):
    here, there = _pair(live, b"spine-dpgd")
    kw = dict(epsilon=2.0, rounds=1, classes=[0, 1], total_records=sum(SIZES), records_per_party=max(SIZES))
    mine = here.dp_gd(**kw)
    theirs = there.dp_gd(dimension=3, **kw)
    assert mine.job_id == theirs.job_id and mine.details["dca_jobs"] == theirs.details["dca_jobs"]
    assert np.array_equal(mine.model.coef, theirs.model.coef), (mine.model.coef, theirs.model.coef)
    _same_ledgers(live, here, mine, theirs)  # the job's one charge
    for p in PARTIES:  # and a zero-charge marker per round
        mine_marks = [e["round"] for e in here._backend.ledger[p] if e.get("dpgd_job_id") == mine.job_id]
        assert mine_marks == [e["round"] for e in _live_entries(live, p) if e.get("dpgd_job_id") == theirs.job_id] == [0, 1]


def test_ensemble_same_ledger(live):
    here, there = _pair(live, b"spine-ensemble")
    _, _, aux = live
    mine = here.ensemble(auxiliary=aux, epsilon=5.0, lam=0.05, classes=[0, 1])
    theirs = there.ensemble(auxiliary="aux", epsilon=5.0, lam=0.05, classes=[0, 1])
    assert mine.guarantee == theirs.guarantee
    _same_ledgers(live, here, mine, theirs)
    assert np.array_equal(mine.model.coef, theirs.model.coef), (mine.model.coef, theirs.model.coef)


def test_dca_sum_same_mechanism_other_noise(live):
    """The one protocol whose seeded release is NOT the same in-process and live, and why: a DCA sum's noise is drawn
    by the compute nodes from the job's seed *and its DCA job id* (``mpdp.dca.compute_node``: child
    ``dca/<job id>/node-noise/<node>``), and a live curator names an operator's DCA job with 48 fresh random bits (a
    DcaJobSpec carries no job id; deriving it from the seed would make two submissions of one seeded spec collide).
    So this test compares what the noise does not touch — the guarantee, σ, ρ, the clients included, the noise's
    variance, and that no party's ledger is charged (the vectors are simulated clients', not the parties') — and that
    each release is the clients' sum plus noise of that variance; and that the in-process job with the same seed
    (hence the same id) is bit for bit reproducible, so the id is the only difference."""
    here, there = _pair(live, b"spine-dca")
    Z = np.random.default_rng(3).uniform(-1, 1, size=(20, 3))  # public simulation vectors
    before = {p: _live_entries(live, p) for p in PARTIES}
    mine, theirs = here.dca_sum(Z, epsilon=1.0, delta=1e-5), there.dca_sum(Z, epsilon=1.0, delta=1e-5)
    assert mine.seeded and theirs.seeded and mine.noise == theirs.noise == "discrete-gaussian"
    assert mine.guarantee == theirs.guarantee and mine.details == theirs.details
    assert (mine.model.clients_included, mine.model.noise_variance) == (theirs.model.clients_included, theirs.model.noise_variance) == (20, mine.model.noise_variance)
    sd = np.sqrt(mine.model.noise_variance)
    for r in (mine, theirs):
        assert np.all(np.abs(r.model.values - Z.sum(axis=0)) < 8 * sd)
    assert not np.array_equal(mine.model.values, theirs.model.values)  # other ids, other noise (equal with probability ~0)
    again = mpdp.Federation.in_process(parties=live[1], key_bits=KEY_BITS, seed=b"spine-dca", names=PARTIES).dca_sum(Z, epsilon=1.0, delta=1e-5)
    assert again.job_id == mine.job_id and np.array_equal(again.model.values, mine.model.values)
    assert {p: _live_entries(live, p) for p in PARTIES} == before and all(not here._backend.ledger[p] for p in PARTIES)


def test_over_budget_fails_alike_and_spends_nothing(live):
    """A job whose ε alone exceeds every party's budget: JobFailed in both, with the ledger's own refusal (what the
    job needs and what is left), and no new entry in any ledger: the spend is refused before anything derived from
    the records leaves (an LMGC job: before training; a Pathak job: at ProtocolStart, before the local model)."""
    here, there = _pair(live, b"spine-budget")
    before = {p: _live_entries(live, p) for p in PARTIES}
    need = rf"party-\d.*needs ε={2 * BUDGET:g}, δ=0; left ε="
    for run in (lambda f: f.lmgc(epsilon=2 * BUDGET, data_norm=4.0), lambda f: f.logistic_regression(epsilon=2 * BUDGET, noise="corrected", classes=[0, 1])):
        with pytest.raises(mpdp.JobFailed, match=need):
            run(here)
        with pytest.raises(mpdp.JobFailed, match=need):
            run(there)
    assert {p: _live_entries(live, p) for p in PARTIES} == before
    assert all(not here._backend.ledger[p] for p in PARTIES)
