"""The distributed Gaussian mechanism of DCA (Heikkilä et al. 2017, Sec. 2.1 and
Theorem 1; the analytic calibration of Balle & Wang 2018).

Hazmat. What misuse breaks: sampling noise from anything but the client's CSPRNG
:class:`~mpdp.math.drbg.Drbg`; calling `paper` mode (ε, δ)-DP when ε ≥ 1 (the classic constant is
proved for ε < 1 only — :func:`dca_guarantee` reports the δ it really gives); releasing a sum over
fewer than N − T clients (:func:`require_enough_clients` refuses).

Thm 1 (Heikkilä et al. 2017): with at most T clients colluding or dropping, each client adding
N(0, σ²_std/(N−T−1)) per coordinate makes the sum (ε, δ)-DP, where σ_std is the central Gaussian
mechanism's σ for ℓ2-sensitivity Δ₂. Worst case: m ≤ T clients dropped, T − m of the included ones
reveal their noise, and the target client's own noise is not counted; the others then contribute
(N − m) − (T − m) − 1 = N − T − 1 honest terms, i.e. exactly σ²_std, whatever m ≤ T is.

Known limitation (documented in docs, not fixed here): each client rounds z_i + η_i to the 2^-f grid
before sharing, and the normals come from floating-point Box–Muller; the release is therefore a sum of
rounded Gaussians, not the ideal real-valued mechanism. With f = 32 the grid is 2^-32, many orders of
magnitude below σ_client, but the guarantee is stated for the idealised mechanism.
"""

from __future__ import annotations

import math

import numpy as np

from mpdp.dca.errors import InsufficientNoise
from mpdp.dp.mechanisms import Guarantee, analytic_gaussian_sigma, classic_gaussian_sigma, gaussian_delta
from mpdp.math.drbg import Drbg

MODES = ("corrected", "paper")
MECHANISM = "distributed Gaussian (DCA, Heikkilä et al. 2017, Thm 1)"


def sigma_std(mode: str, sensitivity: float, epsilon: float, delta: float) -> float:
    """σ_std of the central Gaussian mechanism for ℓ2-sensitivity Δ₂.

    `corrected`: the analytic Gaussian mechanism (Balle & Wang 2018), (ε, δ)-DP for every ε > 0.
    `paper`: the classic formula σ_std = sqrt(2 ln(1.25/δ))·Δ₂/ε, proved only for ε < 1 (the paper runs ε up to 31.6).
    """
    if mode == "corrected":
        return analytic_gaussian_sigma(sensitivity, epsilon, delta)
    if mode == "paper":
        return classic_gaussian_sigma(sensitivity, epsilon, delta)
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


def client_sigma(sigma_std_value: float, clients: int, max_missing: int) -> float:
    """Each client's σ = σ_std / sqrt(N − T − 1) (Thm 1); needs N − T − 1 ≥ 1."""
    honest_others = clients - max_missing - 1
    if honest_others < 1:
        raise ValueError(f"N − T − 1 must be at least 1, got N={clients}, T={max_missing}")
    return sigma_std_value / math.sqrt(honest_others)


def client_noise(rng: Drbg, shape: int | tuple[int, ...], sigma_client: float) -> np.ndarray:
    """η_i ~ N(0, σ_client²·I), drawn from the client's keystream (vectorised over clients when shape is (n, d)).

    Sensitivity: Δ₂ of one client's z_i (replace-one adjacency, same N). Norm: ℓ2.
    Guarantee: alone, nothing; summed over the N − T − 1 honest others with σ_client from
    :func:`client_sigma`, (ε, δ)-DP for the sum (Thm 1) — analytic calibration in `corrected` mode,
    the classic formula (ε < 1 only) in `paper` mode.
    """
    if not (math.isfinite(sigma_client) and sigma_client > 0):
        raise ValueError(f"sigma_client must be finite and positive, got {sigma_client}")
    eta = rng.normal(shape)
    eta *= sigma_client  # in place: η is N·d values in a cohort
    return eta


def dca_guarantee(mode: str, sensitivity: float, epsilon: float, delta: float, sigma_std_value: float, clients: int, max_missing: int) -> Guarantee:
    """What a DCA release really guarantees (stated in every result, in both modes).

    `corrected`: (ε, δ). `paper`: (ε, max(δ, δ_exact)) where δ_exact = δ(σ_std) of the Gaussian
    mechanism (Balle & Wang Thm 8, tight), which exceeds δ when the classic constant is used at ε ≥ 1.
    """
    exact = gaussian_delta(sigma_std_value, sensitivity, epsilon)
    real_delta = delta if mode == "corrected" else max(delta, exact)
    calib = (
        "σ_std from the analytic Gaussian mechanism (Balle & Wang 2018)"
        if mode == "corrected"
        else (
            f"σ_std from the classic formula sqrt(2 ln(1.25/δ))·Δ₂/ε (paper mode; proved for ε < 1 only; "
            f"exact δ at this σ is {exact:.3g})"
        )
    )
    statement = (
        f"({epsilon:g}, {real_delta:.3g})-DP for the sum of z_i + η_i over the clients that reached every compute node, "
        f"adjacency = one client's vector replaced (same N = {clients}), ℓ2-sensitivity Δ₂ = {sensitivity:g}; "
        f"holds when at most T = {max_missing} clients collude or drop out and at least one compute node is honest; "
        f"each client adds N(0, σ_std²/(N−T−1)), {calib}."
    )
    return Guarantee(MECHANISM, epsilon, real_delta, sensitivity, "l2", statement)


def require_enough_clients(included: int, clients: int, max_missing: int) -> None:
    """Refuse (raise :class:`InsufficientNoise`) unless |A| ≥ N − T (the paper's Sec. 3.1.3, fault tolerance)."""
    if included < clients - max_missing:
        raise InsufficientNoise(
            f"only {included} of {clients} clients reached every compute node; at most T = {max_missing} may be missing "
            f"(need at least {clients - max_missing}), so the noise cannot reach σ²_std: nothing is released"
        )


def worst_case_noise_variance(sigma_client: float, clients: int, max_missing: int) -> float:
    """Variance of the honest others' noise in the worst case of Thm 1: (N − T − 1)·σ_client² (= σ²_std)."""
    return (clients - max_missing - 1) * sigma_client**2
