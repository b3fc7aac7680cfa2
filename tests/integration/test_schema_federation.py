"""The federation schema across real processes: a job carrying the schema's sha256 runs at parties whose datasets
have that schema (rows encoded by it, d the schema's), and a party whose dataset has another schema, or none,
refuses it with INVALID_JOB before it spends or trains. An empty hash checks nothing (older operators)."""

from __future__ import annotations

import json

import grpc
import numpy as np
import pytest

from mpdp.messages import common_pb2
from mpdp.schema import Schema
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.launcher.federation import LocalFederation
from mpdp_services.operator.local import submit_local
from mpdp_services.operator.pathak2010 import OperatorClient, make_spec

pytestmark = pytest.mark.integration
PARTIES = ["party-1", "party-2", "party-3"]
SCHEMA = """\
mpdp_schema: 1
version: {version}
features:
  - {{name: age, type: numeric, bounds: [0, 100]}}
  - {{name: colour, type: categorical, vocabulary: [red, green, blue]}}
  - {{name: smoker, type: binary, positive: yes, negative: no}}
label: {{column: outcome, positive: sick, negative: well}}
scale: symmetric
"""


def _rows(g: np.random.Generator, n: int) -> str:
    lines = ["outcome,age,colour,smoker"]
    for _ in range(n):
        age, colour, smoker = g.integers(20, 90), g.choice(["red", "green", "blue"]), g.choice(["yes", "no"])
        sick = (age > 55) ^ (g.random() < 0.1)
        lines.append(f"{'sick' if sick else 'well'},{age},{colour},{smoker}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def schema_fed(tmp_path_factory):
    root = tmp_path_factory.mktemp("schema")
    (root / "v1.yaml").write_text(SCHEMA.format(version=1))
    (root / "v2.yaml").write_text(SCHEMA.format(version=2))  # the same features, another version: another hash
    g = np.random.default_rng(3)
    ds = {}
    for p in PARTIES:
        f = root / f"{p}.csv"
        f.write_text(_rows(g, 60))
        ds[p] = {"toy": {"path": str(f), "format": "csv", "schema": str(root / ("v2.yaml" if p == "party-3" else "v1.yaml"))},
                 "plain": {"path": str(f), "format": "csv"}}
    fed = LocalFederation(root / "fed", PARTIES, ds, test_mode=True, paillier_bits=768, dgk_bits=768, budget_epsilon=1e6)
    fed.start()
    fed.v1 = Schema.load(root / "v1.yaml")  # type: ignore[attr-defined]
    yield fed
    fed.stop()


def test_pathak_job_runs_on_the_schemas_encoding(schema_fed):
    spec = make_spec("toy", PARTIES[:2], 1.0, 0.05, "corrected", 120.0, schema_sha256=schema_fed.v1.sha256())
    with OperatorClient(Endpoints.load(schema_fed.workdir)) as client:
        status = client.wait(client.submit(spec), timeout=120)
        assert status.state == "PUBLISHED", status.detail
        assert client.model(status.job_id).dimension == schema_fed.v1.dimension == 5


def test_party_with_another_schema_refuses_the_pathak_job(schema_fed):
    spec = make_spec("toy", PARTIES, 1.0, 0.05, "corrected", 120.0, schema_sha256=schema_fed.v1.sha256())
    with OperatorClient(Endpoints.load(schema_fed.workdir)) as client:
        status = client.wait(client.submit(spec), timeout=120)
    assert status.state == "FAILED" and status.problem == common_pb2.INVALID_JOB, status
    assert "party-3" in status.detail and "schema" in status.detail
    ledger = schema_fed.workdir / "party-3" / "state" / "ledger.json"
    entries = json.loads(ledger.read_text())["entries"] if ledger.exists() else []
    assert all(e["job_id"] != status.job_id for e in entries)  # refused before spending


def test_party_without_a_schema_refuses_and_an_empty_hash_checks_nothing(schema_fed):
    ep = Endpoints.load(schema_fed.workdir)
    with pytest.raises(grpc.RpcError) as e:  # "plain" has no schema configured
        submit_local(ep, "plain", PARTIES, 10.0, 1e-3, "corrected", 1e-3, 1.0, schema_sha256=schema_fed.v1.sha256())
    assert "party-1" in e.value.details() and "requires a schema" in e.value.details()
    out = submit_local(ep, "toy", PARTIES, 10.0, 1e-3, "corrected", 1e-3, 1.0)  # no hash: each party encodes by its own schema
    assert len(out["releases"]) == 3


def test_python_api_puts_the_schema_in_the_spec(schema_fed, tmp_path):
    import mpdp

    v2 = tmp_path / "v2.yaml"
    v2.write_text(SCHEMA.format(version=2))
    fed = mpdp.Federation.connect(schema_fed.workdir, dataset="toy", schema=v2)
    with pytest.raises(mpdp.JobFailed, match="schema"):  # party-1 and party-2 were configured with version 1
        fed.logistic_regression(epsilon=1.0, lam=0.05, noise="corrected", parties=PARTIES[:2])
