"""The public plan of a DP-GD job and the curator's side of it (sans-IO).

A job is R + 1 DCA rounds over the same K parties (the DCA clients):

* **round 0** — each party sends [second moment of its rows (:func:`~mpdp.dpgd.model.second_moment`),
  Σ clip_C ∇ℓ_i(0), and, under add/remove adjacency, a·n_p (its row count, a = 1/2)]. The curator forms Böhning's
  Hessian bound P = A ⊗ Ŝ/N̂ + λI (Ŝ: the noisy second moment with negative eigenvalues clipped to 0) and takes
  the first step W₁ = −P⁻¹(ĝ₀/N̂). With R = 0 this is the whole job: the one-round *functional mechanism*
  (a noisy quadratic upper bound of the loss, minimised in closed form).
* **rounds 1..R** — each party sends Σ clip_C ∇ℓ_i(W_t) at the published iterate W_t; the curator steps
  W_{t+1} = W_t − P⁻¹(ĝ_t/N̂ + λW_t) (a majorise–minimise step: P bounds the Hessian everywhere, so no step size
  is tuned).
* the model is the average of the last ⌈(R+1)·(1 − average_from)⌉ iterates (noise averages out over them).

Adjacency and sensitivities (one row of one party added/removed — ``add-remove``, N unknown, estimated from the
round-0 count — or replaced — ``replace``, N public): with ‖x‖ ≤ 1 a row moves the second moment by at most 1
(‖xxᵀ‖_F = ‖x‖²), the clipped gradient sum by C and the count by a, so Δ₀ = √(1 + C² + a²) and Δ_t = C
(add/remove); replacing a row at most doubles each part: Δ₀ = 2√(1 + C²), Δ_t = 2C. Every round's noise has
σ_r = Δ_r/μ_r with μ₀² = h·μ² and μ_t² = (1 − h)·μ²/R, so the job is μ-GDP with μ from (ε, δ)
(:mod:`mpdp.dpgd.accounting`), whatever the DCA's T. Each round's DCA job is built from :class:`DcaParams` with
the (ε_r, δ) whose σ_std is Δ_r/μ_r; the guarantee is recomputed from the σ_std the DCA really uses.

**Validated rounds** (``validate="l2"``, the federation's default): every party proves on its secret shares that its
round vector lies in the ℓ2 ball of radius n_max·b_r (n_max the public row bound, b_r = √(1 + C² [+ a²]) in round 0 —
‖second moment‖_F ≤ n_p and the count a·n_p — and C after), so a malicious party moves a round's sum by at most that
much (:mod:`mpdp.dca.validation`). The parties add no noise: the compute nodes add the DCA's distributed discrete
Gaussian to their partial sums (:mod:`mpdp.dca.discrete`, "Node noise"): the job's budget is ρ-zCDP (:func:`~mpdp.dpgd.accounting.zcdp_budget`, δ including each round's refusal
probability ≤ TV_ROUND), split ρ₀ = h·ρ, ρ_t = (1 − h)·ρ/R, and each round's DCA job must have ρ ≤ ρ_r (checked
when it is built and by every party).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from mpdp import accounting as ledger_accounting, limits
from mpdp.dca.errors import InvalidJob
from mpdp.dca.params import DcaParams
from mpdp.dp.mechanisms import Guarantee
from mpdp.dpgd import accounting
from mpdp.dpgd.model import Preconditioner, Task, gradient_sum, party_rows, second_moment, unpack_second_moment

REPLACE, ADD_REMOVE = "replace", "add-remove"
VALIDATE_L2, VALIDATE_NONE = "l2", "none"
VALIDATES = (VALIDATE_L2, VALIDATE_NONE)
VALIDATED_MECHANISM = "DP gradient descent over validated DCA (distributed discrete Gaussian rounds composed in zCDP)"
VALIDATED_FRAC_BITS = 16  # the largest f a validated round tries (the ℓ2 circuit needs d·(n_max·b_r·2^f)² < p)
ADJACENCIES = (REPLACE, ADD_REMOVE)
COUNT_WEIGHT = 0.5  # a: the count coordinate of round 0 (add/remove only)
MU_SAFETY = 1.0 - 1e-9  # plan a hair under the target μ so that the recomputed ε never exceeds the one asked for
MECHANISM = "DP gradient descent over DCA (Gaussian rounds composed in zCDP/GDP)"
TRUST_MODEL = (
    "honest-but-curious parties, compute nodes and curator; at most T parties collude or drop out in any round; "
    "at least one compute node is honest (the compute nodes do not all collude); the curator sees only the noisy "
    "sums of each round and publishes every iterate; channels are mutual TLS"
)
VALIDATED_TRUST_MODEL = (
    "parties may be malicious: each round vector is proven on its shares to lie in the public ℓ2 ball (n_max·b_r) "
    "(fully linear proof, soundness error ≤ 2^-60), an invalid one is dropped like a dropout; parties add no noise: "
    "each compute node adds its own discrete Gaussian draw to its partial sum (the guarantee counts M − c of them; c "
    "unset = M − 1); at most T parties drop out or are rejected in any round; honest-but-curious compute nodes and "
    "curator; at least one compute node is honest; the curator sees only the noisy sums of each round and publishes "
    "every iterate; channels are mutual TLS"
)

# Public defaults, fixed on a simulated data set (mpdp.dpgd.tuning), never on the data they are used with.
DEFAULT_ROUNDS = 4
DEFAULT_CLIP = 0.5
DEFAULT_HESSIAN_SHARE = 0.5
DEFAULT_AVERAGE_FROM = 0.0
# On the simulated set (N = 30 000) the one-round functional mechanism (R = 0) beats R = 4 at ε ≥ 0.5 and loses at
# ε ≤ 0.2; the switch is set between them, on N·ε (the signal-to-noise ratio of the sums), never on private data.
FUNCTIONAL_SWITCH = 10_000.0


def auto_rounds(epsilon: float, records: int) -> int:
    """The public choice of R: 0 (functional mechanism) when N·ε ≥ 10⁴, else :data:`DEFAULT_ROUNDS`."""
    return 0 if epsilon * records >= FUNCTIONAL_SWITCH else DEFAULT_ROUNDS


@dataclass(frozen=True)
class RoundSpec:
    """Round r of the plan: vector length, Δ₂, the DCA's (ε_r, δ) and the σ_std that follows."""

    index: int
    dimension: int
    sensitivity: float
    epsilon: float
    delta: float
    sigma_std: float  # validated: the Gaussian σ with the same ρ, Δ_r/√(2ρ_r) (for reading only)
    purpose: str
    rho: float = 0.0  # validated: the round's zCDP budget; its DCA job must have ρ ≤ rho


@dataclass(frozen=True)
class DpgdPlan:
    """Public hyperparameters of one job. ``total_records`` N is public under ``replace`` and must be None under
    ``add-remove`` (then N̂ comes from round 0)."""

    task: Task
    dimension: int
    epsilon: float
    delta: float
    lam: float = 1e-3
    rounds: int = DEFAULT_ROUNDS
    clip: float = DEFAULT_CLIP
    hessian_share: float = DEFAULT_HESSIAN_SHARE
    average_from: float = DEFAULT_AVERAGE_FROM
    adjacency: str = REPLACE
    total_records: int | None = None
    mode: str = "corrected"
    validate: str = VALIDATE_NONE  # "l2": validated rounds over the discrete Gaussian (see the module's text)
    specs: tuple[RoundSpec, ...] = field(init=False)
    guarantee: Guarantee = field(init=False)
    mu: float = field(init=False)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon > 0) or not 0 < self.delta < 1:
            raise ValueError(f"need ε > 0 and 0 < δ < 1, got ({self.epsilon}, {self.delta})")
        if not 1 <= self.dimension <= 1024:
            raise ValueError(f"dimension must be 1..1024 (round 0 sends d(d+1)/2 entries), got {self.dimension}")
        if not (0 <= self.rounds <= 100):
            raise ValueError(f"rounds must be 0..100, got {self.rounds}")
        if not (math.isfinite(self.clip) and self.clip > 0):
            raise ValueError(f"clip must be finite and positive, got {self.clip}")
        if not (math.isfinite(self.lam) and self.lam > 0):
            raise ValueError(f"lambda must be finite and positive, got {self.lam}")
        if not 0 <= self.average_from < 1:
            raise ValueError(f"average_from must be in [0, 1), got {self.average_from}")
        if self.adjacency not in ADJACENCIES:
            raise ValueError(f"adjacency must be one of {ADJACENCIES}, got {self.adjacency!r}")
        if (self.adjacency == REPLACE) != (self.total_records is not None):
            raise ValueError("replace adjacency needs the public total_records N; add-remove must not have one")
        if self.total_records is not None and self.total_records < 1:
            raise ValueError("total_records must be positive")
        h = 1.0 if self.rounds == 0 else self.hessian_share
        if not 0 < h <= 1 or (self.rounds > 0 and h >= 1):
            raise ValueError(f"hessian_share must be in (0, 1) when rounds > 0, got {self.hessian_share}")
        if self.validate not in VALIDATES:
            raise ValueError(f"validate must be one of {VALIDATES}, got {self.validate!r}")
        if self.validate == VALIDATE_L2:
            if self.mode != "corrected":
                raise ValueError("validated rounds use the discrete Gaussian's own calibration: leave mode at corrected")
            self._init_validated(h)
            return
        mu = accounting.gdp_mu(self.epsilon, self.delta) * MU_SAFETY
        mus = [math.sqrt(h) * mu] + ([math.sqrt((1 - h) / self.rounds) * mu] * self.rounds if self.rounds else [])
        specs = []
        for r, mu_r in enumerate(mus):
            sens = self.sensitivity(r)
            eps_r = accounting.gdp_epsilon(mu_r, self.delta)
            sigma = _sigma_std(self.mode, sens, eps_r, self.delta)
            specs.append(RoundSpec(r, self.round_dimension(r), sens, eps_r, self.delta, sigma, f"dpgd round {r} of {self.rounds}"))
        object.__setattr__(self, "specs", tuple(specs))
        real_mu = accounting.compose([s.sensitivity / s.sigma_std for s in specs])
        object.__setattr__(self, "mu", real_mu)
        real_eps = accounting.gdp_epsilon(real_mu, self.delta)
        statement = (
            f"({real_eps:.6g}, {self.delta:.3g})-DP for the released model and every published iterate; "
            f"adjacency = one row of one party {'replaced (N public)' if self.adjacency == REPLACE else 'added or removed'}; "
            f"{self.rounds + 1} Gaussian rounds with ℓ2-sensitivities {', '.join(f'{s.sensitivity:.4g}' for s in specs[:2])}{', …' if len(specs) > 2 else ''} "
            f"and σ_std {', '.join(f'{s.sigma_std:.4g}' for s in specs[:2])}{', …' if len(specs) > 2 else ''}; composition: ρ = {accounting.zcdp_rho(real_mu):.4g}-zCDP "
            f"(μ = {real_mu:.4g}-GDP), converted to (ε, δ) exactly; holds when at most T parties collude or drop out "
            f"in each round and at least one compute node is honest; the parties' round vectors are not proven valid (validate none): "
            f"a malicious party can move a round's sum arbitrarily"
        )
        object.__setattr__(self, "guarantee", Guarantee(MECHANISM, real_eps, self.delta, specs[-1].sensitivity, "l2", statement))

    def _init_validated(self, h: float) -> None:
        """ρ-zCDP budget for the whole job, split like μ² above; each round's (ε_r, δ) is the one its ρ_r converts
        to, which the DCA's discrete calibration turns into a σ² with ρ ≤ ρ_r (checked in :meth:`dca_params`)."""
        tv = (self.rounds + 1) * accounting.TV_ROUND
        rho = accounting.zcdp_budget(self.epsilon, self.delta, tv) * MU_SAFETY
        rhos = [h * rho] + ([(1 - h) * rho / self.rounds] * self.rounds if self.rounds else [])
        specs = []
        for r, rho_r in enumerate(rhos):
            sens = self.sensitivity(r)
            eps_r = accounting.zcdp_epsilon(rho_r, self.delta)
            specs.append(RoundSpec(r, self.round_dimension(r), sens, eps_r, self.delta, sens / math.sqrt(2 * rho_r), f"dpgd round {r} of {self.rounds}", rho_r))
        object.__setattr__(self, "specs", tuple(specs))
        total = math.fsum(s.rho for s in specs)
        object.__setattr__(self, "mu", math.sqrt(2 * total))
        real_eps = accounting.zcdp_epsilon(total, self.delta - (1 + math.exp(self.epsilon)) * tv)
        if real_eps > self.epsilon:
            raise ValueError(f"the validated rounds' budget gives ε = {real_eps:.6g} > {self.epsilon:g}")
        statement = (
            f"({real_eps:.6g}, {self.delta:.3g})-DP for the released model and every published iterate; "
            f"adjacency = one row of one party {'replaced (N public)' if self.adjacency == REPLACE else 'added or removed'}; "
            f"{self.rounds + 1} validated rounds of the distributed discrete Gaussian (Kairouz, Liu & Steinke 2021, Prop. 14) with "
            f"ℓ2-sensitivities {', '.join(f'{s.sensitivity:.4g}' for s in specs[:2])}{', …' if len(specs) > 2 else ''}, each ρ_r-zCDP with "
            f"ρ_r ≤ {', '.join(f'{s.rho:.4g}' for s in specs[:2])}{', …' if len(specs) > 2 else ''}; composition: ρ = {total:.4g}-zCDP, "
            f"to (ε, δ) by Canonne, Kamath & Steinke 2020 (Prop. 12), δ including (1 + e^ε)·{tv:.3g} for noise-caused refusals; every "
            "party's round vector is proven on its shares to lie in the public ℓ2 ball n_max·b_r (fully linear proof, soundness error "
            "≤ 2^-60), invalid ones are dropped like dropouts; the parties add no noise: the compute nodes add it (each round's "
            "ρ_r counts the noise of the M − c nodes that do not pool theirs with the curator, c unset = M − 1), so no party "
            "can omit or inflate it and dropouts remove none; holds when at most c compute nodes reveal or omit their noise and "
            "at least one compute node is honest"
        )
        object.__setattr__(self, "guarantee", Guarantee(VALIDATED_MECHANISM, real_eps, self.delta, specs[-1].sensitivity, "l2", statement))

    @property
    def validated(self) -> bool:
        return self.validate == VALIDATE_L2

    @property
    def trust_model(self) -> str:
        return VALIDATED_TRUST_MODEL if self.validated else TRUST_MODEL

    def l2_factor(self, r: int) -> float:
        """b_r: one row's most ℓ2 norm in round r's vector (rows on the unit ball): √(1 + C² [+ a²]) in round 0
        (‖x xᵀ‖_F = ‖x‖² ≤ 1, the clipped gradient ≤ C, the count a), C after."""
        if r == 0:
            return math.sqrt(1.0 + self.clip**2 + (COUNT_WEIGHT**2 if self.adjacency == ADD_REMOVE else 0.0))
        return self.clip

    def l2_bound(self, r: int, records_per_client: int) -> float:
        """The radius a validated round proves each party's vector within: n_max·b_r."""
        return float(records_per_client) * self.l2_factor(r)

    # -- public shapes ----------------------------------------------------------------------
    @property
    def width(self) -> int:
        return self.task.width

    @property
    def moment_length(self) -> int:
        return self.dimension * (self.dimension + 1) // 2

    def round_dimension(self, r: int) -> int:
        dm = self.dimension * self.width
        if r == 0:
            return self.moment_length + dm + (1 if self.adjacency == ADD_REMOVE else 0)
        return dm

    def sensitivity(self, r: int) -> float:
        if r == 0:
            if self.adjacency == ADD_REMOVE:
                return math.sqrt(1.0 + self.clip**2 + COUNT_WEIGHT**2)
            return 2.0 * math.sqrt(1.0 + self.clip**2)
        return self.clip if self.adjacency == ADD_REMOVE else 2.0 * self.clip

    def dca_params(
        self,
        r: int,
        job_id: str,
        clients: int,
        nodes: Sequence[str],
        *,
        records_per_client: int,
        max_missing: int = 0,
        simulation_seed: bytes = b"",
        roster: Sequence[str] = (),
        deadline_seconds: float = 600.0,
        frac_bits: int = 32,
        purpose: str = "",
    ) -> DcaParams:
        """Round r's DCA job: a party's vector coordinates are bounded by records_per_client·max(1, C).
        ``purpose`` labels the DCA job (a federation job names the round: ``<dp-gd job>.r<r>``)."""
        s = self.specs[r]
        if self.validated:
            return self._validated_params(r, job_id, clients, nodes, records_per_client=records_per_client, max_missing=max_missing,
                                          simulation_seed=simulation_seed, roster=roster, deadline_seconds=deadline_seconds, purpose=purpose)
        params = DcaParams(
            job_id=job_id,
            dimension=s.dimension,
            clients=clients,
            max_missing=max_missing,
            epsilon=s.epsilon,
            delta=s.delta,
            sensitivity=s.sensitivity,
            nodes=tuple(nodes),
            mode=self.mode,
            frac_bits=frac_bits,
            clip_bounds=(float(records_per_client) * max(1.0, self.clip),),
            simulation_seed=simulation_seed,
            roster=tuple(roster),
            purpose=purpose or s.purpose,
            deadline_seconds=deadline_seconds,
        )
        if params.sigma_std < s.sigma_std * (1 - 1e-9):
            raise ValueError(f"round {r}: the DCA's σ_std {params.sigma_std} is below the plan's {s.sigma_std}")
        return params

    def _validated_params(self, r: int, job_id: str, clients: int, nodes: Sequence[str], *, records_per_client: int, max_missing: int,
                          simulation_seed: bytes, roster: Sequence[str], deadline_seconds: float, purpose: str) -> DcaParams:
        """Round r's validated DCA job: ℓ2 ball n_max·b_r, discrete Gaussian with ρ ≤ ρ_r, the largest f ≤ 16 whose
        circuit fits Field64."""
        s = self.specs[r]
        last: Exception | None = None
        for f in range(VALIDATED_FRAC_BITS, limits.MIN_FRAC_BITS - 1, -1):
            eps = s.epsilon
            for _ in range(20):  # the discrete calibration lands a hair over ρ_r at worst (floating point): ask for less
                try:
                    params = DcaParams(
                        job_id=job_id, dimension=s.dimension, clients=clients, max_missing=max_missing, epsilon=eps, delta=s.delta,
                        sensitivity=s.sensitivity, nodes=tuple(nodes), frac_bits=f, clip_bounds=(self.l2_bound(r, records_per_client),),
                        simulation_seed=simulation_seed, roster=tuple(roster), purpose=purpose or s.purpose, deadline_seconds=deadline_seconds,
                        noise="discrete-gaussian", validate=VALIDATE_L2,
                    )
                except InvalidJob as e:
                    last = e
                    break
                if params.rho <= s.rho and params.discrete is not None and params.discrete.p_fail <= accounting.TV_ROUND:
                    return params
                eps *= 1 - 1e-6
            else:
                raise ValueError(f"round {r}: no discrete Gaussian job meets ρ ≤ {s.rho:.6g}")
        raise ValueError(f"round {r}: no validated DCA job fits ({last})")

    def ledger_entry(self, job_id: str, *, seeded: bool = False) -> dict:
        """The one charge of the whole job (every round's release is covered by it); the accountant composes its
        R + 1 Gaussian rounds (σ_std/Δ_r each, no subsampling)."""
        g = self.guarantee
        return {
            "protocol": "dpgd",
            "job_id": job_id,
            "mechanism": g.mechanism,
            "epsilon": g.epsilon,
            "delta": g.delta,
            "rounds": self.rounds + 1,
            "purpose": f"dp-gd {self.task.kind} model",
            "seeded": seeded,
            "plan": self.public(),
            "accounting": ledger_accounting.gaussian([s.sigma_std / s.sensitivity for s in self.specs]) if not self.validated
            else ledger_accounting.discrete_gaussian(math.fsum(s.rho for s in self.specs), tv=(self.rounds + 1) * accounting.TV_ROUND),
        }

    def public(self) -> dict:
        return {
            "task": self.task.kind,
            "classes": self.task.classes,
            "dimension": self.dimension,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "lambda": self.lam,
            "rounds": self.rounds,
            "clip": self.clip,
            "hessian_share": self.hessian_share,
            "average_from": self.average_from,
            "adjacency": self.adjacency,
            "total_records": self.total_records,
            "mode": self.mode,
            "validate": self.validate,
        }


def _sigma_std(mode: str, sensitivity: float, epsilon: float, delta: float) -> float:
    """σ_std as the DCA computes it (through DcaParams' public API: a throw-away two-client job)."""
    p = DcaParams(job_id="plan", dimension=1, clients=2, max_missing=0, epsilon=epsilon, delta=delta, sensitivity=sensitivity, nodes=("a", "b"), mode=mode)
    return p.sigma_std


def round_job_id(job_id: str, r: int) -> str:
    """The name of round r of dp-gd job ``job_id``: the DCA job's id in memory, its ``purpose`` in a federation."""
    return f"{job_id}.r{r}"


def party_vector(plan: DpgdPlan, r: int, W: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """What one party contributes to round r at the published iterate W (rows must be on the unit ball)."""
    if r == 0:
        parts = [second_moment(X), gradient_sum(plan.task, np.zeros((plan.dimension, plan.width)), X, y, plan.clip)]
        if plan.adjacency == ADD_REMOVE:
            parts.append(np.array([COUNT_WEIGHT * X.shape[0]]))
        return np.concatenate(parts)
    return gradient_sum(plan.task, W, X, y, plan.clip)


def party_vector_terms(plan: DpgdPlan, r: int, W: np.ndarray, values: np.ndarray | None, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, int]:
    """One batch's part of :func:`party_vector` (its sums over rows, without the count), and its row count. The batch
    is raw: its rows go onto the unit ball and its labels are mapped here (:func:`party_rows` with the dataset's
    distinct labels ``values``), so batches of one dataset map alike."""
    Xp, yp = party_rows(plan.task, X, y, values)
    if r == 0:
        return np.concatenate([second_moment(Xp), gradient_sum(plan.task, np.zeros((plan.dimension, plan.width)), Xp, yp, plan.clip)]), len(yp)
    return gradient_sum(plan.task, W, Xp, yp, plan.clip), len(yp)


def party_vector_of(plan: DpgdPlan, r: int, sums: np.ndarray, n: int) -> np.ndarray:
    """:func:`party_vector` from the batches' summed :func:`party_vector_terms`: round 0 appends the count
    coordinate (add/remove). Equal to the in-memory vector up to the order of floating-point additions
    (docs/data-sources.md, "Bounded memory")."""
    if r == 0 and plan.adjacency == ADD_REMOVE:
        return np.concatenate([sums, np.array([COUNT_WEIGHT * n])])
    return sums


class DpgdCurator:
    """The curator's steps: publish W_t, take round t's noisy sum, step. Sans-IO; only noisy sums go in."""

    def __init__(self, plan: DpgdPlan) -> None:
        self.plan = plan
        self.round = 0
        d, m = plan.dimension, plan.width
        self.W = np.zeros((d, m))
        self.iterates: list[np.ndarray] = []
        self.records: float | None = None
        self.pre: Preconditioner | None = None

    @property
    def done(self) -> bool:
        return self.round > self.plan.rounds

    def iterate(self) -> np.ndarray:
        """W_t the parties evaluate their gradients at in the next round (zeros for round 0)."""
        return self.W.copy()

    def take(self, values: Sequence[float] | np.ndarray) -> np.ndarray:
        """Round t's released sum → W_{t+1}."""
        if self.done:
            raise ValueError("the job has no more rounds")
        plan = self.plan
        d, m = plan.dimension, plan.width
        v = np.asarray(values, dtype=np.float64)
        if v.shape != (plan.round_dimension(self.round),) or not np.all(np.isfinite(v)):
            raise ValueError(f"round {self.round} releases {plan.round_dimension(self.round)} finite values, got {v.shape}")
        if self.round == 0:
            L = plan.moment_length
            if plan.adjacency == ADD_REMOVE:
                self.records = max(1.0, float(v[-1]) / COUNT_WEIGHT)
            else:
                self.records = float(plan.total_records)  # type: ignore[arg-type]
            S = unpack_second_moment(v[:L], d) / self.records
            self.pre = Preconditioner(plan.task, S, plan.lam)
            G = v[L : L + d * m].reshape(d, m) / self.records
        else:
            G = v.reshape(d, m) / self.records + plan.lam * self.W  # type: ignore[operator]
        self.W = self.W - self.pre.solve(G)  # type: ignore[union-attr]
        self.iterates.append(self.W.copy())
        self.round += 1
        return self.iterate()

    def model(self) -> np.ndarray:
        """The released model: the average of the last iterates."""
        if not self.done:
            raise ValueError("the job has rounds left")
        k = int(math.floor(len(self.iterates) * self.plan.average_from))
        return np.mean(np.stack(self.iterates[k:]), axis=0)


# -- the party's side over a configured dataset ---------------------------------------------------------------------
def dpgd_contribution(src: Any, name: str, plan: DpgdPlan, r: int, W: np.ndarray, records_limit: int) -> np.ndarray:
    """A DP-GD round's contribution (:func:`party_vector`) over the dataset's batches (``src``: a
    :class:`mpdp.data.dataset.DatasetSource`; :mod:`mpdp.data.engine` reduces them)."""
    from functools import partial

    from mpdp.data.dataset import DoesNotFit, open_rows, require_rows
    from mpdp.data.engine import reducer

    rows = open_rows(src, name=name)
    if rows.dimension != plan.dimension:
        raise DoesNotFit("the dataset's feature count is not the plan's dimension", f"{rows.dimension} features, the plan {plan.dimension}")
    total, n = reducer(src, rows)(partial(party_vector_terms, plan, r, W, rows.label_values()))
    require_rows(int(n), records_limit, "records_per_client")
    return party_vector_of(plan, r, np.asarray(total), int(n))
