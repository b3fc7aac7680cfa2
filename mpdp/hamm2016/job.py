"""The HCB16 ensemble as a federation job without a trusted collector (ours: the paper trusts a collector
with the local classifiers; a secure sum of the votes removes it).

Roles (network-free; ``services/`` only moves their messages):

* :class:`VoterRole` — party P_i: trains its local classifier h_i on its own records, votes h_i(x_j) on every
  public auxiliary point and turns the votes into its DCA vector (:func:`~mpdp.hamm2016.labels.party_votes`).
  The vector goes to the compute nodes as additive shares of a *secure-sum* DCA job (no noise; dca.proto
  ``DcaJobSpec.secure_sum``), so no node and not Charlie ever sees it.
* :class:`CuratorRole` — Charlie, ASK_VOTES → AWAIT_VOTE_SUM → RELEASED (or FAILED): asks every voter, takes
  their receipts or failures (at most T may fail), closes the vote sum, and from the summed vote counts (the only
  vote data it receives) trains the global classifier on majority votes (Alg. 1) or soft labels (Alg. 2) and adds
  the output noise (:func:`curator_release` → :func:`~mpdp.hamm2016.mechanism.release_global`). Only
  w_p = w_s + η leaves the curator.

:func:`run_inmemory` runs the same roles with the in-memory DCA driver (tests, simulations); over sockets the
services do the same steps, and for the same simulation seed both give the same w_p bit for bit.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from mpdp import accounting, limits
from mpdp.data.dataset import DoesNotFit
from mpdp.dca.errors import InvalidJob
from mpdp.dca.params import DcaParams
from mpdp.dp.mechanisms import Guarantee
from mpdp.hamm2016 import pate
from mpdp.hamm2016.erm import DEFAULT_TOL, fit_soft
from mpdp.hamm2016.labels import one_hot, party_votes, vote_counts
from mpdp.hamm2016.local import fit_local
from mpdp.hamm2016.mechanism import EnsembleParams, check_aux_rows, release_global
from mpdp.math.drbg import Drbg
from mpdp.messages import common_pb2, dca_pb2, hamm2016_pb2 as pb
from mpdp.protocol import CURATOR, FAILED, LocalProtocolError, failure_problem, Machine, Peer, Problem, ProtocolError, Publish, RemoteProtocolError, Send, row

METHODS = ("soft", "vote", "pate")
PATE = "pate"
PATE_FRAC_BITS = 16  # the noisy counts' grid 2^-16: far below σ (≥ 1 count), no headroom concern for M ≤ 256
DEFAULT_DEADLINE = 300.0
AUX_CHUNK_ROWS = 2048
MAX_AUX_ROWS = limits.MAX_AUX_ROWS
MAX_CLASSES = limits.MAX_CLASSES
MAX_VOTE_DIMENSION = 1 << 20  # the DCA's largest vector (mpdp.dca.params.MAX_DIMENSION)
MAX_MULTICLASS_PARAMETERS = 4096  # (C·d)² Hessian: 128 MiB
VOTE_VALIDATION = "votes"  # per point one vote: C class bits summing to 1 (binary: the class-1 bit), mpdp.math.flp.VoteBlocks
MAX_VALIDATED_VOTES = limits.MAX_VALIDATED_DIMENSION
VALIDATED_VOTES = (
    " Every voter proves on its secret shares that its vote vector is one vote per auxiliary point (each entry 0 or 1, "
    "and for C > 2 classes each point's C entries summing to 1; fully linear proof, soundness error ≤ 2^-60); an invalid "
    "vote vector (two-hot, empty, out of range) is dropped like a missing voter and counted, never named. A malicious voter "
    "therefore casts at most one vote per point, for a class of its choice, whatever its software does."
)
TRUST_MODEL = (
    "honest-but-curious parties, compute nodes and curator; at least one compute node does not collude with the curator. "
    "The curator sees the public auxiliary features, the summed vote counts per auxiliary point and the number of voters "
    "included; never a party's classifier, its votes or its dataset size. Compute nodes see uniformly random shares only. "
    "The published w_p = w_s + η is ε-DP with one whole party as the privacy unit (Thm 1 / Thm 3; Sec. 4.5 with protect_aux)."
)
TRUST_MODEL_PATE = (
    "honest-but-curious parties, compute nodes and curator; at least one compute node does not collude with the curator; "
    "at most T voters drop out or reveal their noise. Every voter adds its share of Gaussian noise to its vote vector inside "
    "the DCA sum (DCA Thm 1: the N − T − 1 honest others' shares alone reach σ²), so the curator sees only noisy vote counts "
    "per queried auxiliary point and the number of voters included; never a party's classifier, its votes, its dataset size "
    "or an exact count. The labels are the noisy argmax (GNMax) and the published model is trained on them: post-processing "
    "of an (ε, δ)-DP release with one whole party as the privacy unit."
)


class EnsembleJobError(ValueError):
    """The job cannot run as asked; the message names the field or the party."""


class RecordsDoNotFit(EnsembleJobError, DoesNotFit):
    """A voter's records do not fit the job (its classes, the auxiliary data's dimension). ``str()`` names the job's
    public parameter only, for the voter's refusal; ``private`` adds what was read from the records (its own log)."""


# ---------------------------------------------------------------- the job's public parameters


def validate_spec(spec: pb.EnsembleJobSpec) -> None:
    """Everything that can be checked before any data is touched (raises EnsembleJobError).

    Field ranges, ids and distinct names come from :mod:`mpdp.limits`; the rest relates fields."""
    try:
        limits.check_ensemble_job_spec(spec)
    except limits.SpecError as e:
        raise EnsembleJobError(str(e)) from None
    if not spec.max_missing + 2 <= len(spec.parties):
        raise EnsembleJobError(f"max_missing T = {spec.max_missing} leaves fewer than 2 voters of {len(spec.parties)}")
    if spec.method == PATE:
        if not 0 < spec.delta < 1:
            raise EnsembleJobError(f"method pate needs delta in (0, 1) (its guarantee is (ε, δ)-DP), got {spec.delta!r}")
        if spec.protect_aux:
            raise EnsembleJobError("method pate labels public auxiliary points; protect_aux applies to soft/vote only")
    elif spec.delta or spec.queries:
        raise EnsembleJobError(f"delta and queries belong to method pate; method {spec.method} is pure ε-DP over all auxiliary points")

def check_size(spec: pb.EnsembleJobSpec, X_aux: np.ndarray) -> None:
    """Refuse, before any party votes, a job whose vote vector or global fit would not fit in memory."""
    n, d = X_aux.shape
    C = len(spec.classes)
    if vote_dimension(n, C) > MAX_VOTE_DIMENSION:
        raise EnsembleJobError(f"N·C = {n}·{C} vote entries per party exceed {MAX_VOTE_DIMENSION}; use fewer auxiliary rows")
    if validated(spec) and vote_dimension(n, C) > MAX_VALIDATED_VOTES:
        raise EnsembleJobError(f"validated votes hold at most {MAX_VALIDATED_VOTES} entries, N·C = {n}·{C}; use fewer auxiliary rows (pate: queries) "
                               "or take the votes unvalidated")
    if C > 2 and C * d > MAX_MULTICLASS_PARAMETERS:
        raise EnsembleJobError(f"C·d = {C}·{d} parameters exceed {MAX_MULTICLASS_PARAMETERS} (the exact Newton fit needs a (C·d)² Hessian)")


def vote_dimension(n_aux: int, classes: int) -> int:
    """Length of a party's vote vector: N (binary: indicator of class 1) or N·C (one-hot)."""
    return n_aux if classes == 2 else n_aux * classes


def pate_sensitivity(n_aux: int, classes: int) -> float:
    """Δ₂ of a voter's whole vote vector over Q = n_aux queried points: √Q·Δ (Δ = 1 binary, √2 one-hot multiclass).

    One whole party is the privacy unit: its data, hence its classifier, may change and with it every vote; per
    point its entry moves by at most 1 (binary n_j1) or its one-hot row by √2 (multiclass)."""
    return math.sqrt(n_aux) * pate.query_sensitivity(classes)


def pate_queries(spec: pb.EnsembleJobSpec, X_aux: np.ndarray) -> np.ndarray:
    """The auxiliary points a pate job queries (public): the distinct rows of the public auxiliary set, or a
    uniformly random subset of Q of them (a public choice: the OS CSPRNG, or the simulation seed in test mode).
    Each distinct point costs one query, so duplicates are queried once."""
    X = check_auxiliary(X_aux)
    _, first = np.unique(X, axis=0, return_index=True)
    first = np.sort(first)
    if spec.queries and spec.queries < first.size:
        rng = Drbg.from_seed(spec.simulation_seed).child("hamm2016/queries") if spec.simulation_seed else Drbg.from_os()
        first = np.sort(first[np.asarray(rng.permutation(first.size)[: spec.queries], dtype=np.int64)])
    return np.ascontiguousarray(X[first])


def validated(spec: pb.EnsembleJobSpec) -> bool:
    """Whether the vote sum proves every vote vector valid (the default; ``unvalidated`` opts out)."""
    return not spec.unvalidated


def trust_model(spec: pb.EnsembleJobSpec) -> str:
    base = TRUST_MODEL_PATE if spec.method == PATE else TRUST_MODEL
    if not validated(spec):
        return base
    return base.replace("honest-but-curious parties, compute nodes", "parties whose vote vectors are proven valid (possibly malicious), honest-but-curious compute nodes", 1) + VALIDATED_VOTES


def vote_job(spec: pb.EnsembleJobSpec, job_id: str, n_aux: int) -> DcaParams:
    """The DCA job that adds up the parties' vote vectors (entries 0/1, so clip bound 1).

    soft/vote: a secure sum (no noise; the curator's output perturbation is the mechanism). pate: a DCA Gaussian
    job with Δ₂ = √Q·Δ (:func:`pate_sensitivity`) at the job's (ε, δ): every voter adds N(0, σ_std²/(M − T − 1))
    per entry (Thm 1), so the sum the curator receives is already (ε, δ)-DP.

    Validated (the default): every vote vector is proven on its shares to be one vote per point
    (:data:`VOTE_VALIDATION`: C bits summing to 1 per point, the class-1 bit for C = 2); pate's noise is then the
    distributed discrete Gaussian, added by the compute nodes to their partial sums (the voters add none, so no voter
    can inflate or omit it), whose (ε, δ) the DCA's calibration gives for the same Δ₂."""
    check = validated(spec)
    if spec.method == PATE and check:
        return _validated_pate_job(spec, job_id, n_aux)
    if spec.method == PATE:
        return _pate_job(spec, job_id, n_aux, PATE_FRAC_BITS)
    return DcaParams(
        job_id=job_id,
        dimension=vote_dimension(n_aux, len(spec.classes)),
        clients=len(spec.parties),
        max_missing=spec.max_missing,
        epsilon=0.0,
        delta=0.0,
        sensitivity=0.0,
        nodes=tuple(spec.compute_nodes),
        frac_bits=8,  # votes are integers; 8 fractional bits leave room for N·2^8 ≪ 2^63
        clip_bounds=(1.0,),
        deadline_seconds=spec.deadline_seconds or DEFAULT_DEADLINE,
        simulation_seed=spec.simulation_seed,
        roster=tuple(spec.parties),
        purpose="hamm2016/votes",
        secure_sum=True,
        validate=VOTE_VALIDATION if check else "none",
        vote_classes=len(spec.classes) if check else 0,
    )


def _pate_job(spec: pb.EnsembleJobSpec, job_id: str, n_aux: int, frac_bits: int, noise: str = "gaussian", validate: str = "none") -> DcaParams:
    return DcaParams(
        job_id=job_id,
        dimension=vote_dimension(n_aux, len(spec.classes)),
        clients=len(spec.parties),
        max_missing=spec.max_missing,
        epsilon=spec.epsilon,
        delta=spec.delta,
        sensitivity=pate_sensitivity(n_aux, len(spec.classes)),
        nodes=tuple(spec.compute_nodes),
        frac_bits=frac_bits,
        clip_bounds=(1.0,),
        deadline_seconds=spec.deadline_seconds or DEFAULT_DEADLINE,
        simulation_seed=spec.simulation_seed,
        roster=tuple(spec.parties),
        purpose="hamm2016/pate-votes",
        noise=noise,
        validate=validate,
        vote_classes=len(spec.classes) if validate != "none" else 0,
    )


def _validated_pate_job(spec: pb.EnsembleJobSpec, job_id: str, n_aux: int) -> DcaParams:
    """pate's validated vote sum: the largest f ≤ PATE_FRAC_BITS whose window fits Field64 (N votes plus the
    compute nodes' noise tail below 2^62; votes are integers, so any f rounds them exactly). The voters prove their votes
    only; the compute nodes add the noise (:mod:`mpdp.dca.discrete`, "Node noise")."""
    last: InvalidJob | None = None
    for f in range(PATE_FRAC_BITS, 3, -1):
        try:
            return _pate_job(spec, job_id, n_aux, f, noise="discrete-gaussian", validate=VOTE_VALIDATION)
        except InvalidJob as e:
            if not str(e).startswith("validation"):
                raise
            last = e
    raise EnsembleJobError(f"no validated vote sum fits: {last}; take fewer queries or the votes unvalidated")


def ensemble_params(spec: pb.EnsembleJobSpec, n_aux: int, voters: int) -> EnsembleParams:
    if spec.method == PATE:
        raise EnsembleJobError("method pate has no output perturbation: its guarantee is the vote sum's (vote_job)")
    return EnsembleParams(
        method=spec.method, lam=spec.lam, epsilon=spec.epsilon, classes=len(spec.classes), n_aux=n_aux, parties=voters, protect_aux=spec.protect_aux
    )


def ledger_entry(job_id: str, spec: pb.EnsembleJobSpec, dca_job_id: str, n_aux: int) -> dict:
    """What a voter records: the release is ε-DP with the whole party as the unit (its votes may change arbitrarily).

    pate: the noisy vote sum's (ε, δ) and its Gaussian record (σ_std/Δ₂ for the accountant), from the same
    :func:`vote_job` the voter checked the announced DCA job against."""
    if spec.method == PATE:
        entry = vote_job(spec, dca_job_id, n_aux).ledger_entry()
        entry.update({"protocol": "hamm2016", "job_id": job_id, "dca_job_id": dca_job_id, "method": PATE, "queries": n_aux,
                      "mechanism": "GNMax on the DCA-noised vote sum (" + entry["mechanism"] + ")"})
        return entry
    g = ensemble_params(spec, n_aux, len(spec.parties)).guarantee
    return {
        "protocol": "hamm2016",
        "job_id": job_id,
        "dca_job_id": dca_job_id,
        "mechanism": g.mechanism,
        "epsilon": spec.epsilon,
        "delta": 0.0,
        "method": spec.method,
        "seeded": bool(spec.simulation_seed),
        "accounting": accounting.pure_epsilon("spherical Laplace output perturbation (whole party as the unit)"),
    }


# ---------------------------------------------------------------- public auxiliary data


def pack_auxiliary(X_aux: np.ndarray) -> bytes:
    return np.ascontiguousarray(X_aux, dtype="<f8").tobytes()


def auxiliary_digest(X_aux: np.ndarray) -> bytes:
    """SHA-256 over (N, d, packed rows): voters check they label exactly what Charlie will train on."""
    n, d = X_aux.shape
    return hashlib.sha256(n.to_bytes(4, "little") + d.to_bytes(4, "little") + pack_auxiliary(X_aux)).digest()


def check_auxiliary(X_aux: np.ndarray) -> np.ndarray:
    """The auxiliary features as Charlie publishes them: finite, 1 ≤ N ≤ 2^20 rows, ‖x_j‖ ≤ 1 (Thm 1/3 need it)."""
    try:
        X = check_aux_rows(X_aux)
    except ValueError as e:
        raise EnsembleJobError(str(e)) from None
    if X.shape[0] > MAX_AUX_ROWS:
        raise EnsembleJobError(f"auxiliary data may have at most {MAX_AUX_ROWS} rows, got {X.shape[0]}")
    return X


def auxiliary_chunks(X_aux: np.ndarray, rows: int = AUX_CHUNK_ROWS) -> list[pb.AuxiliaryChunk]:
    n, d = X_aux.shape
    return [
        pb.AuxiliaryChunk(first_row=s, rows=min(rows, n - s), features=d, values=pack_auxiliary(X_aux[s : s + rows]))
        for s in range(0, n, rows)
    ]


def assemble_auxiliary(chunks: list[pb.AuxiliaryChunk], request: pb.VoteRequest) -> np.ndarray:
    """Rebuild and verify the auxiliary features a voter received (shape, contiguity, digest)."""
    n, d = request.auxiliary_rows, request.auxiliary_features
    if not 1 <= n <= MAX_AUX_ROWS or d < 1:
        raise EnsembleJobError(f"the vote request announces an auxiliary set of {n}×{d}")
    parts, expected = [], 0
    for c in chunks:
        if c.first_row != expected or c.features != d or len(c.values) != 8 * c.rows * d or c.rows == 0:
            raise EnsembleJobError(f"auxiliary chunk at row {c.first_row} is malformed or out of order (expected row {expected}, d = {d})")
        parts.append(np.frombuffer(c.values, dtype="<f8").reshape(c.rows, d))
        expected += c.rows
    if expected != n:
        raise EnsembleJobError(f"received {expected} auxiliary rows, the request announces {n}")
    X = np.concatenate(parts).astype(np.float64)
    if auxiliary_digest(X) != request.auxiliary_digest:
        raise EnsembleJobError("the auxiliary data do not match the digest in the vote request")
    return check_auxiliary(X)


# ---------------------------------------------------------------- roles


def label_indices(y: np.ndarray, classes: list[str] | tuple[str, ...]) -> np.ndarray:
    """Map a party's labels onto class indices 0..C−1 by their text form (1.0 → "1"); unknown labels refuse."""
    index = {c: k for k, c in enumerate(classes)}
    out = np.empty(len(y), dtype=np.int64)
    for i, v in enumerate(y):
        key = _label_text(v)
        if key not in index:
            raise RecordsDoNotFit("a label of the dataset is not one of the job's classes", f"label {key!r} is not one of the job's classes {list(classes)}")
        out[i] = index[key]
    return out


def _label_text(v: Any) -> str:
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    if isinstance(v, (bytes, np.bytes_)):
        return v.decode()
    return str(v)


@dataclass
class VoterRole:
    """Party P_i of one ensemble job: h_i from its own records, votes on the auxiliary points."""

    name: str
    local_model: str = "logreg"

    def vote(self, spec: pb.EnsembleJobSpec, X: np.ndarray, y: np.ndarray, X_aux: np.ndarray) -> np.ndarray:
        """The DCA vector of this party: party_votes(h_i(x_1..x_N)). X is clipped to ‖x‖ ≤ 1 like the aux data."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != X_aux.shape[1]:
            raise RecordsDoNotFit("the dataset's feature count is not the auxiliary data's",
                                  f"its data have {X.shape[-1] if X.ndim == 2 else '?'} features, the auxiliary data {X_aux.shape[1]}")
        norms = np.linalg.norm(X, axis=1)
        X = X / np.maximum(1.0, norms)[:, None]
        yi = label_indices(y, list(spec.classes))
        h = fit_local(self.local_model, X, yi, len(spec.classes), spec.local_lam or spec.lam)
        pred = np.asarray(h.predict(X_aux), dtype=np.int64)
        return party_votes(pred, len(spec.classes))


def output_rng(spec: pb.EnsembleJobSpec) -> Drbg:
    """η's generator: the OS CSPRNG, or (test mode, marked non-private) the job's simulation seed."""
    if spec.simulation_seed:
        return Drbg.from_seed(spec.simulation_seed).child("hamm2016/output")
    return Drbg.from_os()


def curator_release(job_id: str, spec: pb.EnsembleJobSpec, X_aux: np.ndarray, vote_sum: dca_pb2.DpSum) -> pb.EnsembleRelease:
    """Charlie's step: summed votes → counts → w_s (Alg. 1 or 2) → w_p = w_s + η, published with its guarantee."""
    if spec.method == PATE:
        return pate_release(job_id, spec, X_aux, vote_sum)
    if not vote_sum.secure_sum or vote_sum.dimension != vote_dimension(X_aux.shape[0], len(spec.classes)):
        raise EnsembleJobError("the vote sum is not the secure sum of this job's vote vectors")
    voters = int(vote_sum.clients_included)
    counts = vote_counts(np.asarray(vote_sum.values, dtype=np.float64), X_aux.shape[0], len(spec.classes), voters)
    params = ensemble_params(spec, X_aux.shape[0], voters)
    rel = release_global(X_aux, counts, params, output_rng(spec))
    g = rel.guarantee
    return pb.EnsembleRelease(
        job_id=job_id,
        method=spec.method,
        weights=np.asarray(rel.weights, dtype=np.float64).ravel().tolist(),
        classes=list(spec.classes),
        features=X_aux.shape[1],
        parties_included=voters,
        auxiliary_rows=X_aux.shape[0],
        lam=spec.lam,
        epsilon=spec.epsilon,
        sensitivity=params.sensitivity,
        guarantee=common_pb2.Guarantee(**g.as_dict()),
        trust_model=trust_model(spec),
        dca_job_id=vote_sum.job_id,
        seeded=bool(spec.simulation_seed),
    )


def pate_release(job_id: str, spec: pb.EnsembleJobSpec, X_query: np.ndarray, vote_sum: dca_pb2.DpSum) -> pb.EnsembleRelease:
    """Charlie's pate step: noisy counts → GNMax labels → student w = argmin (1/Q)·Σ l(w; x_j, label_j) + (λ/2)‖w‖².

    The noisy sum is the DCA Gaussian release of :func:`vote_job` (already (ε, δ)-DP); everything here is
    post-processing of it, so the model carries that guarantee with one whole party as the unit."""
    C, n = len(spec.classes), X_query.shape[0]
    params = vote_job(spec, vote_sum.job_id, n)
    if vote_sum.secure_sum or vote_sum.dimension != params.dimension or len(vote_sum.values) != params.dimension:
        raise EnsembleJobError("the vote sum is not the noisy DCA sum of this job's vote vectors")
    voters = int(vote_sum.clients_included)
    noisy = np.asarray(vote_sum.values, dtype=np.float64)
    if not np.all(np.isfinite(noisy)):
        raise EnsembleJobError("the noisy vote sum holds non-finite values")
    labels = pate.noisy_argmax(noisy if C == 2 else noisy.reshape(n, C), voters)
    w = fit_soft(X_query, one_hot(labels, C), spec.lam, tol=DEFAULT_TOL)
    g = params.guarantee
    guarantee = Guarantee(
        mechanism=f"GNMax (Papernot et al. 2018) on the DCA-noised vote sum, Q = {n} queried points; student L2-LR = post-processing",
        epsilon=g.epsilon, delta=g.delta, sensitivity=g.sensitivity, norm="l2 (√Q·Δ: Δ = 1 binary, √2 multiclass)",
        statement=(f"{g.statement} The counts are labelled by their noisy argmax and the model is trained on those labels only "
                   f"(post-processing): the released weights are ({g.epsilon:g}, {g.delta:.3g})-DP with one whole party as the unit."
                   + ("" if validated(spec) else " The vote vectors are not proven valid (unvalidated): a malicious voter can move the counts arbitrarily.")),
    )
    return pb.EnsembleRelease(
        job_id=job_id,
        method=PATE,
        weights=np.asarray(w, dtype=np.float64).ravel().tolist(),
        classes=list(spec.classes),
        features=X_query.shape[1],
        parties_included=voters,
        auxiliary_rows=n,
        lam=spec.lam,
        epsilon=g.epsilon,
        sensitivity=g.sensitivity,
        guarantee=common_pb2.Guarantee(**guarantee.as_dict()),
        trust_model=trust_model(spec),
        dca_job_id=vote_sum.job_id,
        seeded=bool(spec.simulation_seed),
    )


@dataclass(frozen=True)
class CloseVoteSum:
    """Output: every voter has answered; close the vote sum's submissions now (not at the deadline)."""

    dca_job_id: str


@dataclass(frozen=True)
class AbortVoteSum:
    """Output: the job failed; the vote sum must be aborted (its nodes drop the shares) and nothing released."""

    dca_job_id: str
    detail: str


ASK_VOTES, AWAIT_VOTE_SUM, RELEASED = "ASK_VOTES", "AWAIT_VOTE_SUM", "RELEASED"


class CuratorRole(Machine):
    """Charlie in one ensemble job, sans-IO on the one engine: ASK_VOTES → AWAIT_VOTE_SUM → RELEASED, or FAILED.

    ``start()`` gives one VoteRequest per voter; each voter's answer is a :class:`~hamm2016_pb2.VoteReceipt`
    (:meth:`receipt`) or a failure (:meth:`vote_failed`). Once all M have answered and at most T failed, the
    vote sum is closed (:class:`CloseVoteSum`); more than T failures abort it (:class:`AbortVoteSum`).
    :meth:`vote_sum` takes the DCA secure sum and publishes the release.

    Charlie takes no message here: a voter's answer is the return of Charlie's own Vote call and the vote sum
    the result of his own DCA job, so all three are local events of the table (sender ``self``). An answer
    that cannot be taken (from a non-voter, a second one, out of order, or not a receipt for this job and
    voter) is refused and changes nothing; the service counts a refused receipt as that voter failing, and
    more than T failures fail the job closed. The voters' and nodes' own failure policies are the engine's.
    """

    ROLE = "ensemble_curator"
    STATES = (ASK_VOTES, AWAIT_VOTE_SUM, RELEASED, FAILED)
    TERMINAL = (RELEASED, FAILED)
    TABLE = (
        row(ASK_VOTES, "vote", "self", f"{ASK_VOTES}|{AWAIT_VOTE_SUM}|{FAILED}"),  # a voter's receipt came back
        row(ASK_VOTES, "vote_failed", "self", f"{ASK_VOTES}|{AWAIT_VOTE_SUM}|{FAILED}"),  # a voter's call failed
        row(AWAIT_VOTE_SUM, "vote_sum", "self", f"{RELEASED}|{FAILED}"),
    )
    PARTICIPANTS = frozenset()

    def __init__(self, job_id: str, dca_job_id: str, spec: pb.EnsembleJobSpec, X_aux: np.ndarray) -> None:
        validate_spec(spec)
        super().__init__(job_id, CURATOR, record=False)
        self.dca_job_id, self.spec = dca_job_id, spec
        self.X_aux = check_auxiliary(X_aux)
        check_size(spec, self.X_aux)
        self.receipts: dict[str, pb.VoteReceipt] = {}
        self.failures: dict[str, str] = {}

    def start(self) -> list[Send]:
        req = pb.VoteRequest(job_id=self.job_id, dca_job_id=self.dca_job_id, spec=self.spec, auxiliary_digest=auxiliary_digest(self.X_aux),
                             auxiliary_rows=self.X_aux.shape[0], auxiliary_features=self.X_aux.shape[1])
        return [Send(Peer("party", p), req) for p in self.spec.parties]

    def receipt(self, party: str, receipt: pb.VoteReceipt) -> list[Any]:
        self._answer(party)
        if receipt.party != party or receipt.job_id != self.job_id:
            raise RemoteProtocolError(Problem.MALFORMED, f"party {party} answered for another party or job than {self.job_id}")
        return self._local("vote", party, receipt)

    def vote_failed(self, party: str, detail: str) -> list[Any]:
        self._answer(party)
        return self._local("vote_failed", party, detail)

    def vote_sum(self, vote_sum: dca_pb2.DpSum) -> list[Any]:
        if self.state != AWAIT_VOTE_SUM:
            raise LocalProtocolError(Problem.STEP_OUT_OF_ORDER, f"job {self.job_id}: the vote sum arrived in state {self.state}")
        if vote_sum.job_id != self.dca_job_id:
            raise LocalProtocolError(Problem.MALFORMED, f"job {self.job_id}: the sum of another DCA job than {self.dca_job_id}")
        return self._local("vote_sum", vote_sum)

    # -- engine hooks --------------------------------------------------------------------------------
    def _kinds(self, sender: Peer) -> frozenset[str]:
        return frozenset()  # Charlie's ensemble role takes no message

    def _abort_notices(self, e: ProtocolError) -> list[Any]:
        return [AbortVoteSum(self.dca_job_id, e.detail)]

    # -- handlers --------------------------------------------------------------------------------------
    def _on_vote(self, party: str, receipt: pb.VoteReceipt) -> list[Any]:
        self.receipts[party] = receipt
        return self._answered()

    def _on_vote_failed(self, party: str, detail: str) -> list[Any]:
        self.failures[party] = detail
        return self._answered()

    def _on_vote_sum(self, vote_sum: dca_pb2.DpSum) -> list[Any]:
        # The reasons below are fixed texts: the exceptions' own messages quote entries of the exact vote sum,
        # which must not leave the curator (through the operator's error or the logs).
        try:
            release = curator_release(self.job_id, self.spec, self.X_aux, vote_sum)
        except ValueError:
            return self._give_up(f"job {self.job_id} published nothing: the summed votes are not valid vote counts (a voter sent something other than its vote vector)")
        except RuntimeError:
            return self._give_up(f"job {self.job_id} published nothing: the exact fit of the global classifier did not converge")
        self.state = RELEASED
        return [Publish(release)]

    def _answer(self, party: str) -> None:
        """Refusals of an answer that change nothing."""
        if self.state != ASK_VOTES:
            raise RemoteProtocolError(Problem.STEP_OUT_OF_ORDER, f"job {self.job_id}: an answer from {party} in state {self.state}")
        if party not in self.spec.parties:
            raise RemoteProtocolError(Problem.WRONG_ROLE, f"{party} is not a voter of job {self.job_id}")
        if party in self.receipts or party in self.failures:
            raise RemoteProtocolError(Problem.REPLAY, f"party {party} already answered in job {self.job_id}")

    def _answered(self) -> list[Any]:
        if len(self.failures) > self.spec.max_missing:
            return self._give_up(f"job {self.job_id} published nothing: {'; '.join(f'party {p}: {d}' for p, d in self.failures.items())}",
                                 failure_problem(self.failures.values()))
        if len(self.receipts) + len(self.failures) < len(self.spec.parties):
            return []
        self.state = AWAIT_VOTE_SUM
        return [CloseVoteSum(self.dca_job_id)]

    def _give_up(self, detail: str, problem: "Problem.ValueType" = Problem.JOB_FAILED) -> list[Any]:
        e = LocalProtocolError(problem, detail)
        self._fail(e)
        return e.notices


def weights_of(release: pb.EnsembleRelease) -> np.ndarray:
    """w (d,) for two classes, W (C, d) otherwise."""
    w = np.asarray(release.weights, dtype=np.float64)
    C = len(release.classes)
    return w if C == 2 else w.reshape(C, release.features)


# ---------------------------------------------------------------- in-memory driver


@dataclass
class InMemoryRun:
    release: pb.EnsembleRelease
    vote_sum: dca_pb2.DpSum
    curator_transcript: list  # what the curator (DCA aggregator) received
    node_transcripts: dict[str, list]


def run_inmemory(
    job_id: str,
    dca_job_id: str,
    spec: pb.EnsembleJobSpec,
    party_data: dict[str, tuple[np.ndarray, np.ndarray]],
    X_aux: np.ndarray,
    *,
    local_models: dict[str, str] | None = None,
    drop: tuple[str, ...] = (),
    ledgers: Mapping[str, Any] | None = None,
) -> InMemoryRun:
    """The whole job in one process: every party a DCA client machine, the nodes and Charlie as machines. Each voter
    spends what a served party spends for its vote shares (:func:`ledger_entry`, the ensemble's ε), checked and
    recorded in its :class:`~mpdp.ledger.PrivacyLedger` of ``ledgers`` (by name) before the shares leave (over
    budget: :class:`~mpdp.driver.SpendRefused`)."""
    from mpdp.dca.driver import run_job

    validate_spec(spec)
    X_aux = pate_queries(spec, X_aux) if spec.method == PATE else check_auxiliary(X_aux)
    names = list(spec.parties)
    if set(party_data) != set(names):
        raise EnsembleJobError(f"party data for {sorted(party_data)} but the job lists {names}")
    params = vote_job(spec, dca_job_id, X_aux.shape[0])
    curator = CuratorRole(job_id, dca_job_id, spec, X_aux)
    local_models = local_models or {}
    voters, Z, outs = [], [], []
    for ask in curator.start():  # each voter answers the VoteRequest with its vote vector (or drops out)
        if curator.state == FAILED:
            break
        name = ask.to.name
        if name in drop:
            outs += curator.vote_failed(name, "dropped out")
            continue
        Z.append(VoterRole(name, local_models.get(name, "logreg")).vote(spec, *party_data[name], X_aux))
        voters.append(name)
        outs += curator.receipt(name, pb.VoteReceipt(job_id=job_id, party=name, local_model=local_models.get(name, "logreg")))
    if any(isinstance(o, AbortVoteSum) for o in outs):
        raise EnsembleJobError(curator.error.detail if curator.error else "the job failed")
    # the services' derivation (services/dca_client.submit_vector: child client/<id> of the job's seed), so a seeded
    # pate job's noise — and with it the release — is the same bit for bit in memory and over sockets
    rng = Drbg.from_seed(spec.simulation_seed) if spec.simulation_seed else Drbg.from_os()
    full = np.zeros((len(names), params.dimension))  # dropped voters never submit (run_job's drop)
    for name, z in zip(voters, Z):
        full[names.index(name)] = z
    run = run_job(params, full, rng, client_ids=names, client_mode="machines", drop=[names.index(n) for n in drop], ledgers=ledgers,
                  charge=lambda p: (ledger_entry(job_id, spec, dca_job_id, X_aux.shape[0]),))
    if run.release is None:
        raise EnsembleJobError(f"the vote sum was not released: {run.error.detail if run.error else 'unknown'}")
    outs = curator.vote_sum(run.release)
    if curator.state != RELEASED:
        raise EnsembleJobError(curator.error.detail if curator.error else "nothing released")
    release = next(o.release for o in outs if isinstance(o, Publish))
    return InMemoryRun(release, run.release, list(run.aggregator.transcript or []), {k: list(m.transcript or []) for k, m in run.nodes.items()})
