"""`mpdp regress`: distributed DP Bayesian linear regression (Heikkilä et al. 2017, Algorithm 2) as a federation job.

:class:`mpdp.regression.role.RegressionRole` decides the public steps (std round, grid search, main round,
posterior); this driver only carries out each round it asks for: create the round's DCA job, have the curator
ask every party to contribute its statistic as a DCA client (``RequestContributions``), wait for the DP
release. Party data never leave the parties; each contribution is secret-shared across the compute nodes with
its slice of Gaussian noise, floating-point (``noise="gaussian"``) or exact integer discrete Gaussian
(``noise="discrete-gaussian"``, :mod:`mpdp.dca.discrete`; both rounds then state ρ-zCDP and (ε, δ)); the plan's
threshold search simulates the Gaussian mode's σ, which can only make the thresholds slightly less than optimal
in the discrete mode, never the release less private. :func:`mpdp.regression.role.run_inmemory` drives the same role in one process.
"""

from __future__ import annotations

import grpc

from mpdp.messages import contribution_pb2 as cpb, contribution_pb2_grpc as cpb_grpc, dca_pb2 as pb
from mpdp.regression.plan import RegressionPlan
from mpdp.regression.role import RegressionRole, RegressionRun, RoundFailed, RunRound, drive
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.common.rpc import CHANNEL_OPTIONS
from mpdp_services.dca_client.client import DcaOperator

__all__ = ["RegressionRun", "RoundFailed", "run_regression"]


def _round(ep: Endpoints, op: DcaOperator, dataset: str, parties: list[str], ask: RunRound) -> tuple[str, pb.DpSum]:
    job = op.create(ask.params.to_spec())
    opts = CHANNEL_OPTIONS + [("grpc.ssl_target_name_override", ep.curator_name)]
    with grpc.secure_channel(ep.curator_address, ep.tls.channel_credentials(), options=opts) as ch:
        stub = cpb_grpc.ContributionCuratorStub(ch)
        req = cpb.StatisticRequest(dca_job_id=job, dataset=dataset, statistic=ask.statistic, bounds=list(ask.bounds), records_per_client=ask.records_per_party)
        try:
            stub.RequestContributions(cpb.ContributionRound(request=req, parties=parties), timeout=900)
        except grpc.RpcError as e:
            raise RoundFailed(f"{ask.statistic} round ({job}): {e.details()}") from e
    status = op.wait(job, timeout=900)
    if status.state != "RELEASED":
        raise RoundFailed(f"{ask.statistic} round ({job}) failed: {status.detail}")
    return job, op.release(job)


def run_regression(
    ep: Endpoints,
    dataset: str,
    parties: list[str],
    nodes: list[str],
    bounds: tuple[float, ...],
    epsilon: float,
    delta: float,
    total_records: int,
    records_per_party: int,
    *,
    mode: str = "corrected",
    noise: str = "gaussian",
    grid_repeats: tuple[int, int] = (20, 20),
    seed: bytes = b"",
    deadline: float = 600.0,
) -> RegressionRun:
    plan = RegressionPlan(bounds, epsilon, delta, mode, grid_repeats=grid_repeats)
    role = RegressionRole(plan, parties, nodes, total_records, records_per_party, seed=seed, deadline=deadline, noise=noise)
    with DcaOperator(ep) as op:
        return drive(role, lambda ask: _round(ep, op, dataset, parties, ask))
