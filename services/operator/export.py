"""Any released model as plain data (`mpdp model export`): what a job of any protocol published, fetched from the
curator's job host (GetRelease), as one JSON document and its arrays (for npz).

Every document names the job, its protocol and model kind, the guarantee (mechanism, ε, δ, statement), the trust
model where the protocol states one, whether a simulation seed fixed the noise, and the model itself: coefficients
(and intercept where the model has one) with the class labels, or the released sum or posterior.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mpdp import registry
from mpdp.messages import common_pb2, operations_pb2 as pb


def _guarantee(g: common_pb2.Guarantee) -> dict[str, Any]:
    return {"mechanism": g.mechanism, "epsilon": g.epsilon, "delta": g.delta, "statement": g.statement}


def pathak(m) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    from mpdp.pathak2010 import tester

    w = tester.rebuild(m)  # ŵ_s = Σ shares / K (the shares' sum is the release)
    doc = {"model": "logreg", "coefficients": w.tolist(), "intercept": 0.0, "classes": ["-1", "1"], "dimension": m.dimension, "parties": m.parties,
           "epsilon": m.epsilon, "lam": getattr(m, "lambda"), "dataset": m.dataset, "guarantee": _guarantee(m.guarantee),
           "trust_model": m.trust_model, "seeded": m.seeded}
    return doc, {"coefficients": w}


def lmgc(s) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    from mpdp.local_release import theta_of

    releases = {r.party: {"theta": list(r.theta), "classes": list(r.classes), "dimension": r.dimension, "guarantee": _guarantee(r.guarantee)} for r in s.releases}
    # the set (and its average, post-processing) is max_j ε_j-DP: each record is in exactly one party's data
    worst = max(s.releases, key=lambda r: r.guarantee.epsilon)
    guarantee = {**_guarantee(worst.guarantee), "statement": s.aggregate_statement or worst.guarantee.statement}
    doc: dict[str, Any] = {"model": "lmgc", "releases": releases, "aggregate_statement": s.aggregate_statement, "guarantee": guarantee, "seeded": s.seeded}
    arrays = {f"theta_{p}": theta_of(r) for p, r in zip(releases, s.releases)}
    if s.aggregate.theta:
        doc["aggregate"] = {"theta": list(s.aggregate.theta), "classes": list(s.aggregate.classes), "dimension": s.aggregate.dimension,
                            "guarantee": _guarantee(s.aggregate.guarantee)}
        doc["classes"] = list(s.aggregate.classes)
        arrays["theta_average"] = theta_of(s.aggregate)
    return doc, arrays


def ensemble(r) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    from mpdp.hamm2016.job import weights_of

    W = weights_of(r)
    doc = {"model": "hamm2016", "method": r.method, "coefficients": W.tolist(), "intercept": 0.0, "classes": list(r.classes), "features": r.features,
           "parties_included": r.parties_included, "epsilon": r.epsilon, "lam": r.lam, "sensitivity": r.sensitivity, "guarantee": _guarantee(r.guarantee),
           "trust_model": r.trust_model, "seeded": r.seeded}
    return doc, {"coefficients": W}


def dca(r) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    values = np.asarray(r.values, dtype=np.float64)
    doc = {"model": "sum", "values": values.tolist(), "clients_included": r.clients_included, "guarantee": _guarantee(r.guarantee),
           "trust_model": r.trust_model, "seeded": r.seeded}
    return doc, {"values": values}


def dpgd(m) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    from mpdp.dpgd.role import DpgdRun

    run = DpgdRun.of(m)
    doc = run.summary()
    doc["iterates"] = [np.asarray(it).tolist() for it in run.iterates]
    doc.setdefault("coefficients", np.asarray(run.model).tolist())
    return doc, {"weights": np.asarray(run.model), "iterates": np.stack([np.asarray(it) for it in run.iterates])}


def regression(m) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    from mpdp.regression.role import RegressionRun

    run = RegressionRun.of(m)
    p = run.posterior
    releases = [{"job": r.job_id, "values": list(r.values), "epsilon": r.guarantee.epsilon, "delta": r.guarantee.delta, "statement": r.guarantee.statement}
                for r in (run.std_release, run.main_release)]
    doc = {
        "model": "regression", "parties": list(m.parties), "bounds": list(run.plan.bounds), "epsilon": run.plan.epsilon,
        "delta": run.plan.delta, "calibration": run.plan.mode, "mode": run.plan.mode, "coefficients": p.mean.tolist(), "intercept": 0.0,
        "posterior_mean": p.mean.tolist(), "posterior_precision": np.asarray(p.precision).tolist(), "posterior_lambda": p.lam,
        "thresholds": np.asarray(run.thresholds).tolist(), "multipliers": list(run.multipliers), "std_release": releases[0], "main_release": releases[1],
        "guarantee": _guarantee(m.guarantee), "trust_model": m.trust_model, "seeded": m.seeded,
    }
    arrays = {"posterior_mean": p.mean, "posterior_precision": np.asarray(p.precision), "thresholds": np.asarray(run.thresholds),
              "std_release": np.asarray(run.std_release.values), "main_release": np.asarray(run.main_release.values)}
    return doc, arrays


def exported(release: pb.JobRelease) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(document, arrays) of a job's release, by its protocol's export (``mpdp.registry``: ``Hooks.export``);
    ValueError if the release cannot be read."""
    field = release.WhichOneof("release")
    if field is None:
        raise ValueError(f"job {release.job_id} carries no release")
    by_field = [p for p in registry.PROTOCOLS if p.submission == field]
    protocol = registry.BY_NAME.get(release.protocol) if release.protocol else (by_field[0] if len(by_field) == 1 else None)
    if protocol is None or protocol.submission != field or protocol.hooks.export is None:
        raise ValueError(f"job {release.job_id}: its release names no protocol this client can export")
    doc, arrays = registry.hook(protocol.hooks.export)(getattr(release, field))
    return {"job_id": release.job_id, "protocol": protocol.name, **doc}, arrays
