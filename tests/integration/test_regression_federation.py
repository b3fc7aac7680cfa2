"""`mpdp regress` over sockets: 3 parties as DCA clients, 3 compute nodes, mutual TLS. The posterior equals
the in-memory path's for the same seeds and job ids (same noise, same releases). Both rounds are validated (the
default: each party's statistic proven in its per-coordinate range, discrete Gaussian noise); the unvalidated path's
equality is tests/regression/test_regression_role.py's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mpdp.dca.driver import run_job
from mpdp.math.drbg import Drbg
from mpdp.messages import dca_pb2
from mpdp.regression.plan import RegressionPlan
from mpdp.regression.role import run_inmemory
from mpdp.regression.statistics import party_statistics
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.launcher.federation import LocalFederation
from mpdp_services.operator.regression import run_regression

pytestmark = pytest.mark.integration
PARTIES = ["party-1", "party-2", "party-3"]
NODES = ["node-1", "node-2", "node-3"]
D = 4


def test_socket_posterior_equals_in_memory_posterior(tmp_path):
    g = np.random.default_rng(0)
    beta = g.normal(size=D)
    parts = []
    ds = {}
    for p, n in zip(PARTIES, (120, 90, 150)):
        X = np.clip(g.normal(size=(n, D)), -2, 2)
        y = X @ beta + 0.3 * g.normal(size=n)
        parts.append((X, y))
        f = tmp_path / "data" / f"{p}.csv"
        f.parent.mkdir(parents=True, exist_ok=True)
        np.savetxt(f, np.column_stack([X, y]), delimiter=",", fmt="%.17g")
        ds[p] = {"lin": {"path": str(f), "format": "csv"}}
    bounds = (2.0,) * D + (6.0,)
    seed = b"regress-socket"
    fed = LocalFederation(tmp_path / "fed", PARTIES, ds, test_mode=True, paillier_bits=768, dgk_bits=768, compute_nodes=NODES, budget_epsilon=100.0)
    with fed:
        run = run_regression(Endpoints.load(fed.workdir), "lin", PARTIES, NODES, bounds, 5.0, 1e-4, 360, 200, grid_repeats=(2, 2), seed=seed)
        for p in PARTIES:
            entries = json.loads((fed.workdir / p / "state" / "ledger.json").read_text())["entries"]
            assert {run.std_job, run.main_job} <= {e["job_id"] for e in entries}
    # the same two rounds in memory, with the socket run's job ids and seeds
    plan = RegressionPlan(bounds, 5.0, 1e-4, grid_repeats=(2, 2))

    def memory_round(spec, job_id, round_name, clip):
        params = spec.dca_params(job_id, 3, NODES, records_per_client=200, simulation_seed=seed, roster=PARTIES, validate=True)
        Z = np.stack([party_statistics(X, y, round_name, clip) for X, y in parts])
        r = run_job(params, Z, Drbg.from_seed(seed), client_ids=PARTIES, client_mode="machines")
        assert r.release is not None, r.error
        return r.release

    std = memory_round(plan.std_round(), run.std_job, "std", plan.bounds)
    for r in (run.std_release, run.main_release):
        assert (r.validate, r.noise, r.clients_rejected) == (dca_pb2.VALIDATE_RANGE, dca_pb2.DISCRETE_GAUSSIAN, 0)
    assert list(std.values) == list(run.std_release.values)
    step = plan.main_round(list(std.values), 360)
    main = memory_round(step.spec, run.main_job, "main", step.spec.bounds)
    assert list(main.values) == list(run.main_release.values)
    post = plan.finish(list(main.values))
    assert np.array_equal(post.mean, run.posterior.mean)
    assert np.array_equal(post.precision, run.posterior.precision)
    # and the in-memory driver of the same role (mpdp.regression.role) that `mpdp regress` drives
    mem = run_inmemory(plan, dict(zip(PARTIES, parts)), NODES, 360, 200, job_ids=(run.std_job, run.main_job), seed=seed)
    assert mem.std_release == run.std_release and mem.main_release == run.main_release
    assert np.array_equal(mem.posterior.mean, run.posterior.mean) and np.array_equal(mem.posterior.precision, run.posterior.precision)
    # (How informative the posterior is at a given ε is measured over many noise draws in tests/regression;
    # one draw here would make this equality test depend on the job ids' noise stream.)
