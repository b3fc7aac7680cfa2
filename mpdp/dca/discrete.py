"""The distributed discrete Gaussian noise mode of DCA (`discrete-gaussian`): calibration, accounting, rounding.

Hazmat. Each client rounds its clipped vector to the integer grid of the fixed-point scale (units of γ = 2^-f)
with *conditional randomized rounding*, adds integer noise η_ij ~ N_Z(0, σ²) drawn exactly
(:mod:`mpdp.dp.discrete_gaussian`, Canonne, Kamath & Steinke 2020), and shares the integer vector in Z_(2^64).
The release is the integer sum decoded by 2^-f as in the Gaussian mode. What misuse breaks: declaring a Δ₂ the
statistic does not have; editing σ² after calibration; treating a release whose sum left its window (see
:func:`sum_window`) as valid (the aggregator refuses it).

Accounting (Kairouz, Liu & Steinke 2021, "The Distributed Discrete Gaussian Mechanism for Federated Learning
with Secure Aggregation", ICML 2021, arXiv:2102.06387):

* **Sum of discrete Gaussians (KLS21 Prop. 14).** For σ ≥ 1/2, Z = Σ_{i=1}^n X_i with X_i i.i.d. N_Z(0, σ²)^d
  and any Δ ∈ Z^d, for all α ≥ 1,
  D_α(Z ‖ Z + Δ) ≤ min{ α‖Δ‖₂²/(2nσ²) + τd,  (α/2)(‖Δ‖₂²/(nσ²) + 2‖Δ‖₁τ/(√n σ) + τ²d),  (α/2)(‖Δ‖₂/(√n σ) + τ√d)² }
  with τ = 10·Σ_{k=1}^{n−1} exp(−2π²σ²·k/(k+1)). Hence ρ-zCDP with ρ = min{‖Δ‖₂²/(2nσ²) + τd,
  ½(‖Δ‖₂²/(nσ²) + 2‖Δ‖₁τ/(√n σ) + τ²d)} (the first term ≤ α(…) for α ≥ 1; the third is never below the second).
* **Who adds the noise (Heikkilä et al. 2017, Thm 1).** With at most T clients colluding or dropping out, the
  noise of n = N − T − 1 honest others is always in the sum; more independent noise is post-processing, so the
  bound with n = N − T − 1 holds for every agreed set A with |A| ≥ N − T.
* **Node noise (validated jobs, ours after the DP draft for DAP, draft-wang-ppm-differential-privacy).** In a
  validated job the clients add no noise and prove only their data; each of the M compute nodes adds
  N_Z(0, σ²)^d to its partial sum before sending it. With at most c nodes pooling their noise with the curator
  (the spec's ``colluders``, 0 ≤ c ≤ M − 1), the noise of n = M − c honest nodes is always in the sum, and the
  bound above holds with that n; the other c draws are post-processing. Dropped or rejected clients remove no
  noise, so the guarantee no longer depends on T (T still bounds how few clients a release may hold).
* **Rounding (ours, after KLS21's conditional randomized rounding, their Prop. 22).** y = z·2^f is rounded to ⌊y⌋
  or ⌈y⌉ with P[⌈y⌉] = y − ⌊y⌋, and the whole vector is redrawn until the rounding error r = ỹ − y has
  ‖r‖₂² ≤ R² = min(d, d/4 + √(d·ln(1/β)/2)) (each r_j² ∈ [0, 1) with mean ≤ 1/4, so Hoeffding accepts a draw with
  probability ≥ 1 − β). DCA's adjacency is replace-one with a declared Δ₂, so we bound the *difference*:
  ‖ỹ − ỹ'‖₂ ≤ Δ₂·2^f + 2R for every accepted pair (privacy depends only on that support bound, by the joint
  quasi-convexity of Rényi divergence), and ‖ỹ − ỹ'‖₁ ≤ min(√d·Δ̃₂, Δ̃₂²) for an integer vector.
* **To (ε, δ) (Canonne, Kamath & Steinke 2020, Prop. 12 / Cor. 13).** An (α, ε(α))-RDP mechanism is (ε, δ)-DP with
  ε = ε(α) + (ln(1/δ) − ln α)/(α − 1) + ln(1 − 1/α); we minimise over α on the whole RDP curve above (tighter
  than going through ρ, and tighter than Bun–Steinke's ρ + 2√(ρ ln(1/δ))).
* **The ring Z_(2^64) (ours).** Wrapping is post-processing (it cannot hurt privacy) but would make the release
  wrong, so it is never silent: the job is refused at creation unless the sum's window
  B = N·c_u + √(2Nσ²·ln(2d/p)) stays below 2^62 (c_u = ⌈max_j c_j·2^f⌉; the noise sum is Nσ²-subgaussian,
  CKS20 Cor. 9, so |Σ noise| > B − N·c_u on some coordinate with probability ≤ p = 2^-96); the aggregator refuses a
  sum with any |S_j| > B (a wrap, or a node that deviated), and a wrap that lands back inside the window needs
  |noise| ≥ 2^63, probability < 2^-256. A client refuses to encode |ỹ_ij + η_ij| ≥ 2^62 (int64 headroom). Both
  refusals are events of probability ≤ p_fail (computed below); a mechanism that differs from the accounted one
  only on such an event is (ε, δ + (1 + e^ε)·p_fail)-DP, and the stated δ includes that term.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from mpdp.dp.discrete_gaussian import DiscreteGaussian
from mpdp.math.drbg import Drbg

NAME = "discrete-gaussian"
MECHANISM = "distributed discrete Gaussian (DCA clients, Kairouz, Liu & Steinke 2021; exact sampler of Canonne, Kamath & Steinke 2020)"
NODE_MECHANISM = "distributed discrete Gaussian (DCA compute nodes, Kairouz, Liu & Steinke 2021; exact sampler of Canonne, Kamath & Steinke 2020)"
BETA = math.exp(-0.5)  # conditional rounding's failure bound (KLS21 use e^{-1/2}); ≤ 1/(1−β) ≈ 2.5 draws expected
WINDOW_LOG2_P = -96  # p: probability that the noise sum leaves its window on some coordinate
CLIENT_BOUND = 1 << 62  # a client refuses |ỹ_ij + η_ij| ≥ 2^62
SUM_BOUND = 1 << 62  # the window B must stay below this (half of the signed range: wraps are detectable)
SLACK = 1e-9  # relative margin for floating-point accounting and the rounding check (d·2^-53 ≤ 1.2e-10)
_ALPHAS = np.concatenate([1.0 + np.logspace(-4, 0, 400), np.logspace(0.302, 6, 1600)])


# -- rounding ------------------------------------------------------------------------------------------------
def rounding_bound_sq(d: int, beta: float = BETA) -> float:
    """R² = min(d, d/4 + √(d·ln(1/β)/2)): the accepted rounding error's squared ℓ2 norm, in units."""
    if beta <= 0:
        return float(d)
    return min(float(d), d / 4 + math.sqrt(d * math.log(1 / beta) / 2))


def conditional_round(y: np.ndarray, rng: Drbg, beta: float = BETA) -> np.ndarray:
    """Round each row of y (already in units) to ⌊y⌋ or ⌈y⌉, unbiased, redrawing a row until ‖ỹ − y‖₂² ≤ R².

    Floats are fine here: privacy depends only on the support bound (checked, with margin) and not on the
    rounding probabilities. Returns int64 (callers check |y| < 2^62 first)."""
    y = np.atleast_2d(np.asarray(y, dtype=np.float64))
    bound = rounding_bound_sq(y.shape[1], beta)
    fl = np.floor(y)
    frac = y - fl  # exact: y and ⌊y⌋ are within one binade of each other for |y| < 2^52
    out = fl.copy()
    todo = np.arange(y.shape[0])
    for _ in range(10_000):  # each round accepts a row with probability ≥ 1 − β
        up = rng.uniform((len(todo), y.shape[1])) < frac[todo]
        err = up - frac[todo]
        ok = np.einsum("ij,ij->i", err, err) <= bound
        out[todo[ok]] = fl[todo[ok]] + up[ok]
        todo = todo[~ok]
        if not len(todo):
            return out.astype(np.int64)
    raise RuntimeError("conditional rounding did not accept in 10 000 rounds")  # probability ≤ β^10000


# -- accounting ----------------------------------------------------------------------------------------------
def tau(sigma2: float, n: int) -> float:
    """KLS21's τ = 10·Σ_{k=1}^{n−1} exp(−2π²σ²·k/(k+1)) (σ² in units; 0 for n = 1)."""
    if n <= 1:
        return 0.0
    k = np.arange(1, n, dtype=np.float64)
    return float(10.0 * np.sum(np.exp(-2.0 * math.pi**2 * sigma2 * k / (k + 1))))


def sensitivities(sensitivity: float, frac_bits: int, d: int, beta: float = BETA) -> tuple[float, float]:
    """(Δ̃₂, Δ̃₁) in units after conditional rounding: Δ₂·2^f + 2R, and min(√d·Δ̃₂, Δ̃₂²) (integer vectors)."""
    l2 = sensitivity * 2.0**frac_bits + 2.0 * math.sqrt(rounding_bound_sq(d, beta) * (1 + SLACK))
    l2 *= 1 + SLACK
    return l2, min(math.sqrt(d) * l2, l2 * l2)


def rdp(alpha: np.ndarray | float, l2: float, l1: float, t: float, d: int, n: int, sigma2: float) -> np.ndarray:
    """KLS21 Prop. 14: the Rényi divergence bound of order α for a difference with norms (l2, l1), in units."""
    a = np.asarray(alpha, dtype=np.float64)
    s = math.sqrt(n * sigma2)
    x2, x1 = l2 / s, l1 / s
    return np.minimum.reduce([a * x2 * x2 / 2 + t * d, a / 2 * (x2 * x2 + 2 * x1 * t + t * t * d), a / 2 * (x2 + math.sqrt(d) * t) ** 2])


def epsilon_from_rdp(curve: np.ndarray, alphas: np.ndarray, delta: float) -> tuple[float, float]:
    """CKS20 Prop. 12: ε = min_α ε(α) + (ln(1/δ) − ln α)/(α − 1) + ln(1 − 1/α); returns (ε, the α used)."""
    eps = curve + (math.log(1 / delta) - np.log(alphas)) / (alphas - 1) + np.log1p(-1 / alphas)
    i = int(np.argmin(eps))
    return max(float(eps[i]), 0.0), float(alphas[i])


def delta_from_rdp(curve: np.ndarray, alphas: np.ndarray, epsilon: float) -> float:
    """CKS20 Prop. 12 solved for δ: ln δ = (α − 1)(ε(α) − ε) − ln α + (α − 1)·ln(1 − 1/α), minimised over α."""
    logd = (alphas - 1) * (curve - epsilon) - np.log(alphas) + (alphas - 1) * np.log1p(-1 / alphas)
    return float(min(1.0, math.exp(min(0.0, float(np.min(logd))))))


@dataclass(frozen=True)
class Account:
    """The guarantee of one `discrete-gaussian` DCA job (all noise figures in units of 2^-f)."""

    sigma2: Fraction  # each noise draw's σ² (units²), exact: what the sampler uses (a client's, or a node's when nodes add it)
    honest: int  # n: the noise vectors the guarantee counts (N − T − 1 clients' or M − c nodes')
    tau: float
    l2: float  # Δ̃₂ (units)
    l1: float  # Δ̃₁ (units)
    rho: float  # ρ-zCDP
    epsilon: float
    delta: float  # CKS20 conversion at ε, plus (1 + e^ε)·p_fail
    alpha: float  # the Rényi order that gave δ
    p_fail: float  # probability of a noise-caused refusal (client encode bound or sum window)
    window: int  # B: |S_j| ≤ B for every released coordinate, in units
    nodes: int = 0  # > 0: node noise (a validated job): each of the M nodes adds N_Z(0, σ²); 0: each client does
    colluders: int = 0  # node noise: c, the nodes whose noise is not counted (n = M − c)

    @property
    def sigma_units(self) -> float:
        return math.sqrt(float(self.sigma2))

    @property
    def by_nodes(self) -> bool:
        return self.nodes > 0

    def noise_draws(self, included: int) -> int:
        """How many noise vectors a release over ``included`` clients holds: every node's, or every included client's."""
        return self.nodes if self.nodes else included


def window(clients: int, c_units: int, sigma2: float, d: int, draws: int | None = None) -> int:
    """B = N·c_u + ⌈√(2·m·σ²·ln(2d/p))⌉ with m = ``draws`` noise vectors (default N, one a client): the largest |S_j| a
    valid release can have except with probability p (a sum of m σ²-subgaussian draws is mσ²-subgaussian)."""
    return clients * c_units + noise_tail(clients if draws is None else draws, sigma2, d)


def noise_tail(draws: int, sigma2: float, d: int) -> int:
    """⌈√(2·m·σ²·ln(2d/p))⌉ + 1: the sum of m independent N_Z(0, σ²)^d draws (mσ²-subgaussian, CKS20 Cor. 9) exceeds
    it in magnitude on some coordinate with probability ≤ p = 2^-96."""
    t = math.sqrt(2.0 * draws * sigma2 * (math.log(2 * d) - WINDOW_LOG2_P * math.log(2)))
    return math.ceil(t * (1 + SLACK)) + 1


def clip_units(clip_max: float, frac_bits: int) -> int:
    return math.ceil(clip_max * 2.0**frac_bits)


def _honest(clients: int, max_missing: int, nodes: int, colluders: int) -> int:
    if nodes:
        if not 0 <= colluders < nodes:
            raise ValueError(f"colluders c must satisfy 0 ≤ c ≤ M − 1, got c={colluders}, M={nodes}")
        return nodes - colluders
    n = clients - max_missing - 1
    if n < 1:
        raise ValueError(f"N − T − 1 must be at least 1, got N={clients}, T={max_missing}")
    return n


def account(sigma2: Fraction, *, sensitivity: float, frac_bits: int, d: int, clients: int, max_missing: int, clip_max: float, epsilon: float,
            extra_fail: float = 0.0, nodes: int = 0, colluders: int = 0) -> Account:
    """The (ρ, ε, δ) a job with per-draw σ² (units²) really gives, at the job's ε. ``extra_fail``: the probability of
    any further noise-caused refusal, added to p_fail. ``nodes`` > 0: node noise (each of the M nodes adds N_Z(0, σ²),
    n = M − c of them counted; the clients add none and cannot refuse for their noise); 0: client noise (n = N − T − 1)."""
    s2 = float(sigma2)
    if sigma2 < Fraction(1, 4):
        raise ValueError("KLS21 Prop. 14 needs σ ≥ 1/2 unit")
    n = _honest(clients, max_missing, nodes, colluders)
    t = tau(s2, n)
    l2, l1 = sensitivities(sensitivity, frac_bits, d)
    x2, x1 = l2 * l2 / (n * s2), l1 / math.sqrt(n * s2)
    rho = min(x2 / 2 + t * d, (x2 + 2 * x1 * t + t * t * d) / 2)
    curve = rdp(_ALPHAS, l2, l1, t, d, n, s2)
    logd = (_ALPHAS - 1) * (curve - epsilon) - np.log(_ALPHAS) + (_ALPHAS - 1) * np.log1p(-1 / _ALPHAS)
    i = int(np.argmin(logd))
    c_u = clip_units(clip_max, frac_bits)
    if nodes:  # a node's noise never meets a client bound; a draw that breaks the window is the window's refusal
        p_client = 0.0
    else:  # client refusal: some |ỹ + η| ≥ 2^62 needs |η| ≥ 2^62 − c_u − 1 (σ²-subgaussian tail, N·d draws)
        gap = float(CLIENT_BOUND - c_u - 1)
        p_client = math.exp(min(0.0, math.log(2.0 * clients * d) - gap * gap / (2 * s2)))
    p_fail = min(1.0, p_client + 2.0**WINDOW_LOG2_P + extra_fail)
    delta = min(1.0, math.exp(min(0.0, float(logd[i]))) + (1 + math.exp(min(epsilon, 700.0))) * p_fail)
    return Account(sigma2, n, t, l2, l1, rho, epsilon, delta, float(_ALPHAS[i]), p_fail, window(clients, c_u, s2, d, nodes or None), nodes, colluders)


def calibrate(*, epsilon: float, delta: float, sensitivity: float, frac_bits: int, d: int, clients: int, max_missing: int, clip_max: float,
              extra_fail: float = 0.0, nodes: int = 0, colluders: int = 0) -> Account:
    """The smallest σ² (units², a rational with denominator 2^8) whose account gives (ε, ≤ δ); raises ValueError.
    ``nodes``, ``colluders``: as in :func:`account` (node noise when nodes > 0)."""
    n = _honest(clients, max_missing, nodes, colluders)
    kw = dict(sensitivity=sensitivity, frac_bits=frac_bits, d=d, clients=clients, max_missing=max_missing, clip_max=clip_max, epsilon=epsilon,
              extra_fail=extra_fail, nodes=nodes, colluders=colluders)

    def ok(s: float) -> bool:
        return account(_rational(s * s), **kw).delta <= delta  # type: ignore[arg-type]

    l2, _ = sensitivities(sensitivity, frac_bits, d)
    lo, hi = 0.5, max(1.0, l2 / math.sqrt(n))
    while not ok(hi):
        lo, hi = hi, hi * 2
        if hi > 2.0**60:
            raise ValueError("no σ below 2^60 units gives this (ε, δ)")
    if ok(lo):
        hi = lo
    else:
        for _ in range(60):
            mid = math.sqrt(lo * hi)
            lo, hi = (lo, mid) if ok(mid) else (mid, hi)
            if hi / lo < 1 + 1e-7:
                break
    return account(_rational(hi * hi), **kw)  # type: ignore[arg-type]


def _rational(s2: float) -> Fraction:
    """σ² rounded *up* to a multiple of 2^-8 (more noise, never less): an exact rational for the sampler."""
    return Fraction(math.ceil(s2 * 256), 256)


# -- clients -------------------------------------------------------------------------------------------------
class EncodeRefused(ValueError):
    """A client's |ỹ_ij + η_ij| reached 2^62 (probability ≤ p_fail, data-independent): nothing is sent."""


def client_integers(clipped: np.ndarray, frac_bits: int, sigma2: Fraction, rng: Drbg) -> tuple[np.ndarray, np.ndarray]:
    """Rows of clipped z → (ỹ, η) as int64: conditional randomized rounding of z·2^f, then exact N_Z(0, σ²) noise.

    The noise comes from ``rng.child("dgauss")``, the rounding from ``rng.child("round")``; the caller adds and
    encodes (two's complement in Z_(2^64)) after :func:`check_encodable`."""
    y = np.atleast_2d(np.asarray(clipped, dtype=np.float64)) * 2.0**frac_bits
    rounded = conditional_round(y, rng.child("round"))
    sampler = DiscreteGaussian(sigma2, rng.child("dgauss"))
    raw = sampler.samples(y.size)
    if raw and max(map(abs, raw)) >= CLIENT_BOUND:
        raise EncodeRefused("a noise draw reached 2^62 units")
    noise = np.array(raw, dtype=np.int64).reshape(y.shape)
    total = rounded + noise  # |rounded| ≤ c_u ≪ 2^62, |noise| < 2^62: no int64 overflow
    if np.any(np.abs(total) >= CLIENT_BOUND):
        raise EncodeRefused("a noisy value reached 2^62 units")
    return rounded, noise


def rounded_integers(clipped: np.ndarray, frac_bits: int, rng: Drbg) -> np.ndarray:
    """Rows of clipped z → ỹ as int64: the conditional randomized rounding of z·2^f alone (a validated job's client,
    whose noise the compute nodes add), from ``rng.child("round")`` as in :func:`client_integers`."""
    y = np.atleast_2d(np.asarray(clipped, dtype=np.float64)) * 2.0**frac_bits
    return conditional_round(y, rng.child("round"))


class NodeNoiseRefused(RuntimeError):
    """A node's noise draw reached 2^62 units (probability ≤ 2^-96 with the job's window): the node sends nothing."""


def node_noise(d: int, sigma2: Fraction, rng: Drbg) -> np.ndarray:
    """A compute node's noise for one validated job: d exact draws of N_Z(0, σ²) (Canonne, Kamath & Steinke 2020,
    :mod:`mpdp.dp.discrete_gaussian`) from ``rng`` (a CSPRNG), as int64. Refuses σ < 1/2 unit (below KLS21 Prop. 14's
    range: the account would not hold) and a draw of magnitude ≥ 2^62 (it could not be told from a wrap)."""
    if d < 1 or sigma2 < Fraction(1, 4):
        raise NodeNoiseRefused("a node's noise needs d ≥ 1 and σ ≥ 1/2 unit")
    raw = DiscreteGaussian(sigma2, rng).samples(d)
    if max(map(abs, raw)) >= CLIENT_BOUND:
        raise NodeNoiseRefused("a noise draw reached 2^62 units")
    return np.array(raw, dtype=np.int64)
