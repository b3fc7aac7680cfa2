"""The public API against a real local federation (curator, 3 parties, 3 DCA compute nodes as separate processes
over mutual TLS): ``Federation.connect`` runs Pathak, DCA sums, LMGC, regression, dp-gd and an ensemble through
the operator clients and returns the same Result type, with the same fields, as the in-process federation."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer

import mpdp
from mpdp.results import DpSumRelease, LinearClassifier, LinearRegressor, LmgcClassifier, Result
from mpdp_services.launcher.federation import LocalFederation

pytestmark = pytest.mark.integration
PARTIES = ["party-1", "party-2", "party-3"]
NODES = ["node-1", "node-2", "node-3"]


def _write(path, X, y) -> dict:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savetxt(path, np.column_stack([X, y]), delimiter=",", fmt="%.17g")
    return {"path": str(path), "format": "csv"}


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    root = tmp_path_factory.mktemp("api")
    X, y = load_breast_cancer(return_X_y=True)
    X = (X - X.mean(axis=0)) / X.std(axis=0)  # public demo scaling
    order = np.random.default_rng(0).permutation(len(y))  # public simulation split
    test, aux, train = order[:120], order[120:200], order[200:]
    g = np.random.default_rng(1)
    beta = np.array([0.8, -0.5, 0.3])
    ds: dict[str, dict[str, dict]] = {p: {} for p in PARTIES}
    parts, lin = [], []
    for j, (p, rows) in enumerate(zip(PARTIES, np.array_split(train, 3))):
        ds[p]["bc"] = _write(root / "data" / p / "bc.csv", X[rows], y[rows])
        parts.append((X[rows], y[rows]))
        Xl = np.clip(g.normal(size=(100 + 20 * j, 3)), -2, 2)
        yl = np.clip(Xl @ beta + 0.2 * g.normal(size=len(Xl)), -4, 4)
        ds[p]["lin"] = _write(root / "data" / p / "lin.csv", Xl, yl)
        lin.append((Xl, yl))
    auxiliary = {"bc_aux": _write(root / "data" / "aux.csv", X[aux], np.zeros(len(aux)))}
    fed = LocalFederation(root / "fed", PARTIES, ds, test_mode=True, paillier_bits=1024, dgk_bits=1024, compute_nodes=NODES,
                          auxiliary=auxiliary, budget_epsilon=1e6)
    with fed:
        yield fed, parts, lin, X[test], y[test]


def _same_shape(a: Result, b: Result) -> None:
    assert type(a) is type(b) and type(a.model) is type(b.model) and a.protocol == b.protocol
    assert [f.name for f in dataclasses.fields(a)] == [f.name for f in dataclasses.fields(b)]
    assert set(json.loads(a.to_json())) == set(json.loads(b.to_json()))
    assert set(a.details) == set(b.details) and a.noise == b.noise and type(a.guarantee) is type(b.guarantee)


def test_connect_reads_the_endpoints(live, monkeypatch):
    fed, *_ = live
    f = mpdp.Federation.connect(fed.workdir, dataset="bc")
    assert f.backend == "live" and f.parties == tuple(PARTIES) and f.compute_nodes == tuple(NODES)
    monkeypatch.setenv("MPDP_ENDPOINTS", str(fed.workdir / "endpoints.json"))
    assert mpdp.Federation.connect().parties == tuple(PARTIES)


def test_pathak_live_equals_the_in_process_type(live):
    fed, parts, _, Xte, yte = live
    f = mpdp.Federation.connect(fed.workdir, dataset="bc")
    r = f.logistic_regression(epsilon=2.0, lam=0.1, classes=[0, 1])
    assert r.backend == "live" and r.protocol == "pathak2010" and isinstance(r.model, LinearClassifier)
    assert r.guarantee.epsilon == 2.0 and r.noise == "gaussian-distributed" and r.operations["paillier_encrypt"] > 0
    assert {"stage1", "stage2", "stage3", "total"} <= set(r.timings)
    assert set(r.predict(Xte)) <= {0, 1} and r.score(Xte, yte) > 0.6
    local = mpdp.Federation.in_process(parties=parts, key_bits=1024).logistic_regression(epsilon=2.0, lam=0.1)
    _same_shape(r, local)
    # the parties spent the job's ε in their own ledgers
    for p in PARTIES:
        entries = json.loads((fed.workdir / p / "state" / "ledger.json").read_text())["entries"]
        assert any(e["job_id"] == r.job_id for e in entries)


def test_dca_sum_live(live):
    fed, parts, *_ = live
    Z = np.random.default_rng(2).uniform(-1, 1, size=(30, 4))  # public simulation vectors
    f = mpdp.Federation.connect(fed.workdir)
    r = f.dca_sum(Z, epsilon=1.0, delta=1e-5, max_missing=1)
    assert r.backend == "live" and isinstance(r.model, DpSumRelease) and r.model.clients_included == 30
    assert r.operations["accepted_shares"] == 30 * len(NODES) and 0 < r.guarantee.delta <= 1e-5
    assert np.all(np.abs(r.model.values - Z.sum(axis=0)) < 8 * np.sqrt(r.model.noise_variance))
    _same_shape(r, mpdp.Federation.in_process(parties=parts).dca_sum(Z, epsilon=1.0, delta=1e-5, max_missing=1))


def test_lmgc_regression_dpgd_ensemble_live(live):
    fed, parts, lin, Xte, yte = live
    f = mpdp.Federation.connect(fed.workdir, dataset="bc")
    m = f.lmgc(epsilon=1000.0, data_norm=8.0)
    assert m.backend == "live" and isinstance(m.model, LmgcClassifier) and m.score(Xte, yte) > 0.6
    assert set(m.details["releases"]) == set(PARTIES)
    reg = f.linear_regression(bounds=(2, 2, 2, 4), epsilon=4.0, total_records=360, records_per_party=200, grid_repeats=(2, 2), dataset="lin")
    assert isinstance(reg.model, LinearRegressor) and reg.guarantee.epsilon == pytest.approx(4.0) and len(reg.details["dca_jobs"]) == 2
    _same_shape(reg, mpdp.Federation.in_process(parties=lin).linear_regression(bounds=(2, 2, 2, 4), epsilon=4.0, grid_repeats=(2, 2)))
    gd = f.dp_gd(epsilon=2.0, rounds=1, classes=[0, 1], total_records=sum(len(p[1]) for p in parts), records_per_party=200, dimension=30)
    assert gd.protocol == "dp-gd" and gd.operations["dca_jobs"] == 2 and gd.score(Xte, yte) > 0.6
    ens = f.ensemble(auxiliary="bc_aux", epsilon=50.0, lam=0.05, classes=[0, 1])
    assert ens.protocol == "hamm2016" and ens.details["parties_included"] == 3 and set(ens.predict(Xte)) <= {0, 1}
    with pytest.raises(ValueError, match="needs total_records"):
        f.linear_regression(bounds=(2, 2, 2, 4), epsilon=1.0, dataset="lin")
    with pytest.raises(TypeError, match="name of its auxiliary dataset"):
        f.ensemble(auxiliary=Xte, epsilon=1.0)
    with pytest.raises(mpdp.JobFailed):
        f.logistic_regression(epsilon=1.0, dataset="no-such-dataset")
    # the curator's jobs through its job host: every protocol's job listed, watched to its end, exported
    listed = {j["job_id"]: j for j in f.jobs()}
    for r in (m, reg, gd, ens):
        assert listed[r.job_id]["terminal"] and list(f.watch(r.job_id))[-1]["released"]
        doc = f.export(r.job_id)
        assert doc["job_id"] == r.job_id and doc["guarantee"]["epsilon"] > 0
    exported = f.export(reg.job_id)
    assert np.array_equal(exported["posterior_mean"], reg.model.coef), sorted(exported)
    with pytest.raises(ValueError, match="only a live federation"):
        mpdp.Federation.in_process(parties=parts).jobs()


def test_the_sklearn_estimator_fits_on_a_live_federation_one_job_per_fit(live):
    """mpdp.FederatedLogisticRegression over the live federation: fit() is one job the parties spend in their ledgers."""
    fed, _, _, Xte, yte = live
    f = mpdp.Federation.connect(fed.workdir, dataset="bc")
    clf = mpdp.FederatedLogisticRegression(f, epsilon=2.0, lam=0.1, classes=(0, 1)).fit()
    assert clf.classes_.tolist() == [0, 1] and clf.coef_.shape == (1, 30) and clf.score(Xte, yte) > 0.6
    job = clf.job_["job_id"]
    for p in PARTIES:
        entries = json.loads((fed.workdir / p / "state" / "ledger.json").read_text())["entries"]
        assert any(e["job_id"] == job and e["epsilon"] == 2.0 for e in entries)
