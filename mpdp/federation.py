"""One object per federation: :class:`Federation` runs every protocol with the same call, in-process or live.

* :meth:`Federation.in_process` — every role (curator, parties, DCA compute nodes) is a machine in this
  process, on the same sans-IO core the services run (:mod:`mpdp.pathak2010`, :mod:`mpdp.dca`, …), with real
  keys (2048-bit Paillier and DGK by default) and the OS CSPRNG. Data stay in the arrays you pass.
* :meth:`Federation.connect` — a live federation (`mpdp federation up` or `mpdp provision`): the calls go
  through the operator clients (``services/operator``) over mutual TLS; the parties' data stay at the parties
  and are named by the dataset each party maps to its own file.

Every method is differentially private and returns a :class:`mpdp.results.Result` (model with
``predict``/``score``, guarantee, trust model, timings, operation counts, ``to_json()``). Non-private
baselines exist only by name, in :mod:`mpdp.baselines`.

>>> import numpy as np, mpdp
>>> g = np.random.default_rng(0)                                   # public simulation data
>>> parts = [(X, np.where(X[:, 0] > 0, "yes", "no")) for X in (g.normal(size=(n, 3)) for n in (40, 50, 60))]
>>> fed = mpdp.Federation.in_process(parties=parts, key_bits=1024, seed=b"doc")  # seeded: reproducible, not private
>>> r = fed.logistic_regression(epsilon=1.0, lam=0.1)
>>> r.guarantee.epsilon, r.protocol, sorted(r.model.classes)
(1.0, 'pathak2010', ['no', 'yes'])
"""

from __future__ import annotations

import importlib
import math
import os
import warnings
from pathlib import Path
from typing import Any, Iterator, Protocol, Sequence

import numpy as np

from mpdp.results import LIVE, JobFailed, Result

__all__ = ["Federation", "JobFailed", "PATHAK_NOISE", "DCA_NOISE"]

PATHAK_NOISE = ("gaussian-distributed", "corrected", "paper")  # the first is the default (docs/experiments/pathak2010.md)
DCA_NOISE = ("gaussian", "discrete-gaussian")
DCA_VALIDATE = ("range", "l2", "one-hot", "none")  # a DCA sum's predicate (mpdp.dca.validation); none: unproven contributions
ENSEMBLE_METHODS = ("soft", "vote")
ENDPOINTS_ENV = "MPDP_ENDPOINTS"
# The one bridge from the network-free core to the services: the live backend is the operator room's, found by
# name when connecting (the core imports no network code, tests/core/test_layout.py).
LIVE_BACKEND = "mpdp_services.operator.federation"
LIVE_QUERY = "mpdp_services.operator.query"  # Federation.query's operator side


class Backend(Protocol):
    """What a federation mode implements; :class:`Federation` checks the arguments first."""

    mode: str
    parties: tuple[str, ...]
    compute_nodes: tuple[str, ...]

    def logistic_regression(self, *, epsilon: float, lam: float, noise: str, delta: float | None, colluders: int | None,
                            classes: tuple[Any, ...] | None, dataset: str | None, parties: tuple[str, ...] | None) -> Result: ...
    def dp_gd(self, *, epsilon: float, delta: float, lam: float, rounds: int | None, classes: tuple[Any, ...] | None, total_records: int | None,
              records_per_party: int | None, dimension: int | None, max_missing: int, dataset: str | None, parties: tuple[str, ...] | None,
              validate: bool) -> Result: ...
    def dca_sum(self, Z: np.ndarray, *, epsilon: float, delta: float, clip: float, sensitivity: float, max_missing: int, noise: str,
                client_ids: list[str], validate: str) -> Result: ...
    def linear_regression(self, *, bounds: tuple[float, ...], epsilon: float, delta: float, total_records: int | None, records_per_party: int | None,
                          noise: str, grid_repeats: tuple[int, int], dataset: str | None, parties: tuple[str, ...] | None,
                          validate: bool) -> Result: ...
    def ensemble(self, *, auxiliary: Any, epsilon: float, lam: float, classes: tuple[Any, ...] | None, method: str, max_missing: int,
                 local_lam: float, protect_aux: bool, dataset: str | None, parties: tuple[str, ...] | None) -> Result: ...
    def lmgc(self, *, epsilon: float, lam: float, ridge: float, data_norm: float, release: str, dataset: str | None,
             parties: tuple[str, ...] | None) -> Result: ...
    def close(self) -> None: ...


def _positive(name: str, v: Any, *, upper: float | None = None) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, got {type(v).__name__}") from None
    if not (math.isfinite(f) and f > 0) or (upper is not None and not f < upper):
        raise ValueError(f"{name} must be finite and > 0{'' if upper is None else f' and < {upper:g}'}, got {v!r}")
    return f


def _choice(name: str, v: str, options: Sequence[str]) -> str:
    if v not in options:
        raise ValueError(f"{name} must be one of {', '.join(options)}; got {v!r}")
    return v


class Federation:
    """A federation of parties (and, for DCA protocols, compute nodes) that trains with DP.

    Build one with :meth:`in_process` or :meth:`connect`; call a protocol; read the :class:`~mpdp.results.Result`.

    >>> import numpy as np, mpdp
    >>> g = np.random.default_rng(1)
    >>> fed = mpdp.Federation.in_process(parties=[(g.normal(size=(30, 2)), g.normal(size=30)) for _ in range(3)], seed=b"s")
    >>> s = fed.dca_sum(np.clip(g.normal(size=(20, 2)), -1, 1), epsilon=1.0, delta=1e-5)
    >>> s.model.values.shape, s.model.clients_included
    ((2,), 20)
    """

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._schema: Any = None

    # -- construction ------------------------------------------------------------------------------
    @classmethod
    def in_process(cls, parties: Sequence[tuple[Any, Any]], *, compute_nodes: int = 3, key_bits: int = 2048,
                   seed: bytes | str | int | None = None, names: Sequence[str] | None = None, budget_epsilon: float | None = None,
                   budget_delta: float = 1e-3) -> "Federation":
        """All roles as machines in this process. ``parties``: one (X, y) per party (X of shape (n_j, d)).

        ``compute_nodes``: M DCA compute nodes (DCA sums, regression, ensembles, dp-gd). ``key_bits``: the
        Paillier and DGK moduli of the Pathak protocol (below 2048 only as a test federation). ``seed``: fix every
        random choice for a reproducible **simulation** (releases are marked ``seeded`` and are not private);
        None (default) draws from the OS CSPRNG. ``names``: party names (default ``party-1`` … ``party-K``).
        ``budget_epsilon``, ``budget_delta``: every party's privacy budget, as a served party's ledger has it (its
        Spends are checked there by the accountant; a job over budget raises :class:`JobFailed`); None (default): no
        limit, every charge recorded and none refused.
        """
        from mpdp.inprocess import InProcessBackend

        return cls(InProcessBackend(parties, compute_nodes=compute_nodes, key_bits=key_bits, seed=seed, names=names, budget_epsilon=budget_epsilon,
                                    budget_delta=budget_delta))

    @classmethod
    def connect(cls, endpoints: str | os.PathLike | None = None, *, profile: str | None = None, dataset: str | None = None,
                schema: str | os.PathLike | None = None, seed: bytes | str | int | None = None) -> "Federation":
        """A live federation: ``endpoints`` is its ``endpoints.json`` or the folder holding it; else the
        ``MPDP_ENDPOINTS`` environment variable, else the connection ``profile`` (or ``MPDP_PROFILE``, or the
        profiles file's default: `mpdp profile ls`). ``dataset``: the dataset name the parties map to their files,
        used by every call that does not name one. ``schema``: the federation's data schema file (docs/schema.md);
        its sha256 goes in every classification job's spec, and a party whose dataset has another schema refuses.
        ``seed``: a **test federation's** simulation seed (its services refuse it outside test mode), derived per job
        as :meth:`in_process` derives it: the n-th seeded call runs on the same seed in both (releases marked
        ``seeded``, not private); None (default): every role draws from its CSPRNG.

        >>> fed = mpdp.Federation.connect("runs/federation", dataset="breast_cancer")  # doctest: +SKIP
        >>> fed.logistic_regression(epsilon=1.0, lam=0.01).guarantee.statement          # doctest: +SKIP
        >>> fed = mpdp.Federation.connect(profile="hospital-a")                          # doctest: +SKIP
        """
        if endpoints is None:
            endpoints = os.environ.get(ENDPOINTS_ENV)
        if not endpoints:
            profiles = importlib.import_module("mpdp_services.common.profiles")
            if not (profile or os.environ.get(profiles.PROFILE_ENV) or profiles.load().default):
                raise ValueError(f"name the federation's endpoints.json (or its folder) or a profile, or set {ENDPOINTS_ENV}")
            endpoints = profiles.resolve(None, profile)
        live = importlib.import_module(LIVE_BACKEND)  # grpc and the operator clients load only when connecting
        schema_sha256 = ""
        loaded = None
        if schema is not None:
            from mpdp.schema import Schema

            loaded = Schema.load(Path(schema))
            schema_sha256 = loaded.sha256()
        from mpdp.inprocess import as_seed

        fed = cls(live.LiveBackend(Path(endpoints), dataset=dataset, schema_sha256=schema_sha256, seed=as_seed(seed)))
        fed._schema = loaded  # the columns, categories and bounds a query may use (Federation.query)
        return fed

    @property
    def backend(self) -> str:
        """Where jobs run: ``in-process`` or ``live``."""
        return self._backend.mode

    @property
    def mode(self) -> str:
        """Deprecated: the old name of :attr:`backend`, kept for one release (warns)."""
        warnings.warn("Federation.mode is deprecated and goes in the next release; use Federation.backend", FutureWarning, stacklevel=2)
        return self._backend.mode

    @property
    def parties(self) -> tuple[str, ...]:
        return self._backend.parties

    @property
    def compute_nodes(self) -> tuple[str, ...]:
        return self._backend.compute_nodes

    def __repr__(self) -> str:
        return f"Federation({self.backend}, parties={list(self.parties)}, compute_nodes={list(self.compute_nodes)})"

    def close(self) -> None:
        self._backend.close()

    def __enter__(self) -> "Federation":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the curator's jobs (live federations) ------------------------------------------------------
    def _host(self) -> Any:
        if self._backend.mode != LIVE:
            raise ValueError("an in-process federation runs each job to its end in the call; only a live federation's curator holds jobs")
        return self._backend

    def jobs(self, protocol: str = "", *, live_only: bool = False) -> list[dict[str, Any]]:
        """The curator's jobs of every protocol (value-free summaries, newest first), as `mpdp jobs ls` shows them."""
        return self._host().list_jobs(protocol, live_only)

    def watch(self, job_id: str) -> Iterator[dict[str, Any]]:
        """A job's summary now and after each change (state, stage), until it ends; any protocol."""
        return self._host().watch(job_id)

    def cancel(self, job_id: str) -> dict[str, Any]:
        """Fail a running job with CANCELLED; charges already made at the parties stay."""
        return self._host().cancel(job_id)

    def export(self, job_id: str) -> dict[str, Any]:
        """What a job of any protocol released, as `mpdp model export` writes it (coefficients, classes, guarantee,
        trust model; or the sum, or the posterior)."""
        return self._host().export(job_id)

    # -- protocols -----------------------------------------------------------------------------------
    def logistic_regression(self, *, epsilon: float, lam: float = 0.01, noise: str = PATHAK_NOISE[0], delta: float | None = None,
                            colluders: int | None = None, classes: Sequence[Any] | None = None, dataset: str | None = None,
                            parties: Sequence[str] | None = None) -> Result:
        """Pathak, Rane & Raj (2010): every party trains an L2-regularised logistic regression on its rows (scaled
        onto ‖x‖ ≤ 1), and the secure protocol (Paillier, DGK comparisons, secret shares) publishes their average
        plus noise calibrated to the smallest party, without anyone learning the sizes or the other models.

        ``noise``: ``gaussian-distributed`` (default: every party draws a share of Gaussian noise; (ε, δ)-DP
        against ``colluders`` pooling parties, δ default 1e-6), ``corrected`` (ε-DP spherical Laplace of the
        smallest party, which knows its noise) or ``paper`` (as published). ``classes``: the two labels, the
        second one positive (in-process default: the labels found, the larger positive; live default (−1, +1)).

        >>> r = fed.logistic_regression(epsilon=1.0, lam=0.01)       # doctest: +SKIP
        >>> r.score(X_test, y_test), r.guarantee.delta                # doctest: +SKIP
        """
        _positive("epsilon", epsilon)
        _positive("lam", lam)
        _choice("noise", noise, PATHAK_NOISE)
        if delta is not None:
            _positive("delta", delta, upper=1.0)
            if noise != "gaussian-distributed":
                raise ValueError(f"delta applies to gaussian-distributed noise only; {noise} is pure ε-DP")
        if colluders is not None and (int(colluders) != colluders or colluders < 0):
            raise ValueError(f"colluders must be a non-negative integer, got {colluders!r}")
        return self._backend.logistic_regression(epsilon=float(epsilon), lam=float(lam), noise=noise, delta=delta, colluders=colluders,
                                                 classes=_classes_arg(classes, 2), dataset=dataset, parties=_parties_arg(parties))

    def dp_gd(self, *, epsilon: float, delta: float = 1e-6, lam: float = 0.01, rounds: int | None = None, classes: Sequence[Any] | None = None,
              total_records: int | None = None, records_per_party: int | None = None, dimension: int | None = None, max_missing: int = 0,
              dataset: str | None = None, parties: Sequence[str] | None = None, validate: bool = True) -> Result:
        """Multiparty DP gradient descent (docs/protocols/dpgd.md): R + 1 DCA rounds of clipped gradient sums, the
        curator steps on the noisy sums; binary (two classes) or softmax logistic regression, (ε, δ)-DP per record.

        ``total_records`` (N) and ``records_per_party`` are public bounds: required live; in-process they default to
        the arrays' sizes. ``dimension``: d, required live. ``rounds``: R (default: 0 when N·ε ≥ 10⁴, else 4).
        ``validate`` (default): every party proves on its secret shares that its round vector lies in the ℓ2 ball of
        its public row bound × the clip, with distributed discrete Gaussian noise; False: no proofs, Gaussian noise
        (honest-but-curious parties; the guarantee's trust model says so), as `mpdp train dp-gd --validate none`.
        """
        _positive("epsilon", epsilon)
        _positive("delta", delta, upper=1.0)
        _positive("lam", lam)
        for name, v in (("rounds", rounds), ("total_records", total_records), ("records_per_party", records_per_party), ("dimension", dimension)):
            if v is not None and (int(v) != v or v < (0 if name == "rounds" else 1)):
                raise ValueError(f"{name} must be a {'non-negative' if name == 'rounds' else 'positive'} integer, got {v!r}")
        return self._backend.dp_gd(epsilon=float(epsilon), delta=float(delta), lam=float(lam), rounds=rounds, classes=_classes_arg(classes, None),
                                   total_records=total_records, records_per_party=records_per_party, dimension=dimension,
                                   max_missing=_nonneg("max_missing", max_missing), dataset=dataset, parties=_parties_arg(parties),
                                   validate=bool(validate))

    def dca_sum(self, vectors: Any, *, epsilon: float, delta: float, clip: float = 1.0, sensitivity: float | None = None, max_missing: int = 0,
                noise: str | None = None, client_ids: Sequence[str] | None = None, validate: str = "range") -> Result:
        """The Distributed Compute Algorithm (Heikkilä et al. 2017): the (ε, δ)-DP sum of N client vectors.

        Each row of ``vectors`` is one client's vector; every client clips each entry to ±``clip``, adds its slice
        of the Gaussian noise and secret-shares the result across the M compute nodes, which add up and release only
        the noisy sum. ``sensitivity``: Δ₂ of one client's vector (default 2·clip·√d: any client replaced).
        ``max_missing``: T clients that may drop out or collude. ``validate`` (default ``range``): every client proves
        on its shares that each entry is within ±clip (``l2``: ‖z‖₂ ≤ clip; ``one-hot``: a 0/1 vote), and adds no noise:
        the compute nodes add it; an invalid contribution is dropped like a dropout. ``none`` trusts the clients (the guarantee says
        so). ``noise``: ``discrete-gaussian`` (the default, and the only noise a validated sum takes) or, with
        ``validate="none"``, ``gaussian`` (its default there).
        Live, the vectors are submitted with the operator's certificate as a simulated cohort (as `mpdp dca loadgen`).

        >>> fed.dca_sum(np.ones((10, 3)) * 0.5, epsilon=1.0, delta=1e-5).model.values   # doctest: +SKIP
        """
        Z = np.asarray(vectors, dtype=np.float64)
        if Z.ndim != 2 or Z.shape[0] < 2 or Z.shape[1] < 1:
            raise ValueError(f"vectors must be a 2-D array of N ≥ 2 client vectors, got shape {Z.shape}")
        if not np.all(np.isfinite(Z)):
            raise ValueError("vectors must be finite")
        _positive("epsilon", epsilon)
        _positive("delta", delta, upper=1.0)
        _positive("clip", clip)
        sens = 2.0 * float(clip) * math.sqrt(Z.shape[1]) if sensitivity is None else _positive("sensitivity", sensitivity)
        _choice("validate", validate, DCA_VALIDATE)
        if validate != "none" and noise not in (None, "discrete-gaussian"):
            raise ValueError(f"a validated sum (validate={validate!r}) takes discrete-gaussian noise (the proof bounds integer noise); "
                             "pass validate='none' for gaussian noise")
        noise = _choice("noise", noise or ("gaussian" if validate == "none" else "discrete-gaussian"), DCA_NOISE)
        ids = list(client_ids) if client_ids is not None else [f"client-{i:06d}" for i in range(Z.shape[0])]
        if len(ids) != Z.shape[0] or len(set(ids)) != len(ids):
            raise ValueError(f"client_ids must be {Z.shape[0]} distinct names, one per row")
        return self._backend.dca_sum(Z, epsilon=float(epsilon), delta=float(delta), clip=float(clip), sensitivity=sens,
                                     max_missing=_nonneg("max_missing", max_missing), noise=noise, client_ids=ids, validate=validate)

    sum = dca_sum

    def query(self, sql: str, *, epsilon: float = 1.0, delta: float = 1e-6, records_per_party: int = 100_000, schema: str | os.PathLike | None = None,
              parties: Sequence[str] | None = None, max_missing: int = 0) -> Any:
        """A DP answer to one SQL query over the parties' records (docs/protocols/query.md), as a pandas DataFrame: the
        group columns, then per aggregate its estimate, ``<name>_low`` and ``<name>_high`` (a 95 % interval) and
        ``<name>_noise_sd``; ``df.attrs`` holds the job id, the guarantee and how the intervals and the budget split
        were made. Live federations only (the parties' rows stay at the parties).

        The subset: COUNT(*), SUM, AVG, QUANTILE(col, q) / MEDIAN / PERCENTILE_CONT(q) WITHIN GROUP FROM the dataset,
        WHERE on schema columns against literals, GROUP BY schema categories or BIN(col, k) over the schema's public
        bounds; anything else raises :class:`mpdp.query.plan.QueryError` before anything is sent. ``schema``: the
        federation's schema file (default: the one given to :meth:`connect`; none: COUNT(*) only). ``records_per_party``:
        the public row bound each party proves its vector within (not the noise's scale). Each party is charged
        (``epsilon``, ``delta``) once.

        >>> fed = mpdp.Federation.connect("runs/federation", schema="examples/adult/schema.yaml")   # doctest: +SKIP
        >>> fed.query("SELECT sex, COUNT(*) AS n, AVG(age) FROM adult GROUP BY sex")                # doctest: +SKIP
        """
        host = self._host()
        _positive("epsilon", epsilon)
        _positive("delta", delta, upper=1.0)
        q = importlib.import_module(LIVE_QUERY)

        sch = q.load_schema(schema) if schema is not None else self._schema
        spec, _ = q.query_spec(sql, parties=list(parties) if parties is not None else host._names(None), nodes=host._nodes(), epsilon=float(epsilon),
                               delta=float(delta), records_per_party=int(records_per_party), schema=sch, max_missing=int(max_missing))
        try:
            model = q.run_query(host.endpoints, spec)
        except q.QueryFailed as e:
            raise JobFailed(str(e)) from None
        return q.frame(model)

    def evaluate(self, job: str, *, dataset: str, epsilon: float = 1.0, delta: float = 1e-6, score_bins: int = 20,
                 records_per_party: int = 100_000, schema: str | os.PathLike | None = None, parties: Sequence[str] | None = None,
                 max_missing: int = 0) -> dict[str, Any]:
        """A released classifier's accuracy, confusion matrix and AUC on every party's own ``dataset`` rows
        (docs/protocols/query.md, "Evaluating a released model"), released with DP as one query: each party counts
        its confusion matrix and per-class score histogram, and one validated DCA sum releases them. ``job``: a
        released pathak2010 or binary dp-gd model. Returns a dict: ``accuracy`` with ``accuracy_low``/``_high`` (a
        95 % interval), ``auc`` (a point estimate with ``auc_noise_sd``), ``confusion`` (the noisy counts, each with
        its interval), the guarantee. Each party is charged (``epsilon``, ``delta``) once. Live federations only.

        >>> fed.evaluate(result.job_id, dataset="bc_test")["accuracy"]      # doctest: +SKIP
        """
        host = self._host()
        _positive("epsilon", epsilon)
        _positive("delta", delta, upper=1.0)
        q = importlib.import_module(LIVE_QUERY)
        sch = q.load_schema(schema) if schema is not None else None
        protocol, weights = q.released_classifier(host.endpoints, job)
        spec, _ = q.evaluation_spec(job, protocol, weights, dataset=dataset, parties=list(parties) if parties is not None else host._names(None),
                                    nodes=host._nodes(), epsilon=float(epsilon), delta=float(delta), records_per_party=int(records_per_party),
                                    score_bins=int(score_bins), schema_sha256=sch.sha256() if sch is not None else "", max_missing=int(max_missing))
        try:
            model = q.run_query(host.endpoints, spec)
        except q.QueryFailed as e:
            raise JobFailed(str(e)) from None
        return q.evaluation_summary(model)

    def linear_regression(self, *, bounds: Sequence[float], epsilon: float, delta: float = 1e-4, total_records: int | None = None,
                          records_per_party: int | None = None, noise: str | None = None, grid_repeats: tuple[int, int] = (20, 20),
                          dataset: str | None = None, parties: Sequence[str] | None = None, validate: bool = True) -> Result:
        """DP Bayesian linear regression (Heikkilä et al. 2017, Algorithm 2) over the DCA, every party one client.

        ``bounds``: public clip bounds c, d + 1 values (the d features, then the target). Two rounds: the std round
        (squares clipped to c) sets the thresholds B, the main round releases XᵀX and Xᵀy clipped to B; the model is
        the posterior mean. ``total_records`` (N) and ``records_per_party`` are public: required live; in-process
        they default to the arrays' sizes. ``grid_repeats``: simulations of the public threshold search.
        ``validate`` (default): every party proves each coordinate of its statistic within its public range (its row
        bound × the record bounds), with discrete Gaussian noise; False: no proofs (honest-but-curious parties), noise
        ``noise`` (default gaussian).
        """
        b = tuple(_positive("bounds", v) for v in bounds)
        if len(b) < 2:
            raise ValueError("bounds needs d + 1 ≥ 2 values: one per feature, then the target's")
        _positive("epsilon", epsilon)
        _positive("delta", delta, upper=1.0)
        if validate and noise not in (None, "discrete-gaussian"):
            raise ValueError("validated rounds take the discrete Gaussian (the proof bounds integer noise); pass validate=False for gaussian noise")
        noise = _choice("noise", noise or ("discrete-gaussian" if validate else DCA_NOISE[0]), DCA_NOISE)
        repeats = tuple(grid_repeats)
        if len(repeats) != 2:
            raise ValueError(f"grid_repeats needs two counts (R_data, R_noise), got {grid_repeats!r}")
        return self._backend.linear_regression(bounds=b, epsilon=float(epsilon), delta=float(delta), total_records=total_records,
                                               records_per_party=records_per_party, noise=noise, grid_repeats=repeats,
                                               dataset=dataset, parties=_parties_arg(parties), validate=bool(validate))

    def ensemble(self, *, auxiliary: Any, epsilon: float, lam: float = 0.01, classes: Sequence[Any] | None = None, method: str = "soft",
                 max_missing: int = 0, local_lam: float = 0.0, protect_aux: bool = False, dataset: str | None = None,
                 parties: Sequence[str] | None = None) -> Result:
        """Hamm, Cao & Belkin (2016) without a trusted collector: every party votes with its local classifier on
        the curator's public ``auxiliary`` points, the compute nodes add the votes (secure sum), the curator trains
        a global logistic regression on the vote counts and releases it with ε-DP output noise (a party is the unit).

        ``auxiliary``: in-process, the public feature matrix (rows scaled onto ‖x‖ ≤ 1); live, the name of the
        curator's auxiliary dataset. ``method``: ``soft`` (Alg. 2) or ``vote`` (Alg. 1).
        """
        _positive("epsilon", epsilon)
        _positive("lam", lam)
        _choice("method", method, ENSEMBLE_METHODS)
        if local_lam:
            _positive("local_lam", local_lam)
        return self._backend.ensemble(auxiliary=auxiliary, epsilon=float(epsilon), lam=float(lam), classes=_classes_arg(classes, None),
                                      method=method, max_missing=_nonneg("max_missing", max_missing), local_lam=float(local_lam),
                                      protect_aux=bool(protect_aux), dataset=dataset, parties=_parties_arg(parties))

    def lmgc(self, *, epsilon: float, lam: float = 1e-3, ridge: float = 1e-3, data_norm: float = 1.0, release: str = "average",
             dataset: str | None = None, parties: Sequence[str] | None = None) -> Result:
        """Pathak & Raj's large-margin Gaussian classifier (multiclass), released locally: each party trains an
        ε-DP classifier (corrected objective perturbation) on its rows clipped to ``data_norm`` and releases it; the
        curator publishes all releases and their average (post-processing, parallel composition: ε-DP).

        ``release``: the model to return, ``average`` (default) or a party's name (all are in ``details``).
        """
        _positive("epsilon", epsilon)
        _positive("lam", lam)
        _positive("ridge", ridge)
        _positive("data_norm", data_norm)
        return self._backend.lmgc(epsilon=float(epsilon), lam=float(lam), ridge=float(ridge), data_norm=float(data_norm), release=release,
                                  dataset=dataset, parties=_parties_arg(parties))


def _nonneg(name: str, v: Any) -> int:
    if int(v) != v or v < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {v!r}")
    return int(v)


def _parties_arg(parties: Sequence[str] | None) -> tuple[str, ...] | None:
    if parties is None:
        return None
    if isinstance(parties, str):
        raise TypeError("parties must be a list of party names, not one string")
    out = tuple(parties)
    if not out or len(set(out)) != len(out):
        raise ValueError("parties must be distinct names, at least one")
    return out


def _classes_arg(classes: Sequence[Any] | None, exactly: int | None) -> tuple[Any, ...] | None:
    if classes is None:
        return None
    if isinstance(classes, str):
        raise TypeError("classes must be a list of labels, not one string")
    out = tuple(classes)
    if len({str(c) for c in out}) != len(out) or len(out) < 2:
        raise ValueError(f"classes must be at least two distinct labels, got {list(out)}")
    if exactly is not None and len(out) != exactly:
        raise ValueError(f"this protocol is binary: classes must name {exactly} labels (negative, positive), got {list(out)}")
    return out
