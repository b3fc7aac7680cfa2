"""A DCA job's public parameters, validated once, with the per-client σ and the guarantee they yield
(Heikkilä et al. 2017, Sec. 3.1; one fixed-point scale 2^f, shares in Z_2^64, overflow checked
before any modular sum).

Every role builds its machine from the same :class:`DcaParams` (its view adds only its own name).
Validation names the field and the bound; a job that can never run raises :class:`InvalidJob`
(Problem INVALID_JOB), including a job whose sum could wrap: the headroom check
N·(max_j c_j + 8σ_client)·2^f < q/2 with q = 2^64 runs here, before any share exists (ours).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from mpdp import accounting, limits
from mpdp.dca import discrete, mechanism, spec
from mpdp.dca.discrete import Account as DiscreteAccount
from mpdp.dca.errors import InvalidJob
from mpdp.dp.mechanisms import Guarantee
from mpdp.math.fixedpoint import U64_MODULUS, EncodingOverflow, check_sum_headroom
from mpdp.messages import common_pb2, dca_pb2

if TYPE_CHECKING:  # the validation circuits load the field arithmetic (numba): only a validated job builds one
    from mpdp.dca import validation

# Ranges live in mpdp.limits (docs/protocols/limits.md); these names are kept for callers.
MAX_DIMENSION = limits.MAX_DCA_DIMENSION  # 8 MiB per packed vector; gRPC's default message limit is 4 MiB (raise it for d > 2^19)
MAX_CLIENTS = limits.MAX_DCA_CLIENTS
MAX_NODES = limits.MAX_NODES  # per-client node bitmasks are int64 (mpdp.dca.agreement)
MIN_FRAC_BITS, MAX_FRAC_BITS = limits.MIN_FRAC_BITS, limits.MAX_FRAC_BITS
NOISE_TAIL = 8.0  # headroom allows |η_ij| up to 8σ_client per client
MAX_CLIENT_ID = limits.MAX_CLIENT_ID_BYTES  # bytes of UTF-8

MODE_NAMES = {common_pb2.CORRECTED: "corrected", common_pb2.PAPER: "paper"}
MODE_ENUM = {v: k for k, v in MODE_NAMES.items()}
NOISE_NAMES = {dca_pb2.GAUSSIAN: "gaussian", dca_pb2.DISCRETE_GAUSSIAN: discrete.NAME}
NOISE_ENUM = {v: k for k, v in NOISE_NAMES.items()}
VALIDATE_NAMES = {dca_pb2.VALIDATE_NONE: "none", dca_pb2.VALIDATE_RANGE: "range", dca_pb2.VALIDATE_L2: "l2", dca_pb2.VALIDATE_ONE_HOT: "one-hot",
                  dca_pb2.VALIDATE_VOTES: "votes"}
VALIDATE_ENUM = {v: k for k, v in VALIDATE_NAMES.items()}

SECURE_SUM_MECHANISM = "secure sum (DCA masks, no noise)"
SECURE_SUM_STATEMENT = (
    "NOT differentially private: the exact sum of the clients' vectors over the clients that reached every compute node; "
    "no node coalition short of all M learns a client's vector; only the curator sees the sum, and only to feed it into a "
    "mechanism that adds its own DP noise (the job's purpose names it)"
)

TRUST_MODEL = (
    "honest-but-curious clients, compute nodes and curator; at most T clients collude or drop out; "
    "at least one compute node is honest (does not collude); channels are encrypted (TLS)"
)
VALIDATED_TRUST_MODEL = (
    "clients may be malicious: every contribution is proven valid on its shares (fully linear proof, soundness error ≤ 2^-60) "
    "and an invalid one is dropped like a dropout; clients add no noise, so none can omit or inflate it; at most T clients "
    "drop out or are rejected; honest-but-curious compute nodes (they derive the verify key among themselves and do not give it "
    "to clients, and each adds its own noise before sending its partial sum) and curator; at least one compute node is honest "
    "(does not collude); channels are encrypted (TLS)"
)


@dataclass(frozen=True)
class DcaParams:
    """One DCA job: d, N, T, (ε, δ), Δ₂, mode, f, clip bounds, the M compute nodes, and what follows from them."""

    job_id: str
    dimension: int
    clients: int
    max_missing: int
    epsilon: float
    delta: float
    sensitivity: float
    nodes: tuple[str, ...]
    mode: str = "corrected"
    frac_bits: int = 32
    clip_bounds: tuple[float, ...] = (1.0,)
    seed_compressed: bool = False
    deadline_seconds: float = 600.0
    simulation_seed: bytes = b""  # test mode only: non-empty marks the job (and its release) as seeded, non-private
    roster: tuple[str, ...] = ()
    purpose: str = ""
    secure_sum: bool = False  # no noise: the sum is not DP and may only be consumed inside the curator (see below)
    noise: str = "gaussian"  # or "discrete-gaussian": exact integer noise, accounted in mpdp.dca.discrete
    roster_range: tuple[str, int] | None = None  # (prefix, digits): client i is prefix + i zero-padded (instead of ``roster``)
    validate: str = "none"  # or range, l2, one-hot, votes: Field64 shares with a proof (mpdp.dca.validation)
    vote_classes: int = 0  # validate votes: C, the classes of one vote per point (the vector is d/C points, or d bits for C = 2)
    colluders: int | None = None  # a validated noisy job: c ≤ M − 1 nodes may pool their noise with the curator (None = M − 1)
    sigma_std: float = field(init=False)
    sigma_client: float = field(init=False)
    sigma_node: float = field(init=False, default=0.0)  # a validated noisy job: each compute node's noise σ (real units)
    guarantee: Guarantee = field(init=False)
    discrete: discrete.Account | None = field(init=False, default=None)  # the discrete-gaussian mode's account
    validation: validation.Plan | None = field(init=False, default=None)  # a validated job's circuit and bounds
    spec_digest: bytes = field(init=False, default=b"")  # SHA-256 of the whole spec (mpdp.dca.spec): what every share and proof is bound to

    def __post_init__(self) -> None:
        for name, conv in (("nodes", str), ("roster", str), ("clip_bounds", float)):
            object.__setattr__(self, name, tuple(conv(x) for x in getattr(self, name)))
        try:
            limits.check_id(self.job_id, "job_id")
            limits.check_fields(
                "DcaJobSpec",
                dimension=self.dimension,
                clients=self.clients,
                max_missing=self.max_missing,
                epsilon=self.epsilon,
                delta=self.delta,
                sensitivity=self.sensitivity,
                fractional_bits=self.frac_bits,
                clip_bounds=self.clip_bounds,
                compute_nodes=self.nodes,
                deadline_seconds=self.deadline_seconds,
                simulation_seed=self.simulation_seed,
                roster=self.roster,
                purpose=self.purpose,
                vote_classes=self.vote_classes,
                **({} if self.colluders is None else {"colluders": self.colluders}),
            )
        except limits.SpecError as e:
            raise InvalidJob(str(e)) from None
        if self.mode not in mechanism.MODES:
            raise InvalidJob(f"mode must be one of {mechanism.MODES}")
        if self.noise not in NOISE_ENUM:
            raise InvalidJob(f"noise must be one of {tuple(NOISE_ENUM)}")
        if not self.max_missing + 2 <= self.clients:
            raise InvalidJob(f"clients N must satisfy N − T − 1 ≥ 1 (Thm 1), got N={self.clients}, T={self.max_missing}")
        if len(self.clip_bounds) not in (1, self.dimension):
            raise InvalidJob(f"clip_bounds must hold 1 or d = {self.dimension} values, got {len(self.clip_bounds)}")
        if self.roster and len(self.roster) != self.clients:
            raise InvalidJob(f"a roster must list exactly N = {self.clients} distinct client ids, got {len(self.roster)}")
        if self.roster_range is not None:
            self._check_roster_range()
        if self.validate != "none":
            self._check_validated()
        elif self.vote_classes:
            raise InvalidJob("vote_classes is set exactly for validate VOTES")
        if self.node_noise:
            if self.colluders is None:
                object.__setattr__(self, "colluders", self.M - 1)
            elif not 0 <= self.colluders <= self.M - 1:
                raise InvalidJob(f"colluders c must satisfy 0 ≤ c ≤ M − 1 = {self.M - 1}")
        elif self.colluders is not None:
            raise InvalidJob("colluders applies to validated DISCRETE_GAUSSIAN jobs only (whose compute nodes add the noise)")
        object.__setattr__(self, "spec_digest", spec.spec_digest(self))  # of the spec with its defaults applied (c = M − 1 when unset)
        if self.secure_sum:
            if self.noise != "gaussian":
                raise InvalidJob("a secure-sum job adds no noise: leave noise at GAUSSIAN")
            self._init_secure_sum()
            self._init_validation()
            return
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise InvalidJob(f"epsilon must be finite and positive, got {self.epsilon}")
        if not 0 < self.delta < 1:
            raise InvalidJob(f"delta must be in (0, 1), got {self.delta}")
        if not (math.isfinite(self.sensitivity) and self.sensitivity > 0):
            raise InvalidJob(f"sensitivity Δ₂ must be finite and positive, got {self.sensitivity}")
        if self.noise == discrete.NAME:
            self._init_discrete()
            self._init_validation()
            return
        try:
            s_std = mechanism.sigma_std(self.mode, self.sensitivity, self.epsilon, self.delta)
        except ValueError as e:
            raise InvalidJob(str(e)) from None
        s_client = mechanism.client_sigma(s_std, self.clients, self.max_missing)
        object.__setattr__(self, "sigma_std", s_std)
        object.__setattr__(self, "sigma_client", s_client)
        object.__setattr__(
            self,
            "guarantee",
            mechanism.dca_guarantee(self.mode, self.sensitivity, self.epsilon, self.delta, s_std, self.clients, self.max_missing),
        )
        try:
            check_sum_headroom(self.clients, self.value_bound, self.frac_bits, U64_MODULUS)
        except EncodingOverflow as e:
            raise InvalidJob(f"headroom: N·(max c + 8σ_client)·2^f must stay below 2^63: {e}") from None
        self._init_validation()

    def _check_roster_range(self) -> None:
        prefix, digits = self.roster_range  # type: ignore[misc]
        object.__setattr__(self, "roster_range", (str(prefix), int(digits)))
        try:
            limits.check_fields("RosterRange", prefix=prefix, digits=digits)
        except limits.SpecError as e:
            raise InvalidJob(f"roster_range.{e}") from None
        if self.roster:
            raise InvalidJob("a job has a roster list or a roster range, not both")
        if digits < len(str(self.clients - 1)):
            raise InvalidJob(f"roster_range.digits must be at least {len(str(self.clients - 1))} for N = {self.clients}")
        if not valid_client_id(prefix + "0" * digits):
            raise InvalidJob("roster_range: the client ids would be longer than 256 UTF-8 bytes")

    def _check_validated(self) -> None:
        if self.validate not in VALIDATE_ENUM:
            raise InvalidJob(f"validate must be one of {tuple(VALIDATE_ENUM)}")
        if self.dimension > limits.MAX_VALIDATED_DIMENSION:
            raise InvalidJob(f"a validated job has d ≤ {limits.MAX_VALIDATED_DIMENSION} (a client's proof input is ~50 bits a coordinate)")
        if not self.secure_sum and self.noise != discrete.NAME:
            raise InvalidJob("a validated job (the default) needs noise DISCRETE_GAUSSIAN (exact integer noise, added by the compute nodes) or a"
                             " secure sum; validate VALIDATE_NONE runs unproven")
        if (self.validate == "votes") != (self.vote_classes != 0):
            raise InvalidJob("vote_classes is set exactly for validate VOTES")
        if self.validate == "votes" and self.vote_classes > 2 and self.dimension % self.vote_classes:
            raise InvalidJob(f"validate VOTES: d = {self.dimension} is not a whole number of points of {self.vote_classes} classes")

    def _init_validation(self) -> None:
        """A validated job's circuit (:mod:`mpdp.dca.validation`): refused here if any sum it checks could wrap mod p."""
        if self.validate == "none":
            g = self.guarantee
            note = (" Contributions are not proven valid (validate NONE): the guarantee assumes honest clients; one malicious client"
                    " can move the sum arbitrarily or omit its noise.")
            object.__setattr__(self, "guarantee", Guarantee(g.mechanism, g.epsilon, g.delta, g.sensitivity, g.norm, g.statement + note))
            return
        from mpdp.dca import validation

        acc = self.discrete
        try:
            plan = validation.plan(
                self.validate, d=self.dimension, clip_bounds=self.clip_bounds, frac_bits=self.frac_bits, clients=self.clients, vote_classes=self.vote_classes,
                noise_tail=0 if acc is None else discrete.noise_tail(acc.nodes, float(acc.sigma2), self.dimension),
                rounding_sq=self.dimension / 4 if acc is None else discrete.rounding_bound_sq(self.dimension) * (1 + discrete.SLACK),
            )
        except validation.ValidationError as e:
            raise InvalidJob(f"validation: {e}") from None
        object.__setattr__(self, "validation", dataclasses.replace(plan, spec_digest=self.spec_digest))  # its proofs are bound to this spec
        c = plan.circuit
        note = (
            f" Every contribution is proven valid ({self.validate}: data only, |ỹ_j| ≤ {plan.data_bound} units"
            + (f", ‖ỹ‖₂² ≤ {plan.l2_bound} units²" if plan.l2_bound else "")
            + f") by a fully linear proof with {c.proofs} repetitions, soundness error ≤ 2^{c.soundness_log2:.0f}, so one accepted contribution"
            " moves the sum by at most its data bound; rejected contributions count like dropouts against T."
        )
        g = self.guarantee
        object.__setattr__(self, "guarantee", Guarantee(g.mechanism, g.epsilon, g.delta, g.sensitivity, g.norm, g.statement + note))

    @property
    def node_noise(self) -> bool:
        """A validated job with noise: the compute nodes add it (each N_Z(0, σ²) in units², :mod:`mpdp.dca.discrete`,
        "Node noise"); its clients add none and prove their data only."""
        return self.validate != "none" and not self.secure_sum

    @property
    def trust_model(self) -> str:
        if self.validation is None:
            return TRUST_MODEL
        if not self.node_noise:
            return VALIDATED_TRUST_MODEL
        return VALIDATED_TRUST_MODEL + (f"; the guarantee counts the noise of M − c = {self.M - (self.colluders or 0)} of the {self.M} compute nodes:"
                                        f" at most c = {self.colluders} nodes may reveal their noise to the curator or omit it")

    def _init_secure_sum(self) -> None:
        """A secure sum (DCA without the Gaussian noise, ours): the clients' masks hide each vector from every
        node coalition short of all M, but the sum itself is exact. Used where the curator feeds the sum into a
        mechanism that adds the DP noise itself (the HCB16 vote counts, :mod:`mpdp.hamm2016`); such a sum is
        never served by GetRelease nor written to disk, and its guarantee says so."""
        if self.epsilon or self.delta or self.sensitivity:
            raise InvalidJob("a secure-sum job adds no noise: leave epsilon, delta and sensitivity unset (0)")
        if self.mode != "corrected":
            raise InvalidJob("a secure-sum job has no noise calibration: leave mode at CORRECTED")
        object.__setattr__(self, "sigma_std", 0.0)
        object.__setattr__(self, "sigma_client", 0.0)
        object.__setattr__(self, "guarantee", Guarantee(SECURE_SUM_MECHANISM, math.inf, 1.0, 0.0, "none", SECURE_SUM_STATEMENT))
        try:
            check_sum_headroom(self.clients, self.value_bound, self.frac_bits, U64_MODULUS)
        except EncodingOverflow as e:
            raise InvalidJob(f"headroom: N·max c·2^f must stay below 2^63: {e}") from None

    def _init_discrete(self) -> None:
        """The distributed discrete Gaussian (:mod:`mpdp.dca.discrete`): σ² per client in units of 2^-f, exact and
        rational; the guarantee is ρ-zCDP (KLS21 Prop. 14 with n = N − T − 1) and (ε, δ) by CKS20's conversion.
        A job whose sum could leave its window (and so wrap in Z_(2^64)) is refused here, before any share exists."""
        if self.mode != "corrected":
            raise InvalidJob("noise DISCRETE_GAUSSIAN has its own calibration: leave mode at CORRECTED")
        by_nodes = self.node_noise
        try:
            acc = discrete.calibrate(
                epsilon=self.epsilon, delta=self.delta, sensitivity=self.sensitivity, frac_bits=self.frac_bits, d=self.dimension,
                clients=self.clients, max_missing=self.max_missing, clip_max=max(self.clip_bounds),
                nodes=self.M if by_nodes else 0, colluders=(self.colluders or 0) if by_nodes else 0,
            )
        except ValueError as e:
            raise InvalidJob(f"discrete Gaussian calibration: {e}") from None
        if acc.window >= discrete.SUM_BOUND:
            raise InvalidJob(
                f"headroom: the sum's window B = N·⌈c·2^f⌉ + noise tail ≥ 2^{acc.window.bit_length() - 1} must stay below 2^62 "
                "so that no wrap in Z_(2^64) goes unnoticed; lower frac_bits, the clip bounds or N"
            )
        s_draw = acc.sigma_units / 2.0**self.frac_bits
        object.__setattr__(self, "discrete", acc)
        object.__setattr__(self, "sigma_client", 0.0 if by_nodes else s_draw)
        object.__setattr__(self, "sigma_node", s_draw if by_nodes else 0.0)
        object.__setattr__(self, "sigma_std", s_draw * math.sqrt(acc.honest))
        if by_nodes:
            self._node_statement(acc)
            return
        statement = (
            f"{acc.rho:.6g}-zCDP and ({self.epsilon:g}, {acc.delta:.3g})-DP for the integer sum of the rounded z_i + η_i over the clients "
            f"that reached every compute node (decoded by 2^-{self.frac_bits}), adjacency = one client's vector replaced (same N = {self.clients}), "
            f"ℓ2-sensitivity Δ₂ = {self.sensitivity:g} (Δ̃₂ = {acc.l2:.6g} units after conditional randomized rounding, β = e^-1/2); "
            f"each client adds exact discrete Gaussian noise N_Z(0, σ²) with σ² = {acc.sigma2.numerator}/{acc.sigma2.denominator} units² "
            f"(Canonne, Kamath & Steinke 2020, no floating point); ρ from Kairouz, Liu & Steinke 2021 Prop. 14 over the n = N − T − 1 = "
            f"{acc.honest} honest clients' noise (τ = {acc.tau:.3g}); (ε, δ) by Canonne et al.'s RDP conversion at α = {acc.alpha:.4g}, δ including "
            f"the {acc.p_fail:.3g} probability of a noise-caused refusal; holds when at most T = {self.max_missing} clients collude or drop out "
            "and at least one compute node is honest."
        )
        object.__setattr__(self, "guarantee", Guarantee(discrete.MECHANISM, self.epsilon, acc.delta, self.sensitivity, "l2", statement))

    def _node_statement(self, acc: DiscreteAccount) -> None:
        """The guarantee of a validated job whose compute nodes add the noise (:mod:`mpdp.dca.discrete`, "Node noise")."""
        statement = (
            f"{acc.rho:.6g}-zCDP and ({self.epsilon:g}, {acc.delta:.3g})-DP for the integer sum of the rounded z_i over the clients "
            f"that reached every compute node and passed their proofs, plus the compute nodes' noise (decoded by 2^-{self.frac_bits}), "
            f"adjacency = one client's vector replaced (same N = {self.clients}), ℓ2-sensitivity Δ₂ = {self.sensitivity:g} (Δ̃₂ = {acc.l2:.6g} units "
            f"after conditional randomized rounding, β = e^-1/2); the clients add no noise: each of the M = {self.M} compute nodes adds exact "
            f"discrete Gaussian noise N_Z(0, σ²) with σ² = {acc.sigma2.numerator}/{acc.sigma2.denominator} units² (Canonne, Kamath & Steinke 2020, "
            f"no floating point; = σ_std²/(M − c)) to its partial sum before sending it; ρ from Kairouz, Liu & Steinke 2021 Prop. 14 over the "
            f"noise of the n = M − c = {acc.honest} nodes that do not pool their noise with the curator (c = {acc.colluders}, τ = {acc.tau:.3g}); "
            f"(ε, δ) by Canonne et al.'s RDP conversion at α = {acc.alpha:.4g}, δ including the {acc.p_fail:.3g} probability of a noise-caused "
            f"refusal; dropped or rejected clients remove no noise; holds when at most c = {acc.colluders} compute nodes reveal or omit their "
            "noise and at least one compute node is honest."
        )
        object.__setattr__(self, "guarantee", Guarantee(discrete.NODE_MECHANISM, self.epsilon, acc.delta, self.sensitivity, "l2", statement))

    # -- derived ---------------------------------------------------------------------------
    @property
    def rho(self) -> float:
        """ρ of the ρ-zCDP guarantee (discrete-gaussian mode), 0 otherwise."""
        return self.discrete.rho if self.discrete is not None else 0.0

    def noise_variance(self, included: int) -> float:
        """The noise variance per coordinate of a release over ``included`` clients, in real units: every included
        client's noise, or (node noise) every compute node's (discrete: σ²/4^f a draw, an upper bound, CKS20)."""
        if self.discrete is not None:
            return self.discrete.noise_draws(included) * float(self.discrete.sigma2) / 4.0**self.frac_bits
        return included * self.sigma_client**2

    @property
    def has_roster(self) -> bool:
        """Whether the job names its N clients in advance (``roster`` or ``roster_range``): clients then have roster
        indices 0..N−1 and the nodes agree by index (:mod:`mpdp.dca.agreement`)."""
        return bool(self.roster) or self.roster_range is not None

    def roster_id(self, i: int) -> str:
        """The client id with roster index ``i``."""
        if self.roster_range is not None:
            return f"{self.roster_range[0]}{i:0{self.roster_range[1]}d}"
        return self.roster[i]

    @property
    def seeded(self) -> bool:
        return bool(self.simulation_seed)

    @property
    def M(self) -> int:
        return len(self.nodes)

    @property
    def value_bound(self) -> float:
        """max_j c_j + 8σ_client: the per-client magnitude the headroom check allows for."""
        return max(self.clip_bounds) + NOISE_TAIL * self.sigma_client

    @property
    def encode_bound(self) -> float:
        """The largest |z_ij + η_ij| a client encodes: anything that fits one int64 after scaling.

        A single large noise draw may exceed :attr:`value_bound`; what must not wrap is the sum, whose
        noise is N(0, N·σ_client²) — far inside N·value_bound (a 8·sqrt(N)-sigma event)."""
        return math.ldexp(1.0, 62 - self.frac_bits)

    def clip_vector(self) -> np.ndarray:
        """c_j for every coordinate, shape (d,)."""
        return np.broadcast_to(np.asarray(self.clip_bounds, dtype=np.float64), (self.dimension,))

    def node_index(self, name: str) -> int:
        try:
            return self.nodes.index(name)
        except ValueError:
            raise InvalidJob(f"{name!r} is not a compute node of job {self.job_id}") from None

    def node_gets_seed(self, k: int) -> bool:
        """With seed compression, nodes k ≥ 1 receive 32-byte seeds; node 0 the full masked vector."""
        return self.seed_compressed and k >= 1

    def ledger_entry(self) -> dict:
        """What a client records in its privacy ledger for this job.

        A secure-sum job spends nothing by itself (ε = 0 here): the mechanism that consumes the sum records
        its own guarantee (e.g. the HCB16 ensemble job, with this job's id as ``dca_job_id``).
        ``accounting`` is what the ledger's accountant composes (:mod:`mpdp.accounting`): the Gaussian
        σ_std/Δ₂ (the honest others' noise alone, Thm 1), or the discrete mode's ρ-zCDP with its refusal
        probability."""
        g = self.guarantee
        if self.secure_sum:
            return {"protocol": "dca-secure-sum", "job_id": self.job_id, "mechanism": g.mechanism, "epsilon": 0.0, "delta": 0.0, "purpose": self.purpose, "seeded": self.seeded,
                    "accounting": accounting.no_release()}
        entry = {
            "protocol": "dca",
            "job_id": self.job_id,
            "mechanism": g.mechanism,
            "epsilon": g.epsilon,
            "delta": g.delta,
            "mode": self.mode,
            "purpose": self.purpose,
            "seeded": self.seeded,
            "accounting": accounting.gaussian(self.sigma_std / self.sensitivity) if self.discrete is None
            else accounting.discrete_gaussian(self.discrete.rho, tv=self.discrete.p_fail),
        }
        if self.discrete is not None:
            entry.update(noise=self.noise, rho=self.discrete.rho, sigma2_units=str(self.discrete.sigma2))
        if self.node_noise:
            entry.update(noise_by="compute nodes", colluders=self.colluders)
        return entry

    # -- wire ------------------------------------------------------------------------------
    @classmethod
    def from_spec(cls, job_id: str, spec: dca_pb2.DcaJobSpec) -> "DcaParams":
        if spec.mode not in MODE_NAMES:
            raise InvalidJob("mode must be CORRECTED or PAPER")
        if spec.noise not in NOISE_NAMES:
            raise InvalidJob("noise must be GAUSSIAN or DISCRETE_GAUSSIAN")
        if spec.validate not in VALIDATE_NAMES:
            raise InvalidJob("validate must be VALIDATE_RANGE (the default), VALIDATE_NONE, VALIDATE_L2, VALIDATE_ONE_HOT or VALIDATE_VOTES")
        return cls(
            job_id=job_id,
            dimension=spec.dimension,
            clients=spec.clients,
            max_missing=spec.max_missing,
            epsilon=spec.epsilon,
            delta=spec.delta,
            sensitivity=spec.sensitivity,
            nodes=tuple(spec.compute_nodes),
            mode=MODE_NAMES[spec.mode],
            frac_bits=spec.fractional_bits or (32 if spec.validate == dca_pb2.VALIDATE_NONE else 16),
            clip_bounds=tuple(spec.clip_bounds) or (1.0,),
            seed_compressed=spec.seed_compressed,
            deadline_seconds=spec.deadline_seconds or 600.0,
            simulation_seed=spec.simulation_seed,
            roster=tuple(spec.roster),
            purpose=spec.purpose,
            secure_sum=spec.secure_sum,
            noise=NOISE_NAMES[spec.noise],
            roster_range=(spec.roster_range.prefix, spec.roster_range.digits) if spec.HasField("roster_range") else None,
            validate=VALIDATE_NAMES[spec.validate],
            vote_classes=spec.vote_classes,
            colluders=spec.colluders if spec.HasField("colluders") else None,
        )

    def to_spec(self) -> dca_pb2.DcaJobSpec:
        return dca_pb2.DcaJobSpec(
            dimension=self.dimension,
            clients=self.clients,
            max_missing=self.max_missing,
            epsilon=self.epsilon,
            delta=self.delta,
            sensitivity=self.sensitivity,
            mode=MODE_ENUM[self.mode],
            fractional_bits=self.frac_bits,
            clip_bounds=list(self.clip_bounds),
            compute_nodes=list(self.nodes),
            seed_compressed=self.seed_compressed,
            deadline_seconds=self.deadline_seconds,
            simulation_seed=self.simulation_seed,
            roster=list(self.roster),
            purpose=self.purpose,
            secure_sum=self.secure_sum,
            noise=NOISE_ENUM[self.noise],
            roster_range=dca_pb2.RosterRange(prefix=self.roster_range[0], digits=self.roster_range[1]) if self.roster_range is not None else None,
            validate=VALIDATE_ENUM[self.validate],
            vote_classes=self.vote_classes,
            colluders=self.colluders,
        )


def valid_client_id(cid: str) -> bool:
    """1..256 UTF-8 bytes (at most 4 bytes a character, so up to 64 characters needs no encoding)."""
    n = len(cid)
    return 0 < n <= MAX_CLIENT_ID // 4 or (0 < n and len(cid.encode()) <= MAX_CLIENT_ID)
