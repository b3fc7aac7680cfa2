"""A Pathak job's public parameters, derived and validated once (keys, masks and fixed-point
scale; overflow checked before any modular sum).

Bit lengths (ours): n_j < 2^size_bits; a_j ∈ [0, 2^L) with L = size_bits + κ; Charlie's masks
r_k ∈ [0, 2^(L+κ)); comparisons run on ℓ = L + κ + 3 bits after the offset 2^(ℓ−1) (docs/protocols/pathak2010.md, "Stage 1
tournament").
Noise and models use one fixed-point scale 2^f; the noise enters as η̄ = round(K·η·2^f), on K·ŵ_s at the
release's resolution, and |K·η_i| < 2^(eta_bits − f) is required of every party's noise. P1's mask s is
uniform in [2^eta_bits, 2^eta_bits + 2^(eta_bits+κ)) so η̄ + s never wraps mod N′ and hides η̄
statistically (distance ≤ 2^(1−κ)). Final shares live in Z_(2^128).

DISTRIBUTED_GAUSSIAN (docs/protocols/pathak2010.md, "Fixed point"): the noise plaintext is σ̄·Σ_i z̄_i at
scale 2^(f + SIGMA_FRAC_BITS + fz); |σ̄| < 2^(f + SCALE_BITS + SIGMA_FRAC_BITS) and |z̄_i| ≤ 2^(Z_INT_BITS + fz)
give eta_bits below; Charlie and P1 truncate by 2^(SIGMA_FRAC_BITS + fz) (``truncate_bits``) to the scale 2^f.
"""

from __future__ import annotations

from dataclasses import dataclass

from mpdp import limits
from mpdp.dp import pathak_noise
from mpdp.dp.pathak_noise import PathakCalibration
from mpdp.math.fixedpoint import FixedPoint, check_sum_headroom
from mpdp.messages import common_pb2, pathak2010_pb2
from mpdp.pathak2010 import tournament

MIN_KAPPA = limits.MIN_KAPPA
RING_BITS = 128
MODEL_BOUND = float(2**40)  # |ŵ_j,i| must stay below this to be encoded
NOISE_INT_BITS = 32  # |K·η_i| < 2^32: the noise on K·ŵ_s (smallest-party modes)


# Per-call deadlines are sized from the work a call may wait for (``PathakParams.call_seconds``). One 2048-bit
# Paillier operation (encryption, decryption, a full-size exponent) takes ≈ 10 ms and one DGK bit operation
# (encryption, blinding, zero test) 0.04–0.4 ms on one core of the benchmark machine (docs/benchmarks.md); the
# budget allows 5× that for a loaded host. Both scale as (key bits / 2048)³.
PAILLIER_OP_SECONDS = 0.05
DGK_OP_SECONDS = 0.002
KEYGEN_OPS = 200  # P1's ξ key when no spare key is ready: ≈ 1–2 s at 2048 bits, counted in Paillier operations
CALL_FLOOR_SECONDS = 60.0  # no call gets less (local training at JobAnnouncement, TLS set-up, a loaded host)


class InvalidJob(ValueError):
    """A job specification that can never run; the message says which field and why (never a caller's string)."""


def check_spec(job_id: str, spec: pathak2010_pb2.PathakJobSpec) -> None:
    """Every field in its documented range (:mod:`mpdp.limits`), the job id an id, the parties distinct."""
    try:
        limits.check_id(job_id, "job_id")
        limits.check_pathak_job_spec(spec)
    except limits.SpecError as e:
        raise InvalidJob(str(e)) from None


MODE_NAMES = {common_pb2.CORRECTED: "corrected", common_pb2.PAPER: "paper"}
# PATHAK_NOISE_DEFAULT resolves to this in CORRECTED mode (PAPER has only the smallest party's noise).
DEFAULT_NOISE = pathak2010_pb2.DISTRIBUTED_GAUSSIAN


def default_colluders(K: int) -> int:
    """t when the spec leaves it unset: K − 2, but at least 1 (one curious party) and at most K − 1."""
    return min(max(1, K - 2), max(K - 1, 0))


def resolve_noise(spec: pathak2010_pb2.PathakJobSpec) -> tuple[str, int, float, int]:
    """(calibration mode name, noise source, δ, t) of a checked spec; InvalidJob for combinations that cannot run."""
    K = len(spec.parties)
    noise = spec.noise or (DEFAULT_NOISE if spec.mode == common_pb2.CORRECTED else pathak2010_pb2.SMALLEST_PARTY)
    if noise == pathak2010_pb2.SMALLEST_PARTY:
        if spec.delta != 0 or spec.HasField("colluders"):
            raise InvalidJob("spec.delta and spec.colluders apply to DISTRIBUTED_GAUSSIAN noise only")
        return MODE_NAMES[spec.mode], noise, 0.0, 0
    if spec.mode != common_pb2.CORRECTED:
        raise InvalidJob("spec.noise DISTRIBUTED_GAUSSIAN needs mode CORRECTED (PAPER mode has only the smallest party's noise)")
    t = spec.colluders if spec.HasField("colluders") else default_colluders(K)
    if t > max(K - 1, 0):
        raise InvalidJob(f"spec.colluders must be at most K − 1 = {max(K - 1, 0)}")
    return pathak_noise.GAUSSIAN, noise, spec.delta or pathak_noise.DEFAULT_DELTA, t


@dataclass(frozen=True)
class PathakParams:
    job_id: str
    dataset: str
    parties: tuple[str, ...]
    calibration: PathakCalibration
    frac_bits: int = 32
    kappa: int = 40
    size_bits: int = 32
    seeded: bool = False
    deadline_seconds: float = 600.0
    noise: int = pathak2010_pb2.SMALLEST_PARTY  # resolved PathakNoise

    @classmethod
    def from_spec(cls, job_id: str, spec: pathak2010_pb2.PathakJobSpec) -> "PathakParams":
        check_spec(job_id, spec)
        parties = tuple(spec.parties)
        kappa = spec.kappa or 40
        frac = spec.fractional_bits or 32
        size_bits = spec.size_bits or 32
        deadline = spec.deadline_seconds or 600.0
        mode, noise, delta, t = resolve_noise(spec)
        try:
            cal = PathakCalibration(mode, spec.epsilon, getattr(spec, "lambda"), len(parties), delta, t, frac)  # type: ignore[arg-type]
        except ValueError as e:
            raise InvalidJob(str(e)) from None
        p = cls(job_id, spec.dataset, parties, cal, frac, kappa, size_bits, bool(spec.simulation_seed), deadline, noise)
        check_sum_headroom(2 * len(parties), MODEL_BOUND, frac, 1 << RING_BITS)
        return p

    # -- derived sizes ------------------------------------------------------------
    @property
    def K(self) -> int:
        return len(self.parties)

    @property
    def L(self) -> int:
        """Bits of a_j (step S1.1: L = ℓ_n + κ)."""
        return self.size_bits + self.kappa

    @property
    def mask_bits(self) -> int:
        """Charlie's r_k ∈ [0, 2^(L+κ))."""
        return self.L + self.kappa

    @property
    def compare_bits(self) -> int:
        """ℓ = L + κ + 3 (bits of a blinded comparison)."""
        return self.L + self.kappa + 3

    @property
    def distributed(self) -> bool:
        return self.calibration.distributed

    @property
    def eta_bits(self) -> int:
        """Bits bounding |η̄| (the noise plaintext before P1's mask); P1's mask s starts at 2^eta_bits."""
        if self.distributed:
            z_bits = pathak_noise.Z_INT_BITS + self.calibration.z_frac_bits + (self.K - 1).bit_length()
            return self.frac_bits + pathak_noise.SCALE_BITS + pathak_noise.SIGMA_FRAC_BITS + z_bits + 1
        return NOISE_INT_BITS + self.frac_bits

    @property
    def truncate_bits(self) -> int:
        """DISTRIBUTED_GAUSSIAN: the noise plaintext's scale over 2^f (σ̄ and z̄ fractional bits); 0 otherwise."""
        return pathak_noise.SIGMA_FRAC_BITS + self.calibration.z_frac_bits if self.distributed else 0

    @property
    def noise_slot_bits(self) -> int:
        """B: bits of one slot of a packed noise plaintext (S2.4–S3.2); η̄_i + s_i ∈ (0, 2^(eta_bits+κ+2))."""
        return self.eta_bits + self.kappa + 2

    def noise_slots(self, modulus_bits: int) -> int:
        """Coordinates per ζ ciphertext: slots·B ≤ bits(N′) − 1, so a packed plaintext never wraps mod N′."""
        return max(1, (modulus_bits - 1) // self.noise_slot_bits)

    def noise_blocks(self, d: int, modulus_bits: int) -> int:
        """Ciphertexts in NoiseChain and MaskedNoise: ⌈d / slots⌉."""
        slots = self.noise_slots(modulus_bits)
        return (d + slots - 1) // slots

    @property
    def ring_modulus(self) -> int:
        return 1 << RING_BITS

    @property
    def ring(self) -> FixedPoint:
        return FixedPoint(self.frac_bits, self.ring_modulus)

    @property
    def comparisons(self) -> int:
        """DGK comparisons of Stage 1 step 6: K − 1, in ⌈log2 K⌉ tournament rounds (mpdp/pathak2010/tournament.py)."""
        return tournament.comparisons(self.K)

    def step_work(self, d: int) -> tuple[int, int]:
        """(Paillier operations, DGK bit operations) of the heaviest single step any role runs at this K and d.

        Paillier: Charlie's S1.4 (K decryptions, K encryptions) then S2.1 (K encryptions) and a tournament round,
        P1's S0 key generation, a party's S2.4/S3.1 (per coordinate: an exponentiation, a re-randomisation and P1's
        mask) plus P1's K NoiseScaleShares, Charlie's S3.2 (d decryptions). DGK: a round of ⌊K/2⌋ comparisons,
        ℓ bits each, at most 3 operations per bit (Charlie: zero tests of one round and encryptions of the next)."""
        K = self.K
        paillier = max(3 * K, KEYGEN_OPS, 3 * d + K)
        dgk = 3 * tournament.most_pairs(K) * self.compare_bits
        return paillier, dgk

    def call_seconds(self, d: int, key_bits: int) -> float:
        """The deadline of one protocol call of this job (S0–S3, either direction). The receiver answers once the
        step the message completes has run, and may first wait for one step in progress (its lock): twice the
        heaviest step's work, at :data:`PAILLIER_OP_SECONDS` and :data:`DGK_OP_SECONDS` per operation scaled to
        ``key_bits`` (the largest key of the job), and never less than :data:`CALL_FLOOR_SECONDS`.
        ``d`` = 0 while the dimension is not known yet (S0)."""
        paillier, dgk = self.step_work(d)
        scale = (max(key_bits, 2048) / 2048) ** 3
        return max(CALL_FLOOR_SECONDS, 2 * scale * (paillier * PAILLIER_OP_SECONDS + dgk * DGK_OP_SECONDS))

    def index(self, party: str) -> int:
        return self.parties.index(party)

    def min_paillier_bits(self) -> int:
        """Plaintexts must never wrap: ã < 2^(L+κ+1), η̄ + s < 2^(eta_bits+κ+2), K·ŵ scaled below 2^128."""
        return max(self.L + self.kappa + 2, self.eta_bits + self.kappa + 3) + 2
