"""LMGC in the federation: each party releases a DP large-margin Gaussian classifier over mutual TLS,
records it in its ledger, and the curator publishes the set and their average (post-processing)."""

from __future__ import annotations

import json

import grpc
import numpy as np
import pytest
from sklearn.datasets import load_wine

from mpdp_services.common.endpoints import Endpoints
from mpdp_services.launcher.federation import LocalFederation
from mpdp_services.operator.local import fetch, predict_local, submit_local

pytestmark = pytest.mark.integration
PARTIES = ["party-1", "party-2", "party-3"]


@pytest.fixture(scope="module")
def wine_fed(tmp_path_factory):
    root = tmp_path_factory.mktemp("lmgc")
    X, y = load_wine(return_X_y=True)
    X = (X - X.mean(axis=0)) / X.std(axis=0) / 4.0
    order = np.random.default_rng(0).permutation(len(y))
    ds = {}
    for j, p in enumerate(PARTIES):
        rows = order[j::3]
        f = root / "data" / f"{p}.csv"
        f.parent.mkdir(parents=True, exist_ok=True)
        np.savetxt(f, np.column_stack([X[rows], y[rows]]), delimiter=",", fmt="%.17g")
        ds[p] = {"wine": {"path": str(f), "format": "csv"}}
    test = root / "data" / "all.csv"
    np.savetxt(test, np.column_stack([X, y]), delimiter=",", fmt="%.17g")
    fed = LocalFederation(root / "fed", PARTIES, ds, test_mode=True, paillier_bits=768, dgk_bits=768, budget_epsilon=1e6)
    fed.start()
    fed.test_file = test  # type: ignore[attr-defined]
    yield fed
    fed.stop()


def test_each_party_releases_and_the_average_is_published(wine_fed):
    ep = Endpoints.load(wine_fed.workdir)
    s = submit_local(ep, "wine", PARTIES, 1000.0, 1e-3, "corrected", 1e-3, 1.0, seed=b"lmgc-fed")
    assert s["parties"] == PARTIES and "post-processing" in s["aggregate"]
    for p in PARTIES:
        assert s["releases"][p]["epsilon"] == 1000.0
        entries = json.loads((wine_fed.workdir / p / "state" / "ledger.json").read_text())["entries"]
        assert any(e["job_id"] == s["job_id"] and e["protocol"] == "local-release/lmgc" for e in entries)
    published = fetch(ep, s["job_id"])
    assert len(published.releases) == 3 and published.aggregate.theta
    avg = predict_local(ep, s["job_id"], str(wine_fed.test_file), "csv")
    single = predict_local(ep, s["job_id"], str(wine_fed.test_file), "csv", party="party-1")
    assert avg["accuracy"] > 0.8 and single["accuracy"] > 0.6


def test_paper_mode_average_is_refused_with_a_reason(wine_fed):
    ep = Endpoints.load(wine_fed.workdir)
    try:
        s = submit_local(ep, "wine", PARTIES, 1e5, 0.1, "paper", 1e-3, 1.0, seed=b"lmgc-paper")
    except grpc.RpcError as e:  # the paper objective can be unbounded: the party refuses, the job fails, named
        assert e.code() == grpc.StatusCode.ABORTED and "party-" in e.details()
        return
    assert "refused" in s["aggregate"] and "not proven private" in s["aggregate"]


def test_unknown_dataset_fails_the_job_naming_the_party(wine_fed):
    ep = Endpoints.load(wine_fed.workdir)
    with pytest.raises(grpc.RpcError) as e:
        submit_local(ep, "no-such-data", PARTIES, 10.0, 1e-3, "corrected", 1e-3, 1.0)
    assert e.value.code() == grpc.StatusCode.ABORTED and "party-1" in e.value.details() and "no-such-data" in e.value.details()
