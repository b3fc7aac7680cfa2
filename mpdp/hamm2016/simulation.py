"""In-process simulation of HCB16 with thousands of parties (the paper's Sec. 6, Fig. 2–3).

One *data trial* (:func:`run_trial`):

1. public simulation data (numpy generator, never DP noise): about 10 % of the training rows become the
   auxiliary unlabeled set (public), the rest is spread at random over M parties with ``per_party`` rows
   each, or as many as the data allow (:func:`split_rows`; the actual numbers are reported);
2. every party trains its local classifier h_i (:func:`fit_locals`): all-L2-LR binary parties in one call of
   :func:`~mpdp.hamm2016.local.batched_logreg`; multiclass L2-LR by the exact minimiser in each party's row space
   (representer theorem, :func:`reduced_multinomial`); other or mixed scikit-learn types by
   :func:`~mpdp.hamm2016.local.fit_local`;
3. each party votes on the N auxiliary points; the counts come from **exactly the vector sum the DCA nodes
   would compute**, Σ_i :func:`~mpdp.hamm2016.labels.party_votes` (h_i(x_1..x_N)), decoded by
   :func:`~mpdp.hamm2016.labels.vote_counts` (:func:`ensemble_vote_sum`);
4. per method and 1/ε:

   * ``batch``: non-private LR (same λ) on all private rows pooled (:func:`~mpdp.hamm2016.erm.fit_soft`, one-hot);
   * ``soft`` / ``vote``: :func:`~mpdp.hamm2016.mechanism.release_global` with ε = ∞ gives the noise-free
     minimiser w_s (the 1/ε = 0 column, guarantee "none"); for each finite ε, ``noise_draws`` releases
     w_s + η with :func:`~mpdp.hamm2016.mechanism.output_perturbation` — the same two steps release_global
     runs, with the deterministic fit done once per data trial;
   * ``avg``: :func:`~mpdp.hamm2016.mechanism.avg_release` of the local weights (only when every local model is
     L2-LR), one call per noise draw; ``avg-tight``: the same with the objective norm bound (``tight=True``,
     Δ₂ = 2·√(2 ln C/λ)/M);
   * ``pate``: GNMax (:mod:`~mpdp.hamm2016.pate`): ``pate_queries`` distinct auxiliary rows chosen at random
     (public), their vote counts + N(0, σ²) with σ calibrated for (ε, ``pate_delta``) by RDP, noisy argmax labels,
     then the student L2-LR on those rows (post-processing), one noise draw per call;
   * ``indiv``: the mean test accuracy of the local classifiers, estimated on a uniformly drawn subset of
     ``indiv_parties`` parties (public simulation choice; all parties when M is smaller).

Noise comes from the :class:`~mpdp.math.drbg.Drbg` passed in (a child stream per method, ε and draw). A seeded
Drbg (``Drbg.from_seed``) makes a run reproducible: that is a simulation, NOT a private release.

Speed-ups that do not change any number: local models predict each *distinct* auxiliary row once and the
prediction is copied to its duplicates (KDD-99 rows repeat a lot), and test accuracies may be computed on
distinct test rows weighted by their multiplicity (``test_weight``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from mpdp.hamm2016.erm import fit_soft
from mpdp.hamm2016.labels import majority_labels, one_hot, party_votes, soft_labels, vote_counts
from mpdp.hamm2016.local import CLASSIFIERS, LocalModel, batched_logreg, fit_local
from mpdp.hamm2016.mechanism import EnsembleParams, avg_release, output_perturbation, release_global
from mpdp.hamm2016.pate import DEFAULT_DELTA, DEFAULT_QUERIES, query_rows, release_pate
from mpdp.math.drbg import Drbg

METHODS = ("batch", "soft", "avg", "avg-tight", "pate", "vote", "indiv")
PRIVATE_METHODS = ("soft", "avg", "avg-tight", "pate", "vote")
LINEAR_LOCAL_METHODS = ("avg", "avg-tight")  # average local L2-LR weights: need local="logreg"
MIXED_KINDS = ("logreg", "linear_svm", "tree", "naive_bayes")  # "mixed": party i uses MIXED_KINDS[i % 4]
LOCAL_CHOICES = ("logreg", "mixed") + tuple(k for k in CLASSIFIERS if k != "logreg")
DEFAULT_EPSILONS_INV = (0.0, 0.1, 1.0, 10.0, 100.0)
PREDICT_CHUNK = 256  # parties whose aux predictions are held in memory at once

StepCallback = Callable[[str], None]


def epsilon_of(eps_inv: float) -> float:
    """ε for a 1/ε grid value: 0 means no noise (ε = ∞, guarantee "none")."""
    if not (math.isfinite(eps_inv) and eps_inv >= 0):
        raise ValueError(f"1/ε must be finite and ≥ 0, got {eps_inv!r}")
    return math.inf if eps_inv == 0 else 1.0 / eps_inv


@dataclass(frozen=True)
class SimulationConfig:
    """Parameters of one simulated federation (one M). Defaults: the paper's KDD-99 setting (§6.2)."""

    parties: int
    per_party: int = 22
    lam: float = 1e-4
    epsilons_inv: tuple[float, ...] = DEFAULT_EPSILONS_INV
    noise_draws: int = 10
    methods: tuple[str, ...] = METHODS
    local: str = "logreg"
    protect_aux: bool = False
    indiv_parties: int = 1000
    pate_queries: int = DEFAULT_QUERIES
    pate_delta: float = DEFAULT_DELTA

    def __post_init__(self) -> None:
        if self.parties < 1:
            raise ValueError(f"parties must be >= 1, got {self.parties}")
        if self.per_party < 1:
            raise ValueError(f"per_party must be >= 1, got {self.per_party}")
        if not (math.isfinite(self.lam) and self.lam > 0):
            raise ValueError(f"lam must be finite and positive, got {self.lam}")
        if not self.epsilons_inv or len(set(self.epsilons_inv)) != len(self.epsilons_inv):
            raise ValueError(f"epsilons_inv must be distinct values, got {self.epsilons_inv}")
        for v in self.epsilons_inv:
            epsilon_of(v)
        if self.noise_draws < 1:
            raise ValueError(f"noise_draws must be >= 1, got {self.noise_draws}")
        bad = [m for m in self.methods if m not in METHODS]
        if bad or not self.methods or len(set(self.methods)) != len(self.methods):
            raise ValueError(f"methods must be distinct names from {METHODS}, got {self.methods}")
        if self.local not in LOCAL_CHOICES:
            raise ValueError(f"local must be one of {LOCAL_CHOICES}, got {self.local!r}")
        if any(m in LINEAR_LOCAL_METHODS for m in self.methods) and self.local != "logreg":
            raise ValueError("avg and avg-tight average local L2-LR weights: they need local='logreg'")
        if self.pate_queries < 1:
            raise ValueError(f"pate_queries must be >= 1, got {self.pate_queries}")
        if not 0 < self.pate_delta < 1:
            raise ValueError(f"pate_delta must lie in (0, 1), got {self.pate_delta}")
        if self.indiv_parties < 1:
            raise ValueError(f"indiv_parties must be >= 1, got {self.indiv_parties}")


# ------------------------------------------------------------------------------------------- public data split


@dataclass(frozen=True)
class RowSplit:
    """Which training rows are auxiliary and which party holds which rows (public simulation data)."""

    aux: np.ndarray  # (N,) row indices of the auxiliary unlabeled set
    parties: np.ndarray  # (M, n) row indices of each party's private rows
    unused: int  # private-pool rows that no party received
    requested_per_party: int

    @property
    def n_aux(self) -> int:
        return int(self.aux.size)

    @property
    def n_parties(self) -> int:
        return int(self.parties.shape[0])

    @property
    def per_party(self) -> int:
        return int(self.parties.shape[1])

    def summary(self) -> dict:
        return {"n_aux": self.n_aux, "parties": self.n_parties, "per_party": self.per_party,
                "requested_per_party": self.requested_per_party, "private_rows": self.n_parties * self.per_party,
                "unused_rows": self.unused}


def split_rows(n_rows: int, parties: int, per_party: int, aux_fraction: float, gen: np.random.Generator,
               *, max_aux: int | None = None) -> RowSplit:
    """Random split of ``n_rows`` training rows: round(aux_fraction·n_rows) auxiliary rows (at most ``max_aux``
    of them kept — the rest is then unused, never private), the other rows in random order to ``parties``
    parties with min(per_party, pool // parties) rows each. The same generator state gives nested splits:
    a smaller M receives a prefix of the same parties.
    """
    if not 0 < aux_fraction < 1:
        raise ValueError(f"aux_fraction must lie in (0, 1), got {aux_fraction}")
    perm = gen.permutation(n_rows)  # public simulation data: which rows are auxiliary and whose rows are whose
    n_aux = int(round(aux_fraction * n_rows))
    aux, pool = perm[:n_aux], perm[n_aux:]
    if max_aux is not None:
        aux = aux[:max_aux]
    per = min(per_party, pool.size // parties)
    if per < 1 or aux.size < 1:
        raise ValueError(f"{n_rows} rows cannot give {parties} parties one private row each after {n_aux} auxiliary rows")
    return RowSplit(aux, pool[: parties * per].reshape(parties, per), int(pool.size - parties * per), int(per_party))


# ------------------------------------------------------------------------------------------- local models


def reduced_multinomial(X: np.ndarray, y: np.ndarray, classes: int, lam: float) -> np.ndarray:
    """W (M, C, d): each party's exact multinomial L2-LR minimiser (the ``logreg`` local model, no intercept).

    Representer theorem: the minimiser of (1/n)Σ −log softmax(Wx_j)_{y_j} + (λ/2)‖W‖² has its rows in the
    span of the party's x_j. With an orthonormal basis Q_i (d × n) of a space containing that span (reduced QR
    of X_iᵀ), W_i = V_i Q_iᵀ where V_i solves the same problem on the coordinates Z_i = X_i Q_i
    (‖W‖_F = ‖V‖_F, and the loss only sees X_i W_iᵀ = Z_i V_iᵀ). The reduced problem has C·n instead of C·d
    unknowns and is solved by :func:`~mpdp.hamm2016.erm.fit_soft` to the same tolerance (‖∇_W J‖ = ‖∇_V J‖).
    The result equals :func:`~mpdp.hamm2016.local.fit_local` (``"logreg"``) up to rounding (tested).
    """
    X = np.asarray(X, dtype=np.float64)
    M, n, d = X.shape
    if n >= d:  # no reduction possible: the full problem per party
        return np.stack([fit_soft(X[i], one_hot(y[i], classes), lam) for i in range(M)])
    Q, _ = np.linalg.qr(X.transpose(0, 2, 1))  # (M, d, n), orthonormal columns
    Z = np.matmul(X, Q)  # (M, n, n)
    W = np.empty((M, classes, d))
    for i in range(M):
        W[i] = fit_soft(Z[i], one_hot(y[i], classes), lam) @ Q[i].T
    return W


@dataclass
class LocalEnsemble:
    """The M local classifiers: linear weights (all L2-LR) or fitted :class:`~mpdp.hamm2016.local.LocalModel`s."""

    classes: int
    kinds: tuple[str, ...]  # classifier name of each party
    weights: np.ndarray | None = None  # (M, d) binary, (M, C, d) multiclass; None unless every model is L2-LR
    models: list[LocalModel] | None = None

    @property
    def parties(self) -> int:
        return len(self.kinds)

    def predictions(self, X: np.ndarray, parties: np.ndarray | None = None, chunk: int = PREDICT_CHUNK) -> Iterator[np.ndarray]:
        """Class-index predictions (m, n) for consecutive chunks of ``parties`` (default all, in order).

        Linear models use the rule of :func:`~mpdp.hamm2016.erm.predict`: binary class 1 iff wᵀx > 0,
        multiclass the first argmax of Wx.
        """
        idx = np.arange(self.parties) if parties is None else np.asarray(parties)
        for lo in range(0, idx.size, chunk):
            sel = idx[lo: lo + chunk]
            if self.weights is not None:
                W = self.weights[sel]
                if W.ndim == 2:
                    yield (W @ X.T > 0).astype(np.int64)
                else:
                    m, C, d = W.shape
                    yield np.argmax((W.reshape(m * C, d) @ X.T).reshape(m, C, -1), axis=1).astype(np.int64)
            else:
                assert self.models is not None
                yield np.stack([self.models[i].predict(X) for i in sel])


def fit_locals(X: np.ndarray, y: np.ndarray, classes: int, lam: float, local: str = "logreg") -> LocalEnsemble:
    """Train every party's h_i on its rows X (M, n, d) with class indices y (M, n).

    ``logreg``: exact L2-LR for all parties (binary: :func:`~mpdp.hamm2016.local.batched_logreg`; multiclass:
    :func:`reduced_multinomial`). ``mixed``: party i uses :data:`MIXED_KINDS`\\[i mod 4\\]. Any other key of
    :data:`~mpdp.hamm2016.local.CLASSIFIERS`: that type for all parties (one :func:`fit_local` per party).
    """
    M = X.shape[0]
    if local == "logreg":
        if classes == 2:
            W = batched_logreg(X, np.where(y == 1, 1.0, -1.0), lam)
        else:
            W = reduced_multinomial(X, y, classes, lam)
        return LocalEnsemble(classes, ("logreg",) * M, weights=W)
    if local == "mixed":
        kinds = tuple(MIXED_KINDS[i % len(MIXED_KINDS)] for i in range(M))
    elif local in CLASSIFIERS:
        kinds = (local,) * M
    else:
        raise ValueError(f"unknown local classifier {local!r}; use one of {LOCAL_CHOICES}")
    models = [fit_local(kinds[i], X[i], y[i], classes, lam) for i in range(M)]
    return LocalEnsemble(classes, kinds, models=models)


# ------------------------------------------------------------------------------------------- votes


def distinct_rows(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first index of each distinct row, inverse) so that X[first][inverse] == X."""
    _, first, inverse = np.unique(X, axis=0, return_index=True, return_inverse=True)
    return first, np.asarray(inverse).ravel()


def ensemble_vote_sum(ensemble: LocalEnsemble, X_aux: np.ndarray, *, distinct: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Σ_i party_votes(h_i(x_1..x_N)): the vector the DCA secure sum delivers to the curator.

    Each local model predicts every distinct auxiliary row once; ``distinct`` = :func:`distinct_rows` (X_aux)
    (computed when None) copies the prediction to the duplicates, so every party's vote vector is its
    prediction on all N rows, as in the federation.
    """
    first, inverse = distinct if distinct is not None else distinct_rows(X_aux)
    X_u = X_aux[first]
    C = ensemble.classes
    total = np.zeros(X_aux.shape[0] * (1 if C == 2 else C))
    for P in ensemble.predictions(X_u):
        for row in P:
            total += party_votes(row[inverse], C)
    return total


# ------------------------------------------------------------------------------------------- evaluation


def linear_accuracies(weights: np.ndarray, X: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None = None,
                      chunk: int = 64) -> np.ndarray:
    """Test accuracy of each of k linear models, weights (k, d) binary or (k, C, d), prediction rule of
    :func:`~mpdp.hamm2016.erm.predict`; rows weighted by ``sample_weight`` (multiplicities) when given."""
    W = np.asarray(weights, dtype=np.float64)
    w8 = np.ones(X.shape[0]) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    out = np.empty(W.shape[0])
    for lo in range(0, W.shape[0], chunk):
        Wc = W[lo: lo + chunk]
        if Wc.ndim == 2:
            pred = (X @ Wc.T > 0).astype(np.int64)  # (n, k)
        else:
            k, C, d = Wc.shape
            pred = np.argmax((X @ Wc.reshape(k * C, d).T).reshape(-1, k, C), axis=2)  # (n, k)
        out[lo: lo + chunk] = (w8 @ (pred == y[:, None])) / w8.sum()
    return out


def model_accuracies(ensemble: LocalEnsemble, parties: np.ndarray, X: np.ndarray, y: np.ndarray,
                     sample_weight: np.ndarray | None = None) -> np.ndarray:
    """Test accuracy of the local models of ``parties``."""
    if ensemble.weights is not None:
        return linear_accuracies(ensemble.weights[parties], X, y, sample_weight)
    w8 = np.ones(X.shape[0]) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    accs = [(P == y[None, :]) @ w8 / w8.sum() for P in ensemble.predictions(X, parties, chunk=16)]
    return np.concatenate(accs)


# ------------------------------------------------------------------------------------------- one data trial


@dataclass
class TrialData:
    """Public simulation data of one trial, features already in the unit ball."""

    X_aux: np.ndarray  # (N, d) auxiliary (public, unlabeled) rows
    X_parties: np.ndarray  # (M, n, d)
    y_parties: np.ndarray  # (M, n) class indices
    X_test: np.ndarray  # (T, d)
    y_test: np.ndarray  # (T,)
    classes: int
    test_weight: np.ndarray | None = None  # multiplicity of each test row (None: all 1)
    y_aux: np.ndarray | None = None  # true aux labels: diagnostics only, never used by a method
    aux_distinct: tuple[np.ndarray, np.ndarray] | None = None  # distinct_rows(X_aux), computed when None


@dataclass
class TrialResult:
    """Accuracies of one data trial: {(method, 1/ε): [accuracy per noise draw]} (one value when noise-free)."""

    accuracies: dict[tuple[str, float], list[float]] = field(default_factory=dict)
    diagnostics: dict = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    privacy: dict[tuple[str, float], dict] = field(default_factory=dict)


def trial_steps(config: SimulationConfig) -> int:
    """Progress units :func:`run_trial` reports: locals, votes, then one per requested method."""
    return 2 + len(config.methods)


def run_trial(data: TrialData, config: SimulationConfig, rng: Drbg, gen: np.random.Generator,
              step: StepCallback | None = None) -> TrialResult:
    """One data trial of every requested method (module doc); noise from ``rng``, the indiv subset from ``gen``."""
    report = step or (lambda name: None)
    res = TrialResult()
    M, n, d = data.X_parties.shape
    C = data.classes
    N = data.X_aux.shape[0]
    if M != config.parties:
        raise ValueError(f"data hold {M} parties, config.parties = {config.parties}")
    Xt, yt, tw = data.X_test, data.y_test, data.test_weight
    grid = config.epsilons_inv
    res.diagnostics.update(parties=M, per_party=n, n_aux=N, d=d, classes=C)

    t0 = time.perf_counter()
    ens = fit_locals(data.X_parties, data.y_parties, C, config.lam, config.local)
    res.seconds["locals"] = time.perf_counter() - t0
    report("locals")

    t0 = time.perf_counter()
    distinct = data.aux_distinct if data.aux_distinct is not None else distinct_rows(data.X_aux)
    vote_sum = ensemble_vote_sum(ens, data.X_aux, distinct=distinct)
    counts = vote_counts(vote_sum, N, C, M)
    res.seconds["votes"] = time.perf_counter() - t0
    res.diagnostics["aux_distinct_rows"] = int(distinct[0].size)
    res.diagnostics["unanimous_fraction"] = float(np.mean(counts.max(axis=1) == M))
    if data.y_aux is not None:
        res.diagnostics["majority_label_accuracy"] = float(np.mean(majority_labels(counts, M) == data.y_aux))
        res.diagnostics["mean_alpha_true_class"] = float(np.mean(soft_labels(counts, M)[np.arange(N), data.y_aux]))
    report("votes")

    def record(method: str, eps_inv: float, accs: Iterable[float]) -> None:
        res.accuracies.setdefault((method, eps_inv), []).extend(float(a) for a in accs)

    if "batch" in config.methods:
        t0 = time.perf_counter()
        # merge=False: merging duplicate rows (np.unique over ~10⁵ rows) costs more than Newton on all rows here
        w = fit_soft(data.X_parties.reshape(M * n, d), one_hot(data.y_parties.ravel(), C), config.lam, merge=False)
        acc = float(linear_accuracies(w[None], Xt, yt, tw)[0])
        for e in grid:  # non-private: the same number in every column (a horizontal line in the figure)
            record("batch", e, [acc])
        res.seconds["batch"] = time.perf_counter() - t0
        res.diagnostics["batch_weight_norm"] = float(np.linalg.norm(w))
        report("batch")

    for method in ("soft", "avg", "avg-tight", "pate", "vote"):
        if method not in config.methods:
            continue
        t0 = time.perf_counter()
        mrng = rng.child(method)
        if method in LINEAR_LOCAL_METHODS:
            assert ens.weights is not None
            res.diagnostics["avg_weight_norm"] = float(np.linalg.norm(ens.weights.mean(axis=0)))
            res.diagnostics["local_weight_norm_mean"] = float(np.mean(np.linalg.norm(ens.weights.reshape(M, -1), axis=1)))
            res.diagnostics["local_weight_norm_max"] = float(np.max(np.linalg.norm(ens.weights.reshape(M, -1), axis=1)))
            tight = method == "avg-tight"
            for e in grid:
                eps = epsilon_of(e)
                draws = 1 if math.isinf(eps) else config.noise_draws
                rels = [avg_release(ens.weights, config.lam, eps, mrng.child(f"{e!r}/{k}"), tight=tight) for k in range(draws)]
                record(method, e, linear_accuracies(np.stack([r.weights for r in rels]), Xt, yt, tw))
                res.privacy[(method, e)] = rels[0].guarantee.as_dict() | {"mean_noise_norm": float(np.mean([r.noise_norm for r in rels]))}
        elif method == "pate":
            rows = query_rows(distinct[1], config.pate_queries, gen.spawn(1)[0])  # public choice; gen's own stream untouched
            queried = int(np.unique(distinct[1][rows]).size)
            res.diagnostics.update(pate_queries=queried, pate_training_rows=int(rows.size))
            fits: dict[bytes, np.ndarray] = {}  # same labels → same (deterministic) fit
            for e in grid:
                eps = epsilon_of(e)
                draws = 1 if math.isinf(eps) else config.noise_draws
                pate_rels = [release_pate(data.X_aux, rows, distinct[1], counts, lam=config.lam, epsilon=eps, parties=M,
                                          rng=mrng.child(f"{e!r}/{k}"), delta=config.pate_delta, fits=fits) for k in range(draws)]
                record(method, e, linear_accuracies(np.stack([r.weights for r in pate_rels]), Xt, yt, tw))
                extra: dict = {"queries": queried}
                if pate_rels[0].account is not None:
                    extra.update(sigma=pate_rels[0].account.sigma, rho=pate_rels[0].account.rho)
                if data.y_aux is not None:
                    first = np.unique(distinct[1][rows], return_index=True)[1]
                    truth = data.y_aux[rows[first]]
                    extra["label_accuracy_mean"] = float(np.mean([np.mean(r.labels == truth) for r in pate_rels]))
                res.privacy[(method, e)] = pate_rels[0].guarantee.as_dict() | extra  # the noise is on the counts, not the weights
        else:
            base = EnsembleParams(method, config.lam, math.inf, C, N, M, config.protect_aux)
            # ε = ∞: release_global returns the exact noise-free minimiser w_s (guarantee "none") — the fit the
            # curator runs; finite ε adds output-perturbation noise to this same w_s (release_global's last step)
            w_s = release_global(data.X_aux, counts, base, mrng.child("fit")).weights
            res.diagnostics[f"{method}_weight_norm"] = float(np.linalg.norm(w_s))
            for e in grid:
                eps = epsilon_of(e)
                params = EnsembleParams(method, config.lam, eps, C, N, M, config.protect_aux)
                if math.isinf(eps):
                    Ws = w_s[None]
                else:
                    Ws = np.stack([output_perturbation(w_s, params, mrng.child(f"{e!r}/{k}")) for k in range(config.noise_draws)])
                record(method, e, linear_accuracies(Ws, Xt, yt, tw))
                noise = np.linalg.norm((Ws - w_s[None]).reshape(len(Ws), -1), axis=1)
                res.privacy[(method, e)] = params.guarantee.as_dict() | {"noise_scale": params.noise_scale,
                                                                          "mean_noise_norm": float(noise.mean())}
        res.seconds[method] = time.perf_counter() - t0
        report(method)

    if "indiv" in config.methods:
        t0 = time.perf_counter()
        k = min(M, config.indiv_parties)
        chosen = np.sort(gen.choice(M, size=k, replace=False))  # public simulation choice: which parties to score
        accs = model_accuracies(ens, chosen, Xt, yt, tw)
        for e in grid:
            record("indiv", e, [float(accs.mean())])
        res.diagnostics.update(indiv_parties_scored=k, indiv_party_sd=float(accs.std(ddof=1)) if k > 1 else 0.0)
        res.seconds["indiv"] = time.perf_counter() - t0
        report("indiv")
    return res


__all__ = (
    "DEFAULT_EPSILONS_INV", "LINEAR_LOCAL_METHODS", "LOCAL_CHOICES", "LocalEnsemble", "METHODS", "MIXED_KINDS", "PRIVATE_METHODS", "RowSplit",
    "SimulationConfig", "TrialData", "TrialResult", "distinct_rows", "ensemble_vote_sum", "epsilon_of", "fit_locals",
    "linear_accuracies", "model_accuracies", "reduced_multinomial", "run_trial", "split_rows", "trial_steps",
)
