"""Charlie, the untrusted curator of the Pathak–Rane–Raj protocol (their Sec. 3.2; messages in
docs/protocols/pathak2010.md).

Charlie holds ζ = (pk′, sk′) and the DGK key of the comparisons, never sk of ξ. He sees π1(b) only
through the shuffler, ã never, and of the comparisons only orderings of π2∘π1-permuted
positions. States are named for what he awaits next; the table is
:data:`mpdp.pathak2010.states.CURATOR_TABLE`.
"""

from __future__ import annotations

from mpdp import limits
from mpdp.math import comparison, sharing
from mpdp.math.opcount import OpCounter
from mpdp.pathak2010 import packing
from mpdp.math.paillier import CiphertextError, PublicKey, check_key_bits
from mpdp.messages import common_pb2, pathak2010_pb2 as pb
from mpdp.math.drbg import Drbg
from mpdp.pathak2010 import states, tournament
from mpdp.pathak2010.params import PathakParams
from mpdp.pathak2010.resources import CuratorResources
from mpdp.protocol import CURATOR, FAILED, Machine, Output, Peer, Problem, Publish, RemoteProtocolError, Send, StageClock, require

TRUST_MODEL = (
    "honest-but-curious parties and curator; the curator colludes with no party; "
    "known residual leak: the smallest party knows the noise it contributed (docs/limitations.md)"
)


def trust_model(params: PathakParams) -> str:
    """The trust model of a job's release: the smallest-party leak, or the coalition bound t of the distributed noise."""
    if not params.distributed:
        return TRUST_MODEL
    t = params.calibration.colluders
    return (
        "honest-but-curious parties and curator; the curator colludes with no party; every party draws a share of the "
        f"Gaussian noise and no party knows it: the guarantee holds against any {t} colluding part{'y' if t == 1 else 'ies'} "
        "pooling their shares (pathak2010.md, Distributed Gaussian noise)"
    )


class CuratorMachine(Machine):
    ROLE = "curator"
    STATES = states.CURATOR_STATES
    TERMINAL = ("PUBLISHED", FAILED)
    TABLE = states.CURATOR_TABLE
    PARTICIPANTS = frozenset({"party", "leader"})

    def __init__(self, params: PathakParams, spec: pb.PathakJobSpec, party_addresses: dict[str, str], resources: CuratorResources) -> None:
        super().__init__(params.job_id, CURATOR)
        self.params = params
        self.spec = spec
        self.addresses = dict(party_addresses)
        self.res = resources
        self.ops = OpCounter()
        self.rng: Drbg = (
            Drbg.from_seed(spec.simulation_seed).child("curator") if params.seeded else resources.rng.child(f"job/{params.job_id}")
        )
        self.stages = StageClock(resources.clock)
        self.d = 0
        self.party_ops: OpCounter = OpCounter()
        self._b_tilde: list[int] = []
        self._own_piece: list[int] | None = None
        self._zero_pieces: list[list[int]] = []  # S3.3 for c_0, drawn before c_0 is known: pieces 1..K uniform, piece 0 = −Σ
        self.smallest_position: int | None = None  # j̃, in π2-positions (Charlie's view only)
        self._tau: list[int] = []  # τ: Charlie's secret tie-break rank of each position (Stage 1 tournament)
        self._round = 0  # the tournament round whose BlindedComparisons Charlie awaits
        self._positions: list[int] = []  # that round's positions
        self._xi: PublicKey | None = None  # ξ, from P1's PartyPublicKey
        self._r: list[int] = []  # S1.4's masks r_k, and ξ(r_k), made as soon as ξ arrives (before the size shares)
        self._enc_r: list[int] = []
        self._remainders: list[int] | None = None  # π1(b), decrypted when SizeRemainders arrives

    @property
    def stage(self) -> str:
        return states.CURATOR_STAGE[self.state]

    def start(self) -> list[Output]:
        """S0: announce the job to every party with Charlie's public keys."""
        self.stages.enter("setup")
        keys = self.res.secrets.public
        ck = pb.CuratorKeys(
            paillier_n=_b(keys.paillier.n),
            dgk_n=_b(keys.dgk.n),
            dgk_g=_b(keys.dgk.g),
            dgk_h=_b(keys.dgk.h),
            dgk_u=keys.dgk.u,
            dgk_r_bits=keys.dgk.r_bits,
        )
        ann = pb.JobAnnouncement(job_id=self.job_id, spec=self.spec, party_addresses=self.addresses, curator_keys=ck)
        return [Send(Peer("party", p), ann) for p in self.params.parties]

    # -- engine hooks ------------------------------------------------------------------
    def _kinds(self, sender: Peer) -> frozenset[str]:
        if sender.role != "party" or sender.name not in self.params.parties:
            return frozenset()
        return frozenset({"party", "leader"}) if sender.name == self.params.parties[0] else frozenset({"party"})

    def _required(self, state: str) -> list[tuple[type, str]]:
        p = self.params.parties
        if state == "AWAIT_ACCEPTANCES":
            return [(pb.JobAcceptance, n) for n in p]
        if state == "AWAIT_SIZE_SHARES":
            return [(pb.PartyPublicKey, p[0]), (pb.SizeRemainders, p[0])] + [(pb.EncryptedSizeShare, n) for n in p]
        if state == "AWAIT_BLINDED_COMPARISONS":
            return [(pb.BlindedComparisons, p[0])]
        if state == "AWAIT_MASKED_NOISE":
            return [(pb.MaskedNoise, p[0])]
        if state == "AWAIT_PUBLISHED_SHARES":
            return [(pb.ResharePiece, n) for n in p] + [(pb.PublishedShare, n) for n in p]
        raise AssertionError(state)

    def _check_shape(self, message) -> None:
        K = self.params.K
        if isinstance(message, pb.JobAcceptance):  # d sizes every later step and the call deadlines (limits table)
            require(message.dimension <= limits.MAX_PATHAK_DIMENSION, Problem.MALFORMED, f"JobAcceptance dimension {message.dimension} exceeds {limits.MAX_PATHAK_DIMENSION}")
            require(len(message.pi1_commitment) == 32, Problem.MALFORMED, "JobAcceptance must carry a 32-byte π1 commitment")
        elif isinstance(message, pb.SizeRemainders):
            require(len(message.ciphertexts) == K, Problem.MALFORMED, f"SizeRemainders must have K={K} ciphertexts, got {len(message.ciphertexts)}")
        elif isinstance(message, pb.BlindedComparisons) and self.state in ("AWAIT_BLINDED_COMPARISONS", "AWAIT_MASKED_NOISE", "AWAIT_PUBLISHED_SHARES"):
            _check_round(message.round, self._round)  # after the last round, a copy of any round is a REPLAY
            n = len(tournament.pairs(self._positions)) * self.params.compare_bits
            require(len(message.ciphertexts) == n, Problem.MALFORMED, f"BlindedComparisons must carry {n} ciphertexts, got {len(message.ciphertexts)}")
        elif self.d and isinstance(message, pb.MaskedNoise):
            nb = self.params.noise_blocks(self.d, self.res.secrets.paillier.public.bits)
            require(len(message.ciphertexts) == nb, Problem.MALFORMED, f"MaskedNoise must have {nb} ciphertexts (d={self.d} packed), got {len(message.ciphertexts)}")
        elif self.d and isinstance(message, (pb.ResharePiece, pb.PublishedShare)):
            data = message.piece if isinstance(message, pb.ResharePiece) else message.share
            require(len(data) == 16 * self.d, Problem.MALFORMED, f"{type(message).__name__} must be {16 * self.d} bytes (d={self.d} × 16), got {len(data)}")

    def _abort_notices(self, e) -> list[Output]:
        return self._abort(e, [Peer("party", p) for p in self.params.parties])

    def _admit(self, sender: Peer, kinds: frozenset[str], event: str, message):
        row = super()._admit(sender, kinds, event, message)
        if isinstance(message, pb.PartyPublicKey):  # P1 sends ξ a hop before the size shares: encrypt the masks meanwhile
            self._mask_under(message)
        elif isinstance(message, pb.SizeRemainders):  # decrypted while the parties' size shares are still on their way
            self._remainders = self._open_remainders(message)
        return row

    def _open_remainders(self, rem: pb.SizeRemainders) -> list[int]:
        """π1(b): the K remainders decrypted under ζ and range-checked (S1.4)."""
        prm, zeta = self.params, self.res.secrets.paillier
        require(len(rem.ciphertexts) == prm.K, Problem.MALFORMED, f"SizeRemainders must have K={prm.K} ciphertexts, got {len(rem.ciphertexts)}")
        b = [zeta.decrypt_signed(_parse(zeta.public, c), self.ops) for c in rem.ciphertexts]
        # b_j = n_j − a_j with a_j ∈ [0, 2^L) and n_j ∈ [0, 2^size_bits): exactly (−2^L, 2^size_bits). Outside it, the
        # party's size n_j = a_j + b_j breaks the job's public bound whatever its a_j (the comparisons' ℓ assumes it).
        require(all(-(1 << prm.L) < x < 1 << prm.size_bits for x in b), Problem.MALFORMED, "a size remainder b is out of range")
        return b

    def _mask_under(self, key_msg: pb.PartyPublicKey) -> None:
        """Check ξ and draw S1.4's masks r_k ∈ [0, 2^(L+κ)) with their encryptions ξ(r_k) (the step adds them to ξ(π1(a)_k))."""
        prm = self.params
        xi = PublicKey(int.from_bytes(key_msg.paillier_n, "big"))
        try:
            check_key_bits(xi.bits, test_mode=self.res.test_mode)
        except ValueError as e:
            raise RemoteProtocolError(Problem.MALFORMED, str(e)) from e
        require(xi.bits >= prm.min_paillier_bits() and xi.n % 2 == 1, Problem.MALFORMED, f"ξ modulus of {xi.bits} bits is too small for this job")
        self._xi = xi
        self._r = [self.rng.randbits(prm.mask_bits) for _ in range(prm.K)]
        self._enc_r = [xi.encrypt(r, self.rng, ops=self.ops) for r in self._r]

    def _abort_error(self, sender: Peer, abort: common_pb2.JobAbort) -> RemoteProtocolError:
        return RemoteProtocolError(abort.problem or Problem.JOB_FAILED, f"{sender.name}: {abort.detail}")

    # -- S0 ------------------------------------------------------------------------------
    def _step_await_acceptances(self) -> list[Output]:
        acceptances = [self._take(pb.JobAcceptance, n) for n in self.params.parties]
        dims = {n: a.dimension for n, a in zip(self.params.parties, acceptances)}
        if len(set(dims.values())) != 1 or 0 in dims.values():
            raise RemoteProtocolError(Problem.INVALID_JOB, f"parties disagree on the dimension d of dataset {self.params.dataset!r}: {dims}")
        self.d = next(iter(dims.values()))
        self.stages.enter("stage1")
        self.state = "AWAIT_SIZE_SHARES"
        start = pb.ProtocolStart(job_id=self.job_id, dimension=self.d, pi1_commitments=[a.pi1_commitment for a in acceptances])
        return [Send(Peer("party", p), start) for p in self.params.parties]

    # -- Stage 1 -------------------------------------------------------------------------
    def _step_await_size_shares(self) -> list[Output]:
        """S1.4: ξ(π2(π1(a) + r)) to the parties, b̃ = π2(π1(b) − r) kept; comparison bits to the leader."""
        prm, p = self.params, self.params.parties
        K = prm.K
        self._take(pb.PartyPublicKey, p[0])  # checked, and the masks encrypted under it, on arrival (_mask_under)
        xi, r = self._xi, self._r
        assert xi is not None
        rem = self._take(pb.SizeRemainders, p[0])
        b = self._remainders if self._remainders is not None else self._open_remainders(rem)  # π1(b), opened on arrival
        enc_a = [_parse(xi, self._take(pb.EncryptedSizeShare, n).ciphertext) for n in p]  # ξ(π1(a)_k), k = party index
        masked = [xi.add(enc_a[k], self._enc_r[k]) for k in range(K)]
        pi2 = self.rng.child("pi2").permutation(K)
        a_tilde_ct = sharing.apply_permutation(pi2, masked)
        self._b_tilde = sharing.apply_permutation(pi2, [b[k] - r[k] for k in range(K)])
        self._pi2 = pi2
        out: list[Output] = [
            Send(Peer("party", p[k]), pb.MaskedSizeShare(job_id=self.job_id, ciphertext=xi.to_bytes(a_tilde_ct[k]))) for k in range(K)
        ]
        # Ties are broken by τ, a secret uniform rank of the positions (not by the position, which the leader sees).
        self._tau = self.rng.child("tiebreak").permutation(K)
        self.state = "AWAIT_BLINDED_COMPARISONS"
        return out + self._comparison_round(list(range(K)))

    def _comparison_round(self, positions: list[int]) -> list[Output]:
        """Charlie's part of the DGK comparison for each of the round's pairs (i, j): y = b̃_j − b̃_i + e + 2^(ℓ−1), e = [τ_i < τ_j], so
        [x < y] = [n_i < n_j + e]: i precedes j in the strict order of (n, τ) (docs: "Stage 1 tournament")."""
        prm = self.params
        ell = prm.compare_bits
        offset = 1 << (ell - 1)
        dgk = self.res.secrets.dgk
        brng = self.rng.child(f"comparison/{self._round}")
        cts: list[bytes] = []
        for i, j in tournament.pairs(positions):
            y = self._b_tilde[j] - self._b_tilde[i] + int(self._tau[i] < self._tau[j]) + offset
            cts += [dgk.public.to_bytes(c) for c in comparison.b_encrypt_bits(dgk, y, ell, brng, self.ops, factors=self.res.dgk_pool)]
        self._positions = positions
        bits = pb.ComparisonBits(job_id=self.job_id, bit_length=ell, ciphertexts=cts, round=self._round, positions=positions)
        return [Send(Peer("party", prm.parties[0]), bits)]

    def _step_await_blinded_comparisons(self) -> list[Output]:
        """S1.6, one tournament round: the winner of each pair goes on; after the last round j̃ is the minimum of
        (n, τ) over the permuted positions, and S2.1 sends ζ(π2⁻¹(e_j̃)) to every party."""
        prm = self.params
        K, ell = prm.K, prm.compare_bits
        msg = self._take_again(pb.BlindedComparisons, prm.parties[0])
        ps = tournament.pairs(self._positions)
        require(len(msg.ciphertexts) == len(ps) * ell, Problem.MALFORMED, f"BlindedComparisons must carry {len(ps) * ell} ciphertexts, got {len(msg.ciphertexts)}")
        dgk = self.res.secrets.dgk
        parsed = _parse_dgk_many(dgk.public, list(msg.ciphertexts))  # one gcd for the message (same refusals)
        first_wins = []
        for n in range(len(ps)):
            terms = parsed[n * ell : (n + 1) * ell]
            first_wins.append(bool(comparison.b_result(dgk, terms, self.ops)))  # [(n_i, τ_i) < (n_j, τ_j)]
        survivors = tournament.advance(self._positions, first_wins)
        self._round += 1
        if self._round < tournament.rounds(K):
            return self._comparison_round(survivors)
        assert len(survivors) == 1
        m = survivors[0]
        self.smallest_position = m
        u = [1 if k == m else 0 for k in range(K)]
        w = [u[self._pi2[k]] for k in range(K)]  # π2⁻¹(u): entry at π1-position k
        zeta = self.res.secrets.paillier.public
        srng = self.rng.child("selection")
        sk = self.res.secrets.paillier  # Charlie holds ζ's factors: fresh r^N′ by CRT, precomputed between jobs if a pool is given
        pool = self.res.zeta_pool
        factors = [pool.take() if pool is not None else sk.random_factor(srng) for _ in w]
        sel = pb.SelectionVector(job_id=self.job_id, ciphertexts=[zeta.to_bytes(zeta.encrypt(x, factor=f, ops=self.ops)) for x, f in zip(w, factors)])
        self.stages.enter("stage2")
        self.state = "AWAIT_MASKED_NOISE"
        # S3.3 for c_0 ahead of time: the pieces Charlie sends are uniform and independent of c_0 (which only his own
        # piece absorbs, at S3.2), so they go out with the selection vector and the parties' last step waits for no
        # decryption of Charlie's.
        self._zero_pieces = sharing.split([0] * self.d, prm.K + 1, prm.ring_modulus, self.rng.child("reshare"), keep=0)
        # Every selection vector first (each party's ψ_j waits for it), the pieces after them (needed only at S3.3).
        out: list[Output] = [Send(Peer("party", name), sel) for name in prm.parties]
        out += [Send(Peer("party", name), pb.ResharePiece(job_id=self.job_id, piece=sharing.pack_ring(self._zero_pieces[t + 1], 128))) for t, name in enumerate(prm.parties)]
        return out

    # -- Stage 3 -------------------------------------------------------------------------
    def _step_await_masked_noise(self) -> list[Output]:
        """S3.2: decrypt η̄ + s, set c_0 = η̄ + s and keep c_0 − Σ_{t≥1} t_{0,t} (the pieces t_{0,t} left with S2.1). η̄ = round(K·2^f·η) is already the noise on
        K·ŵ_s at full resolution: no factor K here (K·(η̄ + s) would leave the release's residue mod K noiseless).
        DISTRIBUTED_GAUSSIAN: the plaintext is σ̄·Σz̄ + s at scale 2^(f+g); c_0 = ⌊(σ̄·Σz̄ + s)/2^g⌋, likewise on K·ŵ_s."""
        prm = self.params
        msg = self._take(pb.MaskedNoise, prm.parties[0])
        zeta = self.res.secrets.paillier
        slots, width = prm.noise_slots(zeta.public.bits), prm.noise_slot_bits
        nb = prm.noise_blocks(self.d, zeta.public.bits)
        require(len(msg.ciphertexts) == nb, Problem.MALFORMED, f"MaskedNoise must have {nb} ciphertexts (d={self.d} packed), got {len(msg.ciphertexts)}")
        self.stages.enter("stage3")
        plain: list[int] = []
        for b, c in enumerate(msg.ciphertexts):  # slot k of block b is coordinate b·slots + k (packing.py)
            values = packing.unpack(zeta.decrypt(_parse(zeta.public, c), self.ops), min(slots, self.d - b * slots), width)
            require(values is not None, Problem.MALFORMED, "masked noise is out of range")
            plain += values or []
        require(all(0 < v < 1 << (prm.eta_bits + prm.kappa + 2) for v in plain), Problem.MALFORMED, "masked noise is out of range")
        q = prm.ring_modulus
        c0 = [(v >> prm.truncate_bits) % q for v in plain]  # truncate_bits = 0 in the smallest-party modes
        self._own_piece = [(c + z) % q for c, z in zip(c0, self._zero_pieces[0])]  # c_0 − Σ_{t≥1} t_{0,t}
        self.state = "AWAIT_PUBLISHED_SHARES"
        return []

    def _step_await_published_shares(self) -> list[Output]:
        """Re-sharing done, publication: the K+1 shares z_0..z_K go to the model registry."""
        prm = self.params
        assert self._own_piece is not None
        vecs = [self._own_piece] + [_ring(self._take(pb.ResharePiece, n).piece, self.d, n) for n in prm.parties]
        z0 = sharing.combine(vecs, prm.ring_modulus)
        shares = [sharing.pack_ring(z0, 128)]
        stage_seconds: dict[str, float] = {}
        for n in prm.parties:
            ps = self._take(pb.PublishedShare, n)
            _ring(ps.share, self.d, n)
            shares.append(ps.share)
            self.party_ops.update(dict(ps.paillier_ops))
        self.stages.stop()
        stage_seconds.update(self.stages.seconds)
        ops = OpCounter(self.ops)
        ops.update(self.party_ops)
        g = prm.calibration.guarantee(self.d)
        model = pb.PublishedModel(
            job_id=self.job_id,
            shares=shares,
            ring_bits=128,
            fractional_bits=prm.frac_bits,
            parties=prm.K,
            dimension=self.d,
            mode=self.spec.mode,
            epsilon=prm.calibration.epsilon,
            guarantee=common_pb2.Guarantee(**g.as_dict()),
            stage_seconds=stage_seconds,
            paillier_ops=dict(ops),
            seeded=prm.seeded,
            dataset=prm.dataset,
            trust_model=trust_model(prm),
            noise=pb.PathakNoise.ValueType(prm.noise),
            colluders=prm.calibration.colluders,
        )
        setattr(model, "lambda", prm.calibration.lam)
        self.state = "PUBLISHED"
        return [Publish(model)]


def _check_round(got: int, expected: int) -> None:
    """A tournament message of another round: an earlier one is a REPLAY, a later one out of order."""
    if got < expected:
        raise RemoteProtocolError(Problem.REPLAY, f"round {got} was already taken (awaiting round {expected})")
    require(got == expected, Problem.STEP_OUT_OF_ORDER, f"round {got} is not the awaited round {expected}")


def _parse(key: PublicKey, data: bytes) -> int:
    try:
        return key.from_bytes(data)
    except CiphertextError as e:
        raise RemoteProtocolError(Problem.MALFORMED, str(e)) from e


def _parse_dgk(key, data: bytes) -> int:
    try:
        return key.from_bytes(data)
    except ValueError as e:
        raise RemoteProtocolError(Problem.MALFORMED, str(e)) from e


def _parse_dgk_many(key, blobs: list[bytes]) -> list[int]:
    try:
        return key.from_bytes_many(blobs)
    except ValueError as e:
        raise RemoteProtocolError(Problem.MALFORMED, str(e)) from e


def _ring(data: bytes, d: int, sender: str) -> list[int]:
    try:
        return sharing.unpack_ring(data, 128, d)
    except ValueError as e:
        raise RemoteProtocolError(Problem.MALFORMED, f"vector from {sender}: {e}") from e


def _b(v: int) -> bytes:
    return int(v).to_bytes(max(1, (int(v).bit_length() + 7) // 8), "big")
