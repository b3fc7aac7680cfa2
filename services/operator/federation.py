"""The live federation behind :meth:`mpdp.Federation.connect`: each protocol through its operator client.

Every job is submitted, followed and fetched through the curator's job host (:mod:`mpdp_services.operator.jobs`:
``submit`` sends a fresh idempotency key per call and reuses it on its own resends, so a lost answer never starts a
second job). A DCA sum's vectors are then sent by :func:`~mpdp_services.dca_client.client.submit_cohort` (the
operator's certificate submits them as a simulated cohort, as `mpdp dca loadgen`). The core objects that come back
(PublishedModel, DpSum, RegressionRun, …) become a :class:`mpdp.results.Result` exactly as in-process
(:mod:`mpdp.results`), so both modes return the same fields.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, Iterator

import grpc
import numpy as np

from mpdp.results import LIVE, JobFailed, Result, label_text
from mpdp_services.common.endpoints import Endpoints

DEFAULT_CLASSES = (-1.0, 1.0)  # the parties map binary labels to ±1, the larger label positive


class LiveBackend:
    mode = LIVE

    def __init__(self, endpoints: Path, *, dataset: str | None, schema_sha256: str = "", seed: bytes = b"") -> None:
        self.endpoints_path = endpoints
        self.endpoints = Endpoints.load(endpoints)  # FileNotFoundError names the file
        p = endpoints / "endpoints.json" if endpoints.is_dir() else endpoints
        doc = json.loads(p.read_text())
        self.parties = tuple(doc.get("parties", {}))
        self.compute_nodes = tuple(sorted(doc.get("compute_nodes", {})))
        self.dataset = dataset
        self.schema_sha256 = schema_sha256  # in every classification spec ("" = no check)
        self.seed = seed  # a test federation's simulation seed ("" = the roles' CSPRNGs): each job gets its own sub-seed
        self._jobs = 0

    def close(self) -> None:
        pass

    # -- the curator's job host -------------------------------------------------------------------------
    def list_jobs(self, protocol: str, live_only: bool) -> list[dict[str, Any]]:
        from mpdp_services.operator.jobs import list_jobs

        return list_jobs(self.endpoints, protocol, live_only)

    def watch(self, job_id: str) -> Iterator[dict[str, Any]]:
        from mpdp_services.operator.jobs import follow

        return follow(self.endpoints, job_id)

    def cancel(self, job_id: str) -> dict[str, Any]:
        from mpdp_services.operator.jobs import cancel_job

        return cancel_job(self.endpoints, job_id)

    def export(self, job_id: str) -> dict[str, Any]:
        from mpdp_services.operator.export import exported
        from mpdp_services.operator.jobs import release

        return exported(release(self.endpoints, job_id))[0]

    # -- helpers --------------------------------------------------------------------------------------
    def _job_seed(self) -> bytes:
        """The next job's simulation seed, derived as the in-process backend derives it (:func:`mpdp.inprocess.job_seed`),
        so the same seeded calls in the same order get the same seeds in both; b"" without a federation seed."""
        from mpdp.inprocess import job_seed

        self._jobs += 1
        return job_seed(self.seed, self._jobs)

    @staticmethod
    def _job_id(protocol: str, seed: bytes) -> str:
        """A seeded learner job's id, derived from its seed as in-process (:func:`mpdp.registry.seeded_job_id`), so its
        rounds' DCA jobs get the same names too; "" (the curator chooses) for an unseeded job."""
        from mpdp import registry

        return registry.seeded_job_id(protocol, seed) if seed else ""

    def _dataset(self, dataset: str | None) -> str:
        ds = dataset or self.dataset
        if not ds:
            raise ValueError("a live federation trains on a dataset the parties name: pass dataset=... here or to Federation.connect")
        return ds

    def _names(self, parties: tuple[str, ...] | None) -> list[str]:
        if parties is not None:
            return list(parties)
        if not self.parties:
            raise ValueError(f"{self.endpoints_path} lists no parties: pass parties=[...]")
        return list(self.parties)

    def _nodes(self) -> list[str]:
        if len(self.compute_nodes) < 2:
            raise ValueError(f"{self.endpoints_path} lists {len(self.compute_nodes)} compute nodes; DCA protocols need at least 2 "
                             "(a local federation: start it with `mpdp federation up --compute-nodes M`; a provisioned one: `mpdp provision` writes the "
                             "description's compute_nodes into the operator's endpoints.json as \"compute_nodes\": {name: address})")
        return list(self.compute_nodes)

    @staticmethod
    def _required(name: str, v: int | None) -> int:
        if v is None:
            raise ValueError(f"a live federation needs {name} (a public bound the parties check); in-process it defaults to the data's size")
        return v

    # -- Pathak 2010 -------------------------------------------------------------------------------------
    def logistic_regression(self, *, epsilon: float, lam: float, noise: str, delta: float | None, colluders: int | None,
                            classes: tuple[Any, ...] | None, dataset: str | None, parties: tuple[str, ...] | None) -> Result:
        from mpdp.messages import operations_pb2
        from mpdp.results import pathak_result
        from mpdp_services.operator.jobs import run
        from mpdp_services.operator.pathak2010 import make_spec

        t0 = time.perf_counter()
        spec = make_spec(self._dataset(dataset), self._names(parties), epsilon, lam, noise, delta=delta or 0.0, colluders=colluders,
                         schema_sha256=self.schema_sha256)
        spec.simulation_seed = self._job_seed()
        try:
            model = run(self.endpoints, operations_pb2.JobSubmission(pathak2010=spec), timeout=1800)[1].pathak2010
        except grpc.RpcError as e:
            raise JobFailed(f"the Pathak job published nothing: {e.details()}") from None
        return pathak_result(model, mode=self.mode, classes=classes or DEFAULT_CLASSES, noise=noise, total=time.perf_counter() - t0)

    # -- DCA --------------------------------------------------------------------------------------------
    def dca_sum(self, Z: np.ndarray, *, epsilon: float, delta: float, clip: float, sensitivity: float, max_missing: int, noise: str,
                client_ids: list[str], validate: str = "range") -> Result:
        from mpdp.dca.errors import InvalidJob
        from mpdp.dca.params import DcaParams
        from mpdp.results import dca_sum_result
        from mpdp.messages import operations_pb2
        from mpdp_services.dca_client.client import submit_cohort
        from mpdp_services.operator.jobs import follow, release as job_release, started, submit

        t0 = time.perf_counter()
        try:
            params = DcaParams("pending", Z.shape[1], Z.shape[0], max_missing, epsilon, delta, sensitivity, tuple(self._nodes()), clip_bounds=(clip,), noise=noise,
                               validate=validate, frac_bits=32 if validate == "none" else 16, simulation_seed=self._job_seed())
        except InvalidJob as e:
            raise ValueError(str(e)) from None
        ep = self.endpoints
        try:
            job = started(ep, submit(ep, operations_pb2.JobSubmission(dca=params.to_spec())))["job_id"]  # not queued: its clients may fetch it
            t1 = time.perf_counter()
            rep = asyncio.run(submit_cohort(ep, ep.tls, job, client_ids, Z))
            t2 = time.perf_counter()
            status = list(follow(ep, job, timeout=max(60.0, params.deadline_seconds + 60.0)))[-1]
            if status["state"] != "RELEASED":
                raise JobFailed(f"DCA job {job} released nothing ({status['state']}): {status['detail']}")
            release = job_release(ep, job).dca
        except grpc.RpcError as e:
            raise JobFailed(f"the DCA job failed: {e.details()}") from None
        timings = {"create": t1 - t0, "clients": t2 - t1, "agreement+release": time.perf_counter() - t2}
        return dca_sum_result(release, mode=self.mode, total=time.perf_counter() - t0, timings=timings,
                              operations={"accepted_shares": rep.accepted, "rejected_shares": len(rep.rejected), "dca_jobs": 1,
                                          "clients_included": int(release.clients_included)})

    @staticmethod
    def _rounds(releases: list[Any]) -> dict[str, int]:
        return {"dca_jobs": len(releases), "clients_included": sum(int(r.clients_included) for r in releases)}

    def linear_regression(self, *, bounds: tuple[float, ...], epsilon: float, delta: float, total_records: int | None, records_per_party: int | None,
                          noise: str, grid_repeats: tuple[int, int], dataset: str | None, parties: tuple[str, ...] | None,
                          validate: bool = True) -> Result:
        from mpdp.results import regression_result
        from mpdp_services.operator.regression import RoundFailed, run_regression

        total_records = self._required("total_records", total_records)
        records_per_party = self._required("records_per_party", records_per_party)
        t0 = time.perf_counter()
        try:
            seed = self._job_seed()
            run = run_regression(self.endpoints, self._dataset(dataset), self._names(parties), self._nodes(), bounds, epsilon, delta, int(total_records),
                                 int(records_per_party), noise=noise, grid_repeats=grid_repeats, validate=validate, seed=seed,
                                 job_id=self._job_id("regression", seed))
        except RoundFailed as e:
            raise JobFailed(f"the regression job failed: {e}") from None
        except grpc.RpcError as e:
            raise JobFailed(f"the curator refused the regression job: {e.details()}") from None
        return regression_result(run, mode=self.mode, total=time.perf_counter() - t0, operations=self._rounds([run.std_release, run.main_release]))

    def dp_gd(self, *, epsilon: float, delta: float, lam: float, rounds: int | None, classes: tuple[Any, ...] | None, total_records: int | None,
              records_per_party: int | None, dimension: int | None, max_missing: int, dataset: str | None, parties: tuple[str, ...] | None,
              validate: bool = True) -> Result:
        from mpdp.dpgd.model import Task
        from mpdp.dpgd.plan import VALIDATE_L2, VALIDATE_NONE, DpgdPlan, auto_rounds
        from mpdp.results import dpgd_result
        from mpdp_services.operator.dpgd import RoundFailed, run_dpgd

        total_records = self._required("total_records", total_records)
        records_per_party = self._required("records_per_party", records_per_party)
        dimension = self._required("dimension", dimension)
        classes = classes or DEFAULT_CLASSES
        task = Task("binary") if len(classes) == 2 else Task("softmax", len(classes))
        try:
            plan = DpgdPlan(task, int(dimension), epsilon, delta, lam=lam, rounds=auto_rounds(epsilon, int(total_records)) if rounds is None else int(rounds),
                            total_records=int(total_records), validate=VALIDATE_L2 if validate else VALIDATE_NONE)
        except ValueError as e:
            raise ValueError(f"not a valid dp-gd plan: {e}") from None
        t0 = time.perf_counter()
        try:
            seed = self._job_seed()
            run = run_dpgd(self.endpoints, self._dataset(dataset), self._names(parties), self._nodes(), plan, int(records_per_party), max_missing=max_missing,
                           schema_sha256=self.schema_sha256, seed=seed, job_id=self._job_id("dpgd", seed) or None)
        except RoundFailed as e:
            raise JobFailed(f"the dp-gd job failed: {e}") from None
        return dpgd_result(run, mode=self.mode, classes=classes, total=time.perf_counter() - t0, operations=self._rounds(run.releases))

    # -- Hamm 2016 ---------------------------------------------------------------------------------------
    def ensemble(self, *, auxiliary: Any, epsilon: float, lam: float, classes: tuple[Any, ...] | None, method: str, max_missing: int,
                 local_lam: float, protect_aux: bool, dataset: str | None, parties: tuple[str, ...] | None) -> Result:
        from mpdp.messages import hamm2016_pb2
        from mpdp.results import ensemble_result
        from mpdp_services.operator.ensemble import train_ensemble

        if not isinstance(auxiliary, str):
            raise TypeError("a live federation's auxiliary data live at the curator: pass the name of its auxiliary dataset")
        classes = classes or DEFAULT_CLASSES
        spec = hamm2016_pb2.EnsembleJobSpec(dataset=self._dataset(dataset), auxiliary=auxiliary, method=method, lam=lam, epsilon=epsilon,
                                            classes=[label_text(c) for c in classes], parties=self._names(parties), compute_nodes=self._nodes(),
                                            max_missing=max_missing, protect_aux=protect_aux, local_lam=local_lam, schema_sha256=self.schema_sha256,
                                            simulation_seed=self._job_seed())
        t0 = time.perf_counter()
        try:
            rel = train_ensemble(self.endpoints, spec)
        except grpc.RpcError as e:
            raise JobFailed(f"the ensemble job failed: {e.details()}") from None
        return ensemble_result(rel, mode=self.mode, classes=classes, total=time.perf_counter() - t0,
                               operations={"voters": int(rel.parties_included)})

    # -- LMGC local releases -----------------------------------------------------------------------------
    def lmgc(self, *, epsilon: float, lam: float, ridge: float, data_norm: float, release: str, dataset: str | None,
             parties: tuple[str, ...] | None) -> Result:
        from mpdp.results import lmgc_result
        from mpdp_services.operator.local import fetch, submit_local

        t0 = time.perf_counter()
        try:
            summary = submit_local(self.endpoints, self._dataset(dataset), self._names(parties), epsilon, lam, "corrected", ridge, data_norm,
                                   seed=self._job_seed(), schema_sha256=self.schema_sha256)
            models = fetch(self.endpoints, summary["job_id"])
        except grpc.RpcError as e:
            raise JobFailed(f"the LMGC job failed: {e.details()}") from None
        return lmgc_result(models, mode=self.mode, release=release, classes={}, data_norm=data_norm, total=time.perf_counter() - t0,
                           operations={"releases": len(models.releases)})
