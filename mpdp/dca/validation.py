"""Validated DCA contributions: Field64 shares with a fully linear proof (docs/protocols/dca.md, "Validated mode").

Ours, after Prio3 (draft-irtf-cfrg-vdaf §7: FLP on secret shares, joint randomness by Fiat–Shamir from the shares,
query randomness from a key the verifiers share) on the DCA of Heikkilä et al. 2017.

Client i with integer data ỹ_i (units of 2^-f, after clipping and rounding; no noise: in a validated job the compute
nodes add the DP noise to their partial sums, :mod:`mpdp.dca.discrete`, "Node noise"):

1. x = enc(ỹ_i) ∈ {0, 1}^n, the bits of the job's circuit (:func:`plan`): the data predicate alone (range, L2 ball,
   one-hot or votes), so an accepted contribution moves the sum by at most what the predicate allows;
2. x is shared additively over Field64 among the M nodes (node k ≥ 1 gets a 32-byte seed when the job is
   seed-compressed, expanded by AES-256-CTR under XOF(seed, job ‖ spec ‖ client ‖ k); node 0 gets x minus the expansions);
3. joint randomness (Prio3's, §7.2.1.2): node k's part J_k = XOF(blind_k, job ‖ spec ‖ client ‖ k ‖ node k's measurement
   share, or its seed), the seed s = XOF(J_0 ‖ … ‖ J_(M−1)), ρ = XOF(s); the client sends every node its blind and
   all M parts (the hint);
4. π = FLP.prove(x, ρ), shared like x (proof shares are part of each seed's expansion).

Every random value of a client comes from os.urandom, or (the helpers' full shares) from an AES-256-CTR keystream
keyed from it (:class:`mpdp.math.drbg.Drbg`). Here "job ‖ spec ‖ client" is :func:`binder`: the job id, the job's
32-byte spec digest (:mod:`mpdp.dca.spec`, the hash of its whole DcaJobSpec) and the client id.

Node k recomputes its own part, derives s_k from the hint with its own part in place, and computes its verifier
share with query randomness r = XOF(verify key, job ‖ spec ‖ client) — the key is the nodes' own (:func:`verify_key`: a hash
of one random piece from each node, exchanged node to node before any share is taken), so neither the client nor
the curator knows r. It sends (verifier share, J_k, s_k) with its next received-set report.
Every node then decides from the same M records (:func:`decide`): all s_l equal XOF(J_0 ‖ … ‖ J_(M−1)) computed
from the *reported* parts, and FLP.decide on the sum of the verifier shares. Each node's output share is
truncate(its measurement share) = a share of ỹ_i, folded into its sum only if the client is valid.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from mpdp.math import field as F
from mpdp.math import flp
from mpdp.math.drbg import Drbg

_P = np.uint64(F.P)
KINDS = ("none", "range", "l2", "one-hot", "votes")
SEED = 32  # bytes of a blind, a part, a joint-randomness seed, a share seed, the verify key
_DST_PART, _DST_SEED, _DST_JR = b"mpdp/dca/flp/joint-rand-part", b"mpdp/dca/flp/joint-rand-seed", b"mpdp/dca/flp/joint-rand"
_DST_QUERY, _DST_SHARE = b"mpdp/dca/flp/query-rand", b"mpdp/dca/flp/share-key"
_DST_KEY = b"mpdp/dca/flp/verify-key"


class ValidationError(ValueError):
    """A validated job whose circuit cannot be built (a sum could wrap), or a client input outside its predicate."""


class MalformedShare(ValueError):
    """A ValidatedShare of the wrong shape (lengths, non-canonical elements)."""


@dataclass(frozen=True)
class Plan:
    """The circuit of one validated job and the bounds it enforces (all in units of 2^-f)."""

    kind: str
    circuit: flp.Circuit
    d: int
    data_bound: int  # max |ỹ_j| an accepted contribution can have
    l2_bound: int  # the L2 kind: ‖ỹ‖₂² ≤ l2_bound (0 otherwise)
    noise_tail: int  # the nodes' noise: |Σ_k η_kj| ≤ noise_tail except with probability 2^-96 (0: a secure sum)
    window: int  # N·data_bound + noise_tail: the largest |S_j| of a valid release (< 2^62, checked: no wrap modulo p)
    scale: int  # one-hot: the unit 2^f of a vote
    spec_digest: bytes = b""  # the job's spec digest (mpdp.dca.spec; set by DcaParams): every binder, hence every proof, is bound to it

    @property
    def record_bytes(self) -> int:
        """One node's record for one client: verifier share, its part, the seed it used."""
        c = self.circuit
        return F.ENCODED_SIZE * c.proofs * c.verifier_len + 2 * SEED

    @property
    def share_len(self) -> int:
        """Elements of one full share: the measurement, then the R proofs."""
        c = self.circuit
        return c.meas_len + c.proofs * c.proof_len


def plan(kind: str, *, d: int, clip_bounds: tuple[float, ...], frac_bits: int, noise_tail: int, clients: int, rounding_sq: float,
         vote_classes: int = 0) -> Plan:
    """Build the circuit of a validated job (data only: the clients add no noise). ``noise_tail``: the bound on the
    compute nodes' noise sum per coordinate (:func:`mpdp.dca.discrete.noise_tail`; 0 in a secure sum); ``rounding_sq``:
    R², the bound on the conditional rounding's squared error (0 without rounding); ``vote_classes``:
    the votes kind's C (one vote per point: d/C blocks of C bits summing to 1, or d bits for C = 2)."""
    if kind not in KINDS[1:]:
        raise ValidationError(f"validate must be one of {KINDS[1:]}")
    scale = 1 << frac_bits
    c_units = math.ceil(max(clip_bounds) * scale)
    l2_bound = 0
    try:
        if kind == "range":
            data: flp.Predicate = flp.RangeVec(d, 2 * c_units, c_units)
            data_bound = c_units
        elif kind == "l2":
            if len(set(clip_bounds)) != 1:
                raise ValidationError("validate L2 takes one clip bound: the radius c of the ℓ2 ball")
            r_units = math.ceil(math.sqrt(rounding_sq))
            l2_bound = (c_units + r_units) ** 2  # ‖ỹ‖ ≤ ‖z·2^f‖ + ‖rounding error‖ ≤ c·2^f + R
            data = flp.L2Ball(d, c_units.bit_length() + 1, l2_bound)  # |ỹ_j| ≤ c_u < 2^(b−1)
            data_bound = min(c_units + r_units, 1 << c_units.bit_length())
        elif kind == "votes":
            data = flp.VoteBlocks(d if vote_classes == 2 else d // max(vote_classes, 1), vote_classes, 1, scale)
            if data.meas_len != d:
                raise ValidationError(f"votes: d = {d} is not a whole number of points of {vote_classes} classes")
            data_bound = scale
        else:
            data = flp.OneHot(d, scale)
            data_bound = scale
        circuit = flp.Circuit([data])
    except flp.CircuitError as e:
        raise ValidationError(f"{e}; lower fractional_bits or the clip bound") from None
    if noise_tail < 0:
        raise ValidationError("the noise tail is a bound, at least 0")
    window = clients * data_bound + noise_tail
    if window >= 2**62:
        raise ValidationError("N·max |ỹ_j| + the nodes' noise tail must stay below 2^62 (no wrap modulo p); lower fractional_bits, the clip bound or N")
    return Plan(kind, circuit, d, data_bound, l2_bound, noise_tail, window, scale)


# -- client -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ShareForNode:
    """What node k receives (fields of ValidatedShare)."""

    measurement: bytes
    proof: bytes
    share_seed: bytes
    blind: bytes
    joint_rand_parts: bytes


def _job_part(job_id: str, spec_digest: bytes) -> bytes:
    if len(spec_digest) != SEED:
        raise ValueError(f"a validated job's proofs are bound to its {SEED}-byte spec digest (DcaParams.spec_digest); got {len(spec_digest)} bytes")
    j = job_id.encode()
    return len(j).to_bytes(2, "big") + j + spec_digest


def binder(job_id: str, client_id: str, spec_digest: bytes) -> bytes:
    """What a client's share expansion, joint-randomness parts and query randomness are bound to: the job id, the
    job's whole spec (its 32-byte spec digest, :mod:`mpdp.dca.spec`) and the client id, length-prefixed. A proof made
    for one spec fails at a node announced another, even where both specs give the same circuit."""
    c = client_id.encode()
    return _job_part(job_id, spec_digest) + len(c).to_bytes(2, "big") + c


def binders(job_id: str, client_ids: Sequence[str], spec_digest: bytes) -> list[bytes]:
    """:func:`binder` of every client id (the job's part encoded once)."""
    head = _job_part(job_id, spec_digest)
    out = []
    for cid in client_ids:
        c = cid.encode()
        out.append(head + len(c).to_bytes(2, "big") + c)
    return out


def _part(blind: bytes, bind: bytes, k: int, material: bytes | memoryview) -> bytes:
    h = hashlib.shake_128(len(_DST_PART).to_bytes(2, "big") + _DST_PART + blind + bind + k.to_bytes(2, "big"))
    h.update(material)  # = F.xof_bytes(_DST_PART, blind, bind ‖ k ‖ material), without copying the share
    return h.digest(SEED)


def joint_rand_seed(parts: list[bytes]) -> bytes:
    return F.xof_bytes(_DST_SEED, b"", b"".join(parts), SEED)


def joint_rand_seed_with(hint: bytes, k: int, part: bytes) -> bytes:
    """:func:`joint_rand_seed` of the M parts of ``hint`` with part k replaced by ``part`` (node k's own)."""
    return joint_rand_seed([hint[: SEED * k], part, hint[SEED * (k + 1) :]])


def _joint_rands(p: Plan, seeds: list[bytes]) -> np.ndarray:
    """ρ for many clients, (clients, R, jr_len): row i = XOF(seeds[i])."""
    c = p.circuit
    return F.xof_many(_DST_JR, seeds, b"", c.proofs * c.jr_len).reshape(len(seeds), c.proofs, c.jr_len)


def expand_share(p: Plan, seed: bytes, bind: bytes, k: int) -> tuple[np.ndarray, np.ndarray]:
    """A seed-compressed helper's (measurement share, proof share): the AES-256-CTR keystream (:func:`mpdp.math.field.prg`)
    under the key XOF(seed, job ‖ spec ‖ client ‖ k), bound to its job, client and node like the seed's other uses."""
    c = p.circuit
    flat = F.prg(F.xof_bytes(_DST_SHARE, seed, bind + k.to_bytes(2, "big"), SEED), p.share_len)
    return flat[: c.meas_len], flat[c.meas_len :].reshape(c.proofs, c.proof_len)


def expand_shares(p: Plan, seeds: Sequence[bytes], binds: Sequence[bytes], k: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`expand_share` for many clients (seeds[i] bound by binds[i]): (measurement shares (n, meas_len), proof shares
    (n, R, proof_len)), row i the same as expand_share(p, seeds[i], binds[i], k), the keystreams drawn together."""
    c = p.circuit
    head, node = len(_DST_SHARE).to_bytes(2, "big") + _DST_SHARE, k.to_bytes(2, "big")
    keys = [hashlib.shake_128(head + seed + bind + node).digest(SEED) for seed, bind in zip(seeds, binds)]  # = F.xof_bytes(_DST_SHARE, seed, bind ‖ k, SEED)
    flat = F.prg_many(keys, p.share_len)  # rows of a wider array: the measurement and proof columns are views
    return flat[:, : c.meas_len], flat[:, c.meas_len :].reshape(len(keys), c.proofs, c.proof_len)


def encode_input(p: Plan, data: np.ndarray) -> np.ndarray:
    """The bits of ỹ; ValidationError if the input is outside the predicate (an honest client's never is)."""
    data = np.asarray(data, dtype=np.int64)
    if data.ndim != 1:
        raise ValidationError("one client's input is a vector")
    return encode_inputs(p, data[None, :])[0]


def encode_inputs(p: Plan, data: np.ndarray) -> np.ndarray:
    """:func:`encode_input` for many clients (rows of ``data``), shape (rows, meas_len)."""
    values = [np.asarray(data, dtype=np.int64)]
    if p.kind in ("one-hot", "votes"):  # ỹ = z·2^f with z 0/1: the circuit's input is z itself (its output is scale·z)
        if bool((values[0] % p.scale != 0).any()):
            raise ValidationError(f"a {p.kind} input is a 0/1 vector times 2^f")
        values[0] = values[0] // p.scale
    try:
        return p.circuit.encode_rows(values)
    except flp.CircuitError as e:
        raise ValidationError(str(e)) from None


BATCH_ELEMENTS = 1 << 16  # clients proven or verified together hold at most this many measurement elements (512 kB a copy: in cache)
SMALL_CIRCUIT, SMALL_BATCH_ELEMENTS = 1024, 1 << 18  # a circuit this small: 4× as many clients a batch


def batch_size(p: Plan) -> int:
    """How many clients to prove or verify at once (bounded memory; the circuit code takes batch axes). A small
    circuit's batch is larger: at d = 10 (586 elements) each step's fixed cost, spread over 111 clients, was ≈ 2 µs of
    a node's ≈ 27 µs of verification per client; over 447, 0.5 µs."""
    most = SMALL_BATCH_ELEMENTS if p.circuit.meas_len <= SMALL_CIRCUIT else BATCH_ELEMENTS
    return max(1, most // p.circuit.meas_len)


def client_shares(p: Plan, job_id: str, client_id: str, meas: np.ndarray, nodes: int, *, seeded: bool) -> list[ShareForNode]:
    """Steps 2–4 for one client: one :class:`ShareForNode` per node. Randomness: see the module docstring."""
    return client_shares_many(p, job_id, [client_id], np.asarray(meas)[None, :], nodes, seeded=seeded)[0]


def client_shares_many(p: Plan, job_id: str, client_ids: list[str], meas: np.ndarray, nodes: int, *, seeded: bool) -> list[list[ShareForNode]]:
    """Steps 2–4 for many clients at once (rows of ``meas``), proven in one batched call: per client, one
    :class:`ShareForNode` per node, proven :func:`batch_size` clients at a time. Randomness: see the module docstring."""
    out: list[list[ShareForNode]] = []
    for packed in _proven(p, job_id, client_ids, meas, nodes, seeded=seeded):
        for i in range(packed[0].clients):
            out.append([pk.row(i) for pk in packed])
    return out


@dataclass(frozen=True)
class PackedShares:
    """Many clients' :class:`ShareForNode` for one node, field by field (the ValidatedShares message): row i of each
    field is client i's."""

    clients: int
    measurements: bytes
    proofs: bytes
    share_seeds: bytes
    blinds: bytes
    joint_rand_parts: bytes

    def row(self, i: int) -> ShareForNode:
        def cut(data: bytes) -> bytes:
            w = len(data) // self.clients
            return data[w * i : w * (i + 1)]

        return ShareForNode(cut(self.measurements), cut(self.proofs), cut(self.share_seeds), cut(self.blinds), cut(self.joint_rand_parts))

    def rows(self, keep: Sequence[int]) -> PackedShares:
        """The batch of rows ``keep`` only (call after :func:`check_packed_lengths`)."""
        def cut(data: bytes) -> bytes:
            if not data:
                return data
            w, view = len(data) // self.clients, memoryview(data)
            return b"".join(view[w * i : w * (i + 1)] for i in keep)

        return PackedShares(len(keep), *(cut(getattr(self, f)) for f in PACKED_FIELDS))


def client_shares_packed(p: Plan, job_id: str, client_ids: list[str], meas: np.ndarray, nodes: int, *, seeded: bool) -> list[PackedShares]:
    """Steps 2–4 for many clients (a load generator's batch): one :class:`PackedShares` per node, the same shares as
    :func:`client_shares_many` without a Python object per client."""
    parts = list(_proven(p, job_id, client_ids, meas, nodes, seeded=seeded))
    if len(parts) == 1:
        return parts[0]
    return [PackedShares(len(client_ids), *(b"".join(getattr(pk[k], f) for pk in parts) for f in PACKED_FIELDS)) for k in range(nodes)]


PACKED_FIELDS = ("measurements", "proofs", "share_seeds", "blinds", "joint_rand_parts")  # the ValidatedShares fields


def _proven(p: Plan, job_id: str, client_ids: list[str], meas: np.ndarray, nodes: int, *, seeded: bool) -> Iterator[list[PackedShares]]:
    meas = np.asarray(meas, dtype=np.uint64).reshape(len(client_ids), p.circuit.meas_len)
    step = batch_size(p)
    for at in range(0, len(client_ids), step):
        yield _client_shares_batch(p, job_id, client_ids[at : at + step], meas[at : at + step], nodes, seeded=seeded)


def _client_shares_batch(p: Plan, job_id: str, client_ids: list[str], meas: np.ndarray, nodes: int, *, seeded: bool) -> list[PackedShares]:
    c = p.circuit
    b = len(client_ids)
    binds = binders(job_id, client_ids, p.spec_digest)
    blinds = os.urandom(SEED * nodes * b)  # client i's blind for node k: bytes [SEED·(i·nodes + k), +SEED)
    seeds = os.urandom(SEED * nodes * b) if seeded else b""
    stream = Drbg.from_os()  # the helpers' full shares: AES-256-CTR keyed from os.urandom, fresh per batch
    helper_meas = np.empty((nodes - 1, b, c.meas_len), dtype=np.uint64)
    helper_proof = np.empty((nodes - 1, b, c.proofs, c.proof_len), dtype=np.uint64)
    for k in range(1, nodes):
        if seeded:
            helper_meas[k - 1], helper_proof[k - 1] = expand_shares(p, [seeds[SEED * (i * nodes + k) : SEED * (i * nodes + k + 1)] for i in range(b)], binds, k)
        else:
            helper_meas[k - 1] = F.rand_stream(stream, b * c.meas_len).reshape(b, c.meas_len)
            helper_proof[k - 1] = F.rand_stream(stream, b * c.proofs * c.proof_len).reshape(b, c.proofs, c.proof_len)
    lead_meas = meas
    for k in range(nodes - 1):
        lead_meas = F.sub(lead_meas, helper_meas[k])
    lead_bytes = memoryview(F.encode(lead_meas)).cast("B")
    helper_bytes = [memoryview(F.encode(helper_meas[k])).cast("B") for k in range(nodes - 1)]
    w = F.ENCODED_SIZE * c.meas_len
    jr_seeds, hints = [], []
    for i in range(b):
        own = blinds[SEED * i * nodes : SEED * (i + 1) * nodes]
        parts = [_part(own[:SEED], binds[i], 0, lead_bytes[w * i : w * (i + 1)])]
        for k in range(1, nodes):
            material = seeds[SEED * (i * nodes + k) : SEED * (i * nodes + k + 1)] if seeded else helper_bytes[k - 1][w * i : w * (i + 1)]
            parts.append(_part(own[SEED * k : SEED * (k + 1)], binds[i], k, material))
        jr_seeds.append(joint_rand_seed(parts))
        hints.append(b"".join(parts))
    jr = _joint_rands(p, jr_seeds)
    proof = c.prove(meas, jr, F.rand(b * c.proofs * c.arity).reshape(b, c.proofs, c.arity))
    lead_proof = proof
    for k in range(nodes - 1):
        lead_proof = F.sub(lead_proof, helper_proof[k])
    hint_blob = b"".join(hints)
    by_node = np.frombuffer(blinds, dtype=np.uint8).reshape(b, nodes, SEED)
    seed_rows = np.frombuffer(seeds, dtype=np.uint8).reshape(b, nodes, SEED) if seeded else None
    out = [PackedShares(b, bytes(lead_bytes), F.encode(lead_proof), b"", by_node[:, 0].tobytes(), hint_blob)]
    for k in range(1, nodes):
        if seed_rows is not None:
            out.append(PackedShares(b, b"", b"", seed_rows[:, k].tobytes(), by_node[:, k].tobytes(), hint_blob))
        else:
            out.append(PackedShares(b, bytes(helper_bytes[k - 1]), F.encode(helper_proof[k - 1]), b"", by_node[:, k].tobytes(), hint_blob))
    return out


# -- node ---------------------------------------------------------------------------------------------------
def verify_key_piece() -> bytes:
    """Node k's piece of a job's verify key: 32 bytes from the operating system's CSPRNG."""
    return os.urandom(SEED)


def verify_key(job_id: str, pieces: list[bytes], spec_digest: bytes) -> bytes:
    """The job's verify key from every node's piece, in node order: SHAKE128 of the job id, its spec digest and the M
    pieces. With one piece uniform and unseen by a party, the key is uniform to that party (docs/protocols/dca.md,
    "The verify key"); nodes announced different specs derive different keys."""
    if not pieces or any(len(x) != SEED for x in pieces):
        raise ValueError(f"a verify key takes one {SEED}-byte piece per node")
    return F.xof_bytes(_DST_KEY, b"", binder(job_id, "", spec_digest) + b"".join(pieces), SEED)


def query_rand(p: Plan, verify_key: bytes, bind: bytes) -> np.ndarray:
    return flp.query_points(p.circuit, _DST_QUERY, verify_key, bind)


def check_share(p: Plan, share: ShareForNode, *, job_id: str, client_id: str, k: int, nodes: int, seeded: bool, verify_key: bytes) -> tuple[np.ndarray, bytes]:
    """Node k's step for one client: (its output share of ỹ + η, its record for :func:`decide`).
    MalformedShare if a length or an element is wrong (the client is then refused, never summed)."""
    got = check_shares(p, [share], job_id=job_id, client_ids=[client_id], k=k, nodes=nodes, seeded=seeded, verify_key=verify_key)[0]
    if isinstance(got, MalformedShare):
        raise got
    return got


def _parse(p: Plan, share: ShareForNode, bind: bytes, k: int, nodes: int, seeded: bool) -> tuple[np.ndarray, np.ndarray, bytes]:
    c = p.circuit
    if len(share.blind) != SEED or len(share.joint_rand_parts) != SEED * nodes:
        raise MalformedShare(f"a validated share needs a {SEED}-byte blind and {nodes} × {SEED} bytes of joint-randomness parts")
    if seeded and k >= 1:
        if len(share.share_seed) != SEED or share.measurement or share.proof:
            raise MalformedShare(f"node {k} takes a {SEED}-byte share seed in this job")
        meas, proof = expand_share(p, share.share_seed, bind, k)
        return meas, proof, share.share_seed
    if share.share_seed:
        raise MalformedShare(f"node {k} takes full shares in this job")
    try:
        meas = F.decode(share.measurement, c.meas_len)
        proof = F.decode(share.proof, c.proofs * c.proof_len).reshape(c.proofs, c.proof_len)
    except F.NotCanonical as e:
        raise MalformedShare(f"wrong length or a non-canonical element: {e}") from None
    return meas, proof, share.measurement


def check_shares(p: Plan, shares: list[ShareForNode], *, job_id: str, client_ids: list[str], k: int, nodes: int, seeded: bool,
                 verify_key: bytes) -> list[tuple[np.ndarray, bytes] | MalformedShare]:
    """:func:`check_share` for many clients, the well-formed ones queried together (in batches of
    :func:`batch_size`): per client (output share, record), or the MalformedShare that refuses it."""
    out: list[tuple[np.ndarray, bytes] | MalformedShare] = []
    step = batch_size(p)
    for at in range(0, len(shares), step):
        parsed: list[_Parsed | MalformedShare] = []
        for share, cid in zip(shares[at : at + step], client_ids[at : at + step]):
            bind = binder(job_id, cid, p.spec_digest)
            try:
                meas, proof, material = _parse(p, share, bind, k, nodes, seeded)
            except MalformedShare as e:
                parsed.append(e)
                continue
            parsed.append(_Parsed(meas, proof, share.blind, share.joint_rand_parts, material, bind))
        out += _verify(p, parsed, k=k, nodes=nodes, verify_key=verify_key)
    return out


@dataclass(frozen=True)
class _Parsed:
    """One client's well-formed share at node k: what :func:`_verify` needs."""

    meas: np.ndarray
    proof: np.ndarray
    blind: bytes | memoryview
    hint: bytes | memoryview  # the M joint-randomness parts
    material: bytes | memoryview  # what node k's part hashes: its measurement share, or its share seed
    bind: bytes


def _verify(p: Plan, parsed: list[_Parsed | MalformedShare], *, k: int, nodes: int, verify_key: bytes) -> list[tuple[np.ndarray, bytes] | MalformedShare]:
    """Node k's verifier shares for the well-formed clients of ``parsed`` in one batched query (at most
    :func:`batch_size` clients): (output share, record) per client, a MalformedShare passed through."""
    good = [x for x in parsed if not isinstance(x, MalformedShare)]
    if not good:
        return list(parsed)  # type: ignore[arg-type]
    rows, records = _verify_rows(p, np.stack([g.meas for g in good]), np.stack([g.proof for g in good]), [g.blind for g in good],
                                 [g.hint for g in good], [g.material for g in good], [g.bind for g in good], k=k, nodes=nodes, verify_key=verify_key)
    out: list[tuple[np.ndarray, bytes] | MalformedShare] = []
    j = 0
    for x in parsed:
        if isinstance(x, MalformedShare):
            out.append(x)
        else:
            out.append((rows[j], records[j].tobytes()))
            j += 1
    return out


_PART_HEAD = len(_DST_PART).to_bytes(2, "big") + _DST_PART  # F.xof_bytes's prefix for each XOF below, computed once
_SEED_HEAD = len(_DST_SEED).to_bytes(2, "big") + _DST_SEED


def _verify_rows(p: Plan, meas: np.ndarray, proof: np.ndarray, blinds: Sequence[bytes | memoryview], hints: Sequence[bytes | memoryview],
                 materials: Sequence[bytes | memoryview], binds: list[bytes], *, k: int, nodes: int, verify_key: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Node k's step for well-formed clients given as arrays (meas (g, meas_len), proof (g, R, proof_len)) and, per
    client, its blind, its M parts, what its part J_k hashes and its binder: (output shares (g, output_len), records
    (g, record_bytes) uint8: verifier share, own part, joint-randomness seed)."""
    c = p.circuit
    g = len(binds)
    node, lo, hi = k.to_bytes(2, "big"), SEED * k, SEED * (k + 1)
    own, seeds = [], []
    for blind, hint, material, bind in zip(blinds, hints, materials, binds):
        h = hashlib.shake_128(_PART_HEAD + blind + bind + node)  # = _part(blind, bind, k, material)
        h.update(material)
        part = h.digest(SEED)
        own.append(part)
        seeds.append(hashlib.shake_128(_SEED_HEAD + hint[:lo] + part + hint[hi:]).digest(SEED))  # = joint_rand_seed_with(hint, k, part)
    jr = _joint_rands(p, seeds)
    queries = flp.query_points_many(c, _DST_QUERY, verify_key, binds)
    vw = F.ENCODED_SIZE * c.proofs * c.verifier_len
    records = np.empty((g, vw + 2 * SEED), dtype=np.uint8)
    records[:, :vw] = np.ascontiguousarray(c.query(meas, proof, queries, jr, nodes), dtype=F.U64).reshape(g, -1).view(np.uint8)
    records[:, vw : vw + SEED] = np.frombuffer(b"".join(own), dtype=np.uint8).reshape(g, SEED)
    records[:, vw + SEED :] = np.frombuffer(b"".join(seeds), dtype=np.uint8).reshape(g, SEED)
    return c.truncate(meas, nodes), records


class Checked:
    """Node k's results for a batch of clients (:func:`check_packed`), as arrays: client i's output share ``rows[i]``
    and record ``records[i]`` (record_bytes of uint8), unless ``refused`` holds the MalformedShare that refuses it (its
    rows are then meaningless). Indexing gives one client's result as :func:`check_shares` does: (output share,
    record bytes) or the MalformedShare."""

    def __init__(self, rows: np.ndarray, records: np.ndarray, refused: dict[int, MalformedShare]) -> None:
        self.rows, self.records, self.refused = rows, records, refused

    def __len__(self) -> int:
        return int(self.records.shape[0])

    def __getitem__(self, i: int) -> tuple[np.ndarray, bytes] | MalformedShare:
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        bad = self.refused.get(i % len(self))
        return bad if bad is not None else (self.rows[i], self.records[i].tobytes())

    def __iter__(self) -> Iterator[tuple[np.ndarray, bytes] | MalformedShare]:
        return (self[i] for i in range(len(self)))

    def taken(self) -> np.ndarray:
        """The positions of the clients not refused, ascending."""
        if not self.refused:
            return np.arange(len(self))
        keep = np.ones(len(self), dtype=bool)
        keep[list(self.refused)] = False
        return np.flatnonzero(keep)


def check_packed_lengths(p: Plan, packed: PackedShares, *, k: int, nodes: int, seeded: bool) -> None:
    """MalformedShare unless every field of the batch is exactly ``packed.clients`` rows long for node k."""
    c, n = p.circuit, packed.clients
    if len(packed.blinds) != SEED * n or len(packed.joint_rand_parts) != SEED * nodes * n:
        raise MalformedShare(f"{n} validated shares need {n} × {SEED}-byte blinds and {n} × {nodes} × {SEED} bytes of joint-randomness parts")
    if seeded and k >= 1:
        if len(packed.share_seeds) != SEED * n or packed.measurements or packed.proofs:
            raise MalformedShare(f"node {k} takes {n} × {SEED}-byte share seeds in this job")
    else:
        wm, wp = F.ENCODED_SIZE * c.meas_len, F.ENCODED_SIZE * c.proofs * c.proof_len
        if packed.share_seeds or len(packed.measurements) != wm * n or len(packed.proofs) != wp * n:
            raise MalformedShare(f"node {k} takes {n} full shares of {wm} + {wp} bytes in this job")


def check_packed(p: Plan, packed: PackedShares, *, job_id: str, client_ids: list[str], k: int, nodes: int, seeded: bool,
                 verify_key: bytes) -> Checked:
    """:func:`check_shares` for a batch on the wire (the ValidatedShares of a ShareBatch): row i is client_ids[i]'s
    share, checked and verified as its own ClientShare would be (its part, joint randomness and query bound to its own
    id). MalformedShare for the whole batch if a field's length is not n rows (nothing taken), for one client if one
    of its elements is not canonical (in ``refused``)."""
    n = len(client_ids)
    if packed.clients != n:
        raise MalformedShare(f"{n} client ids for {packed.clients} validated shares")
    check_packed_lengths(p, packed, k=k, nodes=nodes, seeded=seeded)
    helper, c = seeded and k >= 1, p.circuit
    wm, wp = F.ENCODED_SIZE * c.meas_len, F.ENCODED_SIZE * c.proofs * c.proof_len
    blinds, hints = memoryview(packed.blinds), memoryview(packed.joint_rand_parts)
    rows: list[np.ndarray] = []
    records = np.zeros((n, p.record_bytes), dtype=np.uint8)
    refused: dict[int, MalformedShare] = {}
    step = batch_size(p)
    for at in range(0, n, step):
        stop = min(n, at + step)
        binds = binders(job_id, client_ids[at:stop], p.spec_digest)
        if helper:  # seed-compressed: every client's shares expanded from its seed into one array
            sd = memoryview(packed.share_seeds)
            seeds = [bytes(sd[SEED * i : SEED * (i + 1)]) for i in range(at, stop)]
            meas_rows, proof_rows = expand_shares(p, seeds, binds, k)
            keep = list(range(stop - at))
            materials: list[bytes | memoryview] = list(seeds)
        else:  # full shares: the batch's rows verified as arrays, straight from the message's bytes
            raw_m = memoryview(packed.measurements)[wm * at : wm * stop]
            meas_rows = np.frombuffer(raw_m, dtype=F.U64).reshape(stop - at, c.meas_len)
            proof_rows = np.frombuffer(memoryview(packed.proofs)[wp * at : wp * stop], dtype=F.U64).reshape(stop - at, c.proofs, c.proof_len)
            bad = np.asarray((meas_rows >= _P).any(axis=1) | (proof_rows >= _P).any(axis=(1, 2)))
            keep = np.flatnonzero(~bad).tolist()
            materials = [raw_m[wm * j : wm * (j + 1)] for j in keep]
        whole = len(keep) == stop - at
        got, recs = _verify_rows(p, meas_rows if whole else meas_rows[keep], proof_rows if whole else proof_rows[keep],
                                 [blinds[SEED * (at + j) : SEED * (at + j + 1)] for j in keep],
                                 [hints[SEED * nodes * (at + j) : SEED * nodes * (at + j + 1)] for j in keep], materials,
                                 binds if whole else [binds[j] for j in keep], k=k, nodes=nodes, verify_key=verify_key)
        if whole:
            rows.append(got)
            records[at:stop] = recs
            continue
        chunk = np.zeros((stop - at, got.shape[1]), dtype=got.dtype)
        chunk[keep] = got
        rows.append(chunk)
        records[[at + j for j in keep]] = recs
        for j in sorted(set(range(stop - at)) - set(keep)):
            refused[at + j] = MalformedShare("a non-canonical element")
    return Checked(np.concatenate(rows) if len(rows) > 1 else rows[0] if rows else np.zeros((0, c.output_len), dtype=np.uint64), records, refused)


def decide(p: Plan, records: list[bytes]) -> bool:
    """Valid iff every node used the joint randomness of the parts the nodes themselves computed, and the verifier
    shares add up to an accepting verifier message. Every node computes this from the same M records."""
    return bool(decide_many(p, [records])[0])


def decide_many(p: Plan, clients: list[list[bytes]]) -> np.ndarray:
    """:func:`decide` for many clients (each its M records), in one batched step (:func:`decide_records`). A boolean
    per client; a client with a record of the wrong length, or with another number of records than the first client,
    is invalid."""
    w = p.record_bytes
    n = len(clients)
    ok = np.zeros(n, dtype=bool)
    if not n:
        return ok
    m = len(clients[0])
    shaped = np.fromiter((len(recs) == m and all(len(r) == w for r in recs) for recs in clients), dtype=bool, count=n)
    good = np.flatnonzero(shaped)
    if not good.size or not m:
        return ok
    rows = clients if good.size == n else [clients[j] for j in good.tolist()]
    ok[good] = decide_records(p, np.frombuffer(b"".join([r for recs in rows for r in recs]), dtype=np.uint8).reshape(good.size, m, w))
    return ok


def decide_records(p: Plan, arr: np.ndarray) -> np.ndarray:
    """:func:`decide` for many clients whose M records lie side by side in one array (clients, M, record_bytes) of
    uint8: the seeds compared and the verifier messages summed and decided together (one XOF a client: its seed from
    the reported parts). A boolean per client."""
    c = p.circuit
    n, m, w = arr.shape
    if w != p.record_bytes:
        raise ValueError(f"a record is {p.record_bytes} bytes, not {w}")
    if not n or not m:
        return np.zeros(n, dtype=bool)
    vb = w - 2 * SEED
    span = m * SEED
    parts = np.ascontiguousarray(arr[:, :, vb : vb + SEED]).reshape(n, span).tobytes()
    want = b"".join([hashlib.shake_128(_SEED_HEAD + parts[span * j : span * (j + 1)]).digest(SEED) for j in range(n)])  # XOF(J_0 ‖ … ‖ J_(M−1))
    seeds_ok = (arr[:, :, vb + SEED :] == np.frombuffer(want, dtype=np.uint8).reshape(n, 1, SEED)).all(axis=(1, 2))
    v = np.ascontiguousarray(arr[:, :, :vb]).view(F.U64).reshape(n, m, c.proofs * c.verifier_len)
    canonical = ~np.asarray((v >= _P).any(axis=(1, 2)))
    total = F.sum(np.where(canonical[:, None, None], v, np.uint64(0)), axis=1).reshape(n, c.proofs, c.verifier_len)
    return np.asarray(seeds_ok & canonical & np.asarray(c.decide(total)), dtype=bool)


class Verdicts:
    """Node k's per-client records of a validated job, until each client's M records are in (then :meth:`settle`),
    and its own records until they ride in one of its received-set reports (:meth:`outgoing`).

    Held as arrays, nothing per client but a slot number: an open client (some record in, not yet settled) has a slot,
    a row of M records side by side and M flags (which nodes' records are in). Slots live in blocks of about 4 MB, added
    as more clients are open at once and never copied; a settled client's slot is reused, so memory follows the number
    of clients open at once (a node ahead of the others holds the clients they have not reported yet). The outbox
    keeps this node's records as the batches came."""

    BLOCK_BYTES = 1 << 22

    def __init__(self, p: Plan, nodes: int, own: int) -> None:
        self.plan = p
        self.nodes = nodes
        self.own = own
        self._width = p.record_bytes
        self._shift = max(0, (self.BLOCK_BYTES // (nodes * self._width)).bit_length() - 1)  # 2^shift slots a block
        self._slot = np.full(64, -1, dtype=np.int64)  # client index → its slot, −1 none
        self._blocks: list[np.ndarray] = []  # (2^shift, M, record_bytes) uint8 each
        self._haves: list[np.ndarray] = []  # (2^shift, M) bool each: whose record is in
        self._free = np.zeros(0, dtype=np.int64)  # free slots: _free[:_nfree]
        self._nfree = 0
        self._out_idx: list[np.ndarray] = []  # this node's records not yet sent, in the order they came
        self._out_rec: list[np.ndarray] = []
        self.rejected = 0

    def _slots(self, idx: np.ndarray) -> np.ndarray:
        """The slots of clients ``idx`` (distinct), one taken for each client that has none."""
        if idx.size and int(idx.max()) >= self._slot.size:
            grown = np.full(max(int(idx.max()) + 1, 2 * self._slot.size), -1, dtype=np.int64)
            grown[: self._slot.size] = self._slot
            self._slot = grown
        slots = self._slot[idx]
        new = np.flatnonzero(slots < 0)
        if new.size:
            while new.size > self._nfree:  # one more block of slots
                size, first = 1 << self._shift, len(self._blocks) << self._shift
                self._blocks.append(np.zeros((size, self.nodes, self._width), dtype=np.uint8))
                self._haves.append(np.zeros((size, self.nodes), dtype=bool))
                free = np.empty(first + size, dtype=np.int64)
                free[: self._nfree] = self._free[: self._nfree]
                free[self._nfree : self._nfree + size] = np.arange(first + size - 1, first - 1, -1)
                self._free, self._nfree = free, self._nfree + size
            got = self._free[self._nfree - new.size : self._nfree][::-1].copy()
            self._nfree -= new.size
            slots[new] = got
            self._slot[idx[new]] = got
        return slots

    def _by_block(self, slots: np.ndarray) -> Iterator[tuple[int, np.ndarray, np.ndarray | slice]]:
        """(block, positions in ``slots``, rows in that block: a slice when they are consecutive) for every block
        ``slots`` touch."""
        block = slots >> self._shift
        rows = slots & ((1 << self._shift) - 1)
        first, last = int(block.min()), int(block.max())
        if first == last:
            start = int(rows[0])
            run = int(rows[-1]) - start == rows.size - 1 and (rows.size < 2 or bool((np.diff(rows) == 1).all()))
            yield first, np.arange(slots.size), slice(start, start + rows.size) if run else rows
            return
        for b in np.unique(block).tolist():
            at = np.flatnonzero(block == b)
            yield b, at, rows[at]

    def _write(self, slots: np.ndarray, node: int, rec: np.ndarray) -> None:
        for b, at, rows in self._by_block(slots):
            self._blocks[b][rows, node] = rec if at.size == rec.shape[0] else rec[at]
            self._haves[b][rows, node] = True

    def put_own(self, i: int, record: bytes) -> None:
        self.put_own_many(np.array([i], dtype=np.int64), [record])

    def put_own_many(self, idx: np.ndarray, records: np.ndarray | Sequence[bytes]) -> None:
        """This node's records for clients ``idx`` (distinct): rows of an array (n, record_bytes), or bytes each."""
        rec = records if isinstance(records, np.ndarray) else np.frombuffer(b"".join(records), dtype=np.uint8)
        rec = rec.reshape(len(idx), self._width)
        if not len(idx):
            return
        idx = np.asarray(idx, dtype=np.int64)
        self._write(self._slots(idx), self.own, rec)
        self._out_idx.append(np.array(idx, dtype=np.int64))
        self._out_rec.append(np.array(rec, dtype=np.uint8))

    def put(self, node: int, idx: np.ndarray, blob: bytes) -> None:
        """Node ``node``'s records for ``idx`` (distinct; concatenated in that order); ValueError on a wrong length."""
        w = self._width
        if len(blob) != w * idx.size:
            raise ValueError(f"{idx.size} verifier records must be {w * idx.size} bytes, got {len(blob)}")
        if not idx.size:
            return
        self._write(self._slots(np.asarray(idx, dtype=np.int64)), node, np.frombuffer(blob, dtype=np.uint8).reshape(idx.size, w))

    def outgoing(self, idx: np.ndarray) -> bytes:
        """This node's records for ``idx`` (its report's clients, in the report's order), taken from the outbox;
        KeyError for a client whose record is not there."""
        idx = np.asarray(idx, dtype=np.int64)
        if not idx.size:
            return b""
        held = np.concatenate(self._out_idx) if self._out_idx else np.zeros(0, dtype=np.int64)
        recs = np.concatenate(self._out_rec) if self._out_rec else np.zeros((0, self._width), dtype=np.uint8)
        if held.size == idx.size and np.array_equal(held, idx):  # the usual case: every record held, in this order
            self._out_idx, self._out_rec = [], []
            return recs.tobytes()
        order = np.argsort(held, kind="stable")
        at = np.searchsorted(held[order], idx)
        found = at < held.size
        found[found] &= held[order][at[found]] == idx[found]
        if not bool(found.all()):
            raise KeyError(int(idx[~found][0]))
        pos = order[at]
        out = recs[pos].tobytes()
        left = np.ones(held.size, dtype=bool)
        left[pos] = False
        self._out_idx, self._out_rec = ([held[left]], [recs[left]]) if left.any() else ([], [])
        return out

    def settle(self, idx: np.ndarray) -> np.ndarray:
        """Decide the clients ``idx`` (distinct; every node's record is in): a boolean array, True = valid. Forgets
        them (a client some record of which is missing is invalid)."""
        idx = np.asarray(idx, dtype=np.int64)
        out = np.zeros(idx.size, dtype=bool)
        inside = idx < self._slot.size
        slots = np.full(idx.size, -1, dtype=np.int64)
        slots[inside] = self._slot[idx[inside]]
        held = np.flatnonzero(slots >= 0)
        if held.size:
            gone = slots[held]
            complete = np.zeros(held.size, dtype=bool)
            records = np.empty((held.size, self.nodes, self._width), dtype=np.uint8)
            for b, at, rows in self._by_block(gone):
                whole = at.size == gone.size
                complete[at if not whole else slice(None)] = self._haves[b][rows].all(axis=1)
                records[at if not whole else slice(None)] = self._blocks[b][rows]
                self._haves[b][rows] = False  # forget them: their slots are free again
            if complete.any():
                out[held[complete]] = decide_records(self.plan, records if complete.all() else records[complete])
            self._slot[idx[held]] = -1
            self._free[self._nfree : self._nfree + gone.size] = gone
            self._nfree += gone.size
        self.rejected += int(idx.size - np.count_nonzero(out))
        return out

    def clear(self) -> None:
        self._slot = np.full(64, -1, dtype=np.int64)
        self._blocks, self._haves = [], []
        self._free, self._nfree = np.zeros(0, dtype=np.int64), 0
        self._out_idx, self._out_rec = [], []
