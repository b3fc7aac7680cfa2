"""The operator's two-round regression role (mpdp.regression.role.RegressionRole) and its drivers.

Invariants:
* happy path: STD_ROUND → MAIN_ROUND → DONE; the in-memory run through the role equals, bit for bit, the plan's
  steps run by hand over the in-memory DCA driver (the path tests/integration/test_regression_federation.py
  compares with the sockets), so `mpdp regress` and an in-memory run share one machine;
* each round asked for is the plan's round (spec, clip bounds, DCA parameters with the seed, roster, deadline),
  validated by default (each party's statistic proven in its per-coordinate range, discrete Gaussian noise) unless
  the job opts out;
* a release that is not the asked round's (another job, another dimension, other (ε, δ)) fails the job closed;
* a failed round fails the job (drive raises RoundFailed naming the round) and nothing is published;
* inputs out of order (a release before start, anything after the end) are refused and change nothing.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mpdp.dca.driver import run_job
from mpdp.math.drbg import Drbg
from mpdp.messages import common_pb2, dca_pb2
from mpdp.protocol import FAILED, LocalProtocolError, ProtocolError, Publish, check_table
from mpdp.regression.plan import RegressionPlan
from mpdp.regression.role import DONE, MAIN_ROUND, PENDING, STD_ROUND, RegressionRole, RoundFailed, RunRound, drive, run_inmemory
from mpdp.regression.statistics import party_statistics

Problem = common_pb2.Problem
PARTIES = ["party-1", "party-2", "party-3"]
NODES = ["node-1", "node-2", "node-3"]
D = 4
BOUNDS = (2.0,) * D + (6.0,)
SEED = b"regress-role"
N_TOTAL = 360


@pytest.fixture(scope="module")
def data() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    g = np.random.default_rng(0)
    beta = g.normal(size=D)
    out = {}
    for p, n in zip(PARTIES, (120, 90, 150)):
        X = np.clip(g.normal(size=(n, D)), -2, 2)
        out[p] = (X, X @ beta + 0.3 * g.normal(size=n))
    return out


def _plan() -> RegressionPlan:
    return RegressionPlan(BOUNDS, 5.0, 1e-4, grid_repeats=(2, 2))


def _role() -> RegressionRole:
    return RegressionRole(_plan(), PARTIES, NODES, N_TOTAL, 200, seed=SEED)


def test_table_is_well_formed():
    check_table(RegressionRole)


@pytest.mark.parametrize("validate", [True, False], ids=["validated", "unvalidated"])
@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_in_memory_run_through_the_role_equals_the_plan_by_hand(data, validate):
    run = run_inmemory(_plan(), data, NODES, N_TOTAL, 200, job_ids=("dca-std", "dca-main"), seed=SEED, validate=validate)
    # the plan's steps by hand, as the socket test's reference does
    plan = _plan()

    def by_hand(spec, job_id, round_name, clip):
        params = spec.dca_params(job_id, 3, NODES, records_per_client=200, simulation_seed=SEED, roster=PARTIES, validate=validate)
        Z = np.stack([party_statistics(X, y, round_name, clip) for X, y in data.values()])
        r = run_job(params, Z, Drbg.from_seed(SEED), client_ids=PARTIES, client_mode="machines")
        assert r.release is not None, r.error
        return r.release

    std = by_hand(plan.std_round(), "dca-std", "std", plan.bounds)
    step = plan.main_round(list(std.values), N_TOTAL)
    main = by_hand(step.spec, "dca-main", "main", step.spec.bounds)
    post = plan.finish(list(main.values))
    assert run.std_release == std and run.main_release == main
    for r in (std, main):  # validated: the range of records × the record bounds, over the discrete Gaussian; else neither
        assert (r.validate, r.noise) == ((dca_pb2.VALIDATE_RANGE, dca_pb2.DISCRETE_GAUSSIAN) if validate else (dca_pb2.VALIDATE_NONE, dca_pb2.GAUSSIAN))
        assert r.clients_rejected == 0 and r.clients_included == 3
    assert (run.std_job, run.main_job) == ("dca-std", "dca-main")
    assert np.array_equal(run.thresholds, step.thresholds)
    assert np.array_equal(run.posterior.mean, post.mean) and np.array_equal(run.posterior.precision, post.precision)
    assert set(run.seconds) == {"std_round", "grid_search", "main_round"}


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_rounds_asked_are_the_plans(data):
    role = _role()
    [ask] = role.start()
    plan = _plan()
    assert isinstance(ask, RunRound) and role.state == STD_ROUND
    assert ask.statistic == "linreg/std" and ask.bounds == plan.bounds and ask.records_per_party == 200
    assert ask.params == plan.std_round().dca_params(PENDING, 3, NODES, records_per_client=200, simulation_seed=SEED, roster=PARTIES, deadline_seconds=600.0,
                                                     validate=True)
    assert (ask.params.validate, ask.params.noise) == ("range", "discrete-gaussian") and ask.params.clip_bounds == plan.std_round().clip_bounds(200)
    std = _release(ask, "dca-std", data)
    [ask2] = role.released("dca-std", std)
    assert role.state == MAIN_ROUND and ask2.statistic == "linreg/main"
    step = plan.main_round(list(std.values), N_TOTAL)
    assert ask2.spec == step.spec and ask2.bounds == step.spec.bounds
    outs = role.released("dca-main", _release(ask2, "dca-main", data))
    assert role.state == DONE and [type(o) for o in outs] == [Publish] and outs[0].release is role.result


def _release(ask: RunRound, job_id: str, data) -> dca_pb2.DpSum:
    params = dataclasses.replace(ask.params, job_id=job_id)
    Z = np.stack([party_statistics(X, y, ask.spec.round, ask.bounds) for X, y in data.values()])
    r = run_job(params, Z, Drbg.from_seed(SEED), client_ids=PARTIES, client_mode="machines")
    assert r.release is not None
    return r.release


def _tampered(release: dca_pb2.DpSum, **changes) -> dca_pb2.DpSum:
    r = dca_pb2.DpSum()
    r.CopyFrom(release)
    for k, v in changes.items():
        if k == "values":
            del r.values[:]
            r.values.extend(v)
        else:
            setattr(r, k, v)
    return r


@pytest.mark.parametrize("changes", [
    {"job_id": "dca-other"},
    {"dimension": D + 2},
    {"values": [1.0] * (D + 2)},
    {"epsilon": 9.0},
    {"delta": 0.5},
], ids=lambda c: next(iter(c)))
@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_a_release_that_is_not_the_rounds_fails_the_job_closed(data, changes):
    role = _role()
    [ask] = role.start()
    with pytest.raises(LocalProtocolError) as e:
        role.released("dca-std", _tampered(_release(ask, "dca-std", data), **changes))
    assert e.value.problem == Problem.MALFORMED
    assert role.state == FAILED and role.result is None
    with pytest.raises(ProtocolError):  # nothing revives it
        role.released("dca-std", _release(ask, "dca-std", data))
    assert role.state == FAILED


def test_a_failed_round_fails_the_job_and_drive_names_it(data):
    calls = []

    def run_round(ask: RunRound):
        calls.append(ask.statistic)
        if ask.statistic == "linreg/main":
            raise RoundFailed("linreg/main round (dca-main): ABORTED: party-2 refused")
        return "dca-std", _release(ask, "dca-std", data)

    role = _role()
    with pytest.raises(RoundFailed, match="linreg/main round"):
        drive(role, run_round)
    assert calls == ["linreg/std", "linreg/main"]
    assert role.state == FAILED and role.error.problem == Problem.JOB_FAILED and role.result is None


def test_a_failed_std_round_asks_for_no_main_round():
    role = _role()
    role.start()
    assert role.round_failed("linreg/std round (dca-std) failed: too few clients") == []
    assert role.state == FAILED
    with pytest.raises(ProtocolError):
        role.round_failed("again")


def test_inputs_out_of_order_are_refused_and_change_nothing(data):
    role = _role()
    [ask] = role.start()
    with pytest.raises(LocalProtocolError) as e:
        role.start()
    assert e.value.problem == Problem.STEP_OUT_OF_ORDER and role.state == STD_ROUND and role.error is None
    std = _release(ask, "dca-std", data)
    [ask2] = role.released("dca-std", std)
    main = _release(ask2, "dca-main", data)
    role.released("dca-main", main)
    assert role.state == DONE
    result = role.result
    with pytest.raises(ProtocolError):
        role.released("dca-main", main)
    with pytest.raises(ProtocolError):
        role.round_failed("late")
    assert role.state == DONE and role.result is result


def test_duplicate_parties_are_refused():
    with pytest.raises(LocalProtocolError) as e:
        RegressionRole(_plan(), ["p1", "p1"], NODES, N_TOTAL, 200)
    assert e.value.problem == Problem.INVALID_JOB


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_a_validated_job_whose_main_round_cannot_fit_is_refused_before_the_std_round():
    """d = 180: the std round (181 values) fits a validated job, the main round (16,470 > 16,384 values) does not; the job
    is refused at start, before any party spends on the std round. Unvalidated, the same job starts."""
    plan = RegressionPlan((1.0,) * 180 + (2.0,), 5.0, 1e-4, grid_repeats=(2, 2))
    role = RegressionRole(plan, PARTIES, NODES, N_TOTAL, 200, seed=SEED)
    with pytest.raises(LocalProtocolError) as e:
        role.start()
    assert e.value.problem == Problem.INVALID_JOB and "--validate none" in e.value.detail and role.asked is None
    [ask] = RegressionRole(plan, PARTIES, NODES, N_TOTAL, 200, seed=SEED, validate=False).start()
    assert ask.params.validate == "none" and ask.params.noise == "gaussian"
    paper = RegressionPlan(BOUNDS, 5.0, 1e-4, "paper", grid_repeats=(2, 2))  # the published Gaussian rounds: unvalidated only
    with pytest.raises(LocalProtocolError, match="--validate none"):
        RegressionRole(paper, PARTIES, NODES, N_TOTAL, 200, seed=SEED).start()
    assert RegressionRole(paper, PARTIES, NODES, N_TOTAL, 200, seed=SEED, validate=False).start()[0].params.mode == "paper"
