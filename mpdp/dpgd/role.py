"""The dp-gd job (``mpdp train dp-gd``) as one sans-IO role.

:class:`DpgdRole` runs the R + 1 public rounds of a :class:`~mpdp.dpgd.plan.DpgdPlan`: each round is a
:class:`RunRound` output (a DCA job to create, labelled ``<job>.r<round>``, and a contribution round of the
parties with the round's :class:`~mpdp.messages.contribution_pb2.DpgdRound`: plan, round, iterate); its DP
release comes back as the local event ``released`` and goes to the curator's step
(:class:`~mpdp.dpgd.plan.DpgdCurator`), which publishes the next iterate, or, after round R, the model.

Two drivers move the same role: the curator's learner host over the federation (``services/curator/learner.py``,
asynchronously, the same loop as :func:`drive`) and :func:`run_inmemory` (through :func:`drive`), which runs each round's DCA job with the one in-memory driver
(:func:`mpdp.dca.driver.run_job`) and the parties' vectors computed as ``services/party/contribution.py``
computes them. For the same seed and DCA job ids both give the same releases and model bit for bit.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from mpdp import rounds
from mpdp.dca.params import DcaParams
from mpdp.dpgd.plan import TRUST_MODEL, DpgdCurator, DpgdPlan, party_vector, round_job_id
from mpdp.dpgd.wire import iterate_of, plan_of, round_charge, round_request
from mpdp.messages import common_pb2, contribution_pb2, dca_pb2, learner_pb2
from mpdp.protocol import FAILED, LocalProtocolError, Machine, Peer, Problem, Publish, row
from mpdp.rounds import RoundFailed as RoundFailed  # the roles' one round failure, raised by drive

ROUNDS, DONE = "ROUNDS", "DONE"
PENDING = "pending"  # the job id of a round's DCA parameters until the driver has created the job


@dataclass(frozen=True)
class RunRound:
    """Output: create ``params``' DCA job (its id is chosen when it is created) and have every party contribute
    round ``round`` (``request``); answer with :meth:`DpgdRole.released`."""

    round: int
    params: DcaParams  # job_id PENDING, purpose <job>.r<round>
    request: contribution_pb2.DpgdRound
    records_per_party: int


@dataclass
class DpgdRun:
    """What the job published: every round's release and DCA job, every iterate, and the model."""

    job_id: str
    plan: DpgdPlan
    parties: tuple[str, ...]
    dca_jobs: list[str]
    releases: list[dca_pb2.DpSum]
    iterates: list[np.ndarray]
    model: np.ndarray
    seeded: bool
    seconds: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict:
        """The release as `mpdp train dp-gd --json` prints and `mpdp predict` reads it."""
        g = self.plan.guarantee
        return {
            "job_id": self.job_id,
            "model": "dp-gd",
            "task": self.plan.task.kind,
            "classes": self.plan.task.classes,
            "dimension": self.plan.dimension,
            "weights": self.model.tolist(),
            "plan": self.plan.public(),
            "parties": list(self.parties),
            "dca_jobs": list(self.dca_jobs),
            "guarantee": {"epsilon": g.epsilon, "delta": g.delta, "mechanism": g.mechanism, "statement": g.statement},
            "trust_model": TRUST_MODEL,
            "seeded": self.seeded,
            "round_seconds": dict(self.seconds),
        }

    def message(self) -> learner_pb2.LearnerModel:
        """The release as the curator's learner store keeps it (learner.proto LearnerModel); :meth:`of` reads it back."""
        g = self.plan.guarantee
        W = np.asarray(self.model, dtype=np.float64)
        return learner_pb2.LearnerModel(
            job_id=self.job_id, protocol="dpgd", parties=list(self.parties), dca_jobs=list(self.dca_jobs), releases=list(self.releases),
            guarantee=common_pb2.Guarantee(mechanism=g.mechanism, epsilon=g.epsilon, delta=g.delta, sensitivity=g.sensitivity, norm=g.norm, statement=g.statement),
            trust_model=TRUST_MODEL, seeded=self.seeded, seconds=dict(self.seconds),
            dpgd=learner_pb2.DpgdModel(plan=round_request(self.plan, self.job_id, 0, np.zeros_like(W)), outputs=W.shape[1], weights=W.ravel().tolist(),
                                       iterates=[v for it in self.iterates for v in np.asarray(it, dtype=np.float64).ravel().tolist()]),
        )

    @classmethod
    def of(cls, msg: learner_pb2.LearnerModel) -> "DpgdRun":
        """The run a stored :meth:`message` describes (the plan rebuilt from its public parameters); ValueError if it is not one."""
        if msg.WhichOneof("model") != "dpgd":
            raise ValueError(f"job {msg.job_id} is not a dp-gd model")
        m = msg.dpgd
        plan = plan_of(m.plan)
        d, w = plan.dimension, plan.width
        if m.outputs != w or len(m.weights) != d * w or len(m.iterates) % (d * w):
            raise ValueError(f"job {msg.job_id}: the stored weights are not {d} × {w}")
        its = np.asarray(m.iterates, dtype=np.float64).reshape(-1, d, w)
        return cls(msg.job_id, plan, tuple(msg.parties), list(msg.dca_jobs), list(msg.releases), [it for it in its],
                   np.asarray(m.weights, dtype=np.float64).reshape(d, w), msg.seeded, dict(msg.seconds))


class DpgdRole(Machine):
    """The dp-gd job, sans-IO: ROUNDS (R + 1 releases, one step each) → DONE, or FAILED.

    :meth:`start` asks for round 0; :meth:`released` takes a round's DP release (checked: the job the driver
    created for it, the round's dimension and (ε, δ), finite values) and asks for the next round or publishes
    the :class:`DpgdRun`; :meth:`round_failed` ends the job. Every input is the return of the operator's own
    calls, so all are local events (``self``); the parties' and nodes' failure policies are those of the
    contribution round and the DCA job.
    """

    ROLE = "dpgd_operator"
    STATES = (ROUNDS, DONE, FAILED)
    TERMINAL = (DONE, FAILED)
    TABLE = (
        row(ROUNDS, "released", "self", f"{ROUNDS}|{DONE}|{FAILED}"),  # the curator steps; the next round, or the model
        row(ROUNDS, "round_failed", "self", FAILED),
    )
    PARTICIPANTS = frozenset()

    def __init__(self, plan: DpgdPlan, parties: Sequence[str], nodes: Sequence[str], records_per_party: int, *, job_id: str,
                 max_missing: int = 0, seed: bytes = b"", deadline: float = 600.0) -> None:
        super().__init__(job_id, Peer("operator", "operator"), record=False)
        if not parties or len(set(parties)) != len(parties):
            raise LocalProtocolError(Problem.INVALID_JOB, "parties must be distinct and at least one")
        self.plan = plan
        self.parties, self.nodes = tuple(parties), tuple(nodes)
        self.records_per_party, self.max_missing = records_per_party, max_missing
        self.seed, self.deadline = seed, deadline
        self.curator = DpgdCurator(plan)
        self.dca_jobs: list[str] = []
        self.releases: list[dca_pb2.DpSum] = []
        self.asked: RunRound | None = None
        self._result: DpgdRun | None = None

    def start(self) -> list[Any]:
        """Round 0 (state ROUNDS, no move)."""
        if self.state != ROUNDS or self.asked is not None:
            raise LocalProtocolError(Problem.STEP_OUT_OF_ORDER, f"{self.job_id} has already started")
        return [self._ask()]

    def released(self, dca_job_id: str, release: dca_pb2.DpSum) -> list[Any]:
        return self._local("released", dca_job_id, release)

    def round_failed(self, detail: str) -> list[Any]:
        return self._local("round_failed", detail)

    @property
    def result(self) -> DpgdRun | None:
        return None if self.state != DONE else self._result

    # -- engine hooks --------------------------------------------------------------------------------
    def _kinds(self, sender: Peer) -> frozenset[str]:
        return frozenset()  # the operator's role takes no message

    # -- handlers --------------------------------------------------------------------------------------
    def _on_released(self, dca_job_id: str, release: dca_pb2.DpSum) -> list[Any]:
        asked = self.asked
        assert asked is not None
        r, p = asked.round, asked.params
        if release.job_id != dca_job_id or release.dimension != p.dimension or len(release.values) != p.dimension:
            raise LocalProtocolError(Problem.MALFORMED, f"round {r} ({dca_job_id}): the release is not this round's ({release.dimension} values)")
        if (release.epsilon, release.delta) != (p.epsilon, p.delta):
            raise LocalProtocolError(Problem.MALFORMED, f"round {r} ({dca_job_id}): the release's (ε, δ) are not the round's")
        try:
            self.curator.take(list(release.values))
        except ValueError as e:
            raise LocalProtocolError(Problem.JOB_FAILED, f"round {r} ({dca_job_id}): {e}") from None
        self.dca_jobs.append(dca_job_id)
        self.releases.append(release)
        if not self.curator.done:
            return [self._ask()]
        self._result = DpgdRun(self.job_id, self.plan, self.parties, list(self.dca_jobs), list(self.releases), list(self.curator.iterates),
                               self.curator.model(), bool(self.seed))
        self.state = DONE
        return [Publish(self._result)]

    def _on_round_failed(self, detail: str) -> list[Any]:
        e = LocalProtocolError(Problem.JOB_FAILED, detail)
        self._fail(e)
        return e.notices

    def _ask(self) -> RunRound:
        r = self.curator.round
        params = self.plan.dca_params(r, PENDING, len(self.parties), self.nodes, records_per_client=self.records_per_party, max_missing=self.max_missing,
                                      simulation_seed=self.seed, roster=self.parties, deadline_seconds=self.deadline, purpose=round_job_id(self.job_id, r))
        self.asked = RunRound(r, params, round_request(self.plan, self.job_id, r, self.curator.iterate()), self.records_per_party)
        return self.asked


def _stages(ask: RunRound) -> tuple[str, None]:
    return f"r{ask.round}", None  # each round (r0, r1, …); the curator's step after it is not timed apart


def drive(role: DpgdRole, run_round: Callable[[RunRound], tuple[str, dca_pb2.DpSum]], clock: Callable[[], float] = time.perf_counter) -> DpgdRun:
    """Run the role to its end (:func:`mpdp.rounds.drive`): ``run_round`` creates a round's DCA job, has the parties
    contribute and returns (the DCA job id, its release), or raises :class:`RoundFailed`. Times each round (``r0``, ``r1``, …)."""
    run: DpgdRun = rounds.drive(role, RunRound, run_round, _stages, clock)
    return run


def run_inmemory(plan: DpgdPlan, party_data: dict[str, tuple[np.ndarray, np.ndarray]], nodes: Sequence[str], records_per_party: int, *,
                 job_id: str, dca_job_ids: Sequence[str], seed: bytes = b"", max_missing: int = 0, deadline: float = 600.0,
                 observe: Callable[[Any], None] | None = None, ledgers: Mapping[str, Any] | None = None) -> DpgdRun:
    """The whole job in one process through :class:`DpgdRole`: each round's DCA job on the one in-memory driver
    (:func:`mpdp.rounds.inmemory_round`), every party a DCA client machine contributing :func:`party_vector` of its
    rows (already on the unit ball and labelled as the party service labels them, :func:`mpdp.dpgd.model.party_rows`).
    ``dca_job_ids`` name the R + 1 DCA jobs (the federation's curator chooses them); a seeded run with the
    federation's ids reproduces its releases and model bit for bit. ``observe`` sees each round's
    :class:`~mpdp.dca.driver.DcaRun`. Every party spends what a served party spends
    (:func:`mpdp.dpgd.wire.round_charge`: the job's one charge, a marker per round), checked and recorded in its
    :class:`~mpdp.ledger.PrivacyLedger` of ``ledgers`` (by name) before its shares leave (over budget:
    :class:`~mpdp.driver.SpendRefused`)."""
    parties = list(party_data)
    role = DpgdRole(plan, parties, nodes, records_per_party, job_id=job_id, max_missing=max_missing, seed=seed, deadline=deadline)
    ids = iter(dca_job_ids)

    def run_round(ask: RunRound) -> tuple[str, dca_pb2.DpSum]:
        params = dataclasses.replace(ask.params, job_id=next(ids))
        W = iterate_of(ask.request, plan)
        charge = lambda p: round_charge(plan, job_id, ask.round, params.job_id, parties, seeded=p.seeded)  # noqa: E731
        return rounds.inmemory_round(f"round {ask.round}", params, party_data, ask.records_per_party,
                                     lambda X, y: party_vector(plan, ask.round, W, X, y), seed=seed, observe=observe, ledgers=ledgers, charge=charge)

    return drive(role, run_round)
