"""The regression job (Heikkilä et al. 2017, Algorithm 2 over the federation) as one sans-IO role.

:class:`RegressionRole` runs the public steps of :class:`~mpdp.regression.plan.RegressionPlan` in order:
STD_ROUND (ask for the std round: Σ(x², y²) of every party's records clipped to c) → MAIN_ROUND (from the std
release: σ̂, the grid search, the thresholds B, then ask for the main round: XᵀX and Xᵀy clipped to B) → DONE
(the posterior), or FAILED. Each round is a :class:`RunRound` output: a DCA job to create and a contribution
round of the parties (``mpdp.contribution.ContributionRound`` at the curator); its DP release comes back as
the local event ``released`` (or ``round_failed``).

Two drivers move the same role: the curator's learner host over the federation (``services/curator/learner.py``,
asynchronously, the same loop as :func:`drive`; ``mpdp regress`` submits to it) and :func:`run_inmemory` (through :func:`drive`), which runs each round's DCA job with the
one in-memory driver (:func:`mpdp.dca.driver.run_job` over :class:`mpdp.driver.Wire`) with the parties'
statistics computed as the party service computes them. For the same seed and job ids both give the same
releases and posterior bit for bit.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from mpdp import rounds
from mpdp.dca.params import DcaParams
from mpdp.messages import common_pb2, dca_pb2, learner_pb2
from mpdp.protocol import FAILED, LocalProtocolError, Machine, Peer, Problem, Publish, row
from mpdp.regression.grid import Multipliers
from mpdp.regression.plan import MainRoundStep, RegressionPlan
from mpdp.regression.posterior import Posterior
from mpdp.regression.statistics import RoundSpec, main_round_spec
from mpdp.rounds import RoundFailed as RoundFailed  # the roles' one round failure, raised by drive

STD_ROUND, MAIN_ROUND, DONE = "STD_ROUND", "MAIN_ROUND", "DONE"
PENDING = "pending"  # the job id of a round's DCA parameters until the driver has created the job


UNVALIDATED = ". The parties' statistics are not proven valid (unvalidated): a malicious party can move them arbitrarily"


def validity_note(releases: Sequence[dca_pb2.DpSum]) -> str:
    """What a regression's guarantee adds when a round ran without validity proofs (each validated round's own
    statement already says what it proved)."""
    return "" if all(r.validate != dca_pb2.VALIDATE_NONE for r in releases) else UNVALIDATED


@dataclass(frozen=True)
class RunRound:
    """Output: create ``params``' DCA job (its id is chosen when it is created) and have every party contribute
    ``statistic`` of its records clipped to ``bounds``; answer with :meth:`RegressionRole.released`."""

    spec: RoundSpec
    params: DcaParams  # job_id PENDING
    statistic: str  # "linreg/std" | "linreg/main" (contribution.proto StatisticRequest.statistic)
    bounds: tuple[float, ...]
    records_per_party: int


@dataclass
class RegressionRun:
    """What the job published: both releases, the public step between them and the posterior."""

    plan: RegressionPlan
    std_job: str
    main_job: str
    std_release: dca_pb2.DpSum
    main_release: dca_pb2.DpSum
    thresholds: np.ndarray
    multipliers: tuple[float, float]
    posterior: Posterior
    seconds: dict[str, float] = field(default_factory=dict)
    job_id: str = ""  # the regression job's own id where a host ran it ("" in memory: the main round's DCA job names it)

    def message(self, job_id: str, parties: Sequence[str], noise: int = dca_pb2.GAUSSIAN, total_records: int = 0,
                unvalidated: bool = False) -> learner_pb2.LearnerModel:
        """The release as the curator's learner store keeps it (learner.proto LearnerModel); :meth:`of` reads it back.
        The job's guarantee is the basic composition of its two rounds' (the plan's (ε, δ))."""
        rel = (self.std_release, self.main_release)
        eps, delta = sum(r.guarantee.epsilon for r in rel), sum(r.guarantee.delta for r in rel)
        g = common_pb2.Guarantee(mechanism="DCA Gaussian sums, Heikkilä et al. 2017 Algorithm 2 (std and main rounds)", epsilon=eps, delta=delta,
                                 statement=f"({eps:.6g}, {delta:.3g})-DP for the posterior by basic composition of the std round "
                                           f"({rel[0].guarantee.statement}) and the main round ({rel[1].guarantee.statement})" + validity_note(rel))
        p = self.plan
        spec = learner_pb2.RegressionJobSpec(bounds=list(p.bounds), epsilon=p.epsilon, delta=p.delta, total_records=total_records,
                                             mode=common_pb2.CORRECTED if p.mode == "corrected" else common_pb2.PAPER, noise=noise,  # type: ignore[arg-type]
                                             grid_repeats_x=p.grid_repeats[0], grid_repeats_y=p.grid_repeats[1], unvalidated=unvalidated)
        post = self.posterior
        return learner_pb2.LearnerModel(
            job_id=job_id, protocol="regression", parties=list(parties), dca_jobs=[self.std_job, self.main_job], releases=list(rel), guarantee=g,
            trust_model=self.main_release.trust_model, seeded=bool(self.main_release.seeded), seconds=dict(self.seconds),
            regression=learner_pb2.RegressionModel(plan=spec, thresholds=np.asarray(self.thresholds, dtype=np.float64).ravel().tolist(),
                                                   multipliers=list(self.multipliers), posterior_mean=np.asarray(post.mean).ravel().tolist(),
                                                   posterior_precision=np.asarray(post.precision).ravel().tolist(), posterior_lambda=post.lam),
        )

    @classmethod
    def of(cls, msg: learner_pb2.LearnerModel) -> "RegressionRun":
        """The run a stored :meth:`message` describes; ValueError if it is not one."""
        if msg.WhichOneof("model") != "regression" or len(msg.releases) != 2 or len(msg.dca_jobs) != 2:
            raise ValueError(f"job {msg.job_id} is not a regression model")
        m = msg.regression
        s = m.plan
        plan = RegressionPlan(tuple(s.bounds), s.epsilon, s.delta, "corrected" if s.mode == common_pb2.CORRECTED else "paper",
                              grid_repeats=(s.grid_repeats_x, s.grid_repeats_y))
        d = len(m.posterior_mean)
        if len(m.posterior_precision) != d * d or len(m.multipliers) != 2:
            raise ValueError(f"job {msg.job_id}: the stored posterior is not {d}-dimensional")
        post = Posterior(np.asarray(m.posterior_mean, dtype=np.float64), np.asarray(m.posterior_precision, dtype=np.float64).reshape(d, d), m.posterior_lambda)
        return cls(plan, msg.dca_jobs[0], msg.dca_jobs[1], msg.releases[0], msg.releases[1], np.asarray(m.thresholds, dtype=np.float64),
                   (m.multipliers[0], m.multipliers[1]), post, dict(msg.seconds), msg.job_id)


class RegressionRole(Machine):
    """The two-round regression job, sans-IO: STD_ROUND → MAIN_ROUND → DONE, or FAILED.

    :meth:`start` asks for the std round; :meth:`released` takes a round's DP release (checked: the job the
    driver created for it, d + 1 or the main round's dimension values, the job's (ε, δ)); :meth:`round_failed`
    ends the job. Every input is the return of the operator's own calls, so all are local events (``self``);
    the parties' and nodes' failure policies are those of the contribution round and the DCA job.
    """

    ROLE = "regression_operator"
    STATES = (STD_ROUND, MAIN_ROUND, DONE, FAILED)
    TERMINAL = (DONE, FAILED)
    TABLE = (
        row(STD_ROUND, "released", "self", f"{MAIN_ROUND}|{FAILED}"),  # σ̂, grid search, B: ask for the main round
        row(MAIN_ROUND, "released", "self", f"{DONE}|{FAILED}"),  # the posterior is published
        row(STD_ROUND, "round_failed", "self", FAILED),
        row(MAIN_ROUND, "round_failed", "self", FAILED),
    )
    PARTICIPANTS = frozenset()

    def __init__(self, plan: RegressionPlan, parties: Sequence[str], nodes: Sequence[str], total_records: int, records_per_party: int, *,
                 seed: bytes = b"", deadline: float = 600.0, job_id: str = "regression", noise: str = "gaussian", validate: bool = True) -> None:
        super().__init__(job_id, Peer("operator", "operator"), record=False)
        # validated (the default): every party's statistic is proven within its per-coordinate range, and the rounds
        # take the discrete Gaussian (the proof bounds integer noise); ``noise`` is the unvalidated rounds' noise,
        # "gaussian" or "discrete-gaussian" (mpdp.dca.discrete)
        self.validate = validate
        self.noise = "discrete-gaussian" if validate else noise
        if not parties or len(set(parties)) != len(parties):
            raise LocalProtocolError(Problem.INVALID_JOB, "parties must be distinct and at least one")
        self.plan = plan
        self.parties, self.nodes = tuple(parties), tuple(nodes)
        self.total_records, self.records_per_party = total_records, records_per_party
        self.seed, self.deadline = seed, deadline
        self.jobs: dict[str, str] = {}  # round → the DCA job that released it
        self.releases: dict[str, dca_pb2.DpSum] = {}
        self.step: MainRoundStep | None = None
        self.asked: RunRound | None = None
        self._result: RegressionRun | None = None
        # the grid search's (p_x, p_y), public: a driver that ran plan.multipliers(total_records) while the std round ran
        # (it reads no release) sets them here before the std release; None: the release's step runs the search itself
        self.multipliers: Multipliers | None = None

    def start(self) -> list[Any]:
        """The std round (state STD_ROUND, no move)."""
        if self.state != STD_ROUND or self.asked is not None:
            raise LocalProtocolError(Problem.STEP_OUT_OF_ORDER, f"{self.job_id} has already started")
        if self.validate and self.plan.mode != "corrected":
            raise LocalProtocolError(Problem.INVALID_JOB, "validated rounds take the discrete Gaussian's own calibration; the paper calibration "
                                     "reproduces the published Gaussian rounds: take it with --validate none")
        if self.validate:  # the main round must fit too, before the std round spends: its thresholds B ≤ c give a
            self._params(main_round_spec(self.plan.bounds, *self.plan.budget.main, self.plan.mode))  # job at most this wide
        return [self._ask(self.plan.std_round(), self.plan.bounds)]

    def released(self, job_id: str, release: dca_pb2.DpSum) -> list[Any]:
        return self._local("released", job_id, release)

    def round_failed(self, detail: str) -> list[Any]:
        return self._local("round_failed", detail)

    @property
    def result(self) -> RegressionRun | None:
        return None if self.state != DONE else self._result

    # -- engine hooks --------------------------------------------------------------------------------
    def _kinds(self, sender: Peer) -> frozenset[str]:
        return frozenset()  # the operator's role takes no message

    # -- handlers --------------------------------------------------------------------------------------
    def _on_released(self, job_id: str, release: dca_pb2.DpSum) -> list[Any]:
        asked = self.asked
        assert asked is not None
        name = asked.spec.round
        if release.job_id != job_id or release.dimension != asked.params.dimension or len(release.values) != asked.params.dimension:
            raise LocalProtocolError(Problem.MALFORMED, f"{asked.statistic} round ({job_id}): the release is not this round's ({release.dimension} values)")
        if (release.epsilon, release.delta) != (asked.params.epsilon, asked.params.delta):
            raise LocalProtocolError(Problem.MALFORMED, f"{asked.statistic} round ({job_id}): the release's (ε, δ) are not the round's")
        self.jobs[name], self.releases[name] = job_id, release
        if self.state == STD_ROUND:
            try:
                self.step = self.plan.main_round(list(release.values), self.total_records, multipliers=self.multipliers)
            except ValueError as e:
                raise LocalProtocolError(Problem.JOB_FAILED, f"{asked.statistic} round ({job_id}): {e}") from None
            self.state = MAIN_ROUND
            return [self._ask(self.step.spec, self.step.spec.bounds)]
        step = self.step
        assert step is not None
        m = step.multipliers
        mult = (m.p_x, m.p_y) if isinstance(m, Multipliers) else (float(m[0]), float(m[1]))
        self._result = RegressionRun(self.plan, self.jobs["std"], job_id, self.releases["std"], release, step.thresholds, mult,
                                     self.plan.finish(list(release.values)))
        self.state = DONE
        return [Publish(self._result)]

    def _on_round_failed(self, detail: str) -> list[Any]:
        e = LocalProtocolError(Problem.JOB_FAILED, detail)
        self._fail(e)
        return e.notices

    def _params(self, spec: RoundSpec) -> DcaParams:
        try:
            return spec.dca_params(PENDING, len(self.parties), self.nodes, records_per_client=self.records_per_party, simulation_seed=self.seed,
                                   roster=self.parties, deadline_seconds=self.deadline, validate=self.validate)
        except ValueError as e:
            raise LocalProtocolError(Problem.INVALID_JOB, str(e)) from None

    def _ask(self, spec: RoundSpec, bounds: Sequence[float]) -> RunRound:
        params = self._params(spec)
        if self.noise != params.noise:
            params = dataclasses.replace(params, noise=self.noise)
        self.asked = RunRound(spec, params, f"linreg/{spec.round}", tuple(float(b) for b in bounds), self.records_per_party)
        return self.asked


# round → (its stage, the stage of the role's step after it): the std round, the grid search (σ̂ and the thresholds
# B from its release); the main round (the posterior after it is not timed apart)
_STAGES: dict[str, tuple[str, str | None]] = {"std": ("std_round", "grid_search"), "main": ("main_round", None)}


def drive(role: RegressionRole, run_round: Callable[[RunRound], tuple[str, dca_pb2.DpSum]],
          clock: Callable[[], float] = time.perf_counter) -> RegressionRun:
    """Run the role to its end (:func:`mpdp.rounds.drive`): ``run_round`` creates a round's DCA job, has the parties
    contribute and returns (the job id, its release), or raises :class:`RoundFailed`. Times: std_round, grid_search, main_round."""
    run: RegressionRun = rounds.drive(role, RunRound, run_round, lambda ask: _STAGES[ask.spec.round], clock)
    return run


def run_inmemory(plan: RegressionPlan, party_data: dict[str, tuple[np.ndarray, np.ndarray]], nodes: Sequence[str], total_records: int,
                 records_per_party: int, *, job_ids: tuple[str, str], seed: bytes = b"", deadline: float = 600.0, noise: str = "gaussian",
                 validate: bool = True, observe: Callable[[Any], None] | None = None, ledgers: Mapping[str, Any] | None = None) -> RegressionRun:
    """The whole regression in one process through :class:`RegressionRole`: each round's DCA job runs on the
    one in-memory driver (:func:`mpdp.rounds.inmemory_round`), every party a DCA client machine contributing what
    ``services/party/contribution.py`` would (its records clipped to the round's bounds, summed). ``job_ids`` name the
    two DCA jobs (the federation's curator chooses them); a seeded run with the federation's ids reproduces its
    releases bit for bit. ``observe`` sees each round's :class:`~mpdp.dca.driver.DcaRun` (messages, ledger entries,
    times). ``ledgers``: the parties' :class:`~mpdp.ledger.PrivacyLedger` by name; each round's charge is checked and
    recorded there before the party's shares leave (over budget: :class:`~mpdp.driver.SpendRefused`)."""
    from mpdp.regression.statistics import party_statistics

    role = RegressionRole(plan, list(party_data), nodes, total_records, records_per_party, seed=seed, deadline=deadline, noise=noise, validate=validate)
    ids = iter(job_ids)

    def run_round(ask: RunRound) -> tuple[str, dca_pb2.DpSum]:
        params = dataclasses.replace(ask.params, job_id=next(ids))
        return rounds.inmemory_round(f"{ask.statistic} round", params, party_data, ask.records_per_party,
                                     lambda X, y: party_statistics(X, y, ask.spec.round, ask.bounds), seed=seed, observe=observe, ledgers=ledgers)

    return drive(role, run_round)
