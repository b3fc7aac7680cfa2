"""Tight composition of a party's ledger (proof sketch in docs/protocols/accounting.md).

Every ledger entry records, besides its per-release guarantee (``epsilon``, ``delta``), the mechanism that gave
it under the key ``accounting`` (built by the helpers below, read back by :func:`release_of`):

=====================  ==========================================================  ================================
kind                   fields                                                      accounted as
=====================  ==========================================================  ================================
``gaussian``           ``noise_multiplier`` σ/Δ₂ (or ``noise_multipliers``, one     the pair (N(0, z²), N(1, z²))
                       per adaptively chosen Gaussian round), ``tv`` (optional)
``pure-epsilon``       ``noise`` (a label); the entry's ε, δ = 0                    ε-randomised response
``discrete-gaussian``  ``rho`` (ρ-zCDP), ``tv``                                     ρ-zCDP (RDP); or its (ε, δ)
``eps-delta``          — (the entry's ε, δ)                                        the (ε, δ) pair itself
``none``               —                                                           nothing (a secure sum, a marker)
=====================  ==========================================================  ================================

``tv`` is the probability that the real release differs from the accounted ideal one (fixed-point error,
a noise-caused refusal); a mechanism δ_tv-close in total variation to an (ε, δ)-DP one is
(ε, δ + (1 + e^ε)·δ_tv)-DP, so composition charges (1 + e^ε)·Σ tv at the *composed* ε.

An entry without ``accounting`` (older ledgers) or with a kind this code does not know is accounted as
``eps-delta`` with the entry's own (ε, δ): that is the guarantee the entry states, so the fallback is safe.
An entry whose ``accounting`` is malformed raises :class:`AccountingError` (the ledger turns it into a
``LedgerError``): a bad record must never free budget.

:func:`compose` states the composed ε at a target δ (the party's budget δ) as the smallest of three valid upper
bounds: the privacy-loss-distribution (PLD) accountant of Google's ``dp-accounting`` (every entry), the Rényi
(RDP) accountant (only when a discrete-Gaussian entry is present: its guarantee is an RDP curve), and basic
composition (Σε, valid when Σδ ≤ δ). Each is a valid bound on the same composed mechanism, so their minimum is
too; the accountant's answer is therefore never larger than basic composition's.
"""

from __future__ import annotations

import math
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Iterable, Sequence

if TYPE_CHECKING:  # dp_accounting (SciPy) loads when an accountant composes, not to read a ledger's entries
    from dp_accounting import dp_event
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

GAUSSIAN, PURE, DISCRETE, EPS_DELTA, NONE = "gaussian", "pure-epsilon", "discrete-gaussian", "eps-delta", "none"
KINDS = (GAUSSIAN, PURE, DISCRETE, EPS_DELTA, NONE)
PLD, RDP, BASIC = "pld", "rdp", "basic"
# PLD grid: the pessimistic discretisation rounds every privacy loss *up*, so a coarser grid only loosens the
# bound (by at most about this much per composed mechanism class) and keeps a 100-entry ledger fast.
VALUE_DISCRETIZATION = 1e-3
TRUNCATION = -40.0  # log of the Gaussian tail mass the PLD moves to loss +∞ (pessimistic: δ grows by ≤ e^-40)
MAX_NOISE_MULTIPLIER = 1e6
MAX_PLD_MU = 50.0  # Gaussian entries composing to μ above this (ε ≈ μ²/2 > 1000) are not put on a PLD grid
MAX_PAIR_EPSILON = 100.0  # an (ε, δ) or pure entry above this: the accountants step aside, basic composition decides
_EXP_CAP = 700.0


class AccountingError(ValueError):
    """An entry's ``accounting`` record is malformed (a wrong type, a non-finite or out-of-range value)."""


# -- the records an entry keeps ------------------------------------------------------------------------
def gaussian(noise_multiplier: float | Sequence[float], *, tv: float = 0.0) -> dict:
    """A Gaussian release with σ/Δ₂ = ``noise_multiplier`` (a sequence: adaptively composed Gaussian rounds)."""
    if isinstance(noise_multiplier, (int, float)):
        rec: dict = {"kind": GAUSSIAN, "noise_multiplier": float(noise_multiplier)}
    else:
        rec = {"kind": GAUSSIAN, "noise_multipliers": [float(z) for z in noise_multiplier]}
    if tv:
        rec["tv"] = float(tv)
    return rec


def pure_epsilon(noise: str) -> dict:
    """A pure ε-DP release (the entry's ε, δ = 0), e.g. ℓ2-Laplace output perturbation; ``noise`` names it."""
    return {"kind": PURE, "noise": noise}


def discrete_gaussian(rho: float, *, tv: float) -> dict:
    """A ρ-zCDP release (the distributed discrete Gaussian) that differs from the accounted one w.p. ≤ tv."""
    return {"kind": DISCRETE, "rho": float(rho), "tv": float(tv)}


def eps_delta() -> dict:
    """A release known only by the entry's (ε, δ) guarantee."""
    return {"kind": EPS_DELTA}


def no_release() -> dict:
    """Nothing released to anyone who could learn from it (a secure sum feeding another mechanism, a marker)."""
    return {"kind": NONE}


# -- reading a record ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Release:
    """One ledger entry as the accountants see it. ``epsilon``/``delta``: the entry's stated guarantee."""

    kind: str
    epsilon: float
    delta: float
    noise_multiplier: float = 0.0  # gaussian: the rounds combined, (Σ z_r⁻²)^-1/2
    rho: float = 0.0  # discrete-gaussian
    tv: float = 0.0
    pure: float = 0.0  # pure-epsilon / eps-delta: the ε of the pair
    rounds: int = 1

    def event(self) -> dp_event.DpEvent:
        """The ``dp_accounting`` event of this release (what the RDP accountant composes)."""
        from dp_accounting import dp_event

        if self.kind == GAUSSIAN:
            return dp_event.GaussianDpEvent(self.noise_multiplier)
        if self.kind == DISCRETE:
            return dp_event.ZCDpEvent(self.rho)
        if self.kind == NONE:
            return dp_event.NoOpDpEvent()
        # ε-DP (the ε part of an (ε, δ) pair) is ε²/2-zCDP (Bun & Steinke 2016, Prop. 1.4)
        return dp_event.ZCDpEvent(0.5 * self.pure * self.pure)

    def describe(self) -> str:
        if self.kind == GAUSSIAN:
            tail = f" over {self.rounds} rounds" if self.rounds > 1 else ""
            return f"Gaussian σ/Δ={self.noise_multiplier:.4g}{tail}"
        if self.kind == DISCRETE:
            return f"discrete Gaussian ρ={self.rho:.4g}"
        if self.kind == PURE:
            return f"pure ε={self.pure:.4g}"
        if self.kind == NONE:
            return "none"
        return f"(ε, δ)=({self.pure:.4g}, {self.delta:.3g})"


def _number(rec: dict, key: str, lo: float = 0.0, hi: float = math.inf, *, positive: bool = False) -> float:
    v = rec.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise AccountingError(f"accounting field {key!r} must be a number, got {type(v).__name__}")
    v = float(v)
    if not (math.isfinite(v) and lo <= v <= hi) or (positive and v <= 0):
        raise AccountingError(f"accounting field {key!r} = {v!r} is out of range")
    return v


def release_of(entry: dict) -> Release:
    """The accountant's view of one ledger entry (its ``epsilon``/``delta`` already checked finite and ≥ 0)."""
    eps, delta = float(entry.get("epsilon", 0.0)), float(entry.get("delta", 0.0))
    rec = entry.get("accounting")
    fallback = Release(EPS_DELTA, eps, delta, pure=eps) if (eps or delta) else Release(NONE, 0.0, 0.0)
    if rec is None:
        return fallback
    if not isinstance(rec, dict) or not isinstance(rec.get("kind"), str):
        raise AccountingError("an entry's accounting record must be an object with a kind")
    kind = rec["kind"]
    tv = _number(rec, "tv", 0.0, 1.0) if "tv" in rec else 0.0
    if kind == GAUSSIAN:
        if ("noise_multiplier" in rec) == ("noise_multipliers" in rec):
            raise AccountingError("a gaussian record has exactly one of noise_multiplier or noise_multipliers")
        if "noise_multiplier" in rec:
            zs = [_number(rec, "noise_multiplier", 0.0, MAX_NOISE_MULTIPLIER, positive=True)]
        else:
            raw = rec["noise_multipliers"]
            if not isinstance(raw, list) or not 1 <= len(raw) <= 10_000:
                raise AccountingError("noise_multipliers must be a list of 1..10000 numbers")
            zs = [_number({"z": z}, "z", 0.0, MAX_NOISE_MULTIPLIER, positive=True) for z in raw]
        z = 1.0 / math.sqrt(math.fsum(1.0 / (x * x) for x in sorted(zs)))  # μ² adds (Dong, Roth & Su 2019, Cor. 3.3)
        return Release(GAUSSIAN, eps, delta, noise_multiplier=z, tv=tv, rounds=len(zs))
    if kind == DISCRETE:
        return Release(DISCRETE, eps, delta, rho=_number(rec, "rho", positive=True), tv=tv)
    if kind == PURE:
        if delta:
            raise AccountingError(f"a pure-epsilon entry cannot charge δ={delta}")
        return Release(PURE, eps, 0.0, pure=eps)
    if kind == EPS_DELTA:
        return fallback
    if kind == NONE:
        if eps or delta:
            raise AccountingError(f"an entry that releases nothing cannot charge ε={eps}, δ={delta}")
        return Release(NONE, 0.0, 0.0)
    return fallback  # a kind this version does not know: the entry's stated (ε, δ)


# -- composing ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Composition:
    """The composed guarantee of a list of releases at the target δ.

    ``epsilon`` = min(``pld_epsilon``, ``rdp_epsilon``, ``basic_epsilon``), each a valid bound (inf when it
    gives none at ``delta``); ``method`` names the smallest. ``basic_delta`` is Σδ (basic composition)."""

    epsilon: float
    delta: float
    method: str
    pld_epsilon: float
    rdp_epsilon: float
    basic_epsilon: float
    basic_delta: float
    releases: int

    def as_dict(self) -> dict:
        f = lambda x: x if math.isfinite(x) else None  # noqa: E731 - JSON has no inf
        return {"epsilon": f(self.epsilon), "delta": self.delta, "method": self.method, "pld_epsilon": f(self.pld_epsilon),
                "rdp_epsilon": f(self.rdp_epsilon), "basic_epsilon": f(self.basic_epsilon), "basic_delta": self.basic_delta,
                "releases": self.releases}


def compose(releases: Iterable[Release], delta: float, caps: Sequence[float] = ()) -> Composition:
    """The composed ε of ``releases`` at ``delta`` (the party's budget δ). ``caps``: ε values at which to try
    the (1 + e^ε)·Σtv term (the budget ε is a good one; the basic ε is always tried)."""
    if not (0 <= delta <= 1 and math.isfinite(delta)):
        raise ValueError(f"delta must be in [0, 1], got {delta}")
    rs = [r for r in releases if r.kind != NONE]
    basic_eps = math.fsum(r.epsilon for r in rs)
    basic_delta = math.fsum(r.delta for r in rs)
    gauss = tuple(sorted(r.noise_multiplier for r in rs if r.kind == GAUSSIAN))
    gauss_tv = math.fsum(r.tv for r in rs if r.kind == GAUSSIAN)
    pairs = Counter((r.pure, r.delta) for r in rs if r.kind in (PURE, EPS_DELTA))
    discrete = [r for r in rs if r.kind == DISCRETE]
    pld_pairs = pairs + Counter((r.epsilon, r.delta) for r in discrete)  # PLD: a discrete entry by its (ε, δ)
    cap_list = tuple(sorted({float(c) for c in (*caps, basic_eps) if math.isfinite(c) and c >= 0}))
    pld_eps = _bound(_pld_epsilon, gauss, tuple(sorted(pld_pairs.items())), gauss_tv, delta, cap_list) if rs else 0.0
    rdp_eps = math.inf
    if discrete:
        rhos = tuple(sorted(r.rho for r in discrete))
        tv = gauss_tv + math.fsum(r.tv for r in discrete)
        rdp_eps = _bound(_rdp_epsilon, gauss, tuple(sorted(pairs.items())), rhos, tv, delta, cap_list)
    basic = basic_eps if basic_delta <= delta * (1 + 1e-12) else math.inf
    best = min((pld_eps, PLD), (rdp_eps, RDP), (basic, BASIC), key=lambda t: t[0])
    if not rs:
        best = (0.0, BASIC)
    return Composition(best[0], delta, best[1], pld_eps, rdp_eps, basic, basic_delta, len(rs))


def _bound(fn, *args) -> float:
    """An accountant's ε, or inf when it cannot give one (e.g. an entry of ε in the hundreds overflows the PLD's
    e^ε): a missing bound only leaves the others (basic composition is always computed), never frees budget."""
    if any(eps > MAX_PAIR_EPSILON for (eps, _), _ in args[1]):
        return math.inf
    try:
        e = float(fn(*args))
    except (ArithmeticError, ValueError):
        return math.inf
    return e if e >= 0 else math.inf


def _solve(eps_at, inf_delta: float, tv: float, delta: float, caps: tuple[float, ...]) -> float:
    """The smallest valid ε: eps_at(δ′) for δ′ = δ − inf_delta − (1 + e^E)·tv, valid when the answer is ≤ E."""
    if tv == 0.0:
        rest = delta - inf_delta
        return eps_at(rest) if rest > 0 else math.inf
    first = eps_at(delta - inf_delta - 2.0 * tv) if delta - inf_delta - 2.0 * tv > 0 else math.inf
    tries = set(caps)
    if math.isfinite(first):
        tries |= {first * 1.001 + 1e-3, first * 1.05 + 1e-2, first * 1.5 + 0.1}
    best = math.inf
    for cap in sorted(tries):
        rest = delta - inf_delta - (1.0 + math.exp(min(cap, _EXP_CAP))) * tv
        if rest <= 0:
            continue
        e = eps_at(rest)
        if e <= cap:
            best = min(best, e)
    return best


Pairs = tuple[tuple[tuple[float, float], int], ...]  # ((ε, δ), count), sorted


def _mu(gauss: tuple[float, ...]) -> float:
    """μ of the Gaussian entries composed: √(Σ z⁻²) (exact: Gaussian dominating pairs compose to one)."""
    return math.sqrt(math.fsum(1.0 / (x * x) for x in gauss))


def _interval(mu: float) -> float:
    """The PLD grid: VALUE_DISCRETIZATION, doubled while μ > 1 doubles (a wider loss range, same relative error)."""
    return VALUE_DISCRETIZATION * 2.0 ** max(0, math.ceil(math.log2(max(mu, 1.0))))


@lru_cache(maxsize=256)
def _pld_epsilon(gauss: tuple[float, ...], pairs: Pairs, tv: float, delta: float, caps: tuple[float, ...]) -> float:
    pairs = tuple((p, c) for p, c in pairs if c > 0 and p != (0.0, 0.0))
    mu = _mu(gauss) if gauss else 0.0
    if not pairs:
        if not gauss:
            return 0.0
        # only Gaussians: the composed pair is one Gaussian; its exact privacy profile (Balle & Wang 2018, Thm 8)
        from mpdp.dp.mechanisms import gdp_epsilon

        return _solve(lambda d: gdp_epsilon(mu, d) if d < 1 else 0.0, 0.0, tv, delta, caps)
    if mu > MAX_PLD_MU:
        return math.inf  # a composed ε in the thousands: the grid would be huge; basic composition decides
    h = _interval(mu)
    pld = _pairs_pld(pairs, h)
    if gauss:
        pld = pld.compose(_gaussian_pld(1.0 / mu, h))
    return _solve(lambda d: float(pld.get_epsilon_for_delta(d)), 0.0, tv, delta, caps)


@lru_cache(maxsize=16)
def _gaussian_pld(z: float, h: float):
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    return pld_lib.from_gaussian_mechanism(standard_deviation=z, value_discretization_interval=h, log_mass_truncation_bound=TRUNCATION)


_PAIRS: "OrderedDict[tuple[Pairs, float], pld_lib.PrivacyLossDistribution]" = OrderedDict()
_PAIRS_LOCK = threading.Lock()
_PAIRS_MAX = 64


def _pair_pld(eps: float, delta: float, h: float):
    """The dominating pair of every (ε, δ)-DP mechanism (Kairouz, Oh & Viswanath 2015): loss +∞ w.p. δ, else
    ±ε as in ε-randomised response; ``from_privacy_parameters`` rounds the losses up (pessimistic)."""
    from dp_accounting.pld import common as pld_common, privacy_loss_distribution as pld_lib

    return pld_lib.from_privacy_parameters(pld_common.DifferentialPrivacyParameters(eps, delta), value_discretization_interval=h)


def _pairs_pld(pairs: Pairs, h: float):
    """The PLD of the (ε, δ) pairs, cached; a multiset one pair larger than a cached one costs one convolution
    (a ledger grows one entry at a time), a cold one is composed as a balanced tree."""
    with _PAIRS_LOCK:
        hit = _PAIRS.get((pairs, h))
        if hit is not None:
            _PAIRS.move_to_end((pairs, h))
            return hit
        base = None
        for i, (p, c) in enumerate(pairs):
            smaller = pairs[:i] + (((p, c - 1),) if c > 1 else ()) + pairs[i + 1 :]
            if smaller and (smaller, h) in _PAIRS:
                base = (_PAIRS[(smaller, h)], p)
                break
    if base is not None:
        out = base[0].compose(_pair_pld(*base[1], h))
    else:
        parts = [_pair_pld(*p, h) if c == 1 else _pair_pld(*p, h).self_compose(c) for p, c in pairs]
        while len(parts) > 1:
            parts = [parts[i].compose(parts[i + 1]) if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
        out = parts[0]
    with _PAIRS_LOCK:
        _PAIRS[(pairs, h)] = out
        while len(_PAIRS) > _PAIRS_MAX:
            _PAIRS.popitem(last=False)
    return out


@lru_cache(maxsize=64)
def _rdp_epsilon(gauss: tuple[float, ...], pairs: Pairs, rhos: tuple[float, ...], tv: float,
                 delta: float, caps: tuple[float, ...]) -> float:
    """RDP: Gaussians and ρ-zCDP add order by order; an (ε, δ) entry enters as its ε²/2-zCDP part, its δ is added
    (the (ε, δ) pair is a mixture: with probability δ a disclosing pair, else ε-randomised response)."""
    from dp_accounting import dp_event
    from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib

    acc = rdp_lib.RdpAccountant()
    for z in gauss:
        acc.compose(dp_event.GaussianDpEvent(z))
    for rho in rhos:
        acc.compose(dp_event.ZCDpEvent(rho))
    inf_delta = 0.0
    for (eps, d), count in pairs:
        acc.compose(dp_event.ZCDpEvent(0.5 * eps * eps), count)
        inf_delta += count * d
    return _solve(lambda d: float(acc.get_epsilon(d)), inf_delta, tv, delta, caps)


def single_epsilon(release: Release, delta: float) -> float:
    """The ε one release gives alone at ``delta`` under the accountant (for consistency checks and the docs)."""
    return compose([release], delta).epsilon
