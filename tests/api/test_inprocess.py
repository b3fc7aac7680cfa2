"""The public API in-process (mpdp.Federation.in_process): every protocol runs for real on the core's machines
(Pathak with real Paillier/DGK keys, 1024 bits to stay fast), returns the one Result type with honest fields, is
DP by default, and refuses bad calls with messages that name the argument."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_wine

import mpdp
from mpdp.lmgc.estimator import LargeMarginGaussianClassifier
from mpdp.results import DpSumRelease, LinearClassifier, LinearRegressor, LmgcClassifier, Result

KEY_BITS = 1024


def _scaled(X):
    return (X - X.mean(axis=0)) / X.std(axis=0)


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    X = _scaled(X)
    labels = np.where(y == 1, "benign", "malignant")
    order = np.random.default_rng(0).permutation(len(y))  # public simulation split
    test, train = order[:150], order[150:]
    parts = [(X[r], labels[r]) for r in np.array_split(train, 3)]
    return mpdp.Federation.in_process(parties=parts, key_bits=KEY_BITS), X[test], labels[test]


def _check_common(r: Result, protocol: str) -> dict:
    assert isinstance(r, Result) and r.protocol == protocol and r.backend == "in-process"
    assert r.guarantee.epsilon > 0 and r.guarantee.statement and r.trust_model and r.job_id
    assert r.timings["total"] > 0 and all(v >= 0 for v in r.timings.values())
    assert all(isinstance(v, int) and v >= 0 for v in r.operations.values())
    assert not r.seeded
    doc = json.loads(r.to_json())
    assert doc["guarantee"]["epsilon"] == r.guarantee.epsilon and doc["guarantee"]["noise"] == r.noise
    assert doc["protocol"] == protocol and doc["model"]["type"]
    with pytest.raises(Exception):
        r.timings["total"] = 0.0  # type: ignore[index]  # frozen
    return doc


def test_pathak_logistic_regression(cancer):
    fed, Xte, yte = cancer
    r = fed.logistic_regression(epsilon=2.0, lam=0.1)
    doc = _check_common(r, "pathak2010")
    assert isinstance(r.model, LinearClassifier) and r.model.classes == ("benign", "malignant")
    assert r.noise == "gaussian-distributed" and r.guarantee.delta == pytest.approx(1e-6)
    assert r.operations["paillier_encrypt"] > 0 and r.operations["dgk_zero_test"] > 0 and r.operations["messages"] > 0
    assert {"stage1", "stage2", "stage3"} <= set(r.timings)
    pred = r.predict(Xte)
    assert set(pred) <= {"benign", "malignant"} and r.score(Xte, yte) > 0.6
    proba = r.model.predict_proba(Xte)
    assert proba.shape == (len(Xte), 2) and np.allclose(proba.sum(axis=1), 1.0)
    assert np.array_equal(pred, np.where(proba[:, 1] > 0.5, "malignant", "benign"))
    assert doc["details"]["parties"] == 3 and doc["details"]["dimension"] == 30
    # each party's ledger got the job's true charge
    for p in fed.parties:
        assert any(e.get("job_id") == r.job_id and e["epsilon"] == 2.0 for e in fed._backend.ledger[p])


def test_pathak_corrected_noise_is_pure_epsilon(cancer):
    fed, _, _ = cancer
    r = fed.logistic_regression(epsilon=1.0, lam=0.1, noise="corrected")
    assert r.noise == "corrected" and r.guarantee.delta == 0.0 and "smallest party" in r.trust_model


def test_seeded_runs_reproduce_and_are_marked(cancer):
    _, Xte, _ = cancer
    X, y = load_breast_cancer(return_X_y=True)
    parts = [(_scaled(X)[i::3], y[i::3]) for i in range(3)]
    a = mpdp.Federation.in_process(parties=parts, key_bits=768, seed=b"same").logistic_regression(epsilon=1.0, lam=0.1)
    b = mpdp.Federation.in_process(parties=parts, key_bits=768, seed=b"same").logistic_regression(epsilon=1.0, lam=0.1)
    assert a.seeded and b.seeded and np.array_equal(a.model.coef, b.model.coef)
    assert a.model.classes == (0, 1)  # the caller's own labels, the larger one positive


def test_dca_sum(cancer):
    fed, _, _ = cancer
    Z = np.random.default_rng(1).uniform(-1, 1, size=(40, 5))  # public simulation vectors
    r = fed.dca_sum(Z, epsilon=1.0, delta=1e-5, max_missing=2)
    _check_common(r, "dca-sum")
    assert isinstance(r.model, DpSumRelease) and r.model.values.shape == (5,) and r.model.clients_included == 40
    assert r.noise == "discrete-gaussian" and 0 < r.guarantee.delta <= 1e-5 and "proven valid" in r.guarantee.statement  # validated by default
    assert r.operations["accepted_shares"] == 40 * len(fed.compute_nodes)
    sd = np.sqrt(r.model.noise_variance)
    assert sd > 0 and np.all(np.abs(r.model.values - Z.sum(axis=0)) < 8 * sd)  # noisy, but around the true sum
    assert fed.sum is not None and mpdp.Federation.sum is mpdp.Federation.dca_sum
    plain = fed.dca_sum(Z, epsilon=1.0, delta=1e-5, max_missing=2, validate="none")
    assert plain.noise == "gaussian" and "not proven valid" in plain.guarantee.statement
    with pytest.raises(ValueError, match="validate='none'"):
        fed.dca_sum(Z, epsilon=1.0, delta=1e-5, noise="gaussian")
    with pytest.raises(TypeError):
        r.predict(Z)  # a sum is not a predictor


def test_discrete_gaussian_sum(cancer):
    fed, _, _ = cancer
    r = fed.dca_sum(np.full((10, 2), 0.5), epsilon=1.0, delta=1e-5, noise="discrete-gaussian")
    assert r.noise == "discrete-gaussian" and "rho" in r.details


def test_linear_regression():
    g = np.random.default_rng(2)  # public simulation data
    beta = np.array([0.8, -0.5, 0.3])
    parts = []
    for n in (300, 250, 350):
        X = np.clip(g.normal(size=(n, 3)), -2, 2)
        parts.append((X, np.clip(X @ beta + 0.2 * g.normal(size=n), -4, 4)))
    fed = mpdp.Federation.in_process(parties=parts)
    r = fed.linear_regression(bounds=(2, 2, 2, 4), epsilon=4.0, delta=1e-4, grid_repeats=(2, 2))
    _check_common(r, "heikkila2017")
    assert isinstance(r.model, LinearRegressor) and r.model.coef.shape == (3,)
    assert r.guarantee.epsilon == pytest.approx(4.0) and r.guarantee.delta == pytest.approx(1e-4)  # both rounds composed
    assert len(r.details["dca_jobs"]) == 2 and r.operations["dca_jobs"] == 2
    X = np.vstack([p[0] for p in parts]); y = np.concatenate([p[1] for p in parts])
    assert r.score(X, y) > 0.3 and np.all(r.model.predict_std(X[:3]) > 0)
    assert r.noise == "discrete-gaussian"  # validated by default: the proof bounds integer noise
    with pytest.raises(ValueError, match="validate=False"):
        fed.linear_regression(bounds=(2, 2, 2, 4), epsilon=4.0, noise="gaussian")
    plain = fed.linear_regression(bounds=(2, 2, 2, 4), epsilon=4.0, delta=1e-4, grid_repeats=(2, 2), validate=False)
    assert plain.noise == "gaussian" and "not proven valid" in plain.guarantee.statement


def test_dp_gd_binary_and_softmax(cancer):
    fed, Xte, yte = cancer
    r = fed.dp_gd(epsilon=2.0, rounds=2)
    _check_common(r, "dp-gd")
    assert r.model.classes == ("benign", "malignant") and r.operations["dca_jobs"] == 3 and r.score(Xte, yte) > 0.6
    assert r.noise == "discrete-gaussian" and "not proven valid" not in r.guarantee.statement  # validated by default
    plain = fed.dp_gd(epsilon=2.0, rounds=1, validate=False)  # no proofs: Gaussian rounds, and the guarantee says so
    assert plain.noise == "gaussian" and "not proven valid" in plain.guarantee.statement and plain.operations["dca_jobs"] == 2
    X, y = load_wine(return_X_y=True)
    wine = mpdp.Federation.in_process(parties=[(_scaled(X)[i::3], y[i::3]) for i in range(3)])
    s = wine.dp_gd(epsilon=5.0, rounds=1)
    assert s.model.coef.shape == (3, 13) and s.model.classes == (0, 1, 2) and s.model.predict_proba(X[:4]).shape == (4, 3)


def test_ensemble(cancer):
    fed, Xte, yte = cancer
    # M = 3 voters: Δ₂ = 2/(Mλ) ≈ 13, so only a large ε leaves a useful model (at ε = 5 the score is a coin flip)
    r = fed.ensemble(auxiliary=Xte[:80], epsilon=1e4, lam=0.05)
    _check_common(r, "hamm2016")
    assert r.model.classes == ("benign", "malignant") and r.details["parties_included"] == 3 and r.guarantee.delta == 0.0
    assert r.score(Xte[80:], yte[80:]) > 0.8
    with pytest.raises(TypeError, match="feature matrix"):
        fed.ensemble(auxiliary="aux-name", epsilon=1.0)


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_lmgc_releases_and_average():
    X, y = load_wine(return_X_y=True)
    X = _scaled(X) / 4.0
    fed = mpdp.Federation.in_process(parties=[(X[i::3], y[i::3]) for i in range(3)])
    r = fed.lmgc(epsilon=1000.0)
    _check_common(r, "lmgc")
    assert isinstance(r.model, LmgcClassifier) and r.model.classes == (0, 1, 2) and r.score(X, y) > 0.8
    assert "post-processing" in r.details["aggregate"] and set(r.details["releases"]) == set(fed.parties)
    one = fed.lmgc(epsilon=1000.0, release="party-2")
    assert one.details["release"] == "party-2" and one.guarantee.epsilon == 1000.0
    with pytest.raises(ValueError, match="release must be"):
        fed.lmgc(epsilon=1.0, release="nobody")


def test_dp_by_default():
    assert LargeMarginGaussianClassifier().mode == "corrected"
    with pytest.raises(TypeError):
        mpdp.Federation.logistic_regression(None, lam=0.1)  # type: ignore[call-arg]  # ε has no default anywhere
    for name in ("logistic_regression", "dp_gd", "dca_sum", "linear_regression", "ensemble", "lmgc"):
        import inspect

        p = inspect.signature(getattr(mpdp.Federation, name)).parameters
        assert p["epsilon"].default is inspect.Parameter.empty, name
        assert not any("private" in k for k in p), name
    X, y = load_breast_cancer(return_X_y=True)
    base = mpdp.baselines.nonprivate_logistic_regression(_scaled(X), y, lam=0.01)
    assert base.score(_scaled(X), y) > 0.9  # the non-private baseline exists, by name only


def test_errors_are_clear(cancer, monkeypatch):
    fed, _, _ = cancer
    with pytest.raises(ValueError, match="epsilon must be finite and > 0"):
        fed.logistic_regression(epsilon=0.0)
    with pytest.raises(ValueError, match="noise must be one of gaussian-distributed, corrected, paper"):
        fed.logistic_regression(epsilon=1.0, noise="laplace")
    with pytest.raises(ValueError, match="delta applies to gaussian-distributed noise only"):
        fed.logistic_regression(epsilon=1.0, noise="corrected", delta=1e-5)
    with pytest.raises(ValueError, match=r"labels \['malignant'\] are not among classes"):
        fed.logistic_regression(epsilon=1.0, classes=["benign", "other"])
    with pytest.raises(ValueError, match="unknown parties"):
        fed.logistic_regression(epsilon=1.0, parties=["party-9"])
    with pytest.raises(ValueError, match="bounds must hold d \\+ 1 = 31 values"):
        fed.linear_regression(bounds=(1.0, 1.0), epsilon=1.0)
    with pytest.raises(ValueError, match="vectors must be a 2-D array"):
        fed.dca_sum(np.ones(3), epsilon=1.0, delta=1e-5)
    with pytest.raises(ValueError, match="parties disagree on the number of features"):
        mpdp.Federation.in_process(parties=[(np.ones((3, 2)), np.ones(3)), (np.ones((3, 4)), np.ones(3))])
    with pytest.raises(ValueError, match="y must hold one label per row"):
        mpdp.Federation.in_process(parties=[(np.ones((3, 2)), np.ones(4))])
    with pytest.raises(ValueError, match="compute_nodes must be an integer in 2"):
        mpdp.Federation.in_process(parties=[(np.ones((3, 2)), np.ones(3))], compute_nodes=1)
    with pytest.raises(ValueError, match="key_bits must be in"):
        mpdp.Federation.in_process(parties=[(np.ones((3, 2)), np.ones(3))], key_bits=64)
    monkeypatch.delenv("MPDP_ENDPOINTS", raising=False)
    with pytest.raises(ValueError, match="MPDP_ENDPOINTS"):
        mpdp.Federation.connect()
    with pytest.raises(ValueError, match="X has 3 features, the model has 30"):
        fed.logistic_regression(epsilon=1.0, lam=0.1).predict(np.ones((2, 3)))


@pytest.mark.process  # starts a process or opens a socket: not in `make test-fast`
def test_import_is_lazy():
    import subprocess
    import sys

    code = "import sys, mpdp; assert 'grpc' not in sys.modules and 'sklearn' not in sys.modules; mpdp.Federation; assert 'grpc' not in sys.modules; print(mpdp.__all__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Federation" in out.stdout


def test_docstring_examples_run():
    import doctest

    import mpdp.baselines
    import mpdp.estimator
    import mpdp.federation
    import mpdp.results

    for m in (mpdp, mpdp.federation, mpdp.results, mpdp.baselines, mpdp.estimator):
        res = doctest.testmod(m)
        assert res.failed == 0 and res.attempted > 0, m.__name__


def test_in_process_budget_is_checked_as_a_party_ledger_checks_it():
    """Every party's Spend goes through its in-memory ledger (mpdp.driver.Wire): a job over budget fails with
    JobFailed naming the party and the ledger's refusal, and charges nothing; a dp-gd job is charged once (its one
    entry) with a zero-charge marker per round, as a served party records it."""
    g = np.random.default_rng(5)  # public simulation data
    parts = [(g.normal(size=(n, 3)), g.integers(0, 2, size=n)) for n in (30, 40)]
    fed = mpdp.Federation.in_process(parties=parts, key_bits=512, seed=b"budget", budget_epsilon=3.0)
    ok = fed.lmgc(epsilon=2.0, data_norm=4.0)
    with pytest.raises(mpdp.JobFailed, match=r"party-1 cannot pay job lm-[0-9a-f]{12}: needs ε=2, δ=0; left ε=1"):
        fed.lmgc(epsilon=2.0, data_norm=4.0)
    for p in fed.parties:
        assert [(e["job_id"], e["status"]) for e in fed._backend.ledger[p]] == [(ok.job_id, "released")]
    gd = mpdp.Federation.in_process(parties=parts, seed=b"budget").dp_gd(epsilon=1.0, rounds=2, classes=[0, 1])
    with pytest.raises(mpdp.JobFailed, match="cannot pay job dp-"):
        mpdp.Federation.in_process(parties=parts, seed=b"budget", budget_epsilon=0.5).dp_gd(epsilon=1.0, rounds=2, classes=[0, 1])
    led = mpdp.Federation.in_process(parties=parts, seed=b"budget")
    r = led.dp_gd(epsilon=1.0, rounds=2, classes=[0, 1])
    assert np.array_equal(r.model.coef, gd.model.coef)  # the same seed: the same job id, rounds and release
    for p in led.parties:
        entries = led._backend.ledger[p]
        assert [e["protocol"] for e in entries] == ["dpgd", "dpgd-round", "dpgd-round", "dpgd-round"]
        assert entries[0]["epsilon"] == r.guarantee.epsilon and sorted(entries[0]["parties"]) == list(led.parties)
