"""The DP query at the curator (docs/protocols/query.md): a one-round :class:`~mpdp_services.curator.learner.Learner`
the learner host drives over the DCA (``mpdp.registry``: ``Hooks.learner``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mpdp import registry
from mpdp.messages import common_pb2, contribution_pb2 as cpb, learner_pb2 as pb
from mpdp.query.role import STATISTIC, QueryRole, RunRound
from mpdp_services.common import errors
from mpdp_services.curator.learner import DEFAULT_DEADLINE, Learner

if TYPE_CHECKING:
    from mpdp_services.curator.learner import LearnerHost


def _role(spec: pb.LearnerJobSpec, job_id: str) -> QueryRole:
    return QueryRole(spec.query, spec.dataset, spec.schema_sha256, list(spec.parties), list(spec.compute_nodes), spec.records_per_party,
                     max_missing=spec.max_missing, seed=spec.simulation_seed, deadline=spec.deadline_seconds or DEFAULT_DEADLINE, job_id=job_id)


def _request(spec: pb.LearnerJobSpec, ask: RunRound, dca_job: str) -> cpb.StatisticRequest:
    return cpb.StatisticRequest(dca_job_id=dca_job, dataset=spec.dataset, statistic=STATISTIC, records_per_client=ask.records_per_party,
                                schema_sha256=spec.schema_sha256, query=spec.query)


def _check(host: "LearnerHost", spec: pb.LearnerJobSpec) -> None:
    """An evaluation scores a model this curator released, exactly as released (errors.Refused otherwise): the
    parties' release is private whatever the weights, but its result names ``model_job`` and must be that model's."""
    if not spec.query.HasField("evaluation"):
        return
    from mpdp.query.evaluation import classifier_weights

    ev = spec.query.evaluation
    model = host.published(ev.model_job) if host.published is not None else None
    if model is None:
        model = host.store.model(ev.model_job)
    try:
        if model is None:
            raise ValueError(f"no released model {errors.shown(ev.model_job)}")
        protocol, weights = classifier_weights(model)
    except ValueError as e:
        raise errors.Refused(common_pb2.INVALID_JOB, f"not a valid evaluation: {e}") from None
    if protocol != ev.protocol or list(ev.weights) != weights:
        raise errors.Refused(common_pb2.INVALID_JOB, f"not a valid evaluation: the weights are not those job {errors.shown(ev.model_job)} released")


LEARNER = Learner("query", registry.prefix("query"), _role, _request, lambda role: (0, 1), lambda spec, run, job: run.message(job, spec.parties), RunRound,
                  stages=lambda r: ("round", "result"), check=_check)
