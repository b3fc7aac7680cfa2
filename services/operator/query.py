"""The operator's side of a DP query (docs/protocols/query.md): compile the query locally (a query outside the
subset, or naming a column the schema does not hold, is refused here, before the curator or any party sees it), submit
it to the curator's job host (a learner job), wait for the release and read its table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from mpdp.messages import learner_pb2 as pb, query_pb2
from mpdp.query.plan import QueryPlan, compile_query
from mpdp.query.role import records
from mpdp_services.common.endpoints import Endpoints

DEFAULT_RECORDS_PER_PARTY = 100_000  # the public row bound each party's vector is proven within (not its noise: Δ₂ is per record)
DEFAULT_DELTA = 1e-6


class QueryFailed(RuntimeError):
    """The curator refused the query or it released nothing; the message says why."""


def _from(sql: str) -> str:
    import sqlglot
    from sqlglot import exp

    from mpdp.query.plan import QueryError

    try:
        tree = sqlglot.parse_one(sql)
    except sqlglot.errors.SqlglotError:
        raise QueryError("the query does not parse as SQL") from None
    t = tree.find(exp.Table) if tree is not None else None
    if t is None:
        raise QueryError("FROM must name one dataset")
    return t.name


def query_spec(sql: str, *, parties: Sequence[str], nodes: Sequence[str], epsilon: float, delta: float = DEFAULT_DELTA,
               records_per_party: int = DEFAULT_RECORDS_PER_PARTY, schema: Any = None, dataset: str | None = None, max_missing: int = 0,
               seed: bytes = b"", deadline: float = 0.0) -> tuple[pb.LearnerJobSpec, QueryPlan]:
    """The job spec of ``sql`` and its plan; QueryError before anything is sent if the query is outside the subset."""
    ds = dataset or _from(sql)
    plan = compile_query(sql, schema, ds)
    spec = query_pb2.QueryJobSpec(sql=sql, schema_json=schema.canonical().decode() if schema is not None else "", epsilon=epsilon, delta=delta)
    return pb.LearnerJobSpec(dataset=ds, parties=list(parties), compute_nodes=list(nodes), records_per_party=records_per_party, max_missing=max_missing,
                             simulation_seed=seed, deadline_seconds=deadline, schema_sha256=schema.sha256() if schema is not None else "", query=spec), plan


def run_query(ep: Endpoints, spec: pb.LearnerJobSpec) -> pb.LearnerModel:
    """Submit, wait for the end and return the release (:class:`QueryFailed` otherwise)."""
    from mpdp_services.operator.learner import run_model

    return run_model(ep, spec, "query", QueryFailed)


def summary(model: pb.LearnerModel) -> dict[str, Any]:
    """The release as one JSON-able document: the table's records, the guarantee and how the intervals were made."""
    q = model.query
    return {"job_id": model.job_id, "protocol": "query", "sql": q.spec.sql, "rows": records(model), "group_columns": list(q.group_columns),
            "aggregates": list(q.aggregates), "confidence": q.confidence, "interval_method": q.interval_method, "sensitivity": q.sensitivity,
            "budget_split": q.budget_split, "guarantee": {"epsilon": model.guarantee.epsilon, "delta": model.guarantee.delta,
                                                          "mechanism": model.guarantee.mechanism, "statement": model.guarantee.statement},
            "trust_model": model.trust_model, "seeded": model.seeded, "dca_job": model.dca_jobs[0] if model.dca_jobs else ""}


def frame(model: pb.LearnerModel):
    """The release as a pandas DataFrame: the group columns, then per aggregate its estimate, ``_low``, ``_high`` and
    ``_noise_sd``; ``attrs`` holds the guarantee and the interval method."""
    import pandas as pd  # type: ignore[import-untyped]

    doc = summary(model)
    df = pd.DataFrame.from_records(doc["rows"])
    df.attrs.update({k: doc[k] for k in ("job_id", "guarantee", "interval_method", "budget_split", "confidence", "sensitivity", "seeded")})
    return df


def text_table(model: pb.LearnerModel) -> str:
    """The release as an aligned text table (estimate [low, high] ± noise sd per cell)."""
    q = model.query
    head = list(q.group_columns) + list(q.aggregates)
    body = []
    for r in q.rows:
        cells = [f"{_fmt(c.estimate)} [{_fmt(c.low)}, {_fmt(c.high)}] ±{_fmt(c.noise_sd)}" for c in r.cells]
        body.append(list(r.groups) + cells)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip() for row in [head, *body]]
    return "\n".join(lines)


def _fmt(v: float) -> str:
    return "nan" if v != v else format(v, ".4g")


def export(model: pb.LearnerModel) -> tuple[dict[str, Any], dict[str, Any]]:
    """`mpdp model export` of a query's release (``mpdp.registry``: ``Hooks.export``): its summary, and every cell's
    (estimate, low, high, noise sd) as an array of rows × aggregates × 4."""
    import numpy as np

    doc = {k: v for k, v in summary(model).items() if k not in ("job_id", "protocol")}
    cells = np.array([[(c.estimate, c.low, c.high, c.noise_sd) for c in r.cells] for r in model.query.rows], dtype=np.float64)
    return {"model": "query", **doc}, {"cells": cells.reshape(len(model.query.rows), len(model.query.aggregates), 4)}


def shown(model: pb.LearnerModel) -> str:
    """What `mpdp jobs show` prints under a released query job (``Hooks.show``): its table (docs/protocols/query.md)."""
    return text_table(model)


def load_schema(path: str | Path | None):
    if path is None:
        return None
    from mpdp.schema import Schema

    return Schema.load(Path(path))


def dumps(model: pb.LearnerModel) -> str:
    return json.dumps(summary(model), indent=2, allow_nan=False)


# -- evaluating a released model (mpdp.query.evaluation) ------------------------------------------------------------
def released_classifier(ep: Endpoints, job_id: str) -> tuple[str, list[float]]:
    """The protocol and weights ŵ of a released binary linear classifier, fetched as `mpdp predict` fetches them
    (QueryFailed when the job released no such model; grpc.RpcError from the curator)."""
    from mpdp.query.evaluation import classifier_weights
    from mpdp_services.operator.jobs import get_job

    protocol = str(get_job(ep, job_id)["protocol"])
    model: Any = None
    if protocol == "pathak2010":
        from mpdp_services.operator.pathak2010 import OperatorClient

        with OperatorClient(ep) as client:
            model = client.model(job_id)
    elif protocol == "dpgd":
        from mpdp_services.operator.learner import fetch_model

        model = fetch_model(ep, job_id)
    else:
        raise QueryFailed(f"job {job_id} is a {protocol} job; evaluate scores a released pathak2010 or binary dpgd classifier")
    try:
        return classifier_weights(model)
    except ValueError as e:
        raise QueryFailed(str(e)) from None


def evaluation_spec(model_job: str, protocol: str, weights: Sequence[float], *, dataset: str, parties: Sequence[str], nodes: Sequence[str],
                    epsilon: float, delta: float = DEFAULT_DELTA, records_per_party: int = DEFAULT_RECORDS_PER_PARTY, score_bins: int = 0,
                    schema_sha256: str = "", max_missing: int = 0, seed: bytes = b"", deadline: float = 0.0) -> tuple[pb.LearnerJobSpec, QueryPlan]:
    """The query job that evaluates the released model on every party's ``dataset``, and its plan (ValueError for a
    malformed model or bins, before anything is sent)."""
    from mpdp.query.evaluation import DEFAULT_SCORE_BINS, evaluation_of, evaluation_plan

    ev = query_pb2.EvaluationSpec(model_job=model_job, protocol=protocol, weights=list(weights), score_bins=score_bins or DEFAULT_SCORE_BINS)
    plan = evaluation_plan(evaluation_of(ev), dataset)
    spec = query_pb2.QueryJobSpec(sql=plan.sql, epsilon=epsilon, delta=delta, evaluation=ev)
    return pb.LearnerJobSpec(dataset=dataset, parties=list(parties), compute_nodes=list(nodes), records_per_party=records_per_party, max_missing=max_missing,
                             simulation_seed=seed, deadline_seconds=deadline, schema_sha256=schema_sha256, query=spec), plan


def evaluation_summary(model: pb.LearnerModel) -> dict[str, Any]:
    """An evaluation's release as one JSON-able document: accuracy and AUC with their intervals, the confusion matrix."""
    doc = summary(model)
    (row,) = doc["rows"]
    ev = model.query.spec.evaluation
    doc.update(protocol="evaluation", model_job=ev.model_job, model_protocol=ev.protocol, score_bins=ev.score_bins, **row)
    doc["confusion"] = {"true_positive": row["true_positive"], "false_negative": row["false_negative"],
                        "false_positive": row["false_positive"], "true_negative": row["true_negative"]}
    return doc
