"""Operator side of local DP releases (LMGC): submit a job, fetch the published set, classify."""

from __future__ import annotations

import numpy as np

from mpdp.data.loaders import load
from mpdp.local_release import label_text, predict
from mpdp.messages import common_pb2, local_release_pb2 as pb
from mpdp.results import against_majority, majority_rate
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.operator.jobs import released


def summary(s: pb.LocalModelSet) -> dict:
    return {
        "job_id": s.job_id,
        "model": "lmgc",
        "parties": [r.party for r in s.releases],
        "releases": {r.party: {"epsilon": r.guarantee.epsilon, "calibration": r.mode, "mode": r.mode, "classes": list(r.classes), "guarantee": r.guarantee.statement} for r in s.releases},
        "aggregate": s.aggregate_statement,
        "seeded": s.seeded,
    }


def local_spec(dataset: str, parties: list[str], epsilon: float, lam: float, mode: str, ridge: float, data_norm: float, seed: bytes = b"",
               schema_sha256: str = "") -> pb.LocalModelJobSpec:
    spec = pb.LocalModelJobSpec(dataset=dataset, model="lmgc", epsilon=epsilon, parties=parties, mode=common_pb2.CORRECTED if mode == "corrected" else common_pb2.PAPER,
                                ridge=ridge, data_norm=data_norm, simulation_seed=seed, schema_sha256=schema_sha256)
    setattr(spec, "lambda", lam)
    return spec


def submit_local(ep: Endpoints, dataset: str, parties: list[str], epsilon: float, lam: float, mode: str, ridge: float, data_norm: float, seed: bytes = b"",
                 schema_sha256: str = "") -> dict:
    """Run an LMGC job through the curator's job host (keyed submit, watch, release); its summary. grpc.RpcError (the
    job's Problem) if it published nothing."""
    from mpdp.messages import operations_pb2
    from mpdp_services.operator.jobs import run

    spec = local_spec(dataset, parties, epsilon, lam, mode, ridge, data_norm, seed, schema_sha256)
    return summary(run(ep, operations_pb2.JobSubmission(lmgc=spec), timeout=900)[1].lmgc)


def fetch(ep: Endpoints, job_id: str) -> pb.LocalModelSet:
    """A published set of local releases from the curator's job host (GetRelease); ValueError if the job is not an
    LMGC job."""
    return released(ep, job_id, "lmgc")


def predict_local(ep: Endpoints, job_id: str, data_path: str, fmt: str, party: str = "average", **_options: object) -> dict:
    s = fetch(ep, job_id)
    rel = s.aggregate if party == "average" else next((r for r in s.releases if r.party == party), None)
    if rel is None or not rel.theta:
        raise ValueError(f"job {job_id} has no release {party!r}: {s.aggregate_statement if party == 'average' else 'unknown party'}")
    X, y = load(data_path, fmt, n_features=rel.dimension - 1 if fmt != "csv" else None)  # LIBSVM lists non-zero features only
    if X.shape[1] + 1 != rel.dimension:
        raise ValueError(f"{data_path} has {X.shape[1]} features, the model expects {rel.dimension - 1}")
    pred = predict(rel, X)
    labels = np.array([label_text(v) for v in y])
    predicted = {str(c): int(np.sum(pred == c)) for c in sorted(set(pred.tolist()) | set(labels.tolist()))}
    accuracy = float(np.mean(pred == labels))
    return {"job_id": job_id, "release": party, "rows": int(len(pred)), "predicted": predicted, "accuracy": accuracy,
            **against_majority(accuracy, majority_rate(labels)), "guarantee": rel.guarantee.statement}
