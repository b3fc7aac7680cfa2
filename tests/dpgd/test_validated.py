"""Validated dp-gd rounds: every party's round vector proven within the public ℓ2 ball n_max·b_r, over the DCA's
distributed discrete Gaussian, composed in zCDP (mpdp.dpgd.plan, mpdp.dpgd.accounting, mpdp.dpgd.wire).

What must hold: the plan's composed (ε, δ) never exceeds the one asked for, and the ledger's accountant agrees; each
round's DCA job is validated with ρ ≤ ρ_r and the bound the plan says; a party refuses a round whose DCA job has
validation off, a looser bound or less noise; honest parties are never rejected; a malicious party's 10⁹ is."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from mpdp import accounting as ledger_accounting
from mpdp.contribution import AcceptedRound, Contributor
from mpdp.dca.driver import run_job
from mpdp.dpgd import accounting, wire
from mpdp.dpgd.model import Task
from mpdp.dpgd.plan import ADD_REMOVE, DpgdPlan, party_vector, round_job_id
from mpdp.dpgd.role import run_inmemory
from mpdp.dca import validation
from mpdp.math import field as F
from mpdp.math.drbg import Drbg
from mpdp.messages import dca_pb2
from mpdp.protocol import LocalProtocolError, Problem

PARTIES = ("party-1", "party-2", "party-3")
NODES = ("node-1", "node-2", "node-3")
ROWS = 60


def plan(**kw) -> DpgdPlan:
    base: dict = dict(rounds=2, total_records=3 * ROWS, validate="l2")
    base.update(kw)
    if base.get("adjacency") == ADD_REMOVE:
        base["total_records"] = None
    return DpgdPlan(Task("binary"), 4, base.pop("epsilon", 1.0), 1e-6, **base)


def data(seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)  # public simulation data
    out = {}
    for p in PARTIES:
        X = rng.normal(size=(ROWS, 4))
        X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
        out[p] = (X, np.where(X[:, 0] + 0.1 * rng.normal(size=ROWS) > 0, 1.0, -1.0))
    return out


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 8.0])
@pytest.mark.parametrize("adjacency", ["replace", ADD_REMOVE])
def test_the_composed_guarantee_never_exceeds_the_one_asked_for_and_the_ledger_agrees(epsilon, adjacency):
    p = plan(epsilon=epsilon, adjacency=adjacency)
    assert p.guarantee.epsilon <= epsilon and p.guarantee.delta == 1e-6
    total = math.fsum(s.rho for s in p.specs)
    assert total <= accounting.zcdp_budget(epsilon, 1e-6, 3 * accounting.TV_ROUND)
    assert accounting.zcdp_delta(total, epsilon, 3 * accounting.TV_ROUND) <= 1e-6
    entry = p.ledger_entry("dp-1")
    assert entry["accounting"] == ledger_accounting.discrete_gaussian(total, tv=3 * accounting.TV_ROUND)
    comp = ledger_accounting.compose([ledger_accounting.release_of(entry)], 1e-6)
    assert comp.epsilon <= epsilon * (1 + 1e-6)
    for r, s in enumerate(p.specs):
        params = p.dca_params(r, "dca-1", 3, NODES, records_per_client=ROWS, max_missing=1, roster=PARTIES)
        assert params.validate == "l2" and params.noise == "discrete-gaussian" and params.discrete is not None
        assert params.rho <= s.rho and params.discrete.p_fail <= accounting.TV_ROUND
        assert params.clip_bounds == (ROWS * p.l2_factor(r),)
        wire.check_round_job(p, wire.round_request(p, "dp-1", r, np.zeros((4, 1))), dataclasses.replace(params, purpose=round_job_id("dp-1", r)))


def test_a_validated_plan_needs_the_corrected_calibration_and_a_known_mode():
    with pytest.raises(ValueError, match="corrected"):
        plan(mode="paper")
    with pytest.raises(ValueError, match="validate"):
        plan(validate="range")


def test_the_wire_carries_the_validation_and_unvalidated_is_the_explicit_opt_out():
    v, u = plan(), plan(validate="none")
    assert not wire.round_request(v, "dp-1", 0, np.zeros((4, 1))).unvalidated
    assert wire.plan_of(wire.round_request(v, "dp-1", 0, np.zeros((4, 1)))) == v
    assert wire.round_request(u, "dp-1", 0, np.zeros((4, 1))).unvalidated
    assert wire.plan_of(wire.round_request(u, "dp-1", 0, np.zeros((4, 1)))) == u
    assert "discrete Gaussian" in v.guarantee.statement and "proven" in v.guarantee.statement
    assert "not proven valid" in u.guarantee.statement and "not proven" not in v.guarantee.statement and "honest-but-curious parties" in u.trust_model


def _accepted(p: DpgdPlan, r: int) -> AcceptedRound:
    msg = wire.round_request(p, "dp-1", r, np.zeros((4, 1)))
    validate, bounds = wire.expected_validation(p, r, ROWS)
    return AcceptedRound("dca-1", PARTIES, check=lambda params: wire.check_round_job(p, msg, params), validate=validate, bounds=bounds)


def _announce(p: DpgdPlan, r: int, params) -> None:
    Contributor(_accepted(p, r), "party-1", PARTIES, False).announced(params)


@pytest.mark.parametrize("r", [0, 1])
def test_a_party_refuses_a_round_whose_job_drops_validation_loosens_the_bound_or_thins_the_noise(r):
    p = plan()
    good = p.dca_params(r, "dca-1", 3, NODES, records_per_client=ROWS, max_missing=1, roster=PARTIES, purpose=round_job_id("dp-1", r))
    _announce(p, r, good)  # the round as planned is held
    off = plan(validate="none").dca_params(r, "dca-1", 3, NODES, records_per_client=ROWS, max_missing=1, roster=PARTIES, purpose=round_job_id("dp-1", r))
    looser = dataclasses.replace(good, clip_bounds=(10 * good.clip_bounds[0],))
    thinner = dataclasses.replace(good, epsilon=good.epsilon * 4)
    range_mode = dataclasses.replace(good, validate="range")
    trusting = dataclasses.replace(good, colluders=0)  # the nodes' noise counted on all M nodes, not one honest one
    assert good.colluders == good.M - 1
    for bad, says in ((off, "validation"), (looser, "bounds"), (thinner, "noise"), (range_mode, "validation"), (trusting, "colluders")):
        with pytest.raises(LocalProtocolError) as e:
            _announce(p, r, bad)
        assert e.value.problem == Problem.INVALID_JOB and says in e.value.detail


def test_honest_parties_are_never_rejected_and_the_model_is_released():
    rejected: list[int] = []
    run = run_inmemory(plan(), data(), NODES, ROWS, job_id="dp-1", dca_job_ids=["dca-0", "dca-1", "dca-2"], max_missing=1,
                       observe=lambda r: rejected.append(r.release.clients_rejected))
    assert rejected == [0, 0, 0] and np.all(np.isfinite(run.model))


def _mallory(params, cid: str) -> dict[str, dca_pb2.ValidatedShare]:
    """Per compute node, shares of a round vector whose coordinate 0 reads 10⁹ (its lowest 'bit' holds 10⁹·2^f), with an
    honest proof of that input and zero noise."""
    vp = params.validation
    meas = validation.encode_input(vp, np.zeros(params.dimension, dtype=np.int64)).astype(np.uint64)
    meas[0] = F.scalar(10**9 * 2**params.frac_bits + int(meas[0]))
    shares = validation.client_shares(vp, params.job_id, cid, meas, params.M, seeded=params.seed_compressed)
    return {node: dca_pb2.ValidatedShare(measurement=s.measurement, proof=s.proof, share_seed=s.share_seed, blind=s.blind, joint_rand_parts=s.joint_rand_parts)
            for node, s in zip(params.nodes, shares)}


def test_a_party_sending_1e9_is_rejected_and_the_round_releases_the_honest_sum_within_its_noise():
    p = plan()
    params = p.dca_params(1, "dca-1", 3, NODES, records_per_client=ROWS, max_missing=1, roster=PARTIES)
    W = np.full((4, 1), 0.3)
    Z = np.stack([party_vector(p, 1, W, X, y) for X, y in data().values()])
    honest = Z[:2].sum(axis=0)
    bad = _mallory(params, "party-3")

    def tamper(sender, recipient, msg):
        if isinstance(msg, dca_pb2.ClientShare) and msg.client_id == "party-3":
            out = dca_pb2.ClientShare()
            out.CopyFrom(msg)
            out.validated.CopyFrom(bad[recipient.name])
            return out
        return msg

    run = run_job(params, Z, Drbg.from_os(), client_ids=list(PARTIES), client_mode="machines", tamper=tamper)
    assert run.release is not None and run.release.clients_rejected == 1
    # the release is the honest two's sum plus the compute nodes' noise: ≤ 6σ√d off (σ² = the M nodes' variance)
    sigma = math.sqrt(params.noise_variance(run.release.clients_included))
    assert np.max(np.abs(np.asarray(run.release.values) - honest)) <= 6 * sigma * math.sqrt(params.dimension)


@pytest.mark.parametrize("r", [0, 1])
def test_a_partys_reach_is_its_ball_and_no_noise(r):
    """docs/protocols/dpgd.md, "What is proven": an accepted round vector has ‖ỹ‖₂ ≤ n_max·b_r + (⌈R⌉ + 1)·2^-f in
    values, and the clients add no noise (the nodes do), so no √B_η term enters. The doc's example: d = 10, n_max = 2,000,
    f = 16: round 0 within 2,236.068 + 7.7·10⁻⁵, rounds t ≥ 1 within 1,000 + 4.6·10⁻⁵."""
    from mpdp.dca import discrete

    p = DpgdPlan(Task("binary"), 10, 1.0, 1e-6, lam=1e-2, rounds=3, total_records=6000, validate="l2")
    params = p.dca_params(r, "job", 3, list(NODES), records_per_client=2000, roster=list(PARTIES))
    ball = params.validation
    assert ball is not None and params.node_noise and params.frac_bits == 16
    reach = math.sqrt(ball.l2_bound) / 2**params.frac_bits
    margin = (math.ceil(math.sqrt(discrete.rounding_bound_sq(params.dimension) * (1 + discrete.SLACK))) + 1) / 2**params.frac_bits
    assert p.l2_bound(r, 2000) < reach <= p.l2_bound(r, 2000) + margin
    assert (params.dimension, round(p.l2_bound(r, 2000), 3), round(reach - p.l2_bound(r, 2000), 6)) == ((65, 2236.068, 7.7e-5) if r == 0 else (10, 1000.0, 4.6e-5))
