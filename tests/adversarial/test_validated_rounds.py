"""Malicious contributors in the validated rounds every DCA-summed protocol runs: a dp-gd round, a pate vote sum and a
regression round,
over real processes and mutual TLS (3 parties, 3 compute nodes, T = 1).

Mallory holds a PARTY certificate for the roster's third slot (``party-3``: whoever holds the CA key can mint one) and
sends well-formed shares with an honest proof of an invalid input — 10⁹ in a coordinate, a vector over the ℓ2 bound, a
two-hot or an empty vote at one point, 10⁹ in its last input element — through a raw stub; ``party-1`` and ``party-2`` contribute through their own services (a dp-gd
round, asked by a certificate with the curator's name, as the curator asks) or their own certificates (the votes).
Expected: every node rejects Mallory alike, the sum releases (one rejected ≤ T), the release names how many were
rejected and never who, and it differs from the honest parties' sum only by its noise (≤ 6σ√d; the compute nodes add
it, no party does). A raw voter sending its bare vote is accepted (what every voter sends). And a curator cannot
turn a round's validation off or loosen its bound (dp-gd, votes, regression): each party refuses such a round
(INVALID_ARGUMENT) and spends nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math

import grpc
import numpy as np
import pytest

from mpdp.dca import validation
from mpdp.dca.params import DcaParams
from mpdp.dpgd import wire as dpgd_wire
from mpdp.dpgd.model import Task, party_rows
from mpdp.dpgd.plan import DpgdPlan, party_vector, round_job_id
from mpdp.hamm2016 import job as hamm
from mpdp.hamm2016.labels import party_votes
from mpdp.math import field as F
from mpdp.regression.plan import RegressionPlan
from mpdp.regression.statistics import party_statistics
from mpdp.messages import common_pb2, contribution_pb2, contribution_pb2_grpc, dca_pb2, dca_pb2_grpc, hamm2016_pb2, hamm2016_pb2_grpc
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.dca_client.client import submit_vector

from tests.linked import assert_parties_listen_on_no_grpc_port
from tests.adversarial.conftest import (job_host, client_ledger,
    D,
    NODES,
    PARTIES,
    assert_all_serving,
    assert_ledgers_within_budget,
    assert_status,
    channel,
    create_dca,
    ledger_job_ids,
    mint,
    operator_curator,
    refused,
    site_tls,
    synthetic_rows,
    wait_dca,
)

T = 1
ROWS = 100  # the public bound on one party's rows (the parties hold 40, 47 and 54)
HONEST, MALLORY = PARTIES[:2], PARTIES[2]
PLAN = DpgdPlan(Task("binary"), D, 1.0, 1e-5, rounds=1, total_records=40 + 47 + 54, validate="l2")
W = np.array([[0.4], [-0.3], [0.2], [0.1]])


def _announced(fed, tls, job: str) -> DcaParams:
    with channel(fed, "curator", tls) as ch:
        ann = dca_pb2_grpc.DcaCuratorStub(ch).GetJob(common_pb2.JobRef(job_id=job), timeout=30)
    assert ann.verify_key == b""  # the nodes' query randomness is never shown to a client
    return DcaParams.from_spec(job, ann.spec)


def _input(params: DcaParams, attack: str) -> np.ndarray:
    """The bits Mallory proves (honestly, so only the predicate can catch her)."""
    vp = params.validation
    assert vp is not None
    d = params.dimension
    zero = np.zeros(d, dtype=np.int64)
    data = zero
    if vp.kind == "votes":  # a valid vote to start from: class 0 at every point
        data = np.zeros((d // params.vote_classes, params.vote_classes), dtype=np.int64)
        data[:, 0] = vp.scale
        data = data.reshape(-1)
    meas = validation.encode_input(vp, data).astype(np.uint64)
    if attack == "1e9":  # coordinate 0 reads 10⁹: its lowest 'bit' holds 10⁹·2^f
        meas[0] = F.scalar(10**9 * 2**params.frac_bits + int(meas[0]))
    elif attack == "over-norm":  # every coordinate at the ℓ2 radius: ‖y‖ = √d·radius
        big = np.full(d, int(params.clip_bounds[0] * 2**params.frac_bits) - 1, dtype=np.int64)
        pred = vp.circuit.predicates[0]
        half = 1 << (pred.entry_bits - 1)
        bits = ((big[:, None] + half) >> np.arange(pred.entry_bits)) & 1
        meas[: d * pred.entry_bits] = bits.ravel().astype(np.uint64)
    elif attack == "two-hot":  # point 0 votes for classes 0 and 1: every entry a bit, its block sums to 2
        meas[1] = np.uint64(1)
    elif attack == "empty":  # point 0 casts no vote: its block sums to 0
        meas[0] = np.uint64(0)
    elif attack == "last-1e9":  # the last input element (a data bit: the circuit has no noise part) reads 10⁹ units
        meas[-1] = F.scalar(10**9 + int(meas[-1]))
    else:
        raise AssertionError(attack)
    return meas


def _mallory(fed, job: str, attack: str) -> None:
    tls = mint(fed, "party", MALLORY)
    params = _announced(fed, tls, job)
    _send(fed, tls, params, job, _input(params, attack))


def _release(fed, job: str) -> dca_pb2.DpSum:
    st = wait_dca(fed, job, timeout=180)
    assert st.state == "RELEASED", st
    with operator_curator(fed) as ch:
        return job_host(ch).GetRelease(common_pb2.JobRef(job_id=job), timeout=30).dca


def _within_noise(release: dca_pb2.DpSum, honest: np.ndarray, frac_bits: int) -> None:
    d = len(honest)
    err = np.asarray(release.values) - honest
    assert np.max(np.abs(err)) <= 6 * math.sqrt(release.noise_variance) * math.sqrt(d) + len(HONEST) * 2.0**-frac_bits, (err, release.noise_variance)


# -- a dp-gd round -------------------------------------------------------------------------------------------
def _round(fed, job: str, params: DcaParams) -> tuple[str, contribution_pb2.StatisticRequest]:
    dca_job = create_dca(fed, params.to_spec())
    req = contribution_pb2.StatisticRequest(dca_job_id=dca_job, dataset="synthetic", statistic=dpgd_wire.STATISTIC, records_per_client=ROWS,
                                            dpgd=dpgd_wire.round_request(PLAN, job, 1, W), parties=PARTIES)
    return dca_job, req


def _ask(fed, party: str, req: contribution_pb2.StatisticRequest):
    with channel(fed, party, mint(fed, "curator", "curator")) as ch:  # as the curator asks each party
        return contribution_pb2_grpc.ContributionPartyStub(ch).Contribute(req, timeout=120)


def _honest_round_sum() -> np.ndarray:
    total = np.zeros(PLAN.round_dimension(1))
    for j, _ in enumerate(HONEST):  # the parties' datasets as the federation fixture wrote them
        X, y = party_rows(PLAN.task, *synthetic_rows(40 + 7 * j, j, D))
        total += party_vector(PLAN, 1, W, X, y)
    return total


@pytest.mark.parametrize("attack", ["1e9", "over-norm", "last-1e9"])
def test_a_malicious_party_in_a_validated_dpgd_round_is_rejected_and_the_round_releases_the_honest_sum(fed, attack):
    job = f"dp-adv-{attack}"
    params = PLAN.dca_params(1, "pending", len(PARTIES), NODES, records_per_client=ROWS, max_missing=T, roster=PARTIES, deadline_seconds=40.0,
                             purpose=round_job_id(job, 1))
    assert params.validate == "l2" and params.noise == "discrete-gaussian"
    dca_job, req = _round(fed, job, params)
    _mallory(fed, dca_job, attack)
    for p in HONEST:
        assert _ask(fed, p, req).party == p
    r = _release(fed, dca_job)
    assert_parties_listen_on_no_grpc_port(fed)  # a validated DCA round: the parties dialed the nodes and the curator only
    assert (r.clients_included, r.clients_rejected, r.validate) == (len(HONEST), 1, dca_pb2.VALIDATE_L2)
    assert MALLORY not in str(r)
    _within_noise(r, _honest_round_sum(), params.frac_bits)
    for p in HONEST:  # the honest parties paid the dp-gd job's one charge
        assert job in ledger_job_ids(fed, p)
    assert_all_serving(fed)


def test_a_curator_cannot_turn_a_rounds_validation_off_or_loosen_its_bound(fed):
    """The round's plan says validated (ℓ2 ball n_max·C): a DCA job without validation, or with a bound ten times looser,
    is refused by each party as invalid before it computes or spends anything."""
    job = "dp-adv-off"
    good = PLAN.dca_params(1, "pending", len(PARTIES), NODES, records_per_client=ROWS, max_missing=T, roster=PARTIES, deadline_seconds=20.0,
                           purpose=round_job_id(job, 1))
    off = dataclasses.replace(PLAN, validate="none").dca_params(1, "pending", len(PARTIES), NODES, records_per_client=ROWS, max_missing=T, roster=PARTIES,
                                                               deadline_seconds=20.0, purpose=round_job_id(job, 1))
    looser = dataclasses.replace(good, clip_bounds=(10 * good.clip_bounds[0],))
    for bad, says in ((off, "validation"), (looser, "bounds")):
        dca_job, req = _round(fed, job, bad)
        for p in HONEST:
            e = refused(lambda: _ask(fed, p, req))
            assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
            assert says in (e.details() or "")
            assert job not in ledger_job_ids(fed, p) and dca_job not in ledger_job_ids(fed, p)
    assert_ledgers_within_budget(fed)


# -- a pate vote sum -----------------------------------------------------------------------------------------
Q, CLASSES = 12, 3


def _pate_spec() -> hamm2016_pb2.EnsembleJobSpec:
    return hamm2016_pb2.EnsembleJobSpec(dataset="synthetic", auxiliary="aux", method="pate", lam=0.05, epsilon=2.0, delta=1e-5,
                                        classes=[str(k) for k in range(CLASSES)], parties=PARTIES, compute_nodes=NODES, max_missing=T, queries=Q,
                                        deadline_seconds=40.0)


@pytest.mark.parametrize("attack", ["1e9", "last-1e9", "two-hot", "empty", "raw-vote"])
def test_a_malicious_voter_in_a_validated_pate_vote_sum_is_rejected_or_bounded_and_the_labels_come_from_the_votes(fed, attack):
    """Not one vote per point (10⁹ votes, a two-hot point, an empty point, 10⁹ in the last element): rejected, counted,
    and the release is the honest voters' sum within the compute nodes' noise. A raw voter's bare vote (no voter adds
    noise) is valid and counts as the one vote per point it is."""
    spec = _pate_spec()
    params = hamm.vote_job(spec, "pending", Q)
    assert (params.validate, params.vote_classes, params.noise) == ("votes", CLASSES, "discrete-gaussian")
    job = create_dca(fed, params.to_spec())
    ep = Endpoints.load(fed.workdir)
    rng = np.random.default_rng(5)  # public simulation data: the honest teachers' predictions
    votes = np.stack([party_votes(rng.integers(0, CLASSES, size=Q), CLASSES) for _ in HONEST])
    for p, v in zip(HONEST, votes):  # through the product's client, over each party's own certificate
        assert not asyncio.run(submit_vector(ep, site_tls(fed, p), p, job, v, ledger=client_ledger(fed, p))).rejected
    if attack == "raw-vote":
        vote = party_votes(rng.integers(0, CLASSES, size=Q), CLASSES)
        _raw_vote(fed, job, vote)
        expected, rejected, included = votes.sum(axis=0) + vote, 0, 3
    else:
        _mallory(fed, job, attack)
        expected, rejected, included = votes.sum(axis=0), 1, 2
    r = _release(fed, job)
    assert (r.clients_included, r.clients_rejected) == (included, rejected)
    _within_noise(r, expected, params.frac_bits)
    # the curator's pate step on that sum: GNMax labels, the model, and the trust model that says what was proven
    X_q = hamm.pate_queries(spec, synthetic_rows(Q, 99, D)[0])
    rel = hamm.pate_release("hm-adv", spec, X_q, r)
    assert rel.parties_included == included and "proves on its secret shares" in rel.trust_model
    assert_all_serving(fed)


def _raw_vote(fed, job: str, vote: np.ndarray) -> None:
    """Mallory's bare vote through a raw stub, inside the proven predicate: a valid proof."""
    tls = mint(fed, "party", MALLORY)
    params = _announced(fed, tls, job)
    vp = params.validation
    y = np.rint(vote * 2**params.frac_bits).astype(np.int64)
    meas = validation.encode_input(vp, y)
    _send(fed, tls, params, job, meas)


def _send(fed, tls, params: DcaParams, job: str, meas: np.ndarray) -> None:
    shares = validation.client_shares(params.validation, job, MALLORY, meas, params.M, seeded=params.seed_compressed)
    for node, s in zip(params.nodes, shares):
        msg = dca_pb2.ClientShare(job_id=job, client_id=MALLORY, spec_digest=params.spec_digest, validated=dca_pb2.ValidatedShare(
            measurement=s.measurement, proof=s.proof, share_seed=s.share_seed, blind=s.blind, joint_rand_parts=s.joint_rand_parts))
        with channel(fed, node, tls) as ch:
            receipt = dca_pb2_grpc.ComputeNodeStub(ch).SubmitShares(iter([msg]), timeout=30)
        assert receipt.accepted == 1, receipt  # well formed: only the proof can reject it


@pytest.mark.parametrize("change", ["unvalidated", "looser", "range-only", "fewer-classes"])
def test_a_curator_cannot_announce_a_vote_sum_unvalidated_or_with_a_looser_predicate(fed, change):
    """The pate ensemble spec says validated (one vote per point over its C classes); the vote sum a certificate with the
    curator's name announces is not — Gaussian noise without proofs, a looser bound, each entry only in [−1, 1], or votes
    over 2 classes (each entry only a bit). Each voter refuses it INVALID_ARGUMENT before it fits, votes or spends anything."""
    spec = _pate_spec()
    params = hamm.vote_job(spec, "pending", Q)
    assert params.validate == "votes"
    if change == "unvalidated":
        loose = hamm.vote_job(hamm2016_pb2.EnsembleJobSpec(unvalidated=True, **{f.name: v for f, v in spec.ListFields()}), "pending", Q)
    elif change == "looser":
        loose = dataclasses.replace(params, clip_bounds=(10.0,))
    elif change == "range-only":
        loose = dataclasses.replace(params, validate="range", vote_classes=0)
    else:
        loose = dataclasses.replace(params, vote_classes=2)
    dca_job = create_dca(fed, loose.to_spec())
    job = f"hm-adv-{change}"
    req = hamm2016_pb2.VoteRequest(job_id=job, dca_job_id=dca_job, spec=spec, auxiliary_rows=Q, auxiliary_features=D, auxiliary_digest=bytes(32))
    for p in HONEST:
        with channel(fed, p, mint(fed, "curator", "curator")) as ch:
            e = refused(lambda: hamm2016_pb2_grpc.EnsemblePartyStub(ch).Vote(req, timeout=60))
        assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
        assert {"unvalidated": "validation", "looser": "bounds", "range-only": "validation", "fewer-classes": "vote validation"}[change] in (e.details() or "")
        assert job not in ledger_job_ids(fed, p)
    assert_ledgers_within_budget(fed)


# -- a regression round --------------------------------------------------------------------------------------
REG_PLAN = RegressionPlan((1.0,) * D + (2.0,), 2.0, 1e-4, grid_repeats=(2, 2))


def _regression_request(dca_job: str, unvalidated: bool = False) -> contribution_pb2.StatisticRequest:
    return contribution_pb2.StatisticRequest(dca_job_id=dca_job, dataset="synthetic", statistic="linreg/std", bounds=list(REG_PLAN.bounds),
                                             records_per_client=ROWS, parties=PARTIES, unvalidated=unvalidated)


def _regression_params(validate: bool) -> DcaParams:
    return REG_PLAN.std_round().dca_params("pending", len(PARTIES), NODES, records_per_client=ROWS, max_missing=T, roster=PARTIES,
                                           deadline_seconds=40.0, validate=validate)


@pytest.mark.parametrize("change", ["unvalidated", "looser"])
def test_a_curator_cannot_run_a_regression_round_unvalidated_or_with_a_looser_range(fed, change):
    """The round's request says validated (each coordinate of a party's squares within ROWS × c_j²): a DCA job without
    validation, or with a range ten times looser, is refused by each party (INVALID_ARGUMENT) before it computes or spends."""
    good = _regression_params(True)
    assert good.validate == "range" and good.noise == "discrete-gaussian" and good.clip_bounds == REG_PLAN.std_round().clip_bounds(ROWS)
    bad = _regression_params(False) if change == "unvalidated" else dataclasses.replace(good, clip_bounds=tuple(10 * c for c in good.clip_bounds))
    dca_job = create_dca(fed, bad.to_spec())
    for p in HONEST:
        e = refused(lambda: _ask(fed, p, _regression_request(dca_job)))
        assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
        assert ("validation" if change == "unvalidated" else "bounds") in (e.details() or "")
        assert dca_job not in ledger_job_ids(fed, p)
    assert_ledgers_within_budget(fed)


def test_a_malicious_party_in_a_validated_regression_round_is_rejected_and_the_round_releases_the_honest_sum(fed):
    """Mallory proves 10⁹ in a coordinate of her squares: rejected and counted; the two honest parties' statistics
    (their own services, asked as the curator asks) release within the round's noise."""
    params = _regression_params(True)
    dca_job = create_dca(fed, params.to_spec())
    _mallory(fed, dca_job, "1e9")
    for p in HONEST:
        assert _ask(fed, p, _regression_request(dca_job)).party == p
    r = _release(fed, dca_job)
    assert (r.clients_included, r.clients_rejected, r.validate, r.noise) == (len(HONEST), 1, dca_pb2.VALIDATE_RANGE, dca_pb2.DISCRETE_GAUSSIAN)
    honest = sum(party_statistics(*synthetic_rows(40 + 7 * j, j, D), "std", REG_PLAN.bounds) for j, _ in enumerate(HONEST))
    _within_noise(r, honest, params.frac_bits)
    for p in HONEST:
        assert dca_job in ledger_job_ids(fed, p)
    assert_all_serving(fed)
