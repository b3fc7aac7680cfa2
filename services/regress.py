"""`mpdp regress`: distributed DP Bayesian linear regression (Heikkilä et al. 2017, Algorithm 2) as a federation job.

The operator drives the public steps (the curator's plan): create the std-round DCA job, have every party
contribute Σ(x², y²) of its own clipped records as a DCA client, read the DP release, choose thresholds on
synthetic data, create the main-round job, have the parties contribute XᵀX and Xᵀy, and compute the
posterior. Party data never leave the parties; each contribution is secret-shared across the compute nodes
with its slice of Gaussian noise — floating-point (`noise="gaussian"`) or exact integer discrete Gaussian
(`noise="discrete-gaussian"`, :mod:`mpdp.dca.discrete`; both rounds then state ρ-zCDP and (ε, δ)). The plan's
threshold search simulates the Gaussian mode's σ; the discrete mode's σ is a few per cent larger, which can only
make the chosen thresholds slightly less than optimal, never the release less private.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import grpc
import numpy as np

from mpdp.dca.params import NOISE_ENUM
from mpdp.messages import contribution_pb2 as cpb
from mpdp.messages import contribution_pb2_grpc as cpb_grpc
from mpdp.messages import dca_pb2 as pb
from mpdp.regression.plan import RegressionPlan
from mpdp.regression.posterior import Posterior
from services.client import Endpoints
from services.common.rpc import CHANNEL_OPTIONS
from services.dca_client import DcaOperator


@dataclass
class RegressionRun:
    plan: RegressionPlan
    std_job: str
    main_job: str
    std_release: pb.DpSum
    main_release: pb.DpSum
    thresholds: np.ndarray
    multipliers: tuple[float, float]
    posterior: Posterior
    seconds: dict[str, float]


class RoundFailed(RuntimeError):
    pass


def _round(ep: Endpoints, op: DcaOperator, spec: pb.DcaJobSpec, dataset: str, parties: list[str], statistic: str, bounds, records: int) -> tuple[str, pb.DpSum]:
    job = op.create(spec)
    opts = CHANNEL_OPTIONS + [("grpc.ssl_target_name_override", ep.curator_name)]
    with grpc.secure_channel(ep.curator_address, ep.tls.channel_credentials(), options=opts) as ch:
        stub = cpb_grpc.ContributionCuratorStub(ch)
        req = cpb.StatisticRequest(dca_job_id=job, dataset=dataset, statistic=statistic, bounds=[float(b) for b in bounds], records_per_client=records)
        try:
            stub.RequestContributions(cpb.ContributionRound(request=req, parties=parties), timeout=900)
        except grpc.RpcError as e:
            raise RoundFailed(f"{statistic} round ({job}): {e.details()}") from e
    status = op.wait(job, timeout=900)
    if status.state != "RELEASED":
        raise RoundFailed(f"{statistic} round ({job}) failed: {status.detail}")
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
    K = len(parties)
    times: dict[str, float] = {}
    with DcaOperator(ep) as op:
        t = time.perf_counter()
        std_spec = plan.std_round().dca_params("pending", K, nodes, records_per_client=records_per_party, simulation_seed=seed, roster=parties, deadline_seconds=deadline).to_spec()
        std_spec.noise = NOISE_ENUM[noise]
        std_job, std_rel = _round(ep, op, std_spec, dataset, parties, "linreg/std", plan.bounds, records_per_party)
        times["std_round"] = time.perf_counter() - t
        t = time.perf_counter()
        step = plan.main_round(list(std_rel.values), total_records)
        times["grid_search"] = time.perf_counter() - t
        t = time.perf_counter()
        main_spec = step.spec.dca_params("pending", K, nodes, records_per_client=records_per_party, simulation_seed=seed, roster=parties, deadline_seconds=deadline).to_spec()
        main_spec.noise = NOISE_ENUM[noise]
        main_job, main_rel = _round(ep, op, main_spec, dataset, parties, "linreg/main", step.spec.bounds, records_per_party)
        times["main_round"] = time.perf_counter() - t
    post = plan.finish(list(main_rel.values))
    m = step.multipliers
    mult = (m.p_x, m.p_y) if hasattr(m, "p_x") else tuple(m)
    return RegressionRun(plan, std_job, main_job, std_rel, main_rel, step.thresholds, mult, post, times)  # type: ignore[arg-type]
