"""The in-process federation behind :meth:`mpdp.Federation.in_process`: every role a machine in this process.

Each protocol runs on its one in-memory driver, the same sans-IO machines the services run over gRPC:
Pathak on :func:`mpdp.pathak2010.driver.run_job` (curator and parties, real Paillier/DGK keys), DCA sums on
:func:`mpdp.dca.driver.run_job` (clients, M compute nodes, the aggregator), regression and dp-gd on their
operator roles' ``run_inmemory``, ensembles on :func:`mpdp.hamm2016.job.run_inmemory`, LMGC on
:class:`mpdp.local_release.LocalReleaseCurator` with each party's :func:`~mpdp.local_release.party_release`.

Randomness is the OS CSPRNG unless the federation has a seed (then every job gets its own sub-seed, releases are
marked ``seeded`` and the roles run in test mode: reproducible, not private).

Each party keeps a privacy ledger in memory (:class:`mpdp.ledger.PrivacyLedger`, :attr:`InProcessBackend.ledgers`;
its entries also in :attr:`InProcessBackend.ledger`). The party machines' Spends go to it through the one in-memory
driver (:class:`mpdp.driver.Wire`) as a served party's go to its durable ledger: the charge each protocol's core
builds, checked against the party's budget before anything derived from its records leaves. A job over a party's
budget fails with :class:`~mpdp.results.JobFailed` (``party P cannot pay job J: needs …``), as it does live.
"""

from __future__ import annotations

import math
import time
from typing import Any, Sequence

import numpy as np

from mpdp import limits, registry
from mpdp.driver import SpendRefused
from mpdp.ledger import DEFAULT_BUDGET_DELTA, PrivacyLedger
from mpdp.results import IN_PROCESS, JobFailed, Result, label_text


def as_seed(seed: bytes | str | int | None) -> bytes:
    if seed is None:
        return b""
    if isinstance(seed, bytes):
        out = seed
    elif isinstance(seed, str):
        out = seed.encode()
    elif isinstance(seed, int) and not isinstance(seed, bool):
        out = str(seed).encode()
    else:
        raise TypeError(f"seed must be bytes, str or int, got {type(seed).__name__}")
    if not out:
        raise ValueError("seed must not be empty (None draws from the OS CSPRNG)")
    return out


def job_seed(seed: bytes, n: int) -> bytes:
    """The simulation seed of a federation's n-th job (b"" without a federation seed): the in-process and the live
    backend derive it alike, so the same seeded calls in the same order run on the same seeds."""
    return seed + f"/job-{n}".encode() if seed else b""


class InProcessBackend:
    mode = IN_PROCESS

    def __init__(self, parties: Sequence[tuple[Any, Any]], *, compute_nodes: int, key_bits: int, seed: bytes | str | int | None,
                 names: Sequence[str] | None, budget_epsilon: float | None = None, budget_delta: float = DEFAULT_BUDGET_DELTA) -> None:
        if isinstance(parties, dict) or not len(parties):
            raise ValueError("parties must be a list of (X, y) pairs, one per party, at least one")
        names = [f"party-{i + 1}" for i in range(len(parties))] if names is None else list(names)
        if len(names) != len(parties) or len(set(names)) != len(names):
            raise ValueError(f"names must be {len(parties)} distinct party names")
        for n in names:
            try:
                limits.check_id(n, "party name")
            except limits.SpecError as e:
                raise ValueError(str(e)) from None
        self.data: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        d = None
        for n, part in zip(names, parties):
            try:
                X, y = part
            except (TypeError, ValueError):
                raise ValueError(f"party {n}: give (X, y), the features and the labels or targets") from None
            X, y = np.asarray(X, dtype=np.float64), np.asarray(y)
            if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
                raise ValueError(f"party {n}: X must be a 2-D array with at least one row and column, got shape {X.shape}")
            if y.shape != (X.shape[0],):
                raise ValueError(f"party {n}: y must hold one label per row of X ({X.shape[0]}), got shape {y.shape}")
            if not np.all(np.isfinite(X)):
                raise ValueError(f"party {n}: X has non-finite values")
            if d is not None and X.shape[1] != d:
                raise ValueError(f"parties disagree on the number of features: {names[0]} has {d}, {n} has {X.shape[1]}")
            d = X.shape[1]
            self.data[n] = (X, y)
        self.parties = tuple(names)
        if int(compute_nodes) != compute_nodes or not 2 <= compute_nodes <= limits.MAX_NODES:
            raise ValueError(f"compute_nodes must be an integer in 2..{limits.MAX_NODES} (one node alone would see the clients' noisy values), got {compute_nodes!r}")
        self.compute_nodes = tuple(f"node-{k + 1}" for k in range(int(compute_nodes)))
        if int(key_bits) != key_bits or not limits.MIN_TEST_KEY_BITS <= key_bits <= limits.MAX_KEY_BITS:
            raise ValueError(f"key_bits must be in {limits.MIN_TEST_KEY_BITS}..{limits.MAX_KEY_BITS} (2048 or more outside tests), got {key_bits!r}")
        self.key_bits = int(key_bits)
        self.seed = as_seed(seed)
        self.test_mode = bool(self.seed) or self.key_bits < limits.MIN_PRODUCTION_KEY_BITS  # as a federation's test mode
        if budget_epsilon is not None and not (math.isfinite(budget_epsilon) and budget_epsilon >= 0):
            raise ValueError(f"budget_epsilon must be finite and ≥ 0 (None: no limit), got {budget_epsilon!r}")
        if not (math.isfinite(budget_delta) and 0 < budget_delta < 1):
            raise ValueError(f"budget_delta must be in (0, 1), got {budget_delta!r}")
        # each party's ledger; None: no limit (every charge is recorded, none refused)
        self.ledgers = {n: PrivacyLedger(math.inf if budget_epsilon is None else float(budget_epsilon), float(budget_delta)) for n in names}
        self.ledger: dict[str, list[dict]] = {n: led.entries for n, led in self.ledgers.items()}
        self._secrets: Any = None
        self._jobs = 0

    def close(self) -> None:
        pass

    # -- helpers --------------------------------------------------------------------------------------
    def _job(self, protocol: str) -> tuple[str, bytes]:
        """A fresh job id of ``protocol`` (:mod:`mpdp.registry`) and its simulation seed (b"" = OS CSPRNG); a seeded
        job's id is derived from its seed, as a live federation's backend names it."""
        self._jobs += 1
        if self.seed:
            seed = job_seed(self.seed, self._jobs)
            return registry.seeded_job_id(protocol, seed), seed
        return registry.new_job_id(protocol), b""

    def _rng(self, seed: bytes, label: str):
        from mpdp.math.drbg import Drbg

        return Drbg.from_seed(seed).child(label) if seed else Drbg.from_os()

    def _names(self, parties: tuple[str, ...] | None) -> list[str]:
        if parties is None:
            return list(self.parties)
        unknown = [p for p in parties if p not in self.data]
        if unknown:
            raise ValueError(f"unknown parties {unknown}; this federation has {list(self.parties)}")
        return list(parties)

    def _classes(self, names: list[str], given: tuple[Any, ...] | None, *, binary: bool) -> tuple[Any, ...]:
        """The label set: as given, or the sorted labels found (the caller holds all the data in-process)."""
        found = {label_text(v): v for n in names for v in np.unique(self.data[n][1])}
        if given is not None:
            texts = {label_text(c) for c in given}
            extra = sorted(set(found) - texts)
            if extra:
                raise ValueError(f"labels {extra} are not among classes {list(given)}")
            return given
        try:
            out = tuple(x.item() if isinstance(x, np.generic) else x for x in sorted(found.values()))
        except TypeError:
            raise ValueError("labels of mixed kinds cannot be ordered; pass classes=[...]") from None
        if binary and len(out) != 2:
            raise ValueError(f"a binary protocol needs two labels, the parties have {len(out)}: {[label_text(c) for c in out][:10]}")
        if len(out) < 2:
            raise ValueError("the parties have only one label; pass classes=[...]")
        return out

    @staticmethod
    def _index(y: np.ndarray, classes: tuple[Any, ...]) -> np.ndarray:
        pos = {label_text(c): k for k, c in enumerate(classes)}
        return np.array([pos[label_text(v)] for v in y], dtype=np.int64)

    def _pm1(self, y: np.ndarray, classes: tuple[Any, ...]) -> np.ndarray:
        return np.where(self._index(y, classes) == 1, 1.0, -1.0)

    def _mark(self, party: str, protocol: str, job_id: str, status: str, details: dict | None = None) -> None:
        """A spent job's entry marked released or failed, with the details a served party's ledger keeps (never the charge)."""
        entry = self.ledgers[party].find(protocol, job_id)
        if entry is not None:
            entry.update({k: v for k, v in (details or {}).items() if k not in ("protocol", "job_id", "epsilon", "delta", "accounting", "status")})
            entry["status"] = status

    def _records(self, names: list[str], total: int | None, per_party: int | None) -> tuple[int, int]:
        sizes = [len(self.data[n][1]) for n in names]
        return (sum(sizes) if total is None else int(total)), (max(sizes) if per_party is None else int(per_party))

    # -- Pathak 2010 -------------------------------------------------------------------------------------
    def logistic_regression(self, *, epsilon: float, lam: float, noise: str, delta: float | None, colluders: int | None,
                            classes: tuple[Any, ...] | None, dataset: str | None, parties: tuple[str, ...] | None) -> Result:
        from mpdp.pathak2010 import driver
        from mpdp.pathak2010.resources import CuratorSecrets
        from mpdp.results import pathak_result

        t0 = time.perf_counter()
        names = self._names(parties)
        classes = self._classes(names, classes, binary=True)
        data = {n: (self.data[n][0], self._pm1(self.data[n][1], classes)) for n in names}
        job_id, seed = self._job("pathak2010")
        try:
            spec = driver.make_spec(names, epsilon, lam, noise, seed=seed or None, dataset=dataset or "data", delta=delta or 0.0, colluders=colluders)
        except ValueError as e:
            raise ValueError(str(e)) from None
        timings = {}
        if self._secrets is None:  # the curator's long-lived keys: made once per federation
            self._secrets = CuratorSecrets.generate(self.key_bits, self.key_bits)
            timings["curator_keys"] = time.perf_counter() - t0
        try:
            r = driver.run_job(data, spec, self._secrets, party_key_bits=self.key_bits, job_id=job_id, test_mode=self.test_mode, ledgers=self.ledgers)
        except SpendRefused as e:
            raise JobFailed(f"Pathak job {job_id} published nothing: {e}") from None
        if r.model is None:
            raise JobFailed(f"Pathak job {job_id} published nothing: {r.error.detail if r.error else 'no release'}")
        return pathak_result(r.model, mode=self.mode, classes=classes, noise=noise, total=time.perf_counter() - t0,
                             operations={"messages": r.messages}, timings=timings)

    # -- DCA --------------------------------------------------------------------------------------------
    def _dca_counts(self, runs: list[Any]) -> dict[str, int]:
        from mpdp.messages import dca_pb2

        return {"messages": sum(r.messages for r in runs), "accepted_shares": sum(rc.accepted for r in runs for rc in r.receipts),
                "dca_jobs": len(runs), **({} if not runs else {"clients_included": sum(int(r.release.clients_included) for r in runs
                                                                                         if isinstance(r.release, dca_pb2.DpSum))})}

    def dca_sum(self, Z: np.ndarray, *, epsilon: float, delta: float, clip: float, sensitivity: float, max_missing: int, noise: str,
                client_ids: list[str], validate: str = "range") -> Result:
        from mpdp.dca.driver import run_job
        from mpdp.dca.errors import InvalidJob
        from mpdp.dca.params import DcaParams
        from mpdp.results import dca_sum_result

        t0 = time.perf_counter()
        job_id, seed = self._job("dca")
        try:
            params = DcaParams(job_id, Z.shape[1], Z.shape[0], max_missing, epsilon, delta, sensitivity, self.compute_nodes, clip_bounds=(clip,),
                               simulation_seed=seed, noise=noise, validate=validate, frac_bits=32 if validate == "none" else 16)
        except InvalidJob as e:
            raise ValueError(str(e)) from None
        run = run_job(params, Z, self._rng(seed, "dca-clients"), client_ids=client_ids, client_mode="machines" if Z.shape[0] <= 256 else "cohort")
        if run.release is None:
            raise JobFailed(f"DCA job {job_id} released nothing: {run.error.detail if run.error else 'no release'}")
        # the vectors are simulated clients' (live, the operator submits them as a cohort): no party spends
        return dca_sum_result(run.release, mode=self.mode, total=time.perf_counter() - t0, timings=run.seconds, operations=self._dca_counts([run]))

    def linear_regression(self, *, bounds: tuple[float, ...], epsilon: float, delta: float, total_records: int | None, records_per_party: int | None,
                          noise: str, grid_repeats: tuple[int, int], dataset: str | None, parties: tuple[str, ...] | None,
                          validate: bool = True) -> Result:
        from mpdp.regression.plan import RegressionPlan
        from mpdp.regression.role import RoundFailed, run_inmemory
        from mpdp.results import regression_result

        t0 = time.perf_counter()
        names = self._names(parties)
        d = self.data[names[0]][0].shape[1]
        if len(bounds) != d + 1:
            raise ValueError(f"bounds must hold d + 1 = {d + 1} values (the features, then the target), got {len(bounds)}")
        data = {n: (self.data[n][0], np.asarray(self.data[n][1], dtype=np.float64)) for n in names}
        total, per_party = self._records(names, total_records, records_per_party)
        job_id, seed = self._job("regression")
        try:
            plan = RegressionPlan(bounds, epsilon, delta, grid_repeats=grid_repeats)
        except (ValueError, limits.SpecError) as e:
            raise ValueError(str(e)) from None
        runs: list[Any] = []
        try:
            run = run_inmemory(plan, data, self.compute_nodes, total, per_party, job_ids=(registry.round_dca_job_id(job_id, 0), registry.round_dca_job_id(job_id, 1)), seed=seed, noise=noise,
                               validate=validate, observe=runs.append, ledgers=self.ledgers)
        except (RoundFailed, SpendRefused) as e:
            raise JobFailed(f"regression job {job_id}: {e}") from None
        run.job_id = job_id  # the regression job's own id, as a federation's curator names it
        return regression_result(run, mode=self.mode, total=time.perf_counter() - t0, operations=self._dca_counts(runs))

    def dp_gd(self, *, epsilon: float, delta: float, lam: float, rounds: int | None, classes: tuple[Any, ...] | None, total_records: int | None,
              records_per_party: int | None, dimension: int | None, max_missing: int, dataset: str | None, parties: tuple[str, ...] | None,
              validate: bool = True) -> Result:
        from mpdp.dpgd.model import Task, party_rows
        from mpdp.dpgd.plan import VALIDATE_L2, VALIDATE_NONE, DpgdPlan, auto_rounds
        from mpdp.dpgd.role import RoundFailed, run_inmemory
        from mpdp.results import dpgd_result

        t0 = time.perf_counter()
        names = self._names(parties)
        classes = self._classes(names, classes, binary=False)
        d = self.data[names[0]][0].shape[1]
        if dimension is not None and dimension != d:
            raise ValueError(f"dimension {dimension} does not match the parties' {d} features")
        task = Task("binary") if len(classes) == 2 else Task("softmax", len(classes))
        labels = (lambda y: self._pm1(y, classes)) if task.kind == "binary" else (lambda y: self._index(y, classes).astype(np.float64))
        data = {n: party_rows(task, self.data[n][0], labels(self.data[n][1])) for n in names}
        total, per_party = self._records(names, total_records, records_per_party)
        job_id, seed = self._job("dpgd")
        try:
            plan = DpgdPlan(task, d, epsilon, delta, lam=lam, rounds=auto_rounds(epsilon, total) if rounds is None else int(rounds), total_records=total,
                            validate=VALIDATE_L2 if validate else VALIDATE_NONE)  # as live: validated, each round vector proven in its ℓ2 ball
        except ValueError as e:
            raise ValueError(f"not a valid dp-gd plan: {e}") from None
        runs: list[Any] = []
        try:
            run = run_inmemory(plan, data, self.compute_nodes, per_party, job_id=job_id, dca_job_ids=[registry.round_dca_job_id(job_id, r) for r in range(plan.rounds + 1)],
                               seed=seed, max_missing=max_missing, observe=runs.append, ledgers=self.ledgers)
        except (RoundFailed, SpendRefused) as e:
            raise JobFailed(f"dp-gd job {job_id}: {e}") from None
        return dpgd_result(run, mode=self.mode, classes=classes, total=time.perf_counter() - t0, operations=self._dca_counts(runs))

    # -- Hamm 2016 ---------------------------------------------------------------------------------------
    def ensemble(self, *, auxiliary: Any, epsilon: float, lam: float, classes: tuple[Any, ...] | None, method: str, max_missing: int,
                 local_lam: float, protect_aux: bool, dataset: str | None, parties: tuple[str, ...] | None) -> Result:
        from mpdp.hamm2016 import job as core
        from mpdp.messages import hamm2016_pb2
        from mpdp.results import ensemble_result, unit_rows

        if isinstance(auxiliary, str):
            raise TypeError("in-process, auxiliary is the curator's public feature matrix (a live federation names its auxiliary dataset)")
        t0 = time.perf_counter()
        names = self._names(parties)
        classes = self._classes(names, classes, binary=False)
        X_aux = unit_rows(auxiliary)
        job_id, seed = self._job("hamm2016")
        spec = hamm2016_pb2.EnsembleJobSpec(dataset=dataset or "data", auxiliary="auxiliary", method=method, lam=lam, epsilon=epsilon,
                                            classes=[label_text(c) for c in classes], parties=names, compute_nodes=list(self.compute_nodes),
                                            max_missing=max_missing, protect_aux=protect_aux, local_lam=local_lam, simulation_seed=seed)
        # validated, as a federation runs it: every voter proves its vote vector valid on its shares
        data = {n: self.data[n] for n in names}
        try:
            core.validate_spec(spec)
            core.check_size(spec, core.check_auxiliary(X_aux))
            run = core.run_inmemory(job_id, registry.round_dca_job_id(job_id, 0), spec, data, X_aux, ledgers=self.ledgers)
        except core.EnsembleJobError as e:
            raise ValueError(str(e)) from None
        except SpendRefused as e:
            raise JobFailed(f"ensemble job {job_id}: {e}") from None
        ops = {"curator_messages": len(run.curator_transcript), "node_messages": sum(len(t) for t in run.node_transcripts.values()),
               "voters": int(run.vote_sum.clients_included)}
        return ensemble_result(run.release, mode=self.mode, classes=classes, total=time.perf_counter() - t0, operations=ops)

    # -- LMGC local releases -----------------------------------------------------------------------------
    def lmgc(self, *, epsilon: float, lam: float, ridge: float, data_norm: float, release: str, dataset: str | None,
             parties: tuple[str, ...] | None) -> Result:
        from mpdp.driver import Wire
        from mpdp.ledger import RELEASED
        from mpdp.local_release import PROTOCOL, LocalReleaseCurator, LocalReleaseParty, ReleaseError, party_release
        from mpdp.messages import common_pb2, local_release_pb2
        from mpdp.protocol import Problem, ProtocolError, Publish, Reply, Send
        from mpdp.results import lmgc_result

        t0 = time.perf_counter()
        names = self._names(parties)
        if release != "average" and release not in names:
            raise ValueError(f"release must be 'average' or one of {names}, got {release!r}")
        classes = self._classes(names, None, binary=False)
        job_id, seed = self._job("lmgc")
        spec = local_release_pb2.LocalModelJobSpec(dataset=dataset or "data", model="lmgc", epsilon=epsilon, parties=names, mode=common_pb2.CORRECTED,
                                                   ridge=ridge, data_norm=data_norm, simulation_seed=seed)
        setattr(spec, "lambda", lam)
        try:
            curator = LocalReleaseCurator(job_id, spec)
        except ReleaseError as e:
            raise ValueError(str(e)) from None
        outs: list[Any] = []
        for ask in curator.ask():
            assert isinstance(ask, Send)
            name, request = ask.to.name, ask.message
            role = LocalReleaseParty(name, request)  # the party's machine, as services/party/local.py drives it
            wire = Wire(ledgers=self.ledgers)
            wire.machines[role.me] = role
            try:
                wire.route(role.me, role.requested())  # its Spend, before training: the release is the first data-dependent message
            except (SpendRefused, ProtocolError) as e:
                outs += curator.release_failed(name, str(e))
                continue
            X, y = self.data[name]
            try:
                made, details = party_release(name, request, X, y, self._rng(seed, f"party/{name}"))
                rel = next(o.message for o in role.trained(made) if isinstance(o, Reply))
            except (ReleaseError, ProtocolError, ValueError, RuntimeError) as e:
                role.fail(Problem.JOB_FAILED, "the release was not made")
                self._mark(name, PROTOCOL, job_id, "failed")
                outs += curator.release_failed(name, str(e))
                continue
            self._mark(name, PROTOCOL, job_id, RELEASED, details)
            outs += curator.release(name, rel)
        published = next((o.release for o in outs if isinstance(o, Publish)), None)
        if published is None:
            raise JobFailed(curator.error.detail if curator.error else f"LMGC job {job_id} published nothing")
        return lmgc_result(published, mode=self.mode, release=release, classes={label_text(c): c for c in classes}, data_norm=data_norm,
                           total=time.perf_counter() - t0, operations={"releases": len(published.releases)})


__all__ = ["InProcessBackend"]
