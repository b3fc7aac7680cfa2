"""The query job as one sans-IO role: one validated DCA round, then the table.

:class:`QueryRole` (the curator's, hosted by its learner host ``services/curator/learner.py``): ROUND → DONE, or
FAILED. :meth:`QueryRole.start` outputs a :class:`RunRound` — the DCA job to create (its id chosen when it is
created) and the query each party evaluates; the DP release comes back as the local event ``released`` (checked:
this round's dimension and (ε, δ)), which publishes a :class:`QueryRun` (the decoded table), or ``round_failed``.

Each party's side is the one DCA contribution step (:class:`mpdp.contribution.Contributor`): it recompiles the query
against its own copy of the schema (same sha256), holds the DCA job to the plan (:func:`mpdp.query.release.check_job`)
and spends the job's true (ε, δ) once before any share leaves.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from mpdp.dca.params import DcaParams
from mpdp.messages import common_pb2, dca_pb2, learner_pb2, query_pb2
from mpdp.protocol import FAILED, LocalProtocolError, Machine, Peer, Problem, Publish, row
from mpdp.query.evaluation import INTERVAL_METHOD as EVALUATION_INTERVALS
from mpdp.query.plan import QueryError, QueryPlan, compile_query
from mpdp.query.release import CONFIDENCE, INTERVAL_METHOD, Cell, dca_params, decode

ROUND, DONE = "ROUND", "DONE"
PENDING = "pending"  # the DCA job's id until the host has created it
STATISTIC = "query"  # contribution.proto StatisticRequest.statistic


def schema_from_json(schema_json: str, sha256: str):
    """The schema a query spec carries ("" → None), checked against the job's schema digest (ValueError otherwise)."""
    from mpdp.schema import Schema

    if not schema_json:
        if sha256:
            raise ValueError("the job names a schema digest but carries no schema")
        return None
    try:
        schema = Schema.model_validate(json.loads(schema_json))
    except (ValueError, TypeError, RecursionError) as e:
        raise ValueError(f"the query's schema is not a valid schema ({type(e).__name__})") from None
    if schema.sha256() != sha256:
        raise ValueError("the query's schema does not hash to the job's schema_sha256")
    return schema


def plan_of(spec: query_pb2.QueryJobSpec, dataset: str, schema_sha256: str) -> QueryPlan:
    """The public plan of a query spec (ValueError, QueryError otherwise); an evaluation's when it carries one."""
    if spec.HasField("evaluation"):
        from mpdp.query.evaluation import evaluation_of, evaluation_plan

        return evaluation_plan(evaluation_of(spec.evaluation), dataset)
    return compile_query(spec.sql, schema_from_json(spec.schema_json, schema_sha256), dataset)


@dataclass(frozen=True)
class RunRound:
    """Output: create ``params``' DCA job and have every party contribute its vector of the query."""

    params: DcaParams  # job_id PENDING
    plan: QueryPlan
    records_per_party: int


@dataclass
class QueryRun:
    """What the job published: the plan, the DCA release and the decoded table."""

    spec: query_pb2.QueryJobSpec
    plan: QueryPlan
    dca_job: str
    release: dca_pb2.DpSum
    rows: list[tuple[tuple[str, ...], list[Cell]]]
    seconds: dict[str, float] = field(default_factory=dict)

    def message(self, job_id: str, parties: Sequence[str]) -> learner_pb2.LearnerModel:
        r = self.release
        g = common_pb2.Guarantee()
        g.CopyFrom(r.guarantee)
        g.statement = (f"{r.guarantee.statement} The query's {len(self.plan.aggregates)} aggregate(s) share this one release: Δ₂ = "
                       f"{self.plan.sensitivity:.6g} over the whole vector ({self.plan.split()}); each party is charged once.")
        method = EVALUATION_INTERVALS if self.plan.evaluation is not None else INTERVAL_METHOD
        m = query_pb2.QueryModel(spec=self.spec, group_columns=[gr.label for gr in self.plan.groups], aggregates=[a.name for a in self.plan.aggregates],
                                 confidence=CONFIDENCE, interval_method=method, budget_split=self.plan.split(), sensitivity=self.plan.sensitivity)
        for key, cells in self.rows:
            m.rows.append(query_pb2.QueryRow(groups=list(key), cells=[query_pb2.QueryCell(estimate=c.estimate, low=c.low, high=c.high, noise_sd=c.noise_sd)
                                                                      for c in cells]))
        return learner_pb2.LearnerModel(job_id=job_id, protocol="query", parties=list(parties), dca_jobs=[self.dca_job], releases=[r], guarantee=g,
                                        trust_model=r.trust_model, seeded=bool(r.seeded), seconds=dict(self.seconds), query=m)


def records(model: learner_pb2.LearnerModel) -> list[dict[str, Any]]:
    """A stored query release as table records: the group labels, then per aggregate its estimate, ``_low``, ``_high``,
    ``_noise_sd`` (an undefined estimate is None)."""
    if model.WhichOneof("model") != "query":
        raise ValueError(f"job {model.job_id} is not a query")
    q = model.query
    out = []
    for r in q.rows:
        rec: dict[str, Any] = dict(zip(q.group_columns, r.groups))
        for name, c in zip(q.aggregates, r.cells):
            rec[name] = None if math.isnan(c.estimate) else c.estimate
            rec[f"{name}_low"], rec[f"{name}_high"], rec[f"{name}_noise_sd"] = c.low, c.high, None if math.isnan(c.noise_sd) else c.noise_sd
        out.append(rec)
    return out


class QueryRole(Machine):
    """One query, sans-IO: ROUND → DONE, or FAILED. Every input is the return of the host's own calls (``self``)."""

    ROLE = "query_operator"
    STATES = (ROUND, DONE, FAILED)
    TERMINAL = (DONE, FAILED)
    TABLE = (
        row(ROUND, "released", "self", f"{DONE}|{FAILED}"),  # the table is decoded and published
        row(ROUND, "round_failed", "self", FAILED),
    )
    PARTICIPANTS = frozenset()

    def __init__(self, spec: query_pb2.QueryJobSpec, dataset: str, schema_sha256: str, parties: Sequence[str], nodes: Sequence[str],
                 records_per_party: int, *, max_missing: int = 0, seed: bytes = b"", deadline: float = 600.0, job_id: str = "query") -> None:
        super().__init__(job_id, Peer("operator", "operator"), record=False)
        if not parties or len(set(parties)) != len(parties):
            raise LocalProtocolError(Problem.INVALID_JOB, "parties must be distinct and at least one")
        try:
            self.plan = plan_of(spec, dataset, schema_sha256)
        except QueryError as e:
            raise LocalProtocolError(Problem.INVALID_JOB, str(e)) from None
        except ValueError as e:
            raise LocalProtocolError(Problem.INVALID_JOB, str(e)) from None
        self.spec = spec
        self.parties, self.nodes = tuple(parties), tuple(nodes)
        self.records_per_party = records_per_party
        try:
            self.params = dca_params(self.plan, PENDING, self.parties, self.nodes, epsilon=spec.epsilon, delta=spec.delta,
                                     records_per_party=records_per_party, max_missing=max_missing, simulation_seed=seed,
                                     deadline_seconds=deadline, purpose=f"query {job_id}")
        except ValueError as e:
            raise LocalProtocolError(Problem.INVALID_JOB, str(e)) from None
        self.asked: RunRound | None = None
        self._result: QueryRun | None = None

    def start(self) -> list[Any]:
        if self.asked is not None:
            raise LocalProtocolError(Problem.STEP_OUT_OF_ORDER, f"{self.job_id} has already started")
        self.asked = RunRound(self.params, self.plan, self.records_per_party)
        return [self.asked]

    def released(self, job_id: str, release: dca_pb2.DpSum) -> list[Any]:
        return self._local("released", job_id, release)

    def round_failed(self, detail: str) -> list[Any]:
        return self._local("round_failed", detail)

    @property
    def result(self) -> QueryRun | None:
        return None if self.state != DONE else self._result

    def _kinds(self, sender: Peer) -> frozenset[str]:
        return frozenset()

    def _on_released(self, job_id: str, release: dca_pb2.DpSum) -> list[Any]:
        p = self.params
        if release.job_id != job_id or release.dimension != p.dimension or len(release.values) != p.dimension:
            raise LocalProtocolError(Problem.MALFORMED, f"query ({job_id}): the release is not this query's ({release.dimension} values)")
        if (release.epsilon, release.delta) != (p.epsilon, p.delta) or release.sensitivity < self.plan.sensitivity * (1 - 1e-9):
            raise LocalProtocolError(Problem.MALFORMED, f"query ({job_id}): the release's (ε, δ, Δ₂) are not the query's")
        if not all(math.isfinite(v) for v in release.values) or not math.isfinite(release.noise_variance):
            raise LocalProtocolError(Problem.JOB_FAILED, f"query ({job_id}): the release is not finite")
        rows = decode(self.plan, list(release.values), release.noise_variance, release.clients_included, release.fractional_bits)
        self._result = QueryRun(self.spec, self.plan, job_id, release, rows)
        self.state = DONE
        return [Publish(self._result)]

    def _on_round_failed(self, detail: str) -> list[Any]:
        e = LocalProtocolError(Problem.JOB_FAILED, detail)
        self._fail(e)
        return e.notices
