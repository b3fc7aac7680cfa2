"""A regression job's time, told whole: the curator's stages of a job (its learner host's stage clock) add up to the
job's wall time, with every wait named (setup, each round, the grid search between them, the posterior), and none
of them a duration a party measured. Separate processes over loopback TLS; submitted through the job host
(JobOperations), as `mpdp train regression` does. Compares sums only: nothing here asserts how fast anything is."""

from __future__ import annotations

import time

import numpy as np
import pytest

from mpdp.messages import operations_pb2
from mpdp.regression.role import RegressionRun
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.launcher.federation import LocalFederation
from mpdp_services.operator.jobs import get_job, run
from mpdp_services.operator.regression import regression_spec

pytestmark = pytest.mark.integration
PARTIES = ["party-1", "party-2", "party-3"]
NODES = ["node-1", "node-2", "node-3"]
D = 4
STAGES = ["setup", "std_round", "grid_search", "main_round", "posterior"]  # as the registry names them


def _write(tmp_path) -> dict:
    g = np.random.default_rng(3)
    beta = g.normal(size=D)
    ds = {}
    for p, n in zip(PARTIES, (80, 60, 70)):
        X = np.clip(g.normal(size=(n, D)), -2, 2)
        y = X @ beta + 0.3 * g.normal(size=n)
        f = tmp_path / "data" / f"{p}.csv"
        f.parent.mkdir(parents=True, exist_ok=True)
        np.savetxt(f, np.column_stack([X, y]), delimiter=",", fmt="%.17g")
        ds[p] = {"lin": {"path": str(f), "format": "csv"}}
    return ds


def test_a_regression_jobs_stages_add_up_to_its_wall_time(tmp_path):
    fed = LocalFederation(tmp_path / "fed", PARTIES, _write(tmp_path), test_mode=True, paillier_bits=768, dgk_bits=768, compute_nodes=NODES,
                          budget_epsilon=100.0)
    with fed:
        ep = Endpoints.load(fed.workdir)
        runs = []
        for _ in range(2):  # the second job has the same public plan: its grid search is the first one's, reused
            # (10, 10) grid repeats: a grid search long enough that leaving it out of the stages would break the sum
            spec = regression_spec("lin", PARTIES, NODES, (2.0,) * D + (6.0,), 5.0, 1e-4, 210, 100, grid_repeats=(10, 10))
            t0 = time.perf_counter()
            last, rel = run(ep, operations_pb2.JobSubmission(learner=spec))
            client_wall = time.perf_counter() - t0
            summary = get_job(ep, last["job_id"])
            runs.append((RegressionRun.of(rel.learner), summary, client_wall))
    for model, summary, client_wall in runs:
        seconds = model.seconds
        assert list(summary["stage_seconds"]) == STAGES, summary["stage_seconds"]  # the job host shows the same stages, in order
        assert set(seconds) == set(STAGES), seconds  # every wait named; nothing else (no party's own timing)
        job_wall = summary["seconds"]  # admission to end, the job table's clock
        total = sum(seconds.values())
        assert abs(total - job_wall) <= 0.1 * job_wall, (seconds, job_wall)
        assert abs(sum(summary["stage_seconds"].values()) - job_wall) <= 0.1 * job_wall, (summary["stage_seconds"], job_wall)
        assert total <= client_wall, (seconds, client_wall)  # the operator saw the whole job, and a little more
    (first, *_), (second, *_) = runs
    assert first.multipliers == second.multipliers
