"""A dp-gd round on the wire (``contribution.proto`` DpgdRound in a StatisticRequest with statistic ``dpgd/round``).

The operator writes the plan's public parameters, the round and its iterate (:func:`round_request`); the party
rebuilds the plan from them (:func:`plan_of`), reads the iterate (:func:`iterate_of`) and checks that the DCA job
it is asked to submit to is that round's and no other (:func:`check_round_job`): labelled ``<job>.r<round>``
(``purpose``), within the plan's R, with the plan's dimension, Δ₂, mode and σ_std. Every failure is a
:class:`ValueError` whose text names the field, never a caller's string (the party answers INVALID_JOB).
"""

from __future__ import annotations

import math

import numpy as np

from mpdp.dca.params import DcaParams
from mpdp.dpgd import accounting
from mpdp.dpgd.model import BINARY, Task
from mpdp.dpgd.plan import ADD_REMOVE, VALIDATE_L2, VALIDATE_NONE, DpgdPlan, round_job_id
from mpdp.messages import common_pb2, contribution_pb2 as pb

STATISTIC = "dpgd/round"
PROTOCOL = "dpgd"  # the ledger entry of the whole job (DpgdPlan.ledger_entry)
ROUND_PROTOCOL = "dpgd-round"  # a zero-charge marker per round: a party contributes to each round once


def round_charge(plan: DpgdPlan, job_id: str, r: int, dca_job_id: str, parties: list[str] | tuple[str, ...], *, seeded: bool) -> tuple[dict, dict]:
    """What a party spends for its shares of round ``r``: the one charge of the whole job (``DpgdPlan.ledger_entry``,
    with the round's parties, sorted; a ledger stores it once and finds it at every later round), then the round's
    zero-charge marker (a second contribution to the round is a replay). The DCA submission spends nothing of its own."""
    entry = plan.ledger_entry(job_id, seeded=seeded)
    entry["parties"] = sorted(parties)  # every round of the job is a sum over these same parties
    marker = {"protocol": ROUND_PROTOCOL, "job_id": round_job_id(job_id, r), "epsilon": 0.0, "delta": 0.0, "dpgd_job_id": job_id,
              "round": r, "dca_job_id": dca_job_id, "purpose": "covered by the dp-gd job's charge"}
    return entry, marker
MODES = {"corrected": common_pb2.CORRECTED, "paper": common_pb2.PAPER}
MODE_NAMES = {v: k for k, v in MODES.items()}
SIGMA_TOLERANCE = 1e-9  # relative: the DCA recomputes σ_std from the same (ε_r, δ, Δ_r)


def round_request(plan: DpgdPlan, job_id: str, r: int, W: np.ndarray) -> pb.DpgdRound:
    """Round r of ``job_id`` at the iterate W (ignored and sent empty in round 0)."""
    if not 0 <= r <= plan.rounds:
        raise ValueError(f"round {r} is not in 0..{plan.rounds}")
    W = np.asarray(W, dtype=np.float64)
    if W.shape != (plan.dimension, plan.width):
        raise ValueError(f"the iterate must be {plan.dimension} × {plan.width}, got {W.shape}")
    return pb.DpgdRound(
        job_id=job_id, round=r, task=plan.task.kind, classes=plan.task.classes, dimension=plan.dimension, epsilon=plan.epsilon, delta=plan.delta,
        lam=plan.lam, rounds=plan.rounds, clip=plan.clip, hessian_share=plan.hessian_share, average_from=plan.average_from, adjacency=plan.adjacency,
        total_records=plan.total_records or 0, mode=MODES[plan.mode], iterate=[] if r == 0 else W.ravel().tolist(),
        unvalidated=not plan.validated,
    )


def plan_of(msg: pb.DpgdRound) -> DpgdPlan:
    """The plan the request describes (every parameter checked by DpgdPlan itself)."""
    if msg.mode not in MODE_NAMES:
        raise ValueError("dpgd.mode must be CORRECTED or PAPER")
    if msg.task == BINARY and msg.classes != 2:
        raise ValueError("dpgd.classes must be 2 for a binary task")
    try:
        task = Task(msg.task, msg.classes)
        return DpgdPlan(
            task, msg.dimension, msg.epsilon, msg.delta, lam=msg.lam, rounds=msg.rounds, clip=msg.clip, hessian_share=msg.hessian_share,
            average_from=msg.average_from, adjacency=msg.adjacency, total_records=None if msg.adjacency == ADD_REMOVE else (msg.total_records or None),
            mode=MODE_NAMES[msg.mode], validate=VALIDATE_NONE if msg.unvalidated else VALIDATE_L2,
        )
    except ValueError as e:
        raise ValueError(f"dpgd: not a valid plan ({_first_words(e)})") from None


def iterate_of(msg: pb.DpgdRound, plan: DpgdPlan) -> np.ndarray:
    """W_r (d × m): zeros in round 0 (which must send none), else exactly d·m finite values."""
    d, m = plan.dimension, plan.width
    if msg.round == 0:
        if len(msg.iterate):
            raise ValueError("dpgd.iterate must be empty in round 0")
        return np.zeros((d, m))
    W = np.asarray(msg.iterate, dtype=np.float64)
    if W.shape != (d * m,):
        raise ValueError(f"dpgd.iterate must hold d·m = {d * m} values, got {W.size}")
    if not np.all(np.isfinite(W)):
        raise ValueError("dpgd.iterate must be finite")
    return W.reshape(d, m)


def check_round_job(plan: DpgdPlan, msg: pb.DpgdRound, params: DcaParams) -> None:
    """The DCA job ``params`` is round ``msg.round`` of ``msg.job_id`` exactly as the plan has it: a validated plan's
    round is validated over the discrete Gaussian with ρ ≤ ρ_r (the validation mode and ℓ2 bound themselves are held
    by :func:`mpdp.contribution.hold_round` through :func:`expected_validation`)."""
    r = msg.round
    if r > plan.rounds:
        raise ValueError(f"round {r} is beyond the plan's {plan.rounds + 1} rounds")
    if params.purpose != round_job_id(msg.job_id, r):
        raise ValueError(f"the DCA job is not labelled as round {r} of this dp-gd job (purpose must be <job>.r{r})")
    s = plan.specs[r]
    if params.dimension != s.dimension:
        raise ValueError(f"the DCA job sums {params.dimension} values, round {r} of the plan sends {s.dimension}")
    if params.mode != plan.mode or params.sensitivity != s.sensitivity:
        raise ValueError(f"the DCA job's mode or Δ₂ is not round {r}'s of the plan")
    if plan.validated:
        if params.secure_sum or params.discrete is None or params.rho > s.rho or params.discrete.p_fail > accounting.TV_ROUND:
            raise ValueError(f"the DCA job's noise is not round {r}'s of the plan (discrete Gaussian, ρ ≤ {s.rho:.6g})")
        return
    if params.secure_sum or not math.isclose(params.sigma_std, s.sigma_std, rel_tol=SIGMA_TOLERANCE, abs_tol=0.0):
        raise ValueError(f"the DCA job's σ_std is not round {r}'s of the plan ({s.sigma_std:.6g})")


def expected_validation(plan: DpgdPlan, r: int, records_per_client: int) -> tuple[str, tuple[float, ...] | None]:
    """(validate mode, clip bounds) round r's DCA job must have: the ℓ2 ball n_max·b_r, or none (bounds not held)."""
    if plan.validated:
        return VALIDATE_L2, (plan.l2_bound(r, max(1, records_per_client)),)
    return VALIDATE_NONE, None


def _first_words(e: Exception) -> str:
    """A plan error names a parameter and a range; it never quotes a caller's string (choices are checked first)."""
    return str(e).split(",")[0][:120]
