"""Budget split, the guarantee each round really gives, and the ledger entries of Algorithm 2 (basic composition of
the two rounds; every result states the guarantee it really gives).

Composition is basic: the std round spends (ε₁, δ₁) = 0.3·(ε, δ), the main round (ε₂, δ₂) = (ε − ε₁, δ − δ₁),
so (ε₁ + ε₂, δ₁ + δ₂) = (ε, δ) (recorded explicitly, one ledger entry per round). The split is planned
by basic composition; a party's ledger composes the two Gaussian rounds with its accountant
(docs/protocols/accounting.md), which states less than (ε, δ) for them.

What each mode guarantees per round, at the requested δ (computed, not assumed: :func:`epsilon_for` inverts the
exact Gaussian-mechanism δ(ε) of Balle & Wang 2018, Thm 8, at the σ actually used and the *true* Δ₂):

* ``corrected``: analytic calibration at the true Δ₂ — exactly (ε_r, δ_r) for each round, (ε, δ) in total.
* ``paper``: classic calibration (proved for ε < 1 only) at the *declared* Δ₂. In the std round the
  declared Δ₂ = sqrt(Σ c²) is c times too small for equal bounds c (7.5× for UCI), and in the
  unprojected baselines Δ₂ comes from ±5 while the data reach ±10; the real ε of those releases
  is far above the nominal one. The ledger records the larger of the two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mpdp import accounting
from mpdp.dca.mechanism import MECHANISM
from mpdp.regression.config import STD_SHARE
from mpdp.regression.statistics import RoundSpec

EPSILON_CAP = 1e4  # epsilon_for returns inf beyond this


@dataclass(frozen=True)
class Budget:
    """The total (ε, δ) and its split over the two rounds."""

    epsilon: float
    delta: float
    std: tuple[float, float]
    main: tuple[float, float]


def budget_split(epsilon: float, delta: float, share: float = STD_SHARE) -> Budget:
    """(ε₁, δ₁) = share·(ε, δ) for the std round, the rest for the main round (code: share = 0.3)."""
    if not (math.isfinite(epsilon) and epsilon > 0 and 0 < delta < 1):
        raise ValueError(f"need ε > 0 and 0 < δ < 1, got ({epsilon}, {delta})")
    if not 0 < share < 1:
        raise ValueError(f"the std-round share must be in (0, 1), got {share}")
    e1, d1 = share * epsilon, share * delta
    return Budget(epsilon, delta, (e1, d1), (epsilon - e1, delta - d1))


def gaussian_delta(sigma: float, sensitivity: float, epsilon: float) -> float:
    """δ(ε) of the Gaussian mechanism (Balle & Wang 2018, Thm 8), in log space so that large ε cannot overflow:
    δ = Φ(Δ/2σ − εσ/Δ) − exp(ε + log Φ(−Δ/2σ − εσ/Δ))."""
    from scipy.special import log_ndtr  # here, not at the top: reading a plan or a posterior never loads SciPy

    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    return float(math.exp(log_ndtr(a - b)) - math.exp(epsilon + log_ndtr(-a - b)))


def epsilon_for(sigma: float, sensitivity: float, delta: float) -> float:
    """The smallest ε with δ(ε) ≤ δ for noise σ and ℓ2-sensitivity Δ₂ (bisection; inf beyond 10⁴)."""
    if not (sigma > 0 and sensitivity > 0 and 0 < delta < 1):
        raise ValueError(f"need σ > 0, Δ > 0 and 0 < δ < 1, got ({sigma}, {sensitivity}, {delta})")
    if gaussian_delta(sigma, sensitivity, 0.0) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while gaussian_delta(sigma, sensitivity, hi) > delta:
        lo, hi = hi, 2.0 * hi
        if hi > EPSILON_CAP:
            return math.inf
    while hi - lo > 1e-10 * hi:
        mid = 0.5 * (lo + hi)
        if gaussian_delta(sigma, sensitivity, mid) > delta:
            lo = mid
        else:
            hi = mid
    return hi


@dataclass(frozen=True)
class RoundGuarantee:
    """What one release really guarantees."""

    epsilon_nominal: float
    delta: float
    epsilon_actual: float
    declared_sensitivity: float
    true_sensitivity: float
    sigma_std: float
    mode: str
    statement: str

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def round_guarantee(spec: RoundSpec, who: str = "the DCA sum") -> RoundGuarantee:
    """The guarantee of one round's release when the noise reaching it has σ_std (DCA with at most T colluders,
    a trusted aggregator, or each record's own noise under input perturbation — all give σ_std per record)."""
    s = spec.sigma_std
    actual = epsilon_for(s, spec.true_sensitivity, spec.delta)
    if spec.mode == "corrected":
        how = "analytic Gaussian calibration at the true Δ₂"
    else:
        how = (f"classic calibration at the declared Δ₂ = {spec.sensitivity:.6g} (proved for ε < 1 only); the true Δ₂ over the "
               f"clip box is {spec.true_sensitivity:.6g}, so the release is ({actual:.4g}, {spec.delta:.3g})-DP, not "
               f"({spec.epsilon:.4g}, {spec.delta:.3g})")
    text = (f"{spec.round} round: {who} over records clipped to ±{_fmt(spec.bounds)} is ({spec.epsilon:.4g}, {spec.delta:.3g})-DP "
            f"as announced; mode {spec.mode}: {how}; adjacency = one record replaced, N fixed")
    return RoundGuarantee(spec.epsilon, spec.delta, actual, spec.sensitivity, spec.true_sensitivity, s, spec.mode, text)


def ledger_entry(spec: RoundSpec, job_id: str, *, seeded: bool, protocol: str = "dca") -> dict:
    """The record a party keeps for one round in its privacy ledger. ``epsilon`` is what the ledger composes: the nominal
    ε in ``corrected`` mode, max(nominal, actual) in ``paper`` mode (its real cost). The accountant composes the
    Gaussian σ_std / max(declared Δ₂, true Δ₂)."""
    g = round_guarantee(spec)
    spent = spec.epsilon if spec.mode == "corrected" else max(spec.epsilon, g.epsilon_actual)
    return {
        "protocol": protocol,
        "job": job_id,
        "job_id": job_id,
        "purpose": spec.purpose,
        "round": spec.round,
        "mechanism": MECHANISM if protocol == "dca" else protocol,
        "epsilon": spent,
        "delta": spec.delta,
        "epsilon_nominal": spec.epsilon,
        "epsilon_actual": g.epsilon_actual,
        "mode": spec.mode,
        "composition": "basic: the two rounds of one fit add up",
        "declared_sensitivity": spec.sensitivity,
        "true_sensitivity": spec.true_sensitivity,
        "seeded": seeded,
        "accounting": accounting.gaussian(spec.sigma_std / max(spec.sensitivity, spec.true_sensitivity)),
    }


def _fmt(b: tuple[float, ...]) -> str:
    vals = sorted(set(round(v, 4) for v in b))
    return f"{vals[0]:g}" if len(vals) == 1 else f"[{vals[0]:g}, {vals[-1]:g}]"
