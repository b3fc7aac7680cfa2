"""Operator side of HCB16 ensemble jobs: run one, fetch a published ensemble, classify with it."""

from __future__ import annotations

import numpy as np

from mpdp.data.loaders import load
from mpdp.hamm2016 import job as core
from mpdp.hamm2016.erm import predict
from mpdp.messages import hamm2016_pb2 as pb
from mpdp.results import against_majority, majority_rate
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.operator.jobs import released


def summary(r: pb.EnsembleRelease) -> dict:
    return {
        "job_id": r.job_id,
        "model": "hamm2016",
        "method": r.method,
        "classes": list(r.classes),
        "features": r.features,
        "parties_included": r.parties_included,
        "auxiliary_rows": r.auxiliary_rows,
        "lam": r.lam,
        "lambda": r.lam,  # deprecated spelling of "lam", kept for one release
        "epsilon": r.epsilon,
        "sensitivity": r.sensitivity,
        "guarantee": {"mechanism": r.guarantee.mechanism, "epsilon": r.guarantee.epsilon, "delta": r.guarantee.delta, "statement": r.guarantee.statement},
        "trust_model": r.trust_model,
        "vote_sum_job": r.dca_job_id,
        "seeded": r.seeded,
        "stage_seconds": dict(r.stage_seconds),
    }


def train_ensemble(ep: Endpoints, spec: pb.EnsembleJobSpec, timeout: float = 1800.0) -> pb.EnsembleRelease:
    """Run an ensemble job through the curator's job host (keyed submit, watch, release); grpc.RpcError (the job's
    Problem) if it published nothing."""
    from mpdp.messages import operations_pb2
    from mpdp_services.operator.jobs import run

    return run(ep, operations_pb2.JobSubmission(hamm2016=spec), timeout=timeout)[1].hamm2016


def fetch(ep: Endpoints, job_id: str) -> pb.EnsembleRelease:
    """A published ensemble from the curator's job host (GetRelease); ValueError if the job is not an ensemble."""
    return released(ep, job_id, "hamm2016")


def predict_ensemble(ep: Endpoints, job_id: str, data_path: str, fmt: str, **_options: object) -> dict:
    """Classify a file's rows (clipped to ‖x‖ ≤ 1 like the training data) and score them if labelled."""
    r = fetch(ep, job_id)
    X, y = load(data_path, fmt, n_features=r.features if fmt != "csv" else None)
    if X.shape[1] != r.features:
        raise ValueError(f"{data_path} has {X.shape[1]} features, the ensemble has {r.features}")
    from mpdp.learn.logreg import clip_rows

    X = clip_rows(X)  # the one row map of the training data
    pred = predict(core.weights_of(r), X)
    out = {"job_id": job_id, "rows": int(len(pred)), "guarantee": r.guarantee.statement}
    try:
        truth = core.label_indices(y, list(r.classes))
        accuracy = float(np.mean(pred == truth))
        out.update(accuracy=accuracy, **against_majority(accuracy, majority_rate(truth)))
    except core.EnsembleJobError:
        pass  # unlabelled or other labels: predictions only
    out["predicted"] = {c: int(np.sum(pred == k)) for k, c in enumerate(r.classes)}
    return out
