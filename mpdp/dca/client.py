"""Client i of DCA (Heikkilä et al. 2017, Algorithm 1, steps 1–2): clip, add noise, encode, share, send.

:class:`ClientMachine` is one client on one device: it holds z_i and its own Drbg, and ``submit()``
returns the M messages m_{i,k} (one :class:`~mpdp.messages.dca_pb2.ClientShare` per node) plus the
ledger record. :class:`ClientCohort` simulates many clients in one process for the in-memory driver
and benchmarks: the same clipping, noise, encoding and sharing, vectorised over clients, drawn from
one Drbg and emitted as per-node :class:`~mpdp.messages.dca_pb2.ShareBatch` messages.

What the client guarantees by itself: |z_ij| ≤ c_j (it clips — clipping is the guarantee),
its noise is N(0, σ_client²) from a CSPRNG, and any M − 1 of its messages are uniform (Algorithm 1, step 2).
A validated job's client adds no noise: it rounds its data, proves it valid, and the compute nodes add the noise
(:mod:`mpdp.dca.validation`, :mod:`mpdp.dca.discrete`, "Node noise").
What it cannot check: the declared Δ₂ (the job's claim about its statistics, e.g. Algorithm 2's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from mpdp.dca import discrete, mechanism, sharing, states, validation
from mpdp.dca.agreement import roster_for
from mpdp.dca.engine import DcaMachine
from mpdp.dca.errors import InvalidJob
from mpdp.dca.params import DcaParams, valid_client_id
from mpdp.math.drbg import Drbg
from mpdp.math.fixedpoint import EncodingOverflow, encode_u64
from mpdp.messages import dca_pb2 as pb
from mpdp.protocol import LocalProtocolError, Output, Peer, Problem, Send, Spend


def node_peer(name: str) -> Peer:
    return Peer("compute_node", name)


def check_seeding(params: DcaParams, rng: Drbg) -> None:
    """A seeded (non-secret) generator may only serve a job marked as a simulation (DP noise comes from a CSPRNG)."""
    if rng.seeded and not params.seeded:
        raise InvalidJob("a seeded Drbg makes the release non-private, but the job carries no simulation seed")


def contributions(params: DcaParams, z: np.ndarray, rng: Drbg) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step 1 for one client (z of shape (d,)) or many ((n, d)): returns (clipped z, η, u = enc(z + η)).

    η ~ N(0, σ_client²) per coordinate (:func:`mpdp.dca.mechanism.client_noise`); enc has f fractional bits
    into Z_2^64 and refuses values beyond :attr:`DcaParams.encode_bound`.
    """
    z = np.asarray(z, dtype=np.float64)
    if z.shape[-1:] != (params.dimension,) or z.ndim not in (1, 2):
        raise InvalidJob(f"z must have shape (d,) or (n, d) with d = {params.dimension}, got {z.shape}")
    if not np.all(np.isfinite(z)):
        raise InvalidJob("z holds NaN or infinite values")
    c = params.clip_vector()
    if c.size and bool(np.all(c == c[0])):  # one bound for every coordinate: a scalar clip (same values, ~10× faster)
        clipped = np.clip(z, -float(c[0]), float(c[0]))
    else:
        clipped = np.clip(z, -c, c)
    if params.discrete is not None:
        return discrete_contributions(params, clipped, rng)
    # a secure-sum job adds no noise (DcaParams.secure_sum); every other job must (client_noise refuses σ = 0)
    eta = np.zeros_like(clipped) if params.secure_sum else mechanism.client_noise(rng, clipped.shape, params.sigma_client)
    try:
        u = encode_u64(clipped + eta, params.frac_bits, params.encode_bound)
    except EncodingOverflow as e:  # only a ~2^50-sigma noise draw gets here; data-independent
        raise LocalProtocolError(Problem.INTERNAL, f"encoding overflow: {e}") from None
    return clipped, eta, u


def discrete_contributions(params: DcaParams, clipped: np.ndarray, rng: Drbg) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step 1 in the `discrete-gaussian` mode: ỹ = conditional randomized rounding of z·2^f, η ~ N_Z(0, σ²) exactly
    (:func:`mpdp.dca.discrete.client_integers`), u = ỹ + η in Z_2^64 (two's complement). η is returned in real units."""
    acc = params.discrete
    assert acc is not None
    try:
        rounded, noise = discrete.client_integers(clipped, params.frac_bits, acc.sigma2, rng)
    except discrete.EncodeRefused as e:  # probability ≤ p_fail, data-independent; counted in the stated δ
        raise LocalProtocolError(Problem.INTERNAL, f"encoding overflow: {e}") from None
    u = (rounded + noise).view(np.uint64).reshape(clipped.shape)
    return clipped, noise.reshape(clipped.shape) / 2.0**params.frac_bits, u


class ClientMachine(DcaMachine):
    """Client i for one job. States: MUST_SEND_SHARES → DONE (table :data:`mpdp.dca.states.CLIENT_TABLE`)."""

    ROLE = states.CLIENT
    STATES = states.CLIENT_STATES
    TERMINAL = ("DONE", states.FAILED)
    TABLE = states.CLIENT_TABLE
    SPENDS = True  # the shares carry z_i: the client's Spend goes first

    def __init__(self, params: DcaParams, client_id: str, z: np.ndarray, rng: Drbg, *, keep_noise: bool = False, record: bool = True,
                 charge: tuple[dict, ...] | None = None) -> None:
        super().__init__(params.job_id, Peer("party", client_id), record=record)
        if not valid_client_id(client_id):
            raise InvalidJob(f"client id must be 1..256 UTF-8 bytes, got {client_id!r}")
        if params.has_roster and _roster_index(params, [client_id])[0] < 0:
            raise InvalidJob(f"client {client_id!r} is not on the roster of job {params.job_id}")
        check_seeding(params, rng)
        self.params = params
        self.client_id = client_id
        self._z = np.array(z, dtype=np.float64)
        if self._z.shape != (params.dimension,):
            raise InvalidJob(f"z must have shape ({params.dimension},), got {self._z.shape}")
        self._rng = rng.child(f"dca/{params.job_id}")
        self.keep_noise = keep_noise
        self.noise: np.ndarray | None = None  # η_i, kept only with keep_noise (tests)
        self.encoded: np.ndarray | None = None  # u_i, kept only with keep_noise (tests)
        # what the shares cost: the sum's own guarantee (DcaParams.ledger_entry) unless the job that asked for them
        # charges otherwise (a dp-gd round is covered by its job's one charge, an ensemble vote by the ensemble's)
        self.charge = charge

    def _sender_kind(self, sender: Peer) -> str | None:
        return None  # a client takes no messages

    def submit(self) -> list[Output]:
        """Steps 1–2: the client's Spend, then the M messages m_{i,k} (Send to node k)."""
        return self._local("submit")

    def _on_submit(self) -> list[Output]:
        prm = self.params
        if prm.validation is not None:
            return self._submit_validated()
        _, eta, u = contributions(prm, self._z, self._rng.child("noise"))
        masks_rng = self._rng.child("masks")
        out: list[Output] = [Spend(self.charge if self.charge is not None else (prm.ledger_entry(),))]
        if prm.seed_compressed:
            m0, seeds = sharing.share_u64_seeded_packed(u, prm.M, masks_rng)
            out.append(Send(node_peer(prm.nodes[0]), pb.ClientShare(job_id=self.job_id, client_id=self.client_id, spec_digest=prm.spec_digest, masked_vector=sharing.pack_u64(m0))))
            for k in range(1, prm.M):
                out.append(Send(node_peer(prm.nodes[k]), pb.ClientShare(job_id=self.job_id, client_id=self.client_id, spec_digest=prm.spec_digest, mask_seed=seeds[k - 1])))
        else:
            shares = sharing.share_u64(u, prm.M, masks_rng)
            for k in range(prm.M):
                out.append(Send(node_peer(prm.nodes[k]), pb.ClientShare(job_id=self.job_id, client_id=self.client_id, spec_digest=prm.spec_digest, masked_vector=sharing.pack_u64(shares[k]))))
        if self.keep_noise:
            self.noise, self.encoded = eta, u
        self._z[:] = 0.0  # the client's data is not needed any more
        return out

    def _submit_validated(self) -> list[Output]:
        """A validated job (:mod:`mpdp.dca.validation`): the integers ỹ (no noise: the compute nodes add it), their bits,
        Field64 shares and the proof."""
        prm = self.params
        plan = prm.validation
        assert plan is not None
        y = validated_values(prm, self._z, self._rng.child("noise"))
        try:
            meas = validation.encode_input(plan, y)
        except validation.ValidationError as e:  # never for an honest client's ỹ (validated_values keeps it in the predicate)
            raise LocalProtocolError(Problem.INTERNAL, f"encoding refused: {e}") from None
        out: list[Output] = [Spend(self.charge if self.charge is not None else (prm.ledger_entry(),))]
        for k, sh in enumerate(validation.client_shares(plan, self.job_id, self.client_id, meas, prm.M, seeded=prm.seed_compressed)):
            msg = pb.ValidatedShare(measurement=sh.measurement, proof=sh.proof, share_seed=sh.share_seed, blind=sh.blind, joint_rand_parts=sh.joint_rand_parts)
            out.append(Send(node_peer(prm.nodes[k]), pb.ClientShare(job_id=self.job_id, client_id=self.client_id, spec_digest=prm.spec_digest, validated=msg)))
        if self.keep_noise:  # a validated job's client adds no noise (the compute nodes do)
            self.noise, self.encoded = np.zeros(prm.dimension), y.view(np.uint64)
        self._z[:] = 0.0
        return out


def validated_values(params: DcaParams, z: np.ndarray, rng: Drbg) -> np.ndarray:
    """Step 1 of a validated job for one client: ỹ as int64 in units of 2^-f, no noise (the compute nodes add it).

    range: z clipped per coordinate; l2: clipped, then scaled into the ℓ2 ball of radius c; one-hot: z must be a one-hot
    0/1 vector (ỹ = z·2^f exactly). ỹ is the conditional randomized rounding of the discrete mode (or the nearest
    integer in a secure sum)."""
    z = np.asarray(z, dtype=np.float64)
    if z.shape != (params.dimension,):
        raise InvalidJob(f"z must hold d = {params.dimension} finite values")
    return validated_values_many(params, z[None, :], rng)[0]


def validated_values_many(params: DcaParams, Z: np.ndarray, rng: Drbg) -> np.ndarray:
    """:func:`validated_values` for the rows of Z (many simulated clients of a load generator drawing from one Drbg;
    one row: the same draws as :func:`validated_values`): ỹ of shape (rows, d)."""
    plan = params.validation
    assert plan is not None
    Z = np.asarray(Z, dtype=np.float64)
    if Z.ndim != 2 or Z.shape[1] != params.dimension or not np.all(np.isfinite(Z)):
        raise InvalidJob(f"z must hold d = {params.dimension} finite values")
    if plan.kind == "one-hot":
        if not (np.all((Z == 0) | (Z == 1)) and bool((Z.sum(axis=1) == 1).all())):
            raise InvalidJob("a one-hot job takes a vector of zeros with a single 1")
        clipped = Z
    elif plan.kind == "votes":
        C = params.vote_classes
        if not (np.all((Z == 0) | (Z == 1)) and (C == 2 or bool((Z.reshape(len(Z), -1, C).sum(axis=2) == 1).all()))):
            raise InvalidJob("a votes job takes 0/1 entries with one 1 per point")
        clipped = Z
    else:
        c = params.clip_vector()
        clipped = np.clip(Z, -c, c)
        if plan.kind == "l2":
            norm = np.linalg.norm(clipped, axis=1, keepdims=True)
            radius = float(c[0])
            clipped = np.where(norm > radius, clipped * (radius / np.maximum(norm, radius)), clipped)
    if params.discrete is None:  # a secure sum: the nearest integer
        return np.rint(clipped * 2.0**params.frac_bits).astype(np.int64)
    return discrete.rounded_integers(clipped, params.frac_bits, rng)  # 0/1·2^f: exact


def validated_cohort(params: DcaParams, client_ids: list[str], Z: np.ndarray, rng: Drbg, batch_size: int = 0) -> Iterator[tuple[list[str], list[pb.ShareBatch]]]:
    """Many simulated clients of a validated job (load generator, benchmarks; not private: one Drbg for all): per
    batch of ``batch_size`` clients (default :func:`mpdp.dca.validation.batch_size`), its client ids and one ShareBatch
    per node (out[k] goes to node k) carrying their ValidatedShares. A batch's values from one Drbg child
    (:func:`validated_values_many`), its proofs in batched calls (:func:`mpdp.dca.validation.client_shares_packed`);
    each client's shares and proof are exactly those its own :class:`ClientMachine` would send."""
    plan = params.validation
    if plan is None:
        raise InvalidJob("not a validated job")
    check_seeding(params, rng)
    Z = np.asarray(Z, dtype=np.float64)
    if Z.shape != (len(client_ids), params.dimension):
        raise InvalidJob(f"Z must have shape ({len(client_ids)}, {params.dimension}), got {Z.shape}")
    if len(set(client_ids)) != len(client_ids):
        raise InvalidJob("client ids must be distinct")
    indices = _roster_index(params, list(client_ids)) if params.has_roster else None
    if indices is not None and indices.size and int(indices.min()) < 0:
        raise InvalidJob(f"a client of the cohort is not on the roster of job {params.job_id}")
    step = batch_size or validation.batch_size(plan)
    for at in range(0, len(client_ids), step):
        ids = client_ids[at : at + step]
        ys = validated_values_many(params, Z[at : at + step], rng.child(f"noise/{at}"))
        try:
            meas = validation.encode_inputs(plan, ys)
        except validation.ValidationError as e:  # never for an honest client's ỹ
            raise LocalProtocolError(Problem.INTERNAL, f"encoding refused: {e}") from None
        packed = validation.client_shares_packed(plan, params.job_id, ids, meas, params.M, seeded=params.seed_compressed)
        named = {"client_indices": indices[at : at + step].astype("<u4").tobytes()} if indices is not None else {"client_ids": ids}
        yield ids, [pb.ShareBatch(job_id=params.job_id, spec_digest=params.spec_digest, validated=pb.ValidatedShares(
            measurements=sh.measurements, proofs=sh.proofs, share_seeds=sh.share_seeds, blinds=sh.blinds, joint_rand_parts=sh.joint_rand_parts), **named)
            for sh in packed]


@dataclass
class CohortBatch:
    """One batch of simulated clients: per-node ShareBatch messages and, with keep_noise, their contributions."""

    client_ids: list[str]
    batches: list[pb.ShareBatch]  # batches[k] goes to node k
    clipped: np.ndarray | None
    noise: np.ndarray | None
    encoded: np.ndarray | None


class ClientCohort:
    """Many simulated clients in one process (driver, benchmarks). Not a deployment role: one Drbg feeds all
    of them, so it is only as private as that generator; ``lost`` drops chosen (client, node) messages."""

    def __init__(self, params: DcaParams, client_ids: list[str], Z: np.ndarray, rng: Drbg, *, keep_noise: bool = False) -> None:
        check_seeding(params, rng)
        if params.validation is not None:
            raise InvalidJob("a validated job takes one proof per client: simulate its clients with ClientMachine")
        Z = np.asarray(Z, dtype=np.float64)
        if Z.shape != (len(client_ids), params.dimension):
            raise InvalidJob(f"Z must have shape ({len(client_ids)}, {params.dimension}), got {Z.shape}")
        if len(set(client_ids)) != len(client_ids):
            raise InvalidJob("client ids must be distinct")
        self.params = params
        self.client_ids = list(client_ids)
        # a roster job's batches name clients by roster index (4 bytes each, no id strings for the nodes to map)
        self.indices: np.ndarray | None = None
        if params.has_roster:
            self.indices = _roster_index(params, self.client_ids)
            if self.indices.size and int(self.indices.min()) < 0:
                raise InvalidJob(f"a client of the cohort is not on the roster of job {params.job_id}")
        self.Z = Z
        self.rng = rng.child(f"dca/{params.job_id}/cohort")
        self.keep_noise = keep_noise

    def batches(self, batch_size: int, lost: set[tuple[int, int]] | None = None) -> Iterator[CohortBatch]:
        """Yield the cohort in batches of ``batch_size`` clients (indices into client_ids, in order)."""
        prm = self.params
        lost = lost or set()
        for start in range(0, len(self.client_ids), batch_size):
            stop = min(start + batch_size, len(self.client_ids))
            ids = self.client_ids[start:stop]
            named = self._namer(start, stop)
            clipped, eta, u = contributions(prm, self.Z[start:stop], self.rng.child(f"noise/{start}"))
            masks_rng = self.rng.child(f"masks/{start}")
            msgs: list[pb.ShareBatch] = []
            if prm.seed_compressed:
                m0, seeds = sharing.share_u64_seeded_packed(u, prm.M, masks_rng)  # seeds[k−1]: node k's seeds, packed
                if not lost:
                    msgs.append(pb.ShareBatch(job_id=prm.job_id, spec_digest=prm.spec_digest, masked_vectors=sharing.pack_u64(m0), **named(None)))
                    msgs += [pb.ShareBatch(job_id=prm.job_id, spec_digest=prm.spec_digest, mask_seeds=seeds[k - 1], **named(None)) for k in range(1, prm.M)]
                else:
                    keep = _kept(start, stop, 0, lost)
                    msgs.append(pb.ShareBatch(job_id=prm.job_id, spec_digest=prm.spec_digest, masked_vectors=sharing.pack_u64(m0[keep]), **named(keep)))
                    for k in range(1, prm.M):
                        keep = _kept(start, stop, k, lost)
                        blob = seeds[k - 1]
                        kept = b"".join(blob[sharing.SEED_BYTES * j : sharing.SEED_BYTES * (j + 1)] for j in keep)
                        msgs.append(pb.ShareBatch(job_id=prm.job_id, spec_digest=prm.spec_digest, mask_seeds=kept, **named(keep)))
            elif not lost:
                shares = sharing.share_u64(u, prm.M, masks_rng)
                template = pb.ShareBatch(job_id=prm.job_id, spec_digest=prm.spec_digest, **named(None))  # ids converted once, copied M times in C
                for k in range(prm.M):
                    msg = pb.ShareBatch()
                    msg.CopyFrom(template)
                    msg.masked_vectors = sharing.pack_u64(shares[k])
                    msgs.append(msg)
            else:
                shares = sharing.share_u64(u, prm.M, masks_rng)
                for k in range(prm.M):
                    keep = _kept(start, stop, k, lost)
                    msgs.append(pb.ShareBatch(job_id=prm.job_id, spec_digest=prm.spec_digest, masked_vectors=sharing.pack_u64(shares[k][keep]), **named(keep)))
            yield CohortBatch(ids, msgs, clipped if self.keep_noise else None, eta if self.keep_noise else None, u if self.keep_noise else None)


    def _namer(self, start: int, stop: int):
        """keep (positions in the batch, None = all) → the ShareBatch fields naming those clients."""
        if self.indices is not None:
            packed = self.indices[start:stop].astype("<u4")
            return lambda keep: {"client_indices": (packed if keep is None else packed[keep]).tobytes()}
        ids = self.client_ids[start:stop]
        return lambda keep: {"client_ids": ids if keep is None else [ids[j] for j in keep]}


def _roster_index(params: DcaParams, ids: list[str]) -> np.ndarray:
    return roster_for(params).lookup(ids)


def _kept(start: int, stop: int, k: int, lost: set[tuple[int, int]]) -> list[int]:
    if not lost:
        return list(range(stop - start))
    return [j for j in range(stop - start) if (start + j, k) not in lost]
