"""The operator's dp-gd role and the round on the wire: the role's in-memory drive equals ``learner.fit`` bit for
bit; a request round-trips to the same plan and iterate; the party's checks refuse a DCA job that is not the
plan's round (beyond R, another label, another σ_std)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mpdp.dpgd import learner
from mpdp.dpgd.model import Task, party_rows
from mpdp.dpgd.plan import DpgdPlan, round_job_id
from mpdp.dpgd.role import run_inmemory
from mpdp.dpgd.wire import check_round_job, iterate_of, plan_of, round_request

NODES = ("node-1", "node-2", "node-3")


def _parts(task: Task, d: int = 3) -> dict:
    g = np.random.default_rng(5)
    out = {}
    for i, n in enumerate((30, 40, 50)):
        X = g.normal(size=(n, d))
        y = g.integers(0, task.classes, size=n).astype(float)
        out[f"party-{i + 1}"] = party_rows(task, X, y)
    return out


@pytest.mark.parametrize("task", [Task("binary"), Task("softmax", 3)])
def test_role_in_memory_equals_learner_fit(task):
    parts = _parts(task)
    plan = DpgdPlan(task, 3, 0.5, 1e-6, rounds=2, total_records=120)
    ids = [round_job_id("dp-t", r) for r in range(3)]
    run = run_inmemory(plan, parts, NODES, 50, job_id="dp-t", dca_job_ids=ids, seed=b"role")
    fit = learner.fit(plan, list(parts.values()), seed=b"role", job_id="dp-t", parties=list(parts), records_per_party=50)
    assert np.array_equal(run.model, fit.model)
    assert all(np.array_equal(np.asarray(r.values), f) for r, f in zip(run.releases, fit.releases))
    s = run.summary()
    assert s["guarantee"]["epsilon"] == plan.guarantee.epsilon and "do not all collude" in s["trust_model"]


def test_request_round_trip_and_round_checks():
    plan = DpgdPlan(Task("softmax", 3), 4, 0.5, 1e-6, rounds=3, total_records=500)
    W = np.random.default_rng(0).normal(size=(4, 3))
    msg = round_request(plan, "dp-x", 2, W)
    back = plan_of(msg)
    assert back.public() == plan.public() and back.guarantee == plan.guarantee
    assert np.array_equal(iterate_of(msg, back), W)
    params = plan.dca_params(2, "dca-1", 3, NODES, records_per_client=200, purpose=round_job_id("dp-x", 2))
    check_round_job(back, msg, params)
    with pytest.raises(ValueError, match="purpose"):
        check_round_job(back, msg, dataclasses.replace(params, purpose=round_job_id("dp-y", 2)))
    with pytest.raises(ValueError, match="σ_std"):
        check_round_job(back, msg, dataclasses.replace(params, epsilon=params.epsilon * 2))
    beyond = round_request(plan, "dp-x", 3, W)
    beyond.round = 4
    with pytest.raises(ValueError, match="beyond"):
        check_round_job(back, beyond, dataclasses.replace(params, purpose=round_job_id("dp-x", 4)))
    zero = round_request(plan, "dp-x", 0, W)
    assert len(zero.iterate) == 0 and not iterate_of(zero, back).any()
    zero.iterate.extend([1.0])
    with pytest.raises(ValueError, match="empty"):
        iterate_of(zero, back)
    bad = round_request(plan, "dp-x", 1, W)
    bad.iterate[0] = float("nan")
    with pytest.raises(ValueError, match="finite"):
        iterate_of(bad, back)
