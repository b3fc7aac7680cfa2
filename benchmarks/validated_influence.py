"""How far one malicious client moves a validated release, in units of the release's σ_std (the three attacks of
docs/protocols/dca.md, "Validated mode": a DCA sum coordinate, a dp-gd round, a PATE voter).

In a validated job the clients prove their data only and the compute nodes add the noise, so the most an accepted
client can do is use its whole data allowance; anything past it fails its proof. Each attack runs the real machines
in one process (:func:`mpdp.dca.driver.run_job`, seeded so that every honest client's rounding and every node's
noise repeat exactly), twice: once with the attacker, once with the attacker sending zeros (for PATE: the attacker's
honest vote). The difference of the two releases is the attacker's influence, exactly, noise cancelled.

    python benchmarks/validated_influence.py            # prints one JSON object

Attacks:

- ``dca-sum``: a range job (|z_j| ≤ 1, d = 5, N = 12, T = 3, M = 3, ε = 1, δ = 10⁻⁵, Δ₂ = 2, f = 16). "edge": z_0 = c,
  the data bound (accepted); "twice": ỹ_0 = 2c (its second bit decomposition wraps); "huge": its first input element
  reads 10³·c·2^f — both forged with an honest proof of the forged input.
- ``dpgd-round``: round 1 of a validated dp-gd plan (ℓ2 ball of radius n_max·C, 3 parties, M = 3): "edge" puts the
  whole radius into coordinate 0 (accepted); "huge" as above.
- ``pate-voter``: three voters (T = 1), δ = 10⁻⁶, at (C = 3, Q = 200, ε = 2) and (C = 2, Q = 100, ε = 50): one voter
  votes class 0 on every point (its legal maximum: one vote a point); "all-classes" forges a vote for every class of
  every point (C = 2: a vote of 2 on every point), the systematic shift the former noise allowance allowed: rejected,
  so its shift is its honest vote's absence. Reported besides the shift: the labels' accuracy against the queries'
  true classes and the share labelled class 0, honest and attacked, over ``PATE_REPEATS`` unseeded runs each.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np

from mpdp.dca import validation
from mpdp.dca.driver import run_job
from mpdp.dca.params import DcaParams
from mpdp.dpgd.model import Task
from mpdp.dpgd.plan import DpgdPlan
from mpdp.hamm2016 import job as ensemble
from mpdp.hamm2016 import pate
from mpdp.math import field as F
from mpdp.math.drbg import Drbg
from mpdp.messages import dca_pb2 as pb
from mpdp.messages import hamm2016_pb2

NODES = ("n0", "n1", "n2")
PATE_REPEATS = 10


def _forged(params: DcaParams, cid: str, meas: np.ndarray) -> dict[str, pb.ValidatedShare]:
    plan = params.validation
    assert plan is not None
    shares = validation.client_shares(plan, params.job_id, cid, meas.astype(np.uint64), params.M, seeded=params.seed_compressed)
    return {n: pb.ValidatedShare(measurement=s.measurement, proof=s.proof, share_seed=s.share_seed, blind=s.blind, joint_rand_parts=s.joint_rand_parts)
            for n, s in zip(params.nodes, shares)}


def _tamper(cid: str, shares: dict[str, pb.ValidatedShare]):
    def hook(sender, recipient, msg):
        if isinstance(msg, pb.ClientShare) and msg.client_id == cid:
            out = pb.ClientShare(job_id=msg.job_id, client_id=cid)
            out.validated.CopyFrom(shares[recipient.name])
            return out
        return msg

    return hook


def _huge(params: DcaParams) -> np.ndarray:
    plan = params.validation
    assert plan is not None
    meas = validation.encode_input(plan, np.zeros(params.dimension, dtype=np.int64)).astype(np.uint64)
    meas[0] = F.scalar(1000 * plan.data_bound + int(meas[0]))
    return meas


def _twice_range(params: DcaParams) -> np.ndarray:
    plan = params.validation
    assert plan is not None
    pred = plan.circuit.predicates[0]
    meas = validation.encode_input(plan, np.zeros(params.dimension, dtype=np.int64)).astype(np.uint64)
    x = 2 * plan.data_bound + pred.offset
    meas[: pred.bits] = [(x >> j) & 1 for j in range(pred.bits)]
    at = params.dimension * pred.bits
    meas[at : at + pred.bits] = [((x + pred.gap) % (1 << pred.bits) >> j) & 1 for j in range(pred.bits)]
    return meas


def _shift(params: DcaParams, Z: np.ndarray, ids: list[str], attacker: int, z_attack: np.ndarray | None, forged: np.ndarray | None) -> dict:
    """(release with the attack − release with the attacker sending Z[attacker]: zeros, or for votes its honest vote),
    in units of σ_std: max |·| over coordinates."""
    base = run_job(params, Z, Drbg.from_seed("influence"), client_ids=ids, client_mode="machines", record=False)
    att_Z = Z.copy()
    if z_attack is not None:
        att_Z[attacker] = z_attack
    tamper = None if forged is None else _tamper(ids[attacker], _forged(params, ids[attacker], forged))
    att = run_job(params, att_Z, Drbg.from_seed("influence"), client_ids=ids, client_mode="machines", record=False, tamper=tamper)
    assert base.release is not None and att.release is not None, (base.error, att.error)
    diff = np.asarray(att.release.values) - np.asarray(base.release.values)
    return {"accepted": att.release.clients_rejected == 0, "max_shift_sigma_std": float(np.max(np.abs(diff))) / params.sigma_std,
            "max_shift": float(np.max(np.abs(diff))), "sigma_std": params.sigma_std, "data_bound": params.validation.data_bound / 2.0**params.frac_bits}


def dca_sum() -> dict:
    N, D = 12, 5
    prm = DcaParams(job_id="influence-sum", dimension=D, clients=N, max_missing=3, epsilon=1.0, delta=1e-5, sensitivity=2.0, nodes=NODES,
                    frac_bits=16, validate="range", noise="discrete-gaussian", simulation_seed=b"influence")
    ids = [f"client-{i:03d}" for i in range(N)]
    Z = np.random.default_rng(1).uniform(-0.9, 0.9, (N, D))
    Z[0] = 0.0  # the attacker, when it behaves
    edge = np.zeros(D)
    edge[0] = 1.0
    return {"edge": _shift(prm, Z, ids, 0, edge, None), "twice": _shift(prm, Z, ids, 0, None, _twice_range(prm)),
            "huge": _shift(prm, Z, ids, 0, None, _huge(prm))}


def dpgd_round() -> dict:
    rows = 50
    plan = DpgdPlan(Task("binary"), 3, 2.0, 1e-6, rounds=2, total_records=3 * rows, validate="l2")
    ids = ["party-0", "party-1", "party-2"]
    prm = plan.dca_params(1, "influence-dpgd", 3, NODES, records_per_client=rows, max_missing=1, roster=ids, simulation_seed=b"influence")
    radius = prm.clip_bounds[0]
    Z = np.random.default_rng(2).uniform(-1, 1, (3, prm.dimension)) * radius / (2 * math.sqrt(prm.dimension))
    Z[0] = 0.0  # the attacker, when it behaves
    edge = np.zeros(prm.dimension)
    edge[0] = radius
    return {"edge": _shift(prm, Z, ids, 0, edge, None), "huge": _shift(prm, Z, ids, 0, None, _huge(prm))}


def _pate_data(classes: int, queries: int, seed: int):
    g = np.random.default_rng(seed)  # public simulation data
    d = 6
    W = g.normal(size=(classes, d))

    def draw(n):
        X = g.normal(size=(n, d))
        X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
        return X, np.argmax(X @ W.T + 0.3 * g.normal(size=(n, classes)), axis=1)

    return {f"voter-{i}": draw(200) for i in range(3)}, draw(queries)


def pate_voter(C: int, Q: int, epsilon: float) -> dict:
    names = ["voter-0", "voter-1", "voter-2"]
    parties, (X_q, y_q) = _pate_data(C, Q, 3)
    spec = hamm2016_pb2.EnsembleJobSpec(dataset="d", auxiliary="a", method="pate", lam=0.05, epsilon=epsilon, delta=1e-6, queries=Q, max_missing=1,
                                        classes=[str(k) for k in range(C)], parties=names, compute_nodes=list(NODES), simulation_seed=b"influence")
    prm = ensemble.vote_job(spec, "influence-pate", Q)
    votes = np.stack([ensemble.VoterRole(n).vote(spec, *parties[n], X_q) for n in names]).astype(np.float64)
    class0 = np.zeros(Q) if C == 2 else np.zeros(Q * C)  # binary: the class-1 indicator, all 0 = class 0
    if C > 2:
        class0[0::C] = 1.0  # one vote a point, always class 0: the voter's legal maximum
    forged = np.ones(prm.validation.circuit.meas_len, dtype=np.uint64)  # C > 2: every class of every point voted (bits, not one vote a point)
    if C == 2:
        forged[:] = 2  # binary: a vote of 2 on every point (not a bit)
    out = {"class-0-voter": _shift(prm, votes, names, 2, class0, None), "all-classes": _shift(prm, votes, names, 2, None, forged)}
    unseeded = dataclasses.replace(prm, job_id="influence-pate-live", simulation_seed=b"")

    def accuracy(Z: np.ndarray) -> tuple[float, float]:
        rel = run_job(unseeded, Z, Drbg.from_os(), client_ids=names, client_mode="machines", record=False).release
        assert rel is not None
        counts = np.asarray(rel.values)
        labels = pate.noisy_argmax(counts if C == 2 else counts.reshape(Q, C), len(names))
        return float(np.mean(labels == y_q)), float(np.mean(labels == 0))

    attacked = votes.copy()
    attacked[2] = class0
    honest_runs = [accuracy(votes) for _ in range(PATE_REPEATS)]
    attacked_runs = [accuracy(attacked) for _ in range(PATE_REPEATS)]
    out["accuracy_honest"] = [min(a for a, _ in honest_runs), max(a for a, _ in honest_runs)]
    out["accuracy_attacked"] = [min(a for a, _ in attacked_runs), max(a for a, _ in attacked_runs)]
    out["class0_share_attacked"] = [min(b for _, b in attacked_runs), max(b for _, b in attacked_runs)]
    out["class0_share_true"] = float(np.mean(y_q == 0))
    out["classes"], out["queries"], out["epsilon"] = C, Q, epsilon
    return out


def main() -> None:
    print(json.dumps({"dca-sum": dca_sum(), "dpgd-round": dpgd_round(), "pate-voter": [pate_voter(3, 200, 2.0), pate_voter(2, 100, 50.0)]}, indent=1))


if __name__ == "__main__":
    main()
