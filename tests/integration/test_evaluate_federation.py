"""Evaluating a released model on a local federation (what `mpdp federation up --test-mode --key-bits 512 --parties 3
--compute-nodes 3` starts) over the breast-cancer parts `mpdp provision demo-data` writes: a Pathak model and a dp-gd
model are trained through the Python API, then `mpdp evaluate --json` (and Federation.evaluate) gives an accuracy
whose interval holds the pooled accuracy of the same released model computed directly on the three parties' rows,
a confusion matrix whose counts' intervals hold the true counts, and charges every party once per evaluation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mpdp.query.release import z_subgaussian
from tests.integration.conftest import DEMO_PARTIES, demo_federation, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.slow]
PARTIES = DEMO_PARTIES


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, *argv)


@pytest.fixture(scope="module")
def efed(tmp_path_factory):
    fed, rows = demo_federation(tmp_path_factory.mktemp("efed"))
    fed.X, fed.y = rows[:, :-1], rows[:, -1]  # type: ignore[attr-defined]
    yield fed
    fed.stop()


def _charges(fed) -> dict[str, int]:
    out = {}
    for p in PARTIES:
        f = Path(fed.workdir) / p / "state" / "ledger.json"
        out[p] = len(json.loads(f.read_text())["entries"]) if f.exists() else 0
    return out


def _confusion(model, X: np.ndarray, y: np.ndarray) -> dict[str, int]:
    pred = model.predict(X)
    pos = y > 0
    return {"true_positive": int(np.sum(pos & (pred > 0))), "false_negative": int(np.sum(pos & (pred < 0))),
            "false_positive": int(np.sum(~pos & (pred > 0))), "true_negative": int(np.sum(~pos & (pred < 0)))}


def test_pathak_model_evaluated_with_dp_holds_the_pooled_accuracy(efed, capsys):
    import mpdp

    with mpdp.Federation.connect(efed.workdir) as fed:
        trained = fed.logistic_regression(epsilon=2.0, lam=0.01, dataset="bc")
    pooled = trained.score(efed.X, efed.y)
    efed.pathak_job = trained.job_id
    before = _charges(efed)
    code, out, err = cli(capsys, "evaluate", "--endpoints", str(efed.workdir), trained.job_id, "--dataset", "bc", "--epsilon", "2", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["model_job"] == trained.job_id and doc["model_protocol"] == "pathak2010"
    assert doc["accuracy_low"] <= pooled <= doc["accuracy_high"], (pooled, doc["accuracy"], doc["accuracy_low"], doc["accuracy_high"])
    assert doc["accuracy_high"] - doc["accuracy_low"] < 0.5  # an informative interval, not [0, 1]
    # the four counts jointly (Bonferroni, 95 % over the four): each cell's own interval is 95 % for that cell alone
    half = z_subgaussian(0.05 / 4)
    for name, true in _confusion(trained.model, efed.X, efed.y).items():
        assert abs(doc[name] - true) <= half * doc[f"{name}_noise_sd"] + 0.05, (name, true, doc[name], doc[f"{name}_noise_sd"])
    assert sum(doc["confusion"].values()) == pytest.approx(len(efed.y), abs=4 * half * doc["true_positive_noise_sd"] + 0.1)
    assert 0.0 <= doc["auc"] <= 1.0 and doc["auc_noise_sd"] > 0
    assert doc["sensitivity"] == pytest.approx(2.0) and doc["guarantee"]["epsilon"] == 2.0
    assert _charges(efed) == {p: before[p] + 1 for p in PARTIES}


def test_dpgd_model_evaluated_through_federation_evaluate(efed):
    import mpdp

    with mpdp.Federation.connect(efed.workdir) as fed:
        trained = fed.dp_gd(epsilon=2.0, delta=1e-6, total_records=400, records_per_party=200, dimension=efed.X.shape[1], dataset="bc")
        pooled = trained.score(efed.X, efed.y)
        before = _charges(efed)
        doc = fed.evaluate(trained.job_id, dataset="bc", epsilon=2.0)
    assert doc["model_protocol"] == "dpgd" and doc["job_id"].startswith("qy-")
    assert doc["accuracy_low"] <= pooled <= doc["accuracy_high"], (pooled, doc["accuracy"], doc["accuracy_low"], doc["accuracy_high"])
    assert _charges(efed) == {p: before[p] + 1 for p in PARTIES}


def test_an_evaluation_of_weights_no_job_released_is_refused_by_the_curator_without_a_charge(efed):
    """The result names a model job, so the curator admits only that job's released weights, exactly."""
    from mpdp_services.common.endpoints import Endpoints
    from mpdp_services.operator.query import QueryFailed, evaluation_spec, released_classifier, run_query

    ep = Endpoints.load(efed.workdir)
    job = efed.pathak_job
    protocol, weights = released_classifier(ep, job)
    before = _charges(efed)
    nodes = ["node-1", "node-2", "node-3"]
    for model_job, w in ((job, [v + 1e-3 for v in weights]), ("pk-000000000000", weights), (job, weights[:7])):
        spec, _ = evaluation_spec(model_job, protocol, w, dataset="bc", parties=PARTIES, nodes=nodes, epsilon=1.0)
        with pytest.raises(QueryFailed, match="not a valid evaluation"):
            run_query(ep, spec)
    assert _charges(efed) == before
