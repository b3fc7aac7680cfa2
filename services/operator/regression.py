"""`mpdp regress`: distributed DP Bayesian linear regression (Heikkilä et al. 2017, Algorithm 2) as a curator job.

The curator hosts the job (services/curator/learner.py): it drives :class:`mpdp.regression.role.RegressionRole`
(std round, grid search, main round, posterior), each round a DCA job the parties contribute to, and keeps the
posterior and both releases in its store. Party data never leave the parties; each contribution is secret-shared
across the compute nodes with its slice of Gaussian noise, floating-point (``noise="gaussian"``) or exact integer
discrete Gaussian (``noise="discrete-gaussian"``, :mod:`mpdp.dca.discrete`). This module only builds the spec,
submits it and reads the release back. :func:`mpdp.regression.role.run_inmemory` drives the same role in one process.
"""

from __future__ import annotations

from mpdp.dca.params import MODE_ENUM, NOISE_ENUM
from mpdp.messages import learner_pb2 as pb
from mpdp.regression.plan import RegressionPlan
from mpdp.regression.role import RegressionRun, RoundFailed
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.operator import learner
from mpdp_services.operator.learner import run_model

__all__ = ["RegressionRun", "RoundFailed", "fetch_model", "regression_spec", "run_regression"]


def regression_spec(dataset: str, parties: list[str], nodes: list[str], bounds: tuple[float, ...], epsilon: float, delta: float, total_records: int,
                    records_per_party: int, *, mode: str = "corrected", noise: str = "gaussian", grid_repeats: tuple[int, int] = (20, 20),
                    seed: bytes = b"", deadline: float = 600.0, job_id: str = "", schema_sha256: str = "", validate: bool = True) -> pb.LearnerJobSpec:
    """``validate`` (the default): every party's statistic is proven in its range and the rounds take the discrete
    Gaussian whatever ``noise`` says; False (``--validate none``): no proofs, noise ``noise``."""
    RegressionPlan(bounds, epsilon, delta, mode, grid_repeats=grid_repeats)  # ValueError here rather than a refusal there
    if noise not in NOISE_ENUM:
        raise ValueError(f"noise must be one of {', '.join(NOISE_ENUM)}")
    return pb.LearnerJobSpec(
        job_id=job_id, dataset=dataset, parties=parties, compute_nodes=nodes, records_per_party=records_per_party, simulation_seed=seed,
        deadline_seconds=deadline, schema_sha256=schema_sha256,
        regression=pb.RegressionJobSpec(bounds=list(bounds), epsilon=epsilon, delta=delta, total_records=total_records, mode=MODE_ENUM[mode],
                                        noise=NOISE_ENUM["discrete-gaussian" if validate else noise], grid_repeats_x=grid_repeats[0],
                                        grid_repeats_y=grid_repeats[1], unvalidated=not validate),
    )


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
    validate: bool = True,
    job_id: str = "",
) -> RegressionRun:
    """Submit the job, wait for the posterior and return the run; raises :class:`RoundFailed` naming why nothing was released.
    ``job_id``: the operator's id for the job ("" = the curator chooses)."""
    spec = regression_spec(dataset, parties, nodes, bounds, epsilon, delta, total_records, records_per_party, mode=mode, noise=noise,
                           grid_repeats=grid_repeats, seed=seed, deadline=deadline, validate=validate, job_id=job_id)
    return RegressionRun.of(run_model(ep, spec, "regression", RoundFailed))


def fetch_model(ep: Endpoints, job_id: str) -> RegressionRun:
    return RegressionRun.of(learner.fetch_model(ep, job_id))


def predict_regression(ep: Endpoints, job_id: str, data_path: str, fmt: str, **_options: object) -> dict:
    """Predict a file's targets (its last column, if any) with a regression job's posterior (ŷ = x*ᵀμ, predictive
    variance 1/λ + x*ᵀΛ⁻¹x*: post-processing of the DP releases); the mean absolute error if the file is labelled."""
    import numpy as np

    from mpdp.data.loaders import load
    from mpdp_services.operator.jobs import release

    rel = release(ep, job_id)
    if rel.WhichOneof("release") != "learner" or rel.learner.WhichOneof("model") != "regression":
        raise ValueError(f"job {job_id} is a {rel.protocol} job, not a regression")
    post = RegressionRun.of(rel.learner).posterior
    X, y = load(data_path, fmt)
    if X.shape[1] != post.mean.size:
        raise ValueError(f"{data_path} has {X.shape[1]} features, the posterior has {post.mean.size}")
    p = post.predict(X)
    out = {"job_id": job_id, "rows": int(len(p.mean)), "mean_prediction": float(np.mean(p.mean)), "mean_predictive_variance": float(np.mean(p.variance)),
           "guarantee": rel.learner.guarantee.statement}
    if y is not None and len(y) == len(p.mean):
        out["mae"] = float(np.mean(np.abs(np.asarray(y, dtype=np.float64) - p.mean)))
    return out
