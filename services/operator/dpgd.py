"""`mpdp train --model dp-gd`: multiparty DP gradient descent (docs/protocols/dpgd.md) as a federation job.

:class:`mpdp.dpgd.role.DpgdRole` decides the public steps (R + 1 rounds, the curator's step after each release,
the model); this driver only carries out each round it asks for: create the round's DCA job (labelled
``<job>.r<round>``), have the curator ask every party to contribute its clipped gradient sum at the published
iterate as a DCA client (``RequestContributions`` with a ``dpgd/round`` StatisticRequest), wait for the DP
release. Party rows never leave the parties; the operator and curator see only each round's noisy sum.
:func:`mpdp.dpgd.role.run_inmemory` drives the same role in one process.

The curator keeps no store for dp-gd models: the released model (weights, plan, guarantee, trust model) is a JSON
file the operator writes under the federation's folder, ``<endpoints folder>/models/<job>.json``
(:func:`save_model`), which ``mpdp predict --job dp-…`` reads (:func:`load_model`).
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import grpc

from mpdp import limits
from mpdp.dpgd.plan import DpgdPlan
from mpdp.dpgd.role import DpgdRole, DpgdRun, RoundFailed, RunRound, drive
from mpdp.dpgd.wire import STATISTIC
from mpdp.messages import contribution_pb2 as cpb, contribution_pb2_grpc as cpb_grpc, dca_pb2 as pb
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.common.rpc import CHANNEL_OPTIONS
from mpdp_services.dca_client.client import DcaOperator

__all__ = ["DpgdRun", "RoundFailed", "load_model", "model_path", "new_job_id", "run_dpgd", "save_model"]
JOB_PREFIX = "dp-"


def new_job_id() -> str:
    return JOB_PREFIX + secrets.token_hex(6)


def _round(ep: Endpoints, op: DcaOperator, dataset: str, parties: list[str], ask: RunRound, schema_sha256: str = "") -> tuple[str, pb.DpSum]:
    name = f"round {ask.round} of {ask.request.job_id}"
    try:
        job = op.create(ask.params.to_spec())
    except grpc.RpcError as e:
        raise RoundFailed(f"{name}: the curator refused its DCA job: {e.details()}") from e
    opts = CHANNEL_OPTIONS + [("grpc.ssl_target_name_override", ep.curator_name)]
    with grpc.secure_channel(ep.curator_address, ep.tls.channel_credentials(), options=opts) as ch:
        stub = cpb_grpc.ContributionCuratorStub(ch)
        req = cpb.StatisticRequest(dca_job_id=job, dataset=dataset, statistic=STATISTIC, records_per_client=ask.records_per_party, dpgd=ask.request,
                                   schema_sha256=schema_sha256)
        try:
            stub.RequestContributions(cpb.ContributionRound(request=req, parties=parties), timeout=900)
        except grpc.RpcError as e:
            raise RoundFailed(f"{name} ({job}): {e.details()}") from e
    status = op.wait(job, timeout=900)
    if status.state != "RELEASED":
        raise RoundFailed(f"{name} ({job}) failed: {status.detail}")
    return job, op.release(job)


def run_dpgd(ep: Endpoints, dataset: str, parties: list[str], nodes: list[str], plan: DpgdPlan, records_per_party: int, *,
             job_id: str | None = None, max_missing: int = 0, seed: bytes = b"", deadline: float = 600.0, schema_sha256: str = "") -> DpgdRun:
    """Run the whole job; raises :class:`RoundFailed` naming the round that released nothing. ``schema_sha256``: the
    federation schema every party's dataset must have ("" = no check)."""
    job_id = job_id or new_job_id()
    limits.check_id(job_id, "job_id")
    role = DpgdRole(plan, parties, nodes, records_per_party, job_id=job_id, max_missing=max_missing, seed=seed, deadline=deadline)
    with DcaOperator(ep) as op:
        return drive(role, lambda ask: _round(ep, op, dataset, parties, ask, schema_sha256))


def models_dir(endpoints: str | Path) -> Path:
    p = Path(endpoints)
    return (p if p.is_dir() else p.resolve().parent) / "models"


def model_path(endpoints: str | Path, job_id: str) -> Path:
    limits.check_id(job_id, "job_id")  # a file name, never a path
    return models_dir(endpoints) / f"{job_id}.json"


def save_model(endpoints: str | Path, run: DpgdRun) -> Path:
    """Write the release (:meth:`DpgdRun.summary`) where `mpdp predict` finds it (0600, tmp + rename)."""
    path = model_path(endpoints, run.job_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(run.summary(), f)
    os.replace(tmp, path)
    return path


def load_model(endpoints: str | Path, job_id: str) -> dict:
    """The stored release of ``job_id``; FileNotFoundError when this federation folder has none."""
    path = model_path(endpoints, job_id)
    if not path.exists():
        raise FileNotFoundError(f"no dp-gd model {job_id} under {models_dir(endpoints)}")
    return json.loads(path.read_text())
