"""`mpdp train dp-gd`: multiparty DP gradient descent (docs/protocols/dpgd.md) as a curator job.

The curator hosts the job (services/curator/learner.py): it drives :class:`mpdp.dpgd.role.DpgdRole` round by
round (each round's DCA job, the parties' contributions, the release) and keeps the released model (weights, plan,
guarantee, trust model) in its store. This module only builds the job spec, submits it and reads the model back
(:func:`run_dpgd` waits for it; ``mpdp train --detach`` does not). :func:`mpdp.dpgd.role.run_inmemory` drives the
same role in one process.
"""

from __future__ import annotations

from mpdp import limits
from mpdp.dpgd.plan import DpgdPlan
from mpdp.dpgd.role import DpgdRun, RoundFailed
from mpdp.dpgd.wire import MODES
from mpdp.messages import learner_pb2 as pb
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.operator import learner
from mpdp_services.operator.learner import run_model

__all__ = ["DpgdRun", "RoundFailed", "dpgd_spec", "fetch_model", "run_dpgd"]


def dpgd_spec(dataset: str, parties: list[str], nodes: list[str], plan: DpgdPlan, records_per_party: int, *, job_id: str = "", max_missing: int = 0,
              seed: bytes = b"", deadline: float = 600.0, schema_sha256: str = "") -> pb.LearnerJobSpec:
    """The job as the curator's learner host takes it (the plan's public parameters; its own defaults for C, h, averaging)."""
    if job_id:
        limits.check_id(job_id, "job_id")
    return pb.LearnerJobSpec(
        job_id=job_id, dataset=dataset, parties=parties, compute_nodes=nodes, records_per_party=records_per_party, max_missing=max_missing,
        simulation_seed=seed, deadline_seconds=deadline, schema_sha256=schema_sha256,
        dpgd=pb.DpgdJobSpec(task=plan.task.kind, classes=plan.task.classes, dimension=plan.dimension, epsilon=plan.epsilon, delta=plan.delta, lam=plan.lam,
                            rounds=plan.rounds, total_records=plan.total_records or 0, mode=MODES[plan.mode], unvalidated=not plan.validated),
    )


def run_dpgd(ep: Endpoints, dataset: str, parties: list[str], nodes: list[str], plan: DpgdPlan, records_per_party: int, *,
             job_id: str | None = None, max_missing: int = 0, seed: bytes = b"", deadline: float = 600.0, schema_sha256: str = "") -> DpgdRun:
    """Submit the job, wait for its release and return it; raises :class:`RoundFailed` naming why nothing was released."""
    spec = dpgd_spec(dataset, parties, nodes, plan, records_per_party, job_id=job_id or "", max_missing=max_missing, seed=seed, deadline=deadline,
                     schema_sha256=schema_sha256)
    return DpgdRun.of(run_model(ep, spec, "dp-gd", RoundFailed))


def fetch_model(ep: Endpoints, job_id: str) -> DpgdRun:
    """The released model of ``job_id`` from the curator's store (grpc.RpcError if there is none, ValueError if the
    job is not a learner's)."""
    return DpgdRun.of(learner.fetch_model(ep, job_id))
