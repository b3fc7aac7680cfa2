"""GNMax labels from noisy vote counts (Papernot et al., ICLR 2018, "Scalable Private Learning with PATE") on the
HCB16 ensemble's auxiliary points; RDP accounting per party; the curator's model is post-processing.

The curator chooses Q auxiliary points to query (public data, a public random choice: :func:`query_rows`). The
voters' secure sum delivers, for each queried point x_j, the vote vector v_j plus Gaussian noise:

* binary: v_j = n_j1 = #{i : h_i(x_j) = 1} (the DCA vector of :func:`~mpdp.hamm2016.labels.party_votes`; n_j0 =
  M − n_j1 with M public), label = 1 iff ñ_j1 ≥ M/2 (ties to class 1, like the majority vote);
* multiclass: v_j = (n_j1..n_jC), label = argmax_k ñ_jk (ties to the lowest k).

ñ = v + N(0, σ²·I). In the federation the noise is added inside the secure sum by the voters: each of the M voters
adds N(0, σ²/(M − T − 1)) per entry, so any M − T − 1 honest voters' slices already sum to variance σ²
(Heikkilä et al. 2017, as in DCA's Gaussian mode); more noise is post-processing. The simulation adds N(0, σ²) to
the sum — that floor. Then the curator never sees exact counts.

Privacy (ours, data-independent GNMax bound, Papernot et al. 2018 Prop. 8 / Mironov 2017 Prop. 7). Privacy unit:
one whole party — its classifier, hence its vote on every queried point, may change. Per query its vote moves
Δ = 1 (binary: one count) or Δ = √2 (multiclass: one count −1, another +1) in ℓ2, so each query is a Gaussian
mechanism with RDP ε_q(α) = α·Δ²/(2σ²) and the Q queries compose (RDP adds) to

    ε(α) = α·ρ,  ρ = Q·Δ²/(2σ²)   (for every α > 1; i.e. ρ-zCDP),

converted to (ε, δ) by Canonne, Kamath & Steinke 2020 Prop. 12 (:func:`mpdp.dca.discrete.epsilon_from_rdp`,
minimised over a grid of α). :func:`calibrate` picks the smallest σ (bisection) whose ε is at most the target. The
composition of Q Gaussians of one σ is itself one Gaussian mechanism with ℓ2 sensitivity √Q·Δ, so Balle & Wang's
exact δ (:func:`mpdp.dp.mechanisms.gaussian_delta`) is smaller still (tested); we state the RDP figure.

The argmax, the student's training on (x_j, label_j) and its release are post-processing of ñ: no further
privacy is spent, and the released weights carry exactly the (ε, δ) above. The queried points' duplicates are
queried once (their label is copied), so Q counts distinct auxiliary rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mpdp import limits
from mpdp.dca.discrete import epsilon_from_rdp
from mpdp.dp.mechanisms import Guarantee, gaussian
from mpdp.hamm2016.erm import DEFAULT_TOL, fit_soft
from mpdp.hamm2016.labels import one_hot
from mpdp.math.drbg import Drbg

DEFAULT_DELTA = limits.DEFAULT_DELTA
DEFAULT_QUERIES = 1000
ALPHAS = np.concatenate([1.0 + np.logspace(-5, 0, 800), np.logspace(0.302, 7, 4000)])  # Rényi orders searched
NOT_PRIVATE = "none: not private (1/ε = 0 baseline): exact vote counts, noise-free argmax"


def query_sensitivity(classes: int) -> float:
    """ℓ2 change of one query's vote vector when one party changes its vote: 1 (binary, n_j1) or √2 (multiclass)."""
    if classes < 2:
        raise ValueError(f"classes must be >= 2, got {classes}")
    return 1.0 if classes == 2 else math.sqrt(2.0)


def rho(sigma: float, queries: int, classes: int) -> float:
    """ρ = Q·Δ²/(2σ²): the composed RDP curve is ε(α) = α·ρ."""
    return queries * query_sensitivity(classes) ** 2 / (2.0 * sigma * sigma)


def epsilon_at(sigma: float, queries: int, classes: int, delta: float) -> tuple[float, float]:
    """(ε, α): the (ε, δ) guarantee of Q GNMax queries with noise σ, by CKS20 Prop. 12 over :data:`ALPHAS`."""
    return epsilon_from_rdp(ALPHAS * rho(sigma, queries, classes), ALPHAS, delta)


@dataclass(frozen=True)
class PateAccount:
    """The guarantee of one GNMax labelling: σ per count, Q queries, RDP ε(α) = α·ρ, (ε, δ) at the α used."""

    sigma: float
    queries: int
    classes: int
    parties: int
    rho: float
    epsilon: float
    delta: float
    alpha: float

    @property
    def sensitivity(self) -> float:
        """ℓ2 sensitivity of all Q queries together: √Q·Δ."""
        return math.sqrt(self.queries) * query_sensitivity(self.classes)

    @property
    def guarantee(self) -> Guarantee:
        kind = "binary" if self.classes == 2 else f"{self.classes}-class"
        return Guarantee(
            mechanism=(f"GNMax (Papernot et al. 2018) on the secure vote sum, {kind}: N(0, σ²) per count, Q={self.queries} "
                       f"queried auxiliary points, M={self.parties} voters; student L2-LR = post-processing"),
            epsilon=float(self.epsilon),
            delta=float(self.delta),
            sensitivity=self.sensitivity,
            norm="l2 (per query Δ = 1 binary, √2 multiclass; Q queries)",
            statement=(
                f"(epsilon, delta)-DP with epsilon = {self.epsilon:.6g}, delta = {self.delta:g}; privacy unit: one whole party "
                f"(its classifier and all its votes may change); data-independent RDP: ε(α) = α·ρ, ρ = Q·Δ²/(2σ²) = {self.rho:.6g}, "
                f"σ = {self.sigma:.6g}, converted at α = {self.alpha:.4g} (Canonne–Kamath–Steinke 2020 Prop. 12); the curator "
                f"sees only noisy counts; the released model is post-processing of the noisy labels"),
        )


def _check(queries: int, classes: int, parties: int, delta: float) -> None:
    if queries < 1 or parties < 1 or classes < 2:
        raise ValueError(f"need queries >= 1, parties >= 1, classes >= 2; got {queries}, {parties}, {classes}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")


def account(sigma: float, *, queries: int, classes: int, parties: int, delta: float = DEFAULT_DELTA) -> PateAccount:
    """The (ε, δ) that noise σ per count gives for Q queries."""
    _check(queries, classes, parties, delta)
    if not (math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be finite and positive, got {sigma!r}")
    eps, alpha = epsilon_at(sigma, queries, classes, delta)
    return PateAccount(float(sigma), queries, classes, parties, rho(sigma, queries, classes), eps, float(delta), alpha)


def calibrate(epsilon: float, *, queries: int, classes: int, parties: int, delta: float = DEFAULT_DELTA) -> PateAccount:
    """The smallest σ (relative precision 1e−9, bisection on log σ) whose account gives at most ``epsilon``."""
    _check(queries, classes, parties, delta)
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be finite and positive, got {epsilon!r}")
    base = math.sqrt(queries) * query_sensitivity(classes)
    lo, hi = base * 1e-3, base
    while epsilon_at(hi, queries, classes, delta)[0] > epsilon:
        lo, hi = hi, hi * 2.0
    while epsilon_at(lo, queries, classes, delta)[0] <= epsilon:
        lo /= 2.0
    while hi / lo > 1 + 1e-9:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if epsilon_at(mid, queries, classes, delta)[0] <= epsilon else (mid, hi)
    acc = account(hi, queries=queries, classes=classes, parties=parties, delta=delta)
    assert acc.epsilon <= epsilon
    return acc


# ------------------------------------------------------------------------------------------- which points


def query_rows(inverse: np.ndarray, queries: int, gen: np.random.Generator) -> np.ndarray:
    """Auxiliary row indices the student trains on: the shortest prefix of a random permutation of the N rows
    that holds ``queries`` distinct rows (all rows when there are fewer distinct ones). ``inverse`` maps each row
    to its distinct-row id (:func:`~mpdp.hamm2016.simulation.distinct_rows`). The prefix follows the auxiliary
    distribution (duplicates keep their weight) while each distinct row costs one query. Public: it depends on the
    public auxiliary rows and ``gen`` only."""
    inv = np.asarray(inverse).ravel()
    if queries < 1:
        raise ValueError(f"queries must be >= 1, got {queries}")
    perm = gen.permutation(inv.size)  # public simulation choice: which auxiliary points the curator queries
    _, first = np.unique(inv[perm], return_index=True)
    if first.size <= queries:
        return perm
    return perm[: int(np.sort(first)[queries])]


# ------------------------------------------------------------------------------------------- votes → labels


def vote_vector(counts: np.ndarray) -> np.ndarray:
    """The secure sum's layout for the queried points: n_j1 (binary, (Q,)) or the (Q, C) counts."""
    c = np.asarray(counts, dtype=np.float64)
    return c[:, 1].copy() if c.shape[1] == 2 else c.copy()


def noisy_votes(votes: np.ndarray, sigma: float, rng: Drbg) -> np.ndarray:
    """votes + N(0, σ²) per entry (the simulation's floor of the voters' summed slices); σ = 0: exact counts."""
    v = np.asarray(votes, dtype=np.float64)
    if sigma == 0:
        return v.copy()
    return v + gaussian(rng, v.shape, sigma)


def noisy_argmax(noisy: np.ndarray, parties: int) -> np.ndarray:
    """Labels from (noisy) votes: binary class 1 iff ñ_j1 ≥ M/2; multiclass argmax (ties to the lowest class)."""
    v = np.asarray(noisy, dtype=np.float64)
    if v.ndim == 1:
        return (v >= parties / 2.0).astype(np.int64)
    return np.argmax(v, axis=1).astype(np.int64)


@dataclass
class PateRelease:
    """The student model trained on the noisy labels and its guarantee (None account: the noise-free baseline)."""

    weights: np.ndarray
    guarantee: Guarantee
    labels: np.ndarray  # label of each queried distinct row
    account: PateAccount | None


def release_pate(X_aux: np.ndarray, rows: np.ndarray, inverse: np.ndarray, counts: np.ndarray, *, lam: float,
                 epsilon: float, parties: int, rng: Drbg, delta: float = DEFAULT_DELTA,
                 fits: dict[bytes, np.ndarray] | None = None) -> PateRelease:
    """GNMax labels for the distinct rows among ``rows`` (Q = their number), then the student
    argmin (1/|rows|)·Σ_{j ∈ rows} l(w; x_j, label_j) + (λ/2)‖w‖² (:func:`~mpdp.hamm2016.erm.fit_soft`).

    counts: (N, C) exact vote counts of all auxiliary rows — in the simulation they stand for the secure sum, and
    only the queried rows' noisy entries are used. ε = math.inf: σ = 0 (not private). Guarantee: the account's
    (ε, δ) for one whole party; the fit is post-processing. ``fits`` (optional, one per (rows, λ)) memoises the
    deterministic fit by its labels: noise draws that give the same labels give the same model, fitted once.
    """
    inv = np.asarray(inverse).ravel()
    ids, first, local = np.unique(inv[rows], return_index=True, return_inverse=True)
    q_rows = np.asarray(rows)[first]  # one representative auxiliary row per queried distinct row
    c = np.asarray(counts)
    classes = c.shape[1]
    if math.isinf(epsilon):
        acc, sigma = None, 0.0
    else:
        acc = calibrate(epsilon, queries=int(ids.size), classes=classes, parties=parties, delta=delta)
        sigma = acc.sigma
    labels = noisy_argmax(noisy_votes(vote_vector(c[q_rows]), sigma, rng), parties)
    y = labels[np.asarray(local).ravel()]
    key = labels.tobytes()
    if fits is not None and key in fits:
        w = fits[key].copy()
    else:
        w = fit_soft(np.asarray(X_aux)[rows], one_hot(y, classes), lam, tol=DEFAULT_TOL)
        if fits is not None:
            fits[key] = w.copy()
    if acc is None:
        g = Guarantee("GNMax student — NO NOISE", math.inf, 1.0, 0.0, "l2", f"{NOT_PRIVATE}; Q = {ids.size} queried points")
    else:
        g = acc.guarantee
    return PateRelease(w, g, labels, acc)


__all__ = (
    "ALPHAS", "DEFAULT_DELTA", "DEFAULT_QUERIES", "PateAccount", "PateRelease", "account", "calibrate", "epsilon_at",
    "noisy_argmax", "noisy_votes", "query_rows", "query_sensitivity", "release_pate", "rho", "vote_vector",
)
