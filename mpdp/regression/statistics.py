"""What one record, or one party, contributes to each DCA round of Algorithm 2 — and what a release decodes to
(Heikkilä et al. 2017, Algorithm 2, steps 1, 2 and 4).

Vector layouts (D = dimension of the round):

* **std round** (D = d + 1): z = (x_1², …, x_d², y²) of the record clipped to the public bounds c.
* **main round** (D = d(d+1)/2 + d): z = (x_j·x_k for j ≤ k in :func:`pair_indices` order, then x_j·y for
  j = 1..d) of the record clipped to the thresholds B.

ℓ2-sensitivity for replace-one adjacency (one record changes, N fixed):

* std round, ``corrected``: Δ₂ = sqrt(Σ_j c_j⁴) — each square lies in [0, c_j²] (ours, Algorithm 2 step 2);
  ``paper``: Δ₂ = sqrt(Σ_j c_j²), the authors' code (c where c² is due). With c > 1 that understates the truth, so the
  paper-mode std round is *not* (ε₁, δ₁)-DP; :func:`mpdp.regression.privacy.epsilon_for` says what it is.
* main round, both modes: Δ₂² = Σ_j B_j⁴ + Σ_{j<k} (2B_jB_k)² + Σ_j (2B_jB_y)² — a square has range B_j², a
  cross product range 2B_jB_k (Algorithm 2 step 4; the code has this right).

A party holding n_p records sends the *sum* of its records' vectors (:func:`party_statistics`): the
per-record sensitivity is unchanged (one record changes one party's sum by at most Δ₂), only the DCA
client's clip box grows to n_p times the per-record box (:meth:`RoundSpec.clip_bounds`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Iterable, Literal, Sequence, cast

import numpy as np

from mpdp.dca import mechanism
from mpdp.dca.errors import InvalidJob
from mpdp.dca.params import DcaParams
from mpdp.regression.config import VARIANCE_FLOOR

Round = Literal["std", "main"]
ROUNDS: tuple[str, ...] = ("std", "main")
Floats = Sequence[float] | np.ndarray  # a float vector, read with np.asarray
MODES: tuple[str, ...] = mechanism.MODES


# -- layout ------------------------------------------------------------------------------------------
def pair_indices(d: int) -> tuple[np.ndarray, np.ndarray]:
    """(j, k) with j ≤ k, row-major: the order of the XᵀX entries in the main-round vector."""
    return np.triu_indices(d)


def round_dimension(round: Round, d: int) -> int:
    """D of the round: d + 1 (std) or d(d+1)/2 + d (main)."""
    _check_round(round)
    return d + 1 if round == "std" else d * (d + 1) // 2 + d


# -- sensitivities -------------------------------------------------------------------------------------
def std_sensitivity(bounds: Floats, mode: str) -> float:
    """Declared Δ₂ of the std round: sqrt(Σ c_j⁴) in ``corrected``, the code's sqrt(Σ c_j²) in ``paper``."""
    c = _bounds(bounds)
    _check_mode(mode)
    return float(np.sqrt(np.sum(c**4))) if mode == "corrected" else float(np.sqrt(np.sum(c**2)))


def std_true_sensitivity(bounds: Floats) -> float:
    """The real Δ₂ of (x², y²) over the box [−c, c]: sqrt(Σ c_j⁴) (x_j = c_j against x'_j = 0 attains it)."""
    return float(np.sqrt(np.sum(_bounds(bounds) ** 4)))


def main_sensitivity(thresholds: Floats) -> float:
    """Δ₂ of the main round over the box [−B, B]: sqrt(Σ B_j⁴ + Σ_{j<k}(2B_jB_k)² + Σ_j(2B_jB_y)²)."""
    B = _bounds(thresholds)
    bx, by = B[:-1], B[-1]
    outer = np.outer(bx, bx)
    off = float(np.sum(np.triu(outer, 1) ** 2))
    return float(np.sqrt(np.sum(bx**4) + 4.0 * off + 4.0 * by**2 * np.sum(bx**2)))


def check_round_job(round: str, bounds: Floats, params: DcaParams) -> None:
    """The DCA job ``params`` may carry this round's statistic of records clipped to ``bounds`` (a party's check before
    it contributes): it sums the round's D values and its noise is calibrated to at least the statistic's Δ₂ over that
    box (std: :func:`std_sensitivity` in the job's mode; main: :func:`main_sensitivity`). A job declaring less would
    release the statistic with less noise than the ε each party is charged for. ValueError otherwise."""
    _check_round(round)
    r = cast(Round, round)
    c = np.asarray(bounds, dtype=np.float64).ravel()
    if c.size < 2 or not np.all(np.isfinite(c)) or not np.all(c > 0):
        raise ValueError("the round's clip box must be d + 1 ≥ 2 finite positive values")
    if params.dimension != round_dimension(r, c.size - 1):
        raise ValueError(f"the DCA job sums {params.dimension} values; the {round} round over d = {c.size - 1} sums {round_dimension(r, c.size - 1)}")
    need = std_sensitivity(c, "paper" if params.mode == "paper" else "corrected") if round == "std" else main_sensitivity(c)
    if not params.sensitivity >= need * (1.0 - 1e-9):
        raise ValueError(f"the DCA job's sensitivity Δ₂ = {params.sensitivity:.6g} is below the {round} statistic's Δ₂ = {need:.6g} "
                         "over the round's clip box: its noise would be too small for the ε charged")


def record_value_bounds(round: Round, bounds: Sequence[float]) -> np.ndarray:
    """max |z_j| of one record's vector: c_j² (std); B_j·B_k and B_j·B_y (main). Used as DCA clip bounds."""
    _check_round(round)
    b = _bounds(bounds)
    if round == "std":
        return b**2
    bx, by = b[:-1], b[-1]
    j, k = pair_indices(len(bx))
    return np.concatenate([bx[j] * bx[k], bx * by])


# -- contributions ----------------------------------------------------------------------------------------
def clip_records(X: np.ndarray, y: np.ndarray, bounds: Floats) -> tuple[np.ndarray, np.ndarray]:
    """Coordinate-wise projection onto [−b_j, b_j] (features) and [−b_y, b_y] (target)."""
    X, y = _records(X, y)
    b = _bounds(bounds)
    if b.size != X.shape[1] + 1:
        raise ValueError(f"bounds must hold d + 1 = {X.shape[1] + 1} values (features, then target), got {b.size}")
    return np.clip(X, -b[:-1], b[:-1]), np.clip(y, -b[-1], b[-1])


def record_statistics(X: np.ndarray, y: np.ndarray, round: Round, bounds: Sequence[float]) -> np.ndarray:
    """Every record's vector for ``round`` after clipping to ``bounds`` (c for std, B for main): shape (n, D).

    This is what each DCA client submits when every client holds one record (the experiment's setting).
    """
    _check_round(round)
    Xc, yc = clip_records(X, y, bounds)
    if round == "std":
        return np.hstack([Xc**2, yc[:, None] ** 2])
    j, k = pair_indices(Xc.shape[1])
    return np.hstack([Xc[:, j] * Xc[:, k], Xc * yc[:, None]])


def party_statistics(X: np.ndarray, y: np.ndarray, round: Round, bounds: Sequence[float]) -> np.ndarray:
    """One party's contribution to ``round``: the sum of its records' vectors, shape (D,).

    ``bounds`` are the public c (std round) or the released thresholds B (main round), d + 1 values each.
    A party submits this vector as one DCA client of a job built by :meth:`RoundSpec.dca_params` with
    ``records_per_client`` ≥ its row count.
    """
    return record_statistics(X, y, round, bounds).sum(axis=0)


# -- release decoding -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StdEstimate:
    """σ̂_j² = (noisy Σ z)_j / N, floored at 0.5 when ≤ 0 (Algorithm 2 step 2); σ̂ = sqrt."""

    variance: np.ndarray  # (d + 1,), after the floor
    raw_variance: np.ndarray  # (d + 1,), before the floor
    floored: np.ndarray  # bool (d + 1,)

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self.variance)


def std_estimate(values: Floats, n: int, *, floor: float = VARIANCE_FLOOR) -> StdEstimate:
    """Decode a released std-round sum (``DpSum.values``) over ``n`` records. The data are assumed centred."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or v.size < 2 or not np.all(np.isfinite(v)):
        raise ValueError(f"a std-round release must be a finite vector of d + 1 ≥ 2 values, got shape {v.shape}")
    if n < 1:
        raise ValueError(f"n must be ≥ 1, got {n}")
    if not floor > 0:
        raise ValueError(f"the variance floor must be positive, got {floor}")
    raw = v / n
    bad = raw <= 0
    return StdEstimate(np.where(bad, floor, raw), raw, bad)


@dataclass(frozen=True)
class SuffStats:
    """A ≈ XᵀX (symmetric, d×d) and b ≈ Xᵀy (d,)."""

    A: np.ndarray
    b: np.ndarray

    @property
    def d(self) -> int:
        return int(self.b.size)


def suff_stats(values: Floats, d: int) -> SuffStats:
    """Rebuild (A, b) from a main-round vector (a release's ``DpSum.values`` or a noiseless sum)."""
    v = np.asarray(values, dtype=np.float64)
    if v.shape != (round_dimension("main", d),) or not np.all(np.isfinite(v)):
        raise ValueError(f"a main-round vector for d = {d} must be {round_dimension('main', d)} finite values, got shape {v.shape}")
    m = d * (d + 1) // 2
    j, k = pair_indices(d)
    A = np.zeros((d, d))
    A[j, k] = v[:m]
    A[k, j] = v[:m]
    return SuffStats(A, v[m:].copy())


def thresholds(std: Floats, bounds: Floats, p_x: float, p_y: float, *, cap: bool = True) -> np.ndarray:
    """B_j = min(p_x·σ̂_j, c_j), B_y = min(p_y·σ̂_y, c_y) (Algorithm 2 step 3). ``cap=False`` only for the code's proj TA."""
    s = np.asarray(std, dtype=np.float64)
    c = _bounds(bounds)
    if s.shape != c.shape or not np.all(s > 0):
        raise ValueError(f"std must hold {c.size} positive values, got {s}")
    if not (p_x > 0 and p_y > 0):
        raise ValueError(f"multipliers must be positive, got p_x={p_x}, p_y={p_y}")
    B = s * np.concatenate([np.full(c.size - 1, p_x), [p_y]])
    return np.minimum(B, c) if cap else B


# -- round specifications ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class RoundSpec:
    """One DCA round of Algorithm 2: what every party computes and how the job is calibrated.

    ``bounds``: the clip box applied to (x, y) before the statistics (c for std, B for main).
    ``sensitivity``: the Δ₂ the noise is calibrated to (declared). ``true_sensitivity``: the Δ₂ of the statistic
    over the clip box; the two differ only in ``paper`` mode (the code's std-round and unclipped-baseline slips), where the release is then weaker
    than (ε, δ) — see :func:`mpdp.regression.privacy.round_guarantee`.
    """

    round: Round
    d: int
    bounds: tuple[float, ...]
    epsilon: float
    delta: float
    mode: str
    sensitivity: float
    true_sensitivity: float
    purpose: str = ""

    def __post_init__(self) -> None:
        _check_round(self.round)
        _check_mode(self.mode)
        if len(self.bounds) != self.d + 1:
            raise ValueError(f"bounds must hold d + 1 = {self.d + 1} values, got {len(self.bounds)}")
        if not (math.isfinite(self.epsilon) and self.epsilon > 0 and 0 < self.delta < 1):
            raise ValueError(f"need ε > 0 and 0 < δ < 1, got ({self.epsilon}, {self.delta})")

    @property
    def dimension(self) -> int:
        return round_dimension(self.round, self.d)

    @property
    def sigma_std(self) -> float:
        """σ of the central Gaussian mechanism for the declared Δ₂ (analytic in ``corrected``, classic in ``paper``)."""
        return mechanism.sigma_std(self.mode, self.sensitivity, self.epsilon, self.delta)

    def record_bounds(self) -> np.ndarray:
        return record_value_bounds(self.round, self.bounds)

    def clip_bounds(self, records: int = 1) -> tuple[float, ...]:
        """Per-coordinate DCA clip bounds for a client summing up to ``records`` records."""
        if records < 1:
            raise ValueError(f"records must be ≥ 1, got {records}")
        return tuple(float(v) for v in self.record_bounds() * records)

    def statistics(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The per-record vectors (n, D) of this round."""
        return record_statistics(X, y, self.round, self.bounds)

    def dca_params(
        self,
        job_id: str,
        clients: int,
        nodes: Sequence[str],
        *,
        max_missing: int = 0,
        records_per_client: int = 1,
        simulation_seed: bytes = b"",
        frac_bits: int = 32,
        roster: Sequence[str] = (),
        deadline_seconds: float = 600.0,
        validate: bool = False,
    ) -> DcaParams:
        """The DCA job of this round (clients = parties, or records when every client holds one record).

        ``validate``: every client proves its vector within the per-coordinate range :meth:`clip_bounds` (records ×
        the record bounds; :data:`VALIDATION`), with the distributed discrete Gaussian at the round's (ε, δ) and Δ₂
        (the proof bounds integer noise); f is the largest ≤ ``frac_bits`` whose circuit fits Field64. ValueError if none
        does (the statistic is too long or its bounds too wide: take the round unvalidated)."""
        if validate:
            return self._validated_params(job_id, clients, nodes, max_missing=max_missing, records_per_client=records_per_client,
                                          simulation_seed=simulation_seed, frac_bits=frac_bits, roster=roster, deadline_seconds=deadline_seconds)
        return DcaParams(
            job_id=job_id,
            dimension=self.dimension,
            clients=clients,
            max_missing=max_missing,
            epsilon=self.epsilon,
            delta=self.delta,
            sensitivity=self.sensitivity,
            nodes=tuple(nodes),
            mode=self.mode,
            frac_bits=frac_bits,
            clip_bounds=self.clip_bounds(records_per_client),
            simulation_seed=simulation_seed,
            roster=tuple(roster),
            purpose=self.purpose or f"heikkila2017 {self.round} round",
            deadline_seconds=deadline_seconds,
        )


    def _validated_params(self, job_id: str, clients: int, nodes: Sequence[str], *, frac_bits: int, **kw: Any) -> DcaParams:
        last: InvalidJob | None = None
        for f in range(frac_bits, MIN_VALIDATED_FRAC_BITS - 1, -1):
            try:
                return dataclasses.replace(self.dca_params(job_id, clients, nodes, frac_bits=f, **kw), noise="discrete-gaussian", validate=VALIDATION)
            except InvalidJob as e:
                if not str(e).startswith(("validation", "a validated job")):
                    raise
                last = e
        raise ValueError(f"no validated {self.round} round fits: {last}; take the rounds unvalidated (--validate none)")


VALIDATION = "range"  # a regression round's validation: every coordinate of a party's sum within records × its record bound
MIN_VALIDATED_FRAC_BITS = 8  # below 2^-8 the rounding of a statistic would no longer be small against its noise


def validated_round(round: str, bounds: Floats, records: int) -> tuple[str, tuple[float, ...]]:
    """What a party holds a validated round's DCA job to: (:data:`VALIDATION`, the per-coordinate clip bounds of a sum of
    up to ``records`` records clipped to ``bounds``), exactly :meth:`RoundSpec.clip_bounds` of the curator's round."""
    _check_round(round)
    if records < 1:
        raise ValueError(f"records must be ≥ 1, got {records}")
    return VALIDATION, tuple(float(v) for v in record_value_bounds(cast(Round, round), [float(b) for b in bounds]) * records)


def std_round_spec(bounds: Sequence[float], epsilon: float, delta: float, mode: str) -> RoundSpec:
    """The std round on the pre-clipped squares with budget (ε₁, δ₁) (callers pass 0.3·(ε, δ), see privacy.budget_split)."""
    c = _bounds(bounds)
    return RoundSpec("std", c.size - 1, tuple(float(v) for v in c), epsilon, delta, mode,
                     std_sensitivity(c, mode), std_true_sensitivity(c), "heikkila2017 std round")


def main_round_spec(
    thresholds_: Floats,
    epsilon: float,
    delta: float,
    mode: str,
    *,
    declared_bounds: Floats | None = None,
    purpose: str = "heikkila2017 main round",
) -> RoundSpec:
    """The main round on data clipped to ``thresholds_`` with budget (ε₂, δ₂).

    ``declared_bounds`` (``paper`` mode only) calibrates Δ₂ from other bounds than the clip box: the code's
    unclipped baselines take Δ₂ from ±5 while the data reach ±10.
    """
    B = _bounds(thresholds_)
    if declared_bounds is not None and mode != "paper":
        raise ValueError("declared_bounds differing from the clip box reproduce the code's unclipped-baseline slip: paper mode only")
    declared = main_sensitivity(declared_bounds if declared_bounds is not None else B)
    return RoundSpec("main", B.size - 1, tuple(float(v) for v in B), epsilon, delta, mode, declared, main_sensitivity(B), purpose)


# -- validation --------------------------------------------------------------------------------------------
def _bounds(bounds: Floats) -> np.ndarray:
    b = np.asarray(bounds, dtype=np.float64).ravel()
    if b.size < 2 or not np.all(np.isfinite(b)) or not np.all(b > 0):
        raise ValueError(f"bounds must be d + 1 ≥ 2 finite positive values, got {b.tolist()[:8]}")
    return b


def _records(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64).ravel()
    if X.ndim != 2 or X.shape[0] != y.size or X.shape[1] < 1:
        raise ValueError(f"X must be (n, d) and y (n,), got {X.shape} and {y.shape}")
    if not (np.all(np.isfinite(X)) and np.all(np.isfinite(y))):
        raise ValueError("X and y must be finite")
    return X, y


def _check_round(round: str) -> None:
    if round not in ROUNDS:
        raise ValueError(f"round must be one of {ROUNDS}, got {round!r}")


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


def party_statistics_batches(batches: Iterable[tuple[np.ndarray, np.ndarray]], round: Round, bounds: Sequence[float]) -> tuple[np.ndarray, int]:
    """:func:`party_statistics` over row batches, and the row count: bounded memory, and equal bit for bit to
    :func:`party_statistics` of the batches' rows concatenated (the running sum goes on row after row, in order,
    across batches, as NumPy's sum along the rows does)."""
    total: np.ndarray | None = None
    n = 0
    for X, y in batches:
        S = record_statistics(X, y, round, bounds)
        total = S.sum(axis=0) if total is None else np.vstack([total[None, :], S]).sum(axis=0)
        n += len(y)
    if total is None:
        raise ValueError("a party's statistics need at least one row")
    return total, n


# -- the party's side over a configured dataset ---------------------------------------------------------------------
def statistics_contribution(src: Any, name: str, round: str, bounds: Sequence[float], records_limit: int) -> np.ndarray:
    """A regression round's contribution (:func:`party_statistics`) over the dataset's batches (``src``: a
    :class:`mpdp.data.dataset.DatasetSource`; :mod:`mpdp.data.engine` reduces them)."""
    from functools import partial

    from mpdp.data.dataset import DoesNotFit, open_rows, require_rows
    from mpdp.data.engine import reducer

    rows = open_rows(src, name=name)
    if len(bounds) != rows.dimension + 1:
        raise DoesNotFit("the job's clip box (bounds) does not match the dataset's columns", f"{rows.dimension} features, {len(bounds)} bounds")
    if getattr(src, "dask", ""):  # parts summed apart, then added: equal up to the order of additions
        total, n = reducer(src, rows)(partial(_statistics_terms, round, tuple(bounds)))
    else:  # one running sum over the rows in order: equal bit for bit to the whole table's
        total, n = party_statistics_batches(rows.batches(), round, tuple(bounds))  # type: ignore[arg-type]
    require_rows(int(n), records_limit, "records_per_client")
    return np.asarray(total)


def _statistics_terms(round: str, bounds: tuple, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, int]:
    return record_statistics(X, y, round, bounds).sum(axis=0), len(y)  # type: ignore[arg-type]
