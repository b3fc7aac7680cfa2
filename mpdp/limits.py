"""Every job-spec field's allowed range, in one table, checked in one place (the job model's "one error table, one gate",
docs/protocols/job-model.md).

Each protocol's spec message (proto/mpdp/messages/*.proto) has its rows in :data:`TABLE`: the field, its
minimum and maximum, the unit and one line on why. ``check_<spec>(msg)`` checks a message against its rows
and raises :class:`SpecError` naming the field and the allowed range; the message never quotes a string the
peer sent (ids, names, labels), so a refusal cannot echo an attacker-sized or attacker-chosen string. Checks
that relate two fields (T ≤ N − 2, one clip bound or d of them) stay with each protocol's parameters; the
per-field ranges live only here. :func:`markdown` renders the table for ``docs/protocols/limits.md``
(``python -m mpdp.limits > docs/protocols/limits.md``; a test keeps the committed page equal to it).

Kinds of row:

* ``int`` / ``real``: a number in [min, max] (``real`` also finite; ``open_min`` makes the lower end open);
  ``default`` says which value 0 stands for (proto3 cannot tell 0 from unset), and 0 is then accepted.
* ``id``: a string matching :data:`ID_PATTERN` (job ids, site names, dataset names); with ``min`` 0 also empty.
* ``text``: a string of min..max characters.
* ``bytes``: min..max bytes.
* ``count``: a repeated field or map with min..max entries; ``item`` says what each entry must be
  (``id`` entries must also be distinct: a duplicate party or node is refused).
* ``choice``: one of ``choices``.
* ``sha256``: empty, or 64 lowercase hex characters (a SHA-256 digest as text, e.g. ``schema_sha256``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from mpdp.messages import common_pb2, dca_pb2, pathak2010_pb2

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
_ID = re.compile(ID_PATTERN)
SHA256_PATTERN = r"^[0-9a-f]{64}$"
_SHA256 = re.compile(SHA256_PATTERN)
MAX_ID = 64

# Shared bounds (one name per concept; params modules import these).
MIN_KAPPA, MAX_KAPPA = 40, 128
MIN_FRAC_BITS, MAX_FRAC_BITS = 8, 48
MAX_EPSILON = 1e6  # far beyond any private use; keeps every noise scale a normal float
MAX_DEADLINE = 86400.0  # 24 h
MAX_SEED_BYTES = 128
MAX_PARTIES = 256  # site lists of contribution rounds, local releases and ensemble voters
MAX_PATHAK_PARTIES = 64  # Stage 1 is a knockout tournament: K − 1 bitwise DGK comparisons in ⌈log2 K⌉ rounds; measured at K = 50
DEFAULT_DELTA = 1e-6  # δ of an (ε, δ) job that names none: Pathak gaussian-distributed (spec delta 0), PATE votes, dp-gd from the CLI
MAX_PATHAK_DIMENSION = 4096  # Paillier work per coordinate (noise chain, masks, reshare)
MAX_DCA_DIMENSION = 1 << 20  # 8 MiB per packed vector; the ensemble's vote vector N·C is a DCA vector
MAX_DCA_CLIENTS = 1_000_000  # 10× the largest benchmark (N = 10⁵); nodes keep per-client state
MAX_QUERY_SQL = 8192  # characters of one query
MAX_QUERY_SCHEMA = 1 << 16  # characters of the schema's canonical JSON a query carries
MAX_EVALUATED_WEIGHTS = 1 << 16  # features of a released model an evaluation scores with
MAX_VALIDATED_DIMENSION = 1 << 14  # a client's proof input is ~20–60 Field64 elements a coordinate: ≤ 8 MiB a message; nodes keep only d-long output shares
MAX_NODES = 63  # per-client node bitmasks are int64 (mpdp.dca.agreement)
MAX_CLIENT_ID_BYTES = 256
MAX_ROSTER_DIGITS = 12  # DcaJobSpec.roster_range: ids prefix + a zero-padded decimal index
MAX_CLASSES = 64
MAX_AUX_ROWS = 1 << 20
MAX_AUX_FEATURES = 4096
MAX_DPGD_D = 1024  # DpgdPlan: round 0 sends d(d+1)/2 + d·m values
MAX_DPGD_ROUNDS = 100
MAX_REGRESSION_D = 256  # the main round sums (d+1)(d+2)/2 + d + 1 entries per party
MAX_GRID_REPEATS = 100  # regression's threshold grid search runs on synthetic data, repeats × repeats fits
MAX_SIZE_BITS = 48
# Admission at the curator (CuratorConfig.max_live_jobs_federation / max_live_jobs_per_operator; job-model.md §5):
# live jobs of the whole federation and of one operator certificate. Each live Pathak job keeps at most a couple of
# calls in flight to each party, so 64 stays well under a connection's 256 concurrent streams.
MAX_LIVE_JOBS_FEDERATION = 64
MAX_LIVE_JOBS_PER_OPERATOR = 32
# JobSubmission.idempotency_key: the curator remembers this many (operator, key) → job entries durably, oldest
# forgotten first (one small JSON line each, rewritten with fsync on every keyed submit).
MAX_SUBMISSION_KEYS = 4096
# Jobs of every protocol waiting for a slot (CuratorConfig.max_queued_jobs / max_queued_jobs_per_operator): a queued job
# holds its spec and an unstarted machine (a few KiB; an ensemble also its auxiliary features), nothing at any party;
# past these bounds a submission is refused OVERLOADED.
MAX_QUEUED_JOBS = 2048
MAX_QUEUED_JOBS_PER_OPERATOR = 512
# An operator's DCA job holds a slot while it waits for clients: its deadline is at most this (CuratorConfig.max_dca_deadline_seconds)
MAX_DCA_SLOT_SECONDS = 3600.0
MAX_LOCAL_ROWS = 10**10  # rows of one party's dataset: it is trained in memory (10¹⁰ rows of one float64 feature is 80 GB); a cached n above is implausible
MIN_PRODUCTION_KEY_BITS, MIN_TEST_KEY_BITS, MAX_KEY_BITS = 2048, 256, 8192
MAX_ADDRESS = 255
MAX_LINK_CALLS = 1024  # calls in flight down one party's link at once (the curator's and the relayed ones); more wait their turn
MAX_LINK_MESSAGE = 64 * 1024 * 1024  # one tunneled request or response: gRPC's message bound (services/common/channels.py)
MAX_METHOD = 128  # characters of a full method name ("/mpdp.messages.Party/SendSealedSizeRemainder")
MAX_LINK_DETAILS = 1024  # characters of a refusal's details carried back up a link (the error table's short details)
MAX_CERTIFICATE = 8192  # bytes of a PEM certificate carried in a sealed call
MAX_TRACE_HEADER = 512  # characters of a tunneled call's traceparent or tracestate
MAX_CALL_SECONDS = 86_400.0 + 600.0  # a tunneled call's timeout: a job's longest deadline and its grace
MAX_REAL = 1e12  # regularisers, norms, sensitivities, clip bounds: finite and far from overflow


class SpecError(ValueError):
    """A spec field outside its documented range. ``str()`` names the field and the allowed range, never the value."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


@dataclass(frozen=True)
class Limit:
    field: str
    kind: str  # int, real, id, text, bytes, count, choice
    min: float | None
    max: float | None
    unit: str
    why: str
    open_min: bool = False
    open_max: bool = False
    default: float | None = None  # 0 stands for this value (and is accepted)
    item: str = ""  # for count: id, real+ (finite, > 0, ≤ MAX_REAL), real (finite, |v| ≤ 1e12), text, client
    choices: tuple[Any, ...] = ()
    choice_names: tuple[str, ...] = ()

    def allowed(self) -> str:
        """The allowed range in words (what a refusal and the docs say)."""
        if self.kind == "choice":
            return "one of " + ", ".join(self.choice_names or tuple(str(c) for c in self.choices))
        if self.kind == "id":
            return ("empty, or " if self.min == 0 else "") + f"an id matching {ID_PATTERN}"
        if self.kind == "sha256":
            return "empty, or 64 lowercase hex characters"
        lo = "(" if self.open_min else "["
        hi = ")" if self.open_max else "]"
        rng = f"{lo}{_num(self.min)}, {_num(self.max)}{hi}"
        unit = f" {self.unit}" if self.unit else ""
        s = {"text": f"{rng} characters", "bytes": f"{rng} bytes", "count": f"{rng} entries"}.get(self.kind, rng + unit)
        if self.kind == "count" and self.item:
            s += {"id": ", each an id, all distinct", "real+": f", each finite in (0, {_num(MAX_REAL)}]",
                  "real": ", each finite with magnitude ≤ 1e12", "text": f", each 1..{MAX_ID} characters, all distinct",
                  "client": f", each 1..{MAX_CLIENT_ID_BYTES} UTF-8 bytes, all distinct"}[self.item]
        if self.default is not None:
            s += f" (0 = default {_num(self.default)})"
        return s


def _num(v: float | None) -> str:
    if v is None:
        return "∞"
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e7:
        return str(int(v))
    if isinstance(v, int) and v >= 1 << 16 and v & (v - 1) == 0:
        return f"2^{v.bit_length() - 1}"
    return f"{v:g}" if isinstance(v, float) else str(v)


MODES = (common_pb2.CORRECTED, common_pb2.PAPER)
MODE_NAMES = ("CORRECTED", "PAPER")
PATHAK_NOISES = (pathak2010_pb2.PATHAK_NOISE_DEFAULT, pathak2010_pb2.SMALLEST_PARTY, pathak2010_pb2.DISTRIBUTED_GAUSSIAN)
PATHAK_NOISE_NAMES = ("PATHAK_NOISE_DEFAULT", "SMALLEST_PARTY", "DISTRIBUTED_GAUSSIAN")


def _eps(why: str = "ε of the guarantee; above the max nothing is private and noise scales underflow") -> Limit:
    return Limit("epsilon", "real", 0.0, MAX_EPSILON, "", why, open_min=True)


def _seed() -> Limit:
    return Limit("simulation_seed", "bytes", 0, MAX_SEED_BYTES, "", "test mode only; a bounded label is enough to seed every generator")


def _deadline(default: float) -> Limit:
    return Limit("deadline_seconds", "real", 0.0, MAX_DEADLINE, "s", "every job ends within a day, so no role waits forever", open_min=True, default=default)


def _mode() -> Limit:
    return Limit("mode", "choice", None, None, "", "the noise calibration: provable (CORRECTED) or the published formula (PAPER)", choices=MODES, choice_names=MODE_NAMES)


def _dataset(why: str = "a dataset named in every party's config") -> Limit:
    return Limit("dataset", "id", None, None, "", why)


def _schema() -> Limit:
    return Limit("schema_sha256", "sha256", None, None, "", "the federation schema's hash (docs/schema.md); a party whose dataset has another schema refuses; empty = no check")


TABLE: dict[str, tuple[Limit, ...]] = {
    "PathakJobSpec": (
        _dataset(),
        _eps(),
        Limit("lambda", "real", 0.0, MAX_REAL, "", "the regulariser λ; finite", open_min=True),
        _mode(),
        Limit("parties", "count", 1, MAX_PATHAK_PARTIES, "", "Stage 1 runs K − 1 bitwise DGK comparisons in ⌈log2 K⌉ rounds; the noise chain has K hops; P1 = parties[0]", item="id"),
        Limit("fractional_bits", "int", MIN_FRAC_BITS, MAX_FRAC_BITS, "bits", "f of the fixed-point scale; the ring (2^128) must hold K·model·2^f", default=32),
        Limit("kappa", "int", MIN_KAPPA, MAX_KAPPA, "bits", "statistical hiding; every mask and Paillier plaintext grows with κ (κ = 10⁶ pinned a party)", default=40),
        Limit("size_bits", "int", 1, MAX_SIZE_BITS, "bits", "public bound n_j < 2^size_bits on a party's record count", default=32),
        _seed(),
        _deadline(600.0),
        Limit("noise", "choice", None, None, "", "who draws the noise: 0 = default (DISTRIBUTED_GAUSSIAN; SMALLEST_PARTY in PAPER mode)",
              choices=PATHAK_NOISES, choice_names=PATHAK_NOISE_NAMES),
        Limit("colluders", "int", 0, MAX_PATHAK_PARTIES - 1, "", "DISTRIBUTED_GAUSSIAN: t ≤ K − 1 parties may pool their noise (checked with K; unset = max(1, K − 2))"),
        Limit("delta", "real", 0.0, 1.0, "", "DISTRIBUTED_GAUSSIAN: δ of the guarantee; SMALLEST_PARTY: 0", open_max=True, default=1e-6),
        _schema(),
    ),
    "JobAnnouncement": (
        Limit("job_id", "id", None, None, "", "job ids reach logs, status details and file names"),
        Limit("party_addresses", "count", 1, MAX_PATHAK_PARTIES, "", "one address per party of the job", item="id"),
    ),
    "JobAcceptance": (
        Limit("dimension", "int", 1, MAX_PATHAK_DIMENSION, "", "d: Paillier work and messages grow per coordinate"),
    ),
    "DcaJobSpec": (
        Limit("dimension", "int", 1, MAX_DCA_DIMENSION, "", "d: 8·d bytes per share; the ensemble's vote vectors reach N·C = 2^20"),
        Limit("clients", "int", 2, MAX_DCA_CLIENTS, "", "N: nodes keep per-client state; N − T − 1 ≥ 1 (Thm 1)"),
        Limit("max_missing", "int", 0, MAX_DCA_CLIENTS - 2, "", "T: at most N − 2 (checked with N)"),
        Limit("epsilon", "real", 0.0, MAX_EPSILON, "", "ε of the Gaussian mechanism (0 only for a secure sum)"),
        Limit("delta", "real", 0.0, 1.0, "", "δ of the Gaussian mechanism (0 only for a secure sum)", open_max=True),
        Limit("sensitivity", "real", 0.0, MAX_REAL, "", "Δ₂ of one client's vector (0 only for a secure sum)"),
        _mode(),
        Limit("fractional_bits", "int", MIN_FRAC_BITS, MAX_FRAC_BITS, "bits", "f of the fixed-point scale in Z_(2^64) (0 = 32 with validate VALIDATE_NONE)", default=16),
        Limit("clip_bounds", "count", 0, MAX_DCA_DIMENSION, "", "c_j: none (= 1), one for all j, or d (checked with d)", item="real+"),
        Limit("compute_nodes", "count", 2, MAX_NODES, "", "M ≥ 2 (one node would see u_i); per-client bitmasks are int64", item="id"),
        _deadline(600.0),
        _seed(),
        Limit("roster", "count", 0, MAX_DCA_CLIENTS, "", "empty (any N clients) or exactly N client ids (checked with N)", item="client"),
        Limit("purpose", "text", 0, 128, "", "a label copied into ledgers and releases"),
        Limit("noise", "choice", None, None, "", "how clients draw η: floating-point Gaussian, or exact integer discrete Gaussian (mode CORRECTED)",
              choices=(dca_pb2.GAUSSIAN, dca_pb2.DISCRETE_GAUSSIAN), choice_names=("GAUSSIAN", "DISCRETE_GAUSSIAN")),
        Limit("validate", "choice", None, None, "", "what each contribution is proven to satisfy (Field64 shares and a proof; d ≤ "
              f"{MAX_VALIDATED_DIMENSION}, noise DISCRETE_GAUSSIAN or a secure sum); 0 = VALIDATE_RANGE, unproven only as VALIDATE_NONE",
              choices=(dca_pb2.VALIDATE_RANGE, dca_pb2.VALIDATE_NONE, dca_pb2.VALIDATE_L2, dca_pb2.VALIDATE_ONE_HOT, dca_pb2.VALIDATE_VOTES),
              choice_names=("VALIDATE_RANGE", "VALIDATE_NONE", "VALIDATE_L2", "VALIDATE_ONE_HOT", "VALIDATE_VOTES")),
        Limit("vote_classes", "int", 0, MAX_CLASSES, "", "validate VOTES: C, the classes of one vote per point (0 otherwise; checked with validate)"),
        Limit("colluders", "int", 0, MAX_NODES - 1, "", "validated DISCRETE_GAUSSIAN: c ≤ M − 1 compute nodes may pool their noise with the curator "
              "(checked with M; unset = M − 1; each node adds σ_std²/(M − c))"),
    ),
    "RosterRange": (  # DcaJobSpec.roster_range: client i is prefix + i zero-padded to `digits` (digits ≥ those of N − 1)
        Limit("prefix", "text", 0, MAX_ID, "", "the common start of the N client ids"),
        Limit("digits", "int", 1, MAX_ROSTER_DIGITS, "", "width of the decimal index; N ≤ 10^6 needs at most 6"),
    ),
    "ReceivedClients": (  # node → node, roster jobs name clients by index (mpdp.dca.agreement); also checked against N
        Limit("index_runs", "count", 0, 2 * MAX_DCA_CLIENTS, "", "(start, length) pairs of roster indices"),
        Limit("bitmap", "bytes", 0, MAX_DCA_CLIENTS // 8 + 1, "", "one bit per roster index from bitmap_start"),
        Limit("bitmap_start", "int", 0, MAX_DCA_CLIENTS, "", "first index of the bitmap, a multiple of 8"),
    ),
    "DcaJobAnnouncement": (
        Limit("job_id", "id", None, None, "", "job ids reach logs, status details and file names"),
        Limit("node_addresses", "count", 0, MAX_NODES, "", "one address per compute node of the job", item="id"),
        Limit("verify_key", "bytes", 0, 0, "bytes", "always empty: a validated job's verify key is the nodes' own (VerifyKeyPiece)"),
    ),
    "VerifyKeyPiece": (  # node → node, validated jobs
        Limit("job_id", "id", None, None, "", "the validated job"),
        Limit("piece", "bytes", 32, 32, "bytes", "the sender's piece of the verify key, from its CSPRNG"),
    ),
    "StatisticRequest": (
        Limit("dca_job_id", "id", None, None, "", "the DCA job the statistic is submitted to"),
        _dataset(),
        Limit("statistic", "text", 1, 32, "", "a statistic name the parties know (linreg/std, linreg/main, dpgd/round, query)"),
        Limit("bounds", "count", 0, MAX_REGRESSION_D + 1, "", "linreg: the clip box, d + 1 values (features, then target); dpgd: none", item="real+"),
        Limit("records_per_client", "int", 1, (1 << 32) - 1, "", "public bound on one party's row count"),
        _schema(),
    ),
    "DpgdRound": (  # StatisticRequest.dpgd (statistic dpgd/round); the party rebuilds and checks the whole plan
        Limit("job_id", "id", None, None, "", "the dp-gd job: one ledger charge covers all its rounds"),
        Limit("round", "int", 0, MAX_DPGD_ROUNDS, "", "r; the plan refuses r > R"),
        Limit("task", "choice", None, None, "", "binary or multinomial logistic regression", choices=("binary", "softmax")),
        Limit("classes", "int", 2, MAX_CLASSES, "", "2 for binary; K for softmax"),
        Limit("dimension", "int", 1, MAX_DPGD_D, "", "round 0 sends d(d+1)/2 + d·m values"),
        _eps(),
        Limit("delta", "real", 0.0, 1.0, "", "δ of the whole job", open_min=True, open_max=True),
        Limit("lam", "real", 0.0, MAX_REAL, "", "the regulariser λ; finite", open_min=True),
        Limit("rounds", "int", 0, MAX_DPGD_ROUNDS, "", "R: the job has R + 1 DCA rounds"),
        Limit("clip", "real", 0.0, MAX_REAL, "", "C, the per-row gradient clip", open_min=True),
        Limit("hessian_share", "real", 0.0, 1.0, "", "h, round 0's share of μ² (1 when R = 0)"),
        Limit("average_from", "real", 0.0, 1.0, "", "the model averages the iterates after this fraction", open_max=True),
        Limit("adjacency", "choice", None, None, "", "one row replaced (N public) or added/removed", choices=("replace", "add-remove")),
        Limit("total_records", "int", 0, (1 << 48), "", "N under replace adjacency; 0 under add-remove"),
        _mode(),
        Limit("iterate", "count", 0, MAX_DPGD_D * MAX_CLASSES, "", "W_r, d·m finite values; none in round 0"),
    ),
    "ContributionRound": (
        Limit("parties", "count", 1, MAX_PARTIES, "", "each party is one DCA client; a duplicate would submit twice", item="id"),
    ),
    "EnsembleJobSpec": (
        _dataset("the parties' private dataset (each party's config)"),
        Limit("auxiliary", "id", None, None, "", "the curator's public auxiliary dataset"),
        Limit("method", "choice", None, None, "", "Alg. 2 (soft labels), Alg. 1 (majority vote) or GNMax on noisy vote counts",
              choices=("soft", "vote", "pate"), choice_names=("soft", "vote", "pate")),
        Limit("lam", "real", 0.0, MAX_REAL, "", "λ of the global ERM; Δ₂ = O(1/λ)", open_min=True),
        _eps("ε of the output perturbation; above the max the noise scale is no longer meaningful"),
        Limit("classes", "count", 2, MAX_CLASSES, "", "C labels; vote vectors have N·C entries", item="text"),
        Limit("parties", "count", 2, MAX_PARTIES, "", "the M voters; a duplicate would vote twice", item="id"),
        Limit("compute_nodes", "count", 2, MAX_NODES, "", "the DCA nodes summing the votes", item="id"),
        Limit("max_missing", "int", 0, MAX_PARTIES - 2, "", "T: at most M − 2 (checked with M)"),
        Limit("local_lam", "real", 0.0, MAX_REAL, "", "λ of each party's local model (0 = the classifier's own)"),
        _seed(),
        _deadline(300.0),
        Limit("delta", "real", 0.0, 1.0, "", "pate: δ of the (ε, δ) guarantee, in (0, 1); soft/vote: 0 (checked with the method)", open_max=True),
        Limit("queries", "int", 0, MAX_AUX_ROWS, "", "pate: Q auxiliary points queried (0 = all); soft/vote: 0"),
        _schema(),
    ),
    "VoteRequest": (
        Limit("job_id", "id", None, None, "", "job ids reach logs, status details and ledgers"),
        Limit("dca_job_id", "id", None, None, "", "the secure-sum DCA job of the votes"),
        Limit("auxiliary_digest", "bytes", 32, 32, "", "SHA-256 of the auxiliary features"),
        Limit("auxiliary_rows", "int", 1, MAX_AUX_ROWS, "", "N auxiliary points each voter labels"),
        Limit("auxiliary_features", "int", 1, MAX_AUX_FEATURES, "", "d of the auxiliary points"),
    ),
    "LocalModelJobSpec": (
        _dataset(),
        Limit("model", "choice", None, None, "", "the local DP model", choices=("lmgc",), choice_names=("lmgc",)),
        _eps(),
        Limit("parties", "count", 1, MAX_PARTIES, "", "each party releases one model; a duplicate would train twice", item="id"),
        _mode(),
        Limit("lambda", "real", 0.0, MAX_REAL, "", "trace regulariser λ", default=1e-3),
        Limit("ridge", "real", 0.0, MAX_REAL, "", "ridge floor Δ", default=1e-3),
        Limit("data_norm", "real", 0.0, MAX_REAL, "", "public row-norm bound r", default=1.0),
        Limit("huber_h", "real", 0.0, 1.0, "", "h of the Huber loss (h ≤ 1 keeps its curvature bound)", default=0.5),
        _seed(),
        _schema(),
    ),
    "LocalModelRequest": (
        Limit("job_id", "id", None, None, "", "job ids reach logs, status details and ledgers"),
    ),
    "RegressionPlan": (
        Limit("bounds", "count", 2, MAX_REGRESSION_D + 1, "", "c: d + 1 values (features, then target)", item="real+"),
        Limit("epsilon", "real", 0.0, MAX_EPSILON, "", "ε of the whole fit (0.3 std round, 0.7 main round)", open_min=True),
        Limit("delta", "real", 0.0, 1.0, "", "δ of the whole fit", open_min=True, open_max=True),
    ),
    "LearnerJobSpec": (  # a multi-round learner hosted by the curator (learner.proto); dpgd/regression: their own rows
        Limit("job_id", "text", 0, MAX_ID, "", "empty (the curator chooses) or an id; an id is never admitted twice"),
        _dataset(),
        Limit("parties", "count", 1, MAX_PARTIES, "", "each party is one DCA client of every round; a duplicate would submit twice", item="id"),
        Limit("compute_nodes", "count", 2, MAX_NODES, "", "M ≥ 2 nodes of every round's DCA job", item="id"),
        Limit("records_per_party", "int", 1, (1 << 32) - 1, "", "public bound on one party's row count"),
        Limit("max_missing", "int", 0, MAX_PARTIES - 2, "", "T of every round: at most K − 2 (checked with K)"),
        _seed(),
        _deadline(600.0),
        _schema(),
    ),
    "DpgdJobSpec": (  # LearnerJobSpec.dpgd (mpdp/dpgd/plan.py DpgdPlan checks the relations)
        Limit("task", "choice", None, None, "", "binary or multinomial logistic regression", choices=("binary", "softmax")),
        Limit("classes", "int", 2, MAX_CLASSES, "", "2 for binary; K for softmax"),
        Limit("dimension", "int", 1, MAX_DPGD_D, "", "round 0 sends d(d+1)/2 + d·m values"),
        _eps(),
        Limit("delta", "real", 0.0, 1.0, "", "δ of the whole job", open_min=True, open_max=True),
        Limit("lam", "real", 0.0, MAX_REAL, "", "the regulariser λ; finite", open_min=True),
        Limit("rounds", "int", 0, MAX_DPGD_ROUNDS, "", "R: the job has R + 1 DCA rounds (0 = the functional mechanism)"),
        Limit("total_records", "int", 1, (1 << 48), "", "N, public (replace adjacency)"),
        _mode(),
    ),
    "RegressionJobSpec": (  # LearnerJobSpec.regression (mpdp/regression/plan.py RegressionPlan)
        Limit("bounds", "count", 2, MAX_REGRESSION_D + 1, "", "c: d + 1 values (features, then target)", item="real+"),
        Limit("epsilon", "real", 0.0, MAX_EPSILON, "", "ε of the whole fit (0.3 std round, 0.7 main round)", open_min=True),
        Limit("delta", "real", 0.0, 1.0, "", "δ of the whole fit", open_min=True, open_max=True),
        Limit("total_records", "int", 1, (1 << 48), "", "N, public"),
        _mode(),
        Limit("noise", "choice", None, None, "", "the rounds' DCA noise: floating-point Gaussian, or exact integer discrete Gaussian (mode CORRECTED)",
              choices=(dca_pb2.GAUSSIAN, dca_pb2.DISCRETE_GAUSSIAN), choice_names=("GAUSSIAN", "DISCRETE_GAUSSIAN")),
        Limit("grid_repeats_x", "int", 1, MAX_GRID_REPEATS, "", "the threshold grid search's repeats (synthetic data, no private data)", default=20),
        Limit("grid_repeats_y", "int", 1, MAX_GRID_REPEATS, "", "the threshold grid search's repeats (synthetic data, no private data)", default=20),
    ),
    "QueryJobSpec": (  # LearnerJobSpec.query and StatisticRequest.query (mpdp/query/plan.py compiles the SQL; docs/protocols/query.md)
        Limit("sql", "text", 1, MAX_QUERY_SQL, "", "one SELECT of the query subset; anything else is refused before any spend"),
        Limit("schema_json", "text", 0, MAX_QUERY_SCHEMA, "", "the schema's canonical JSON (its sha256 is the job's schema_sha256); empty = no schema: COUNT(*) only"),
        _eps("ε of the whole query; its aggregates share it"),
        Limit("delta", "real", 0.0, 1.0, "", "δ of the whole query", open_min=True, open_max=True),
    ),
    "JobSubmission": (  # the job host's envelope (operations.proto); its spec has its own rows
        Limit("idempotency_key", "id", 0, None, "", f"the operator's name for one logical submit: a retry with it gets the first submit's job; "
              f"the curator keeps the last {MAX_SUBMISSION_KEYS} keys durably"),
    ),
    "EvaluationSpec": (  # QueryJobSpec.evaluation: a released classifier scored on each party's rows (mpdp/query/evaluation.py)
        Limit("model_job", "id", None, None, "", "the job that released the model"),
        Limit("protocol", "choice", None, None, "", "the released model's protocol (its tie rule)", choices=("pathak2010", "dpgd")),
        Limit("weights", "count", 1, MAX_EVALUATED_WEIGHTS, "", "the released weights ŵ", item="real"),
        Limit("score_bins", "int", 2, 100, "", "equal-width score bins over [0, 1] per class (the AUC's histograms)", default=20),
    ),
    # the party's link (proto/mpdp/messages/link.proto; services/common/link.py): what the curator sends down it, what
    # a party answers, and a party-to-party call sealed end to end (services/common/seal.py)
    "LinkDown": (
        Limit("call_id", "int", 1, (1 << 63) - 1, "", "the link's call number, echoed in the answer"),
        Limit("method", "text", 1, MAX_METHOD, "", "a full method name of the party's services; any other is refused"),
        Limit("request", "bytes", 0, MAX_LINK_MESSAGE, "bytes", "the serialized request, gRPC's message bound"),
        Limit("timeout_seconds", "real", 0.0, MAX_CALL_SECONDS, "s", "the caller's deadline, relative", open_min=True),
        Limit("traceparent", "text", 0, MAX_TRACE_HEADER, "", "the caller's span (W3C trace context), when traces are on"),
        Limit("tracestate", "text", 0, MAX_TRACE_HEADER, "", "W3C trace state, when traces are on"),
    ),
    "LinkAnswer": (
        Limit("call_id", "int", 1, (1 << 63) - 1, "", "a call in flight on this link; any other answer is refused"),
        Limit("code", "int", 0, 16, "", "a gRPC status code"),
        Limit("details", "text", 0, MAX_LINK_DETAILS, "", "a refusal's short details"),
        Limit("response", "bytes", 0, MAX_LINK_MESSAGE, "bytes", "the serialized response, gRPC's message bound"),
    ),
    "SealedCall": (
        Limit("federation", "text", 1, MAX_ID, "", "the federation's name (the certificates' O)"),
        Limit("sender", "id", None, None, "", "the sending party; the curator checks it is the caller's certificate name"),
        Limit("recipient", "id", None, None, "", "the receiving party; it must hold a link"),
        Limit("method", "text", 1, MAX_METHOD, "", "a full method name of the recipient's party-to-party steps"),
        Limit("job_id", "id", None, None, "", "the job the step belongs to"),
        Limit("nonce", "bytes", 16, 16, "bytes", "the call's random nonce (replays are refused)"),
        Limit("deadline", "real", 0.0, 4e9, "s since the epoch", "the call's absolute deadline; the recipient refuses it after", open_min=True),
        Limit("sender_certificate", "bytes", 1, MAX_CERTIFICATE, "bytes", "the sender's PEM certificate, checked against the federation CA"),
        Limit("ephemeral_key", "bytes", 65, 65, "bytes", "an uncompressed P-256 point (ECDH)"),
        Limit("gcm_nonce", "bytes", 12, 12, "bytes", "AES-GCM's nonce"),
        Limit("ciphertext", "bytes", 16, MAX_LINK_MESSAGE, "bytes", "the sealed request and its 16-byte tag"),
        Limit("signature", "bytes", 8, 80, "bytes", "a DER ECDSA P-256 signature"),
    ),
    "SealedReply": (
        Limit("gcm_nonce", "bytes", 12, 12, "bytes", "AES-GCM's nonce"),
        Limit("ciphertext", "bytes", 16 + 6, MAX_LINK_MESSAGE, "bytes", "the sealed status, details and response, and the tag"),
    ),
    "KeyBits": (
        Limit("paillier_bits", "int", MIN_PRODUCTION_KEY_BITS, MAX_KEY_BITS, "bits", f"Paillier and DGK moduli; {MIN_TEST_KEY_BITS} bits allowed in test mode only; larger keys cost cubic time"),
    ),
}


def limit(spec: str, field: str) -> Limit:
    for row in TABLE[spec]:
        if row.field == field:
            return row
    raise KeyError(f"{spec}.{field}")


# ---------------------------------------------------------------- checks


def is_id(value: object) -> bool:
    """``value`` is a plain id (job id, site name, dataset name): :data:`ID_PATTERN`."""
    return isinstance(value, str) and len(value) <= MAX_ID and _ID.match(value) is not None


def check_id(value: object, what: str) -> None:
    """``value`` is an id (job id, site name, dataset): ``^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$``. Never echoes it."""
    if not is_id(value):
        raise SpecError(what, f"must be an id matching {ID_PATTERN} (1..{MAX_ID} characters)")


def check_unique(names: Iterable[str], what: str) -> None:
    """Refuse a list with a repeated name (a duplicate party would spend twice or submit twice)."""
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise SpecError(what, "names must be distinct (a name repeats)")
        seen.add(n)


def check_key_bits(bits: int, *, test_mode: bool) -> None:
    row = TABLE["KeyBits"][0]
    lo = MIN_TEST_KEY_BITS if test_mode else MIN_PRODUCTION_KEY_BITS
    if not (isinstance(bits, int) and lo <= bits <= MAX_KEY_BITS):
        extra = "" if test_mode else f"; {MIN_TEST_KEY_BITS}..{MIN_PRODUCTION_KEY_BITS - 1} need test mode"
        raise SpecError(row.field, f"key bits must be in [{lo}, {MAX_KEY_BITS}], got {bits}{extra}")


def _client_id_ok(c: str) -> bool:
    return 0 < len(c) and (len(c) <= MAX_CLIENT_ID_BYTES // 4 or len(c.encode()) <= MAX_CLIENT_ID_BYTES)


def check_row(row: Limit, value: Any, where: str = "", *, resolved: bool = False) -> None:
    """Check one value against one row (``where`` prefixes the field name, e.g. ``spec.``).

    ``resolved``: the value is a parameter after defaults were applied, so 0 no longer stands for the default."""
    name = where + row.field
    if row.kind == "id":
        if not (row.min == 0 and value == ""):
            check_id(value, name)
        return
    if row.kind == "sha256":
        if not (isinstance(value, str) and (value == "" or _SHA256.match(value))):
            raise SpecError(name, f"must be {row.allowed()}")
        return
    if row.kind == "choice":
        if value not in row.choices:
            raise SpecError(name, f"must be {row.allowed()}")
        return
    if row.kind in ("text", "bytes", "count"):
        n = len(value)
        if not row.min <= n <= row.max:  # type: ignore[operator]
            raise SpecError(name, f"must hold {row.allowed()}, got {n}")
        if row.kind == "count" and row.item:
            _check_items(row, list(value), name)
        return
    # numbers
    if row.default is not None and value == 0 and not resolved:
        return
    if row.kind == "int":
        ok = isinstance(value, int) and row.min <= value <= row.max  # type: ignore[operator]
    else:
        ok = isinstance(value, (int, float)) and math.isfinite(value) and (row.min < value if row.open_min else row.min <= value) and (value < row.max if row.open_max else value <= row.max)  # type: ignore[operator]
    if not ok:
        raise SpecError(name, f"must be in {row.allowed()}, got {value!r}")


def _check_items(row: Limit, items: list, name: str) -> None:
    if row.item == "id":
        for it in items:
            check_id(it, name)
        check_unique(items, name)
    elif row.item == "text":
        if not all(isinstance(t, str) and 0 < len(t) <= MAX_ID for t in items):
            raise SpecError(name, f"each entry must be 1..{MAX_ID} characters")
        check_unique(items, name)
    elif row.item == "client":
        if not all(isinstance(c, str) and _client_id_ok(c) for c in items):
            raise SpecError(name, f"each entry must be 1..{MAX_CLIENT_ID_BYTES} UTF-8 bytes")
        check_unique(items, name)
    elif row.item == "real":
        if not all(isinstance(v, (int, float)) and math.isfinite(v) and abs(v) <= 1e12 for v in items):
            raise SpecError(name, "each entry must be finite with magnitude at most 1e12")
    elif row.item == "real+":
        if not all(isinstance(v, (int, float)) and math.isfinite(v) and 0 < v <= MAX_REAL for v in items):
            raise SpecError(name, f"each entry must be finite in (0, {_num(MAX_REAL)}]")


def check_message(spec: str, msg: Any, where: str = "") -> None:
    """Check every row of ``TABLE[spec]`` against the message's field of the same name."""
    for row in TABLE[spec]:
        check_row(row, getattr(msg, row.field), where)


def check_pathak_job_spec(msg: Any) -> None:
    check_message("PathakJobSpec", msg)


def check_job_announcement(msg: Any) -> None:
    check_message("JobAnnouncement", msg)
    check_message("PathakJobSpec", msg.spec, "spec.")


def check_job_acceptance(msg: Any) -> None:
    check_message("JobAcceptance", msg)


def check_dca_job_spec(msg: Any) -> None:
    check_message("DcaJobSpec", msg)
    if msg.HasField("roster_range"):
        check_message("RosterRange", msg.roster_range, "roster_range.")


def check_dca_job_announcement(msg: Any) -> None:
    check_message("DcaJobAnnouncement", msg)
    check_message("DcaJobSpec", msg.spec, "spec.")
    if msg.spec.HasField("roster_range"):
        check_message("RosterRange", msg.spec.roster_range, "spec.roster_range.")


def check_statistic_request(msg: Any) -> None:
    check_message("StatisticRequest", msg)
    if msg.HasField("dpgd"):
        check_message("DpgdRound", msg.dpgd, "dpgd.")
    if msg.HasField("query"):
        check_query_job_spec(msg.query, "query.")


def check_query_job_spec(msg: Any, where: str = "") -> None:
    """A query's rows, and its evaluation's when it evaluates a released model."""
    check_message("QueryJobSpec", msg, where)
    if msg.HasField("evaluation"):
        check_message("EvaluationSpec", msg.evaluation, where + "evaluation.")


def check_link_down(msg: Any) -> None:
    check_message("LinkDown", msg)
    if msg.HasField("sealed"):
        check_message("SealedCall", msg.sealed, "sealed.")


def check_link_answer(msg: Any) -> None:
    check_message("LinkAnswer", msg)
    if msg.HasField("sealed"):
        check_message("SealedReply", msg.sealed, "sealed.")


def check_contribution_round(msg: Any) -> None:
    check_message("ContributionRound", msg)
    check_message("StatisticRequest", msg.request, "request.")
    if msg.request.HasField("dpgd"):
        check_message("DpgdRound", msg.request.dpgd, "request.dpgd.")
    if msg.request.HasField("query"):
        check_query_job_spec(msg.request.query, "request.query.")


def check_learner_job_spec(msg: Any) -> None:
    """Every field of a learner job (the common rows, then its learner's); the learner must be set."""
    check_message("LearnerJobSpec", msg)
    if msg.job_id:
        check_id(msg.job_id, "job_id")
    which = msg.WhichOneof("learner")
    if which == "dpgd":
        check_message("DpgdJobSpec", msg.dpgd, "dpgd.")
    elif which == "regression":
        check_message("RegressionJobSpec", msg.regression, "regression.")
    elif which == "query":
        check_query_job_spec(msg.query, "query.")
    else:
        raise SpecError("learner", "must be one of dpgd, regression, query")


def check_ensemble_job_spec(msg: Any) -> None:
    check_message("EnsembleJobSpec", msg)


def check_vote_request(msg: Any) -> None:
    check_message("VoteRequest", msg)
    check_message("EnsembleJobSpec", msg.spec, "spec.")


def check_job_submission(msg: Any) -> None:
    """The job host's envelope fields (not its spec: the protocol's servicer checks that)."""
    check_message("JobSubmission", msg)


def check_local_model_job_spec(msg: Any) -> None:
    check_message("LocalModelJobSpec", msg)


def check_local_model_request(msg: Any) -> None:
    check_message("LocalModelRequest", msg)
    check_message("LocalModelJobSpec", msg.spec, "spec.")


def check_fields(spec: str, **values: Any) -> None:
    """Check keyword values against the rows of ``spec`` with those field names (for dataclass parameters)."""
    for row in TABLE[spec]:
        if row.field in values:
            check_row(row, values[row.field], resolved=True)


def check_regression_plan(bounds: Sequence[float], epsilon: float, delta: float) -> None:
    check_fields("RegressionPlan", bounds=list(bounds), epsilon=epsilon, delta=delta)


# ---------------------------------------------------------------- docs


def markdown() -> str:
    """The page ``docs/protocols/limits.md``: one table per spec message."""
    lines = [
        "# Limits of every job-spec field",
        "",
        "Generated by `python -m mpdp.limits` from `mpdp.limits.TABLE`; do not edit by hand (a test keeps it equal).",
        "",
        "Every curator, party and compute node checks these ranges in one place (`mpdp.limits`), before a job's machine",
        "exists. A refusal answers INVALID_ARGUMENT (INVALID_JOB) naming the field and the allowed range; it never quotes a",
        "string the caller sent. Ids (job ids, site names, dataset names) match",
        f"`{ID_PATTERN}`; every list of parties, voters or nodes must hold distinct names.",
        "",
    ]
    for spec, rows in TABLE.items():
        lines += [f"## {spec}", "", "| field | allowed | unit | why |", "|---|---|---|---|"]
        lines += [f"| `{r.field}` | {r.allowed()} | {r.unit} | {r.why} |" for r in rows]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(), end="")
