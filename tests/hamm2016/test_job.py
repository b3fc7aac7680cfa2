"""The ensemble job's roles in memory (mpdp.hamm2016.job): exact secure vote sum, what the curator sees,
dropouts, and validation of everything that crosses the network."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mpdp.dca import sharing
from mpdp.hamm2016 import job as core
from mpdp.hamm2016.labels import vote_counts
from mpdp.hamm2016.mechanism import release_global
from mpdp.math.fixedpoint import encode_u64
from mpdp.messages import dca_pb2, hamm2016_pb2 as pb
from mpdp.protocol import Problem, ProtocolError

NAMES = [f"p{i}" for i in range(7)]


def _data(classes: int, seed: int = 0):
    g = np.random.default_rng(seed)  # public simulation data
    d = 6
    W = g.normal(size=(classes, d))

    def draw(n):
        X = g.normal(size=(n, d))
        X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
        y = np.argmax(X @ W.T + 0.3 * g.normal(size=(n, classes)), axis=1)
        return X, y

    parties = {n: draw(40) for n in NAMES}
    X_aux, _ = draw(120)
    return parties, X_aux


def _spec(n_classes: int, **kw) -> pb.EnsembleJobSpec:
    base = dict(dataset="d", auxiliary="a", method="soft", lam=0.05, epsilon=5.0, classes=[str(k) for k in range(n_classes)],
                parties=NAMES, compute_nodes=["n1", "n2", "n3"], simulation_seed=b"job-test")
    base.update(kw)
    return pb.EnsembleJobSpec(**base)


@pytest.mark.parametrize("classes,method", [(2, "soft"), (2, "vote"), (3, "soft"), (3, "vote")])
def test_in_memory_job_equals_the_direct_mechanism_and_the_curator_sees_only_partial_sums(classes, method):
    parties, X_aux = _data(classes)
    spec = _spec(classes, method=method)
    run = core.run_inmemory("hm-1", "dca-1", spec, parties, X_aux)
    votes = {n: core.VoterRole(n).vote(spec, *parties[n], X_aux) for n in NAMES}
    counts = vote_counts(sum(votes.values()), len(X_aux), classes, len(NAMES))
    direct = release_global(X_aux, counts, core.ensemble_params(spec, len(X_aux), len(NAMES)), core.output_rng(spec))
    assert np.array_equal(np.asarray(run.release.weights), np.asarray(direct.weights).ravel())
    assert run.release.parties_included == 7 and run.vote_sum.secure_sum and run.vote_sum.noise_variance == 0.0
    # Charlie (the DCA aggregator) received M partial sums and nothing else; none is a party's encoded votes
    assert [type(m).__name__ for _, m in run.curator_transcript] == ["PartialSum"] * 3
    encoded = {n: sharing.pack_u64(encode_u64(v, 8, 2.0**54)) for n, v in votes.items()}
    for _, m in run.curator_transcript:
        assert m.partial_sum not in encoded.values()
    # each node saw one share per party, and no share equals that party's encoded votes
    for node, tr in run.node_transcripts.items():
        shares = [m for _, m in tr if isinstance(m, dca_pb2.ClientShare)]
        assert sorted(s.client_id for s in shares) == NAMES
        assert all(s.masked_vector != encoded[s.client_id] for s in shares)


def test_a_voter_dropping_out_within_T_is_excluded_and_M_shrinks():
    parties, X_aux = _data(2, seed=1)
    spec = _spec(2, max_missing=1)
    run = core.run_inmemory("hm-2", "dca-2", spec, parties, X_aux, drop=("p3",))
    assert run.release.parties_included == 6
    assert run.release.sensitivity == pytest.approx(2.0 / (6 * 0.05))  # Thm 3 with the M that voted


def test_too_many_dropouts_release_nothing():
    parties, X_aux = _data(2, seed=2)
    with pytest.raises(core.EnsembleJobError, match="published nothing: party p1: dropped out; party p2: dropped out"):
        core.run_inmemory("hm-3", "dca-3", _spec(2, max_missing=1), parties, X_aux, drop=("p1", "p2"))


@pytest.mark.parametrize(
    "change, words",
    [
        ({"method": "median"}, "method"),
        ({"lam": 0.0}, "lam"),
        ({"epsilon": float("inf")}, "epsilon"),
        ({"classes": ["a"]}, "classes"),
        ({"classes": ["a", "a"]}, "classes"),
        ({"parties": ["p0"]}, "parties"),
        ({"max_missing": 6}, "max_missing"),
        ({"compute_nodes": ["n1"]}, "compute_nodes"),
        ({"dataset": ""}, "dataset"),
    ],
)
def test_spec_validation_names_the_field(change, words):
    with pytest.raises(core.EnsembleJobError, match=words):
        core.validate_spec(_spec(2, **change))


def test_auxiliary_data_are_checked_end_to_end():
    _, X_aux = _data(2)
    req = pb.VoteRequest(job_id="hm", auxiliary_digest=core.auxiliary_digest(X_aux), auxiliary_rows=len(X_aux), auxiliary_features=X_aux.shape[1])
    chunks = core.auxiliary_chunks(X_aux, rows=50)
    assert np.array_equal(core.assemble_auxiliary(chunks, req), X_aux)
    with pytest.raises(core.EnsembleJobError, match="out of order"):
        core.assemble_auxiliary(chunks[::-1], req)
    with pytest.raises(core.EnsembleJobError, match="received 100"):
        core.assemble_auxiliary(chunks[:2], req)
    tampered = [pb.AuxiliaryChunk(first_row=c.first_row, rows=c.rows, features=c.features, values=c.values) for c in chunks]
    tampered[0].values = (np.frombuffer(tampered[0].values, dtype="<f8") * 0.5).tobytes()
    with pytest.raises(core.EnsembleJobError, match="digest"):
        core.assemble_auxiliary(tampered, req)
    with pytest.raises(core.EnsembleJobError, match="‖x‖ ≤ 1"):
        core.check_auxiliary(X_aux * 3.0)


def test_labels_map_by_text_and_unknown_labels_refuse():
    assert list(core.label_indices(np.array([-1.0, 1.0, 1.0]), ["-1", "1"])) == [0, 1, 1]
    with pytest.raises(core.EnsembleJobError, match="not one of the job's classes") as e:
        core.label_indices(np.array([0.0, 2.0]), ["0", "1"])
    assert "2" not in str(e.value) and "'2'" in e.value.private  # the refusal names no label of the records; the party's log does


def test_a_voter_whose_records_do_not_fit_says_so_without_their_dimension():
    X_aux = np.zeros((3, 4))
    spec = pb.EnsembleJobSpec(classes=["-1", "1"], lam=0.1)
    with pytest.raises(core.RecordsDoNotFit) as e:
        core.VoterRole("party-1").vote(spec, np.zeros((7, 6)), np.ones(7), X_aux)
    assert "6" not in str(e.value) and "7" not in str(e.value) and "6 features" in e.value.private


def test_curator_refuses_a_sum_that_is_not_the_jobs_secure_sum():
    parties, X_aux = _data(2)
    spec = _spec(2)
    run = core.run_inmemory("hm-4", "dca-4", spec, parties, X_aux)
    noisy = dca_pb2.DpSum()
    noisy.CopyFrom(run.vote_sum)
    noisy.secure_sum = False
    with pytest.raises(core.EnsembleJobError, match="secure sum"):
        core.curator_release("hm-4", spec, X_aux, noisy)
    bad = dca_pb2.DpSum()
    bad.CopyFrom(run.vote_sum)
    bad.values[0] = 9.0  # more votes than voters at one point
    with pytest.raises(ValueError):
        core.curator_release("hm-4", spec, X_aux, bad)


# ---------------------------------------------------------------- Charlie's role, message by message


def _role(**kw):
    parties, X_aux = _data(2, seed=4)
    return core.CuratorRole("hm-9", "dca-9", _spec(2, **kw), X_aux), parties, X_aux


def test_curator_role_asks_every_voter_then_closes_the_sum():
    role, _, X_aux = _role()
    asks = role.start()
    assert [a.to.name for a in asks] == NAMES and all(a.message.auxiliary_digest == core.auxiliary_digest(X_aux) for a in asks)
    for n in NAMES[:-1]:
        assert role.receipt(n, pb.VoteReceipt(job_id="hm-9", party=n)) == []
    assert role.receipt(NAMES[-1], pb.VoteReceipt(job_id="hm-9", party=NAMES[-1])) == [core.CloseVoteSum("dca-9")]
    assert role.state == core.AWAIT_VOTE_SUM


@pytest.mark.parametrize(
    "who, receipt, problem",
    [
        ("mallory", pb.VoteReceipt(job_id="hm-9", party="mallory"), Problem.WRONG_ROLE),
        ("p1", pb.VoteReceipt(job_id="hm-9", party="p2"), Problem.MALFORMED),
        ("p1", pb.VoteReceipt(job_id="hm-0", party="p1"), Problem.MALFORMED),
    ],
)
def test_curator_role_refuses_bad_answers_and_keeps_its_state(who, receipt, problem):
    role, _, _ = _role()
    role.start()
    with pytest.raises(ProtocolError) as e:
        role.receipt(who, receipt)
    assert e.value.problem == problem and role.state == core.ASK_VOTES and not role.receipts


def test_curator_role_replay_and_out_of_order():
    role, _, _ = _role()
    role.start()
    role.receipt("p0", pb.VoteReceipt(job_id="hm-9", party="p0"))
    with pytest.raises(ProtocolError) as e:
        role.vote_failed("p0", "again")
    assert e.value.problem == Problem.REPLAY
    with pytest.raises(ProtocolError) as e:  # the sum cannot be used before every voter answered
        role.vote_sum(dca_pb2.DpSum(job_id="dca-9", secure_sum=True))
    assert e.value.problem == Problem.STEP_OUT_OF_ORDER and role.state == core.ASK_VOTES


def test_curator_role_fails_once_more_than_T_voters_fail():
    role, _, _ = _role(max_missing=1)
    role.start()
    assert role.vote_failed("p0", "unreachable") == []
    out = role.vote_failed("p1", "refused")
    assert isinstance(out[0], core.AbortVoteSum) and "p0" in out[0].detail and "p1" in out[0].detail and role.state == "FAILED"
    with pytest.raises(ProtocolError):
        role.receipt("p2", pb.VoteReceipt(job_id="hm-9", party="p2"))


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_thousands_of_voters_through_the_dca_core_give_the_exact_counts():
    """Scale: 3,000 simulated voters' vote vectors (N = 400) summed by the real DCA machines (cohort mode, 3 nodes)
    equal the plain sum the simulation uses, so the experiment's counts are what the federation would compute."""
    from mpdp.dca.driver import run_job
    from mpdp.hamm2016.labels import party_votes
    from mpdp.math.drbg import Drbg

    M, N, C = 3000, 400, 3
    g = np.random.default_rng(11)  # public simulation data: the voters' predictions
    preds = g.integers(0, C, size=(M, N))
    Z = np.stack([party_votes(p, C) for p in preds])
    spec = _spec(C, parties=[f"v{i:04d}" for i in range(M)], max_missing=0, unvalidated=True)  # the DCA core at scale: the unproven sum
    # simulated voters are relayed as one cohort, so their job names them by a range roster (a listed roster takes
    # each client over its own certificate only)
    job = dataclasses.replace(core.vote_job(spec, "dca-big", N), roster=(), roster_range=("v", 4))
    run = run_job(job, Z, Drbg.from_os(), client_ids=list(spec.parties), batch_size=500)
    assert run.release is not None and run.release.clients_included == M
    counts = vote_counts(np.asarray(run.release.values), N, C, M)
    assert np.array_equal(counts, vote_counts(Z.sum(axis=0), N, C, M))
    assert np.array_equal(counts.sum(axis=1), np.full(N, M))


def test_jobs_too_large_to_fit_are_refused_before_anyone_votes():
    X = np.zeros((10, 100))
    with pytest.raises(core.EnsembleJobError, match="C·d"):
        core.check_size(_spec(50), X)  # 50·100 parameters: a (C·d)² Hessian of 200 MB
    with pytest.raises(core.EnsembleJobError, match="vote entries"):
        core.check_size(_spec(2), np.zeros((core.MAX_VOTE_DIMENSION + 1, 2)))
    core.check_size(_spec(3), X)  # 300 parameters: fine


def test_curator_role_never_quotes_the_vote_sum_in_its_failure():
    parties, X_aux = _data(2)
    spec = _spec(2)
    run = core.run_inmemory("hm-5", "dca-5", spec, parties, X_aux)
    role = core.CuratorRole("hm-5", "dca-5", spec, X_aux)
    role.start()
    for n in NAMES:
        role.receipt(n, pb.VoteReceipt(job_id="hm-5", party=n))
    bad = dca_pb2.DpSum()
    bad.CopyFrom(run.vote_sum)
    bad.values[3] = 2.5  # not a count
    out = role.vote_sum(bad)
    assert isinstance(out[0], core.AbortVoteSum) and role.state == "FAILED"
    assert "2.5" not in out[0].detail and "not valid vote counts" in out[0].detail


# ---------------------------------------------------------------- method pate (GNMax on noisy vote counts)


@pytest.mark.parametrize("classes,unvalidated", [(2, False), (3, False), (2, True)])
def test_pate_in_memory_labels_the_noisy_sum_and_states_the_vote_sums_guarantee(classes, unvalidated):
    """Validated by default (one vote per point proven: C bits summing to 1, the class-1 bit for C = 2; discrete
    Gaussian noise, δ at most the one asked for);
    ``unvalidated`` takes Gaussian noise and no proofs."""
    parties, X_aux = _data(classes)
    spec = _spec(classes, method="pate", epsilon=2.0, delta=1e-6, queries=50, unvalidated=unvalidated)
    run = core.run_inmemory("hm-pate", "dca-pate", spec, parties, X_aux)
    rel, vs = run.release, run.vote_sum
    params = core.vote_job(spec, "dca-pate", 50)
    assert rel.method == "pate" and rel.auxiliary_rows == 50 and not vs.secure_sum
    assert rel.guarantee.epsilon == 2.0 and 0 < rel.guarantee.delta <= 1e-6 and vs.clients_rejected == 0
    assert params.validate == ("none" if unvalidated else "votes") and params.vote_classes == (0 if unvalidated else classes)
    assert params.noise == ("gaussian" if unvalidated else "discrete-gaussian")
    assert ("proves on its secret shares" in rel.trust_model) != unvalidated
    assert params.sensitivity == pytest.approx(np.sqrt(50) * (1.0 if classes == 2 else np.sqrt(2)))
    assert params.guarantee.epsilon == 2.0
    if unvalidated:  # the voters add the noise
        assert params.sigma_client > 0 and params.sigma_node == 0
    else:  # the compute nodes add it; a voter proves its votes only
        assert params.sigma_client == 0 and params.sigma_node > 0 and params.node_noise
    X_q = core.pate_queries(spec, X_aux)
    exact = sum(core.VoterRole(n).vote(spec, *parties[n], X_q) for n in NAMES)
    noisy = np.asarray(vs.values)
    assert not np.array_equal(noisy, exact)
    labels = core.pate.noisy_argmax(noisy if classes == 2 else noisy.reshape(50, classes), len(NAMES))
    w = core.fit_soft(X_q, core.one_hot(labels, classes), spec.lam, tol=core.DEFAULT_TOL)
    assert np.allclose(np.asarray(rel.weights), np.ravel(w))
    entry = core.ledger_entry("hm-pate", spec, "dca-pate", 50)
    assert entry["epsilon"] == 2.0 and entry["delta"] == params.guarantee.delta and entry["method"] == "pate"
    if unvalidated:
        assert entry["accounting"] == {"kind": "gaussian", "noise_multiplier": pytest.approx(params.sigma_std / params.sensitivity)}
    else:
        assert entry["accounting"] == {"kind": "discrete-gaussian", "rho": params.rho, "tv": params.discrete.p_fail}


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_pate_vote_sum_noise_has_the_calibrated_variance():
    """The noise the curator's counts carry, over many in-memory vote sums of a validated pate job: the three compute
    nodes' draws, variance 3·σ_node² per entry (≥ σ_std², what the M − c counted nodes give; the voters add none),
    mean 0 (χ²-style bounds at 5 s.e.)."""
    from mpdp.dca.driver import run_job
    from mpdp.math.drbg import Drbg

    spec = _spec(2, method="pate", epsilon=1.0, delta=1e-6, max_missing=1, simulation_seed=b"")
    params = core.vote_job(spec, "dca-var", 40)
    Z = np.zeros((len(NAMES), 40))  # all-zero votes: the sum is pure noise
    draws = np.concatenate([np.asarray(run_job(params, Z, Drbg.from_os(), client_ids=NAMES).release.values) for _ in range(25)])
    var = len(params.nodes) * params.sigma_node**2
    assert params.sigma_client == 0 and var >= params.sigma_std**2 and params.noise_variance(len(NAMES)) == pytest.approx(var, rel=1e-12)
    n = draws.size  # 1000 entries
    assert abs(draws.mean()) < 5 * np.sqrt(var / n)
    assert abs(draws.var() / var - 1) < 5 * np.sqrt(2 / n)


def test_pate_fields_are_checked():
    for kw, words in (({"method": "pate"}, "delta"), ({"delta": 0.1}, "belong to method pate"), ({"queries": 3}, "belong to method pate"),
                      ({"method": "pate", "delta": 1e-6, "protect_aux": True}, "protect_aux")):
        with pytest.raises(core.EnsembleJobError, match=words):
            core.validate_spec(_spec(2, **kw))


@pytest.mark.parametrize("eps,Q,C,delta", [(1.0, 1000, 2, 1e-6), (0.1, 1000, 2, 1e-6), (2.0, 50, 3, 1e-6), (20.0, 60, 2, 1e-7)])
def test_pate_guarantee_against_the_simulations_rdp_accounting(eps, Q, C, delta):
    """The federation calibrates σ_std exactly (Balle & Wang, Δ₂ = √Q·Δ): the Q GNMax queries with per-query Δ and that
    σ are one Gaussian mechanism. mpdp.hamm2016.pate's RDP account of the same σ is a valid but looser bound (ε_RDP ≥ ε),
    so at equal (ε, δ) the simulation's σ is at least the federation's: the experiment never flatters the federation."""
    from mpdp.dp.mechanisms import gaussian_delta
    from mpdp.hamm2016 import pate

    spec = _spec(C, method="pate", epsilon=eps, delta=delta, queries=Q, unvalidated=True)  # the Gaussian path
    p = core.vote_job(spec, "dca-acc", Q)
    Delta = 1.0 if C == 2 else np.sqrt(2.0)
    assert p.sensitivity == pytest.approx(np.sqrt(Q) * Delta, rel=1e-15) and p.sensitivity == pytest.approx(np.sqrt(Q) * pate.query_sensitivity(C))
    assert gaussian_delta(p.sigma_std, p.sensitivity, eps) <= delta  # the stated (ε, δ), exactly
    rdp = pate.account(p.sigma_std, queries=Q, classes=C, parties=len(NAMES), delta=delta)
    assert rdp.rho == pytest.approx(Q * Delta**2 / (2 * p.sigma_std**2), rel=1e-12)
    assert eps <= rdp.epsilon <= 1.15 * eps  # the RDP conversion of the same noise: never tighter, within 8 % here
    sim = pate.calibrate(eps, queries=Q, classes=C, parties=len(NAMES), delta=delta)
    assert p.sigma_std <= sim.sigma <= 1.1 * p.sigma_std  # e.g. Q = 1000, ε = 1: 133.6 vs 143.3
    entry = core.ledger_entry("hm-acc", spec, "dca-acc", Q)
    from mpdp import accounting

    assert accounting.single_epsilon(accounting.release_of(entry), delta) <= eps * (1 + 2e-3)  # the ledger's accountant agrees


@pytest.mark.parametrize("dropped", [0, 2])
def test_pate_noise_inside_the_sum_is_gaussian_and_dropouts_within_T_keep_sigma(dropped):
    """One vote sum over Q·C = 6000 counts: residual = noisy sum − exact votes is N(0, |A|·σ_client²) (χ² on the
    variance at quantile 10⁻⁶, Kolmogorov–Smirnov on the shape); a voter that drops out takes its share of the noise
    with it, yet with |A| ≥ M − T the variance (M − m)·σ_std²/(M − T − 1) stays ≥ σ_std² (DCA Thm 1)."""
    from scipy import stats

    from mpdp.dca.driver import run_job
    from mpdp.hamm2016.labels import party_votes
    from mpdp.math.drbg import Drbg

    M, T, Q, C = 9, 2, 2000, 3
    names = [f"v{i}" for i in range(M)]
    spec = _spec(C, method="pate", parties=names, max_missing=T, queries=Q, epsilon=3.0, delta=1e-6, simulation_seed=b"pate-noise", unvalidated=True)
    params = core.vote_job(spec, "dca-var", Q)
    g = np.random.default_rng(5)  # public simulation data: the voters' predictions
    Z = np.stack([party_votes(g.integers(0, C, size=Q), C) for _ in range(M)])
    drop = list(range(dropped))
    run = run_job(params, Z, Drbg.from_seed(b"pate-noise"), client_ids=names, drop=drop, batch_size=4)
    assert run.release is not None and run.release.clients_included == M - dropped
    resid = np.asarray(run.release.values) - np.delete(Z, drop, axis=0).sum(axis=0)
    var = (M - dropped) * params.sigma_client**2
    assert run.release.noise_variance == pytest.approx(var, rel=1e-12) and var >= params.sigma_std**2
    t = float(np.sum(resid**2)) / var
    assert stats.chi2.ppf(1e-6, resid.size) <= t <= stats.chi2.ppf(1 - 1e-6, resid.size)
    assert stats.kstest(resid / np.sqrt(var), "norm").pvalue > 1e-4
    # T + 1 dropouts: the honest noise could fall short of σ_std², so nothing is released
    short = run_job(params, Z, Drbg.from_seed(b"pate-noise"), client_ids=names, drop=list(range(T + 1)), batch_size=4)
    assert short.release is None and "cannot reach σ²_std" in short.error.detail
