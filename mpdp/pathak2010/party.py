"""P_j, a data holder in the Pathak–Rane–Raj protocol (their Sec. 3; messages in
docs/protocols/pathak2010.md).

P1 (parties[0]) has extra duties: it generates ξ (S0), shuffles the sealed b_j
(S1.2), leads the comparisons (S1.6) and masks the noise (S3.1). States are named for
what the party awaits next; the transition table is :data:`mpdp.pathak2010.states.PARTY_TABLE`.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from typing import Any

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from mpdp import limits
from mpdp.learn import logreg
from mpdp.learn.model_cache import LocalModel
from mpdp.math import comparison, sharing
from mpdp.math.fixedpoint import EncodingOverflow
from mpdp.math.paillier import CiphertextError, KeyPair, check_key_bits
from mpdp.messages import pathak2010_pb2 as pb
from mpdp.pathak2010 import packing, states, tournament
from mpdp.pathak2010.mechanism import party_rng
from mpdp.dp.pathak_noise import SOLVER_TOL, Z_INT_BITS, NoiseOverflow
from mpdp.pathak2010.params import MODEL_BOUND, NOISE_INT_BITS, PathakParams
from mpdp.pathak2010.resources import PartyResources
from mpdp.math.drbg import Drbg
from mpdp.math.opcount import OpCounter
from mpdp.protocol import CURATOR, FAILED, LocalProtocolError, Machine, Output, Peer, Problem, Record, Send, Spend, StageClock, require


CLIP_BOUND = 1.0  # ‖x‖ ≤ 1 (PRR10 Sec. 3.1); with the solver's settings below, part of the model cache's key
FIT_TOL = SOLVER_TOL  # the noise's sensitivity adds the slack of this tolerance (PathakCalibration.model_sensitivity)
FIT_MAX_ITER = 100
PI1_NONCE_BYTES = 32  # each party's contribution to π1's seed (commit and reveal, S0)
RESHARE_KEY_BYTES = 32  # a party's X25519 public key for one job (its S3.3 pieces' seeds come from key agreement)
# Messages of S0 whose content is drawn independently of the party's data: π1's opening and the re-share key
# (Pi1Reveal), ξ's keys (PartySecrets, PartyPublicKey). A job that fails with nothing else sent after a party's
# spend released nothing computed from its data there, and the charge is voided (docs/protocols/accounting.md).
DATA_FREE_MESSAGES: tuple[type, ...] = (pb.Pi1Reveal, pb.PartySecrets, pb.PartyPublicKey)


def pi1_commitment(job_id: str, name: str, nonce: bytes, reshare_key: bytes) -> bytes:
    """SHA-256 over the job, the party, its nonce and its re-share key (both of fixed length): binding, and hiding
    since the nonce is 256 uniform bits. Committing to the key as well means neither Charlie (who relays the
    commitments) nor P1 (who relays the openings) can substitute it alone."""
    label = b"mpdp/pathak2010/pi1-commit\x00" + job_id.encode() + b"\x00" + name.encode() + b"\x00"
    return hashlib.sha256(label + nonce + reshare_key).digest()


def reshare_secret(rng: Drbg) -> tuple[X25519PrivateKey, bytes]:
    """A party's X25519 key pair for one job, from its CSPRNG (its job stream: reproducible in simulations)."""
    secret = X25519PrivateKey.from_private_bytes(rng.random_bytes(32))
    return secret, secret.public_key().public_bytes_raw()


def reshare_pair_seed(job_id: str, secret: X25519PrivateKey, me: str, peer: str, peer_key: bytes) -> bytes:
    """The seed both P_me and P_peer derive for their two S3.3 pieces t_{me,peer} and t_{peer,me}: HKDF-SHA256 of
    their X25519 shared secret, bound to the job and to the pair (names in sorted order, so both get the same).
    :func:`reshare_piece` separates the two pieces by their direction. ValueError: ``peer_key`` is not a point
    whose shared secret is usable (a low-order point gives all zeros, which ``cryptography`` refuses)."""
    shared = secret.exchange(X25519PublicKey.from_public_bytes(peer_key))
    lo, hi = sorted((me, peer))
    info = b"mpdp/pathak2010/reshare-pair\x00" + job_id.encode() + b"\x00" + lo.encode() + b"\x00" + hi.encode()
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(shared)


def joint_pi1(job_id: str, nonces: list[bytes], k: int, *, seeded: bool) -> list[int]:
    """π1 from every party's revealed nonce (in the job's party order): uniform as long as one nonce is, and fixed
    by the commitments before anyone sees another's nonce."""
    key = hashlib.sha256(b"mpdp/pathak2010/pi1\x00" + job_id.encode() + b"\x00" + b"".join(nonces)).digest()
    return Drbg(key, seeded=seeded).permutation(k)


def reshare_piece(job_id: str, sender: str, receiver: str, seed: bytes, d: int) -> list[int]:
    """S3.3's piece t_{sender,receiver} ∈ Z_(2^128)^d, expanded from the seed only ``sender`` and ``receiver`` can
    derive (:func:`reshare_pair_seed`): both compute the same pseudorandom vector, so the piece need not travel.
    The job and both names, in order, separate the streams (a pair's seed makes its two pieces, one each way)."""
    label = b"mpdp/pathak2010/reshare\x00" + job_id.encode() + b"\x00" + sender.encode() + b"\x00" + receiver.encode()
    key = hmac.new(seed, label, hashlib.sha256).digest()
    return sharing.unpack_ring(Drbg.stream_prefix(key, 16 * d), 128, d)  # 16 bytes a word: uniform mod 2^128


def charge_of(machine: Any) -> dict:
    """What a Pathak job charges a party (its ``job_id``, ``d`` and ``params``): the guarantee the release really gives
    (:meth:`PathakCalibration.guarantee`; in paper mode √d·ε/(2K), not the nominal ε), the same figures the DONE
    record carries. The accountant sees gaussian-distributed as a Gaussian with σ/Δ = σ₁ (``sigma_one``: the released
    noise is rounded up from σ₁ times the fixed-point sensitivity) that differs from the ideal release w.p. ≤ τ (the
    fixed point), and the smallest-party modes as pure ε (spherical or coordinate Laplace)."""
    from mpdp import accounting  # the accountant's records; imported where a charge is built

    cal = machine.params.calibration
    g = cal.guarantee(machine.d)
    if cal.distributed:
        record = accounting.gaussian(cal.sigma_one, tv=cal.fixed_point_delta(machine.d) / (1.0 + math.exp(min(cal.epsilon, 700.0))))
    else:
        record = accounting.pure_epsilon("spherical Laplace" if cal.mode == "corrected" else "coordinate Laplace (paper calibration)")
    return {"job_id": machine.job_id, "protocol": "pathak2010", "mechanism": g.mechanism, "epsilon": g.epsilon, "nominal_epsilon": cal.epsilon,
            "delta": g.delta, "mode": cal.mode, "dataset": machine.params.dataset, "accounting": record}


class PartyMachine(Machine):
    ROLE = "party"
    STATES = states.PARTY_STATES
    TERMINAL = ("DONE", FAILED)
    TABLE = states.PARTY_TABLE
    PARTICIPANTS = frozenset({"curator", "party"})
    SPENDS = True  # ProtocolStart's step outputs the job's Spend before any message derived from the records
    PUBLIC = frozenset({"JobAbort", "JobAcceptance"})  # the acceptance carries only d (from the schema) and a commitment to fresh randomness

    def __init__(self, name: str, announcement: pb.JobAnnouncement, dimension: int, resources: PartyResources) -> None:
        """``dimension``: d of the party's records from public facts only (the schema's encoded width, or the
        configured feature count), never from its records: the acceptance carries it. The records are not read
        here: ŵ_j and n_j come with the local event :meth:`trained`, after the spend (docs/protocols/pathak2010.md,
        "When a party accepts, trains and spends")."""
        super().__init__(announcement.job_id, Peer("party", name))
        self.params = PathakParams.from_spec(announcement.job_id, announcement.spec)
        if name not in self.params.parties:
            raise LocalProtocolError(Problem.WRONG_ROLE, f"party {name} is not a participant of job {self.job_id}")
        if self.params.seeded and not resources.test_mode:
            raise LocalProtocolError(Problem.INVALID_JOB, "a simulation seed makes a release non-private; this party is not in test mode")
        if not 1 <= dimension <= limits.MAX_PATHAK_DIMENSION:
            raise LocalProtocolError(Problem.INVALID_JOB, f"the dataset's dimension is outside 1..{limits.MAX_PATHAK_DIMENSION}")
        self.res = resources
        zeta_bits = resources.curator_keys.paillier.bits
        if zeta_bits < self.params.min_paillier_bits():  # η̄ + s (σ̄·Σz̄ + s) must never wrap mod N′
            raise LocalProtocolError(Problem.INVALID_JOB, f"the curator's {zeta_bits}-bit Paillier key is too small for this job (needs {self.params.min_paillier_bits()} bits)")
        self.ops = OpCounter()
        self.j = self.params.index(name)
        self.K = self.params.K
        self.rng: Drbg = (
            party_rng(Drbg.from_seed(announcement.spec.simulation_seed), name)
            if self.params.seeded
            else resources.rng.child(f"job/{self.job_id}")
        )
        self.stages = StageClock(resources.clock)  # this party's own view (its log, tests); never sent
        self.stages.enter("setup")
        self.d = int(dimension)
        self.n: int = 0  # n_j and ŵ_j: set by trained(), after the spend
        self.w: np.ndarray | None = None
        self.local_work_until: float | None = None  # resources.clock time before which trained() is refused (set at ProtocolStart)
        self.party_key: KeyPair | None = None
        self.pi1: list[int] | None = None
        self._pi1_nonce = self.rng.child("pi1").random_bytes(PI1_NONCE_BYTES)
        self._reshare_secret, self.reshare_key = reshare_secret(self.rng.child("reshare-key"))
        self._pi1_commitments: list[bytes] = []  # every party's, from ProtocolStart
        self._reshare_seeds: dict[str, bytes] = {}  # the pair seed shared with every other party but P1 (S3.3; P1 sends its pieces)
        self.c: list[int] | None = None  # c_j ∈ Z_q^d, this party's additive term of K·ŵ_s at scale 2^f
        self._psi: list[int] = []  # ψ_j, packed, while the chain from P_{j+1} is awaited (S2.4)
        self.own_piece: list[int] | None = None
        self.noise: np.ndarray | None = None  # η_j (DISTRIBUTED_GAUSSIAN: z_j), kept for tests (sentinel, equivalence, collusion)
        self.noise_units: int | None = None  # σ̄_j (DISTRIBUTED_GAUSSIAN)
        self._round = 0  # leader: the tournament round whose ComparisonBits it awaits
        self._positions: list[int] = []  # leader: the previous round's positions
        self._a_tilde: list[int] = []  # leader: ã by π2∘π1 position

    # -- engine hooks ------------------------------------------------------------------
    def start(self) -> list[Output]:
        """S0: accept the job before any work on the records (the service has checked the ledger's room; nothing is
        spent yet). The acceptance's d is the schema's and its commitment is to fresh randomness: its content and its
        latency are independent of the records."""
        commitment = pi1_commitment(self.job_id, self.me.name, self._pi1_nonce, self.reshare_key)
        return [Send(CURATOR, pb.JobAcceptance(job_id=self.job_id, dimension=self.d, pi1_commitment=commitment))]

    def charge(self) -> dict:
        """This job's charge (:func:`charge_of`)."""
        return charge_of(self)

    def trained(self, local: LocalModel) -> list[Output]:
        """Local event: ŵ_j and n_j (PRR10 Sec. 3.1, :func:`train_local`), computed after the spend. Refused (the job
        fails INTERNAL) before :attr:`local_work_until`: the first message computed from the records never leaves
        earlier than the party's public local-work time after ProtocolStart."""
        return self._local("trained", local)

    def _on_trained(self, local: LocalModel) -> list[Output]:
        if self.local_work_until is None or self.res.clock() < self.local_work_until:
            raise LocalProtocolError(Problem.INTERNAL, "the local model came before the party's local-work time had passed")
        if local.d != self.d:  # the detail names neither d of the records
            raise LocalProtocolError(Problem.INVALID_JOB, "the dataset's records do not have the dimension its schema gives")
        if local.n >= 1 << self.params.size_bits:  # after the spend (voided: nothing left); names the bound, never n_j
            raise LocalProtocolError(Problem.INVALID_JOB, "the dataset does not fit the job's public bound size_bits")
        self.n = local.n
        self.w = np.array(local.w, dtype=np.float64)
        return []

    def _joint_event(self) -> str | None:
        if self.state == "AWAIT_PARTY_SECRETS" and self.w is None:
            return None  # S1.2 splits n_j: nothing computed from the records before the local model is in
        return super()._joint_event()

    def _kinds(self, sender: Peer) -> frozenset[str]:
        if sender.role == "curator":
            return frozenset({"curator"})  # the service has checked that it is this party's curator
        if sender.role != "party" or sender.name not in self.params.parties:
            return frozenset()
        return frozenset({"party", "leader"}) if sender.name == self.params.parties[0] else frozenset({"party"})

    def _required(self, state: str) -> list[tuple[type, str]]:
        p = self.params.parties
        if state == "AWAIT_START":
            return [(pb.ProtocolStart, CURATOR.name)]
        if state == "AWAIT_PARTY_SECRETS":  # P1 awaits the other parties' reveals, they await P1's PartySecrets
            return [(pb.Pi1Reveal, n) for n in p[1:]] if self.j == 0 else [(pb.PartySecrets, p[0])]
        if state == "AWAIT_SIZE_SHARE":
            assert self.pi1 is not None
            src = p[self.pi1.index(self.j)]  # a_src; every other party's SizeShare is cover (_split_size)
            need: list[tuple[type, str]] = [(pb.SizeShare, n) for n in p if n != self.me.name or n == src]
            if self.j == 0:
                need += [(pb.SealedSizeRemainder, name) for name in p]
            return need
        if state == "AWAIT_MASKED_SIZE_SHARE":
            return [(pb.MaskedSizeShare, CURATOR.name)]
        if state == "AWAIT_COMPARISON":
            need = [(pb.ComparisonBits, CURATOR.name)]
            return need + [(pb.MaskedSize, name) for name in p] if self._round == 0 else need
        if state == "AWAIT_SELECTION":
            need = [(pb.SelectionVector, CURATOR.name)]
            if self.params.distributed:
                return need + ([(pb.NoiseScaleShare, n) for n in p[1:]] if self.j == 0 else [])
            return need
        if state == "AWAIT_NOISE_SCALE":
            return [(pb.NoiseScale, p[0])]
        if state == "AWAIT_NOISE_CHAIN":  # P1 only: every other party's ψ_j (the K parties compute them at once)
            return [(pb.NoiseChain, n) for n in p[1:]]
        if state == "AWAIT_RESHARE_PIECES":  # Charlie's and P1's pieces; the other parties' come from their seeds
            need = [(pb.ResharePiece, CURATOR.name)]
            return need + [(pb.ResharePiece, p[0])] if self.j != 0 else need
        raise AssertionError(state)

    def _admit(self, sender: Peer, kinds: frozenset[str], event: str, message: Any):
        row = super()._admit(sender, kinds, event, message)
        if self._pi1_commitments:  # refused to their sender at once (else in S0's step, once ProtocolStart is in)
            if isinstance(message, pb.Pi1Reveal):
                self._check_reveal(sender.name, message.nonce, message.reshare_key)
            elif isinstance(message, pb.PartySecrets):
                self._check_openings(message)
        return row

    def _check_reveal(self, name: str, nonce: bytes, reshare_key: bytes) -> None:
        i = self.params.index(name)
        require(pi1_commitment(self.job_id, name, nonce, reshare_key) == self._pi1_commitments[i], Problem.MALFORMED,
                f"{name}'s π1 reveal does not open its commitment")

    def _check_openings(self, secrets: pb.PartySecrets) -> None:
        """Every opening P1 relays opens the commitment ProtocolStart carried (this party's own included)."""
        for name, nonce, key in zip(self.params.parties, secrets.pi1_nonces, secrets.reshare_keys):
            self._check_reveal(name, nonce, key)

    def _check_shape(self, message: Any) -> None:
        if isinstance(message, pb.SelectionVector):
            require(len(message.ciphertexts) == self.K, Problem.MALFORMED, f"SelectionVector must have K={self.K} ciphertexts, got {len(message.ciphertexts)}")
        elif isinstance(message, pb.NoiseChain):
            require(self.j == 0, Problem.WRONG_ROLE, "NoiseChain goes to P1 only")
            nb = self._noise_blocks()
            require(len(message.ciphertexts) == nb, Problem.MALFORMED, f"NoiseChain must have {nb} ciphertexts (d={self.d} packed), got {len(message.ciphertexts)}")
        elif isinstance(message, pb.ResharePiece):
            require(len(message.piece) == 16 * self.d, Problem.MALFORMED, f"ResharePiece must be {16 * self.d} bytes (d={self.d} × 16), got {len(message.piece)}")
        elif isinstance(message, (pb.NoiseScaleShare, pb.NoiseScale)):
            require(self.params.distributed, Problem.WRONG_ROLE, f"{type(message).__name__} belongs to DISTRIBUTED_GAUSSIAN jobs only")
            require(self.j == 0 or isinstance(message, pb.NoiseScale), Problem.WRONG_ROLE, "NoiseScaleShare goes to P1 only")
        elif isinstance(message, (pb.ComparisonBits, pb.MaskedSize)):
            require(self.j == 0, Problem.WRONG_ROLE, f"{type(message).__name__} goes to the leader (P1) only")
            if isinstance(message, pb.ComparisonBits):
                self._check_comparison_bits(message)
        elif isinstance(message, pb.Pi1Reveal):
            require(self.j == 0, Problem.WRONG_ROLE, "Pi1Reveal goes to P1 only")
            require(len(message.nonce) == PI1_NONCE_BYTES and len(message.reshare_key) == RESHARE_KEY_BYTES, Problem.MALFORMED,
                    f"Pi1Reveal must carry a {PI1_NONCE_BYTES}-byte nonce and a {RESHARE_KEY_BYTES}-byte re-share key")
        elif isinstance(message, pb.PartySecrets):
            require(len(message.pi1_nonces) == self.K and all(len(v) == PI1_NONCE_BYTES for v in message.pi1_nonces)
                    and len(message.reshare_keys) == self.K and all(len(v) == RESHARE_KEY_BYTES for v in message.reshare_keys), Problem.MALFORMED,
                    f"PartySecrets must carry K={self.K} π1 nonces of {PI1_NONCE_BYTES} bytes and K re-share keys of {RESHARE_KEY_BYTES} bytes")
        elif isinstance(message, pb.ProtocolStart):
            require(len(message.pi1_commitments) == self.K and all(len(c) == 32 for c in message.pi1_commitments), Problem.MALFORMED,
                    f"ProtocolStart must carry K={self.K} π1 commitments of 32 bytes")

    def _abort_notices(self, e) -> list[Output]:
        return self._abort(e, [CURATOR])

    def _to_party(self, index: int, message: Any) -> list[Output]:
        name = self.params.parties[index]
        if name == self.me.name:
            self._deliver_self(message)
            return []
        return [Send(Peer("party", name), message)]

    # -- S0 ------------------------------------------------------------------------------
    def _step_await_start(self) -> list[Output]:
        """S0: spend, then open this party's π1 commitment to P1 (every commitment is in: ProtocolStart carries them
        all). P1 generates ξ (pk to Charlie) and relays every opening with ξ's sk once all are in (next step)."""
        start = self._take(pb.ProtocolStart, CURATOR.name)
        require(start.dimension == self.d, Problem.MALFORMED, f"ProtocolStart says d={start.dimension}, this party has d={self.d}")
        mine = pi1_commitment(self.job_id, self.me.name, self._pi1_nonce, self.reshare_key)
        require(start.pi1_commitments[self.j] == mine, Problem.MALFORMED, "ProtocolStart does not carry this party's π1 commitment")
        self._pi1_commitments = list(start.pi1_commitments)
        self.stages.enter("stage1")
        out: list[Output] = [Spend((self.charge(),))]  # every party has accepted: the job's charge, before anything else
        self.local_work_until = self.res.clock() + self.res.local_work_seconds  # the local model is taken from then on
        self.state = "AWAIT_PARTY_SECRETS"
        if self.j != 0:
            return out + self._to_party(0, pb.Pi1Reveal(job_id=self.job_id, nonce=self._pi1_nonce, reshare_key=self.reshare_key))
        key = self.res.party_key_source()
        check_key_bits(key.public.bits, test_mode=self.res.test_mode)
        self.party_key = key
        return out + [Send(CURATOR, pb.PartyPublicKey(job_id=self.job_id, paillier_n=_b(key.public.n)))]

    def _step_await_party_secrets(self) -> list[Output]:
        """S0: every opening opens its commitment; π1 is drawn from all the nonces (no party chooses it). P1 gathers
        the other parties' reveals and relays them all, with ξ's sk, in one PartySecrets per party; every other
        party checks each opening against its commitment (so P1 can alter none) and derives its re-share seeds.
        Then S1.2."""
        p = self.params.parties
        if self.j == 0:
            assert self.party_key is not None
            nonces, keys = [self._pi1_nonce], [self.reshare_key]
            for name in p[1:]:
                reveal = self._take(pb.Pi1Reveal, name)
                self._check_reveal(name, reveal.nonce, reveal.reshare_key)
                nonces.append(reveal.nonce)
                keys.append(reveal.reshare_key)
            key = self.party_key
            secrets_msg = pb.PartySecrets(job_id=self.job_id, paillier_p=_b(key.p), paillier_q=_b(key.q), pi1_nonces=nonces, reshare_keys=keys)
            out: list[Output] = []
            for i in range(1, self.K):
                out += self._to_party(i, secrets_msg)
        else:
            s = self._take(pb.PartySecrets, p[0])
            self._check_openings(s)
            nonces, keys = list(s.pi1_nonces), list(s.reshare_keys)
            for name, peer_key in zip(p[1:], keys[1:]):
                if name != self.me.name:
                    try:
                        self._reshare_seeds[name] = reshare_pair_seed(self.job_id, self._reshare_secret, self.me.name, name, peer_key)
                    except ValueError:
                        raise_remote(Problem.MALFORMED, f"{name}'s re-share key is not a usable X25519 public key")
            try:
                party_key = KeyPair.from_factors(int.from_bytes(s.paillier_p, "big"), int.from_bytes(s.paillier_q, "big"))
            except ValueError as e:
                raise_remote(Problem.MALFORMED, f"PartySecrets carries an invalid key: {e}")
            try:
                check_key_bits(party_key.public.bits, test_mode=self.res.test_mode)
            except ValueError as e:
                raise_remote(Problem.MALFORMED, str(e))
            self.party_key = party_key
            out = []
        self.pi1 = joint_pi1(self.job_id, nonces, self.K, seeded=self.rng.seeded)
        return out + self._split_size()

    # -- Stage 1 -------------------------------------------------------------------------
    def _split_size(self) -> list[Output]:
        """S1.2: n_j = a_j + b_j; a_j to P_{π1(j)}, ζ(b_j) to the shuffler tagged with π1(j).

        Party-to-party steps travel through the curator (sealed end to end: services/common/seal.py), who sees who
        sends to whom. Who gets a_j is π1(j), which Charlie must not learn, so every party sends a SizeShare to every
        other party: a_j to P_{π1(j)} and to each of the rest a uniform value of the same range (cover; a_j is itself
        uniform on [0, 2^L)), all in this one step. The pattern Charlie sees is the complete graph whatever π1 is."""
        assert self.pi1 is not None
        a = self.rng.randbits(self.params.L)
        b = self.n - a
        zeta = self.res.curator_keys.paillier
        sealed = pb.SealedSizeRemainder(
            job_id=self.job_id,
            position=self.pi1[self.j],
            ciphertext=zeta.to_bytes(zeta.encrypt(b, factor=self.res.zeta_pool.take(), ops=self.ops)),
        )
        self.state = "AWAIT_SIZE_SHARE"
        cover = self.rng.child("size-cover")
        shares: list[Output] = []
        for k in range(self.K):
            if k == self.pi1[self.j]:
                shares += self._to_party(k, pb.SizeShare(job_id=self.job_id, a=_b(a)))
            elif k != self.j:
                shares += self._to_party(k, pb.SizeShare(job_id=self.job_id, a=_b(cover.randbits(self.params.L))))
        return shares + self._to_party(0, sealed)

    def _step_await_size_share(self) -> list[Output]:
        """S1.3: ξ(π1(a)_k) to Charlie; the shuffler also forwards ζ(π1(b)) in position order."""
        assert self.pi1 is not None and self.party_key is not None
        p = self.params.parties
        src = p[self.pi1.index(self.j)]
        share = self._take(pb.SizeShare, src)
        for name in p:  # the other parties' cover shares (see _split_size): dropped unread
            if name not in (src, self.me.name):
                self._take(pb.SizeShare, name)
        a = int.from_bytes(share.a, "big")
        require(a < 1 << self.params.L, Problem.MALFORMED, f"size share exceeds 2^{self.params.L}")
        xi = self.party_key.public
        factor = self.party_key.random_factor(self.rng)  # every party holds ξ's factors (S1.1): r^N by CRT
        out: list[Output] = [Send(CURATOR, pb.EncryptedSizeShare(job_id=self.job_id, ciphertext=xi.to_bytes(xi.encrypt(a, factor=factor, ops=self.ops))))]
        if self.j == 0:
            ordered: list[bytes] = [b""] * self.K
            zeta = self.res.curator_keys.paillier
            for i, name in enumerate(p):
                sealed = self._take(pb.SealedSizeRemainder, name)
                require(sealed.position == self.pi1[i], Problem.MALFORMED, f"{name} tagged its remainder with position {sealed.position}, expected π1 position")
                _checked(zeta.from_bytes, sealed.ciphertext)
                ordered[sealed.position] = sealed.ciphertext
            out.append(Send(CURATOR, pb.SizeRemainders(job_id=self.job_id, ciphertexts=ordered)))
        self.state = "AWAIT_MASKED_SIZE_SHARE"
        return out

    def _step_await_masked_size_share(self) -> list[Output]:
        """S1.5: decrypt ã_k and hand it to the leader (P1)."""
        assert self.party_key is not None
        m = self._take(pb.MaskedSizeShare, CURATOR.name)
        c = _checked(self.party_key.public.from_bytes, m.ciphertext)
        a_tilde = self.party_key.decrypt(c, self.ops)
        require(a_tilde < 1 << (self.params.mask_bits + 1), Problem.MALFORMED, "masked size ã is out of range")
        self.state = "AWAIT_COMPARISON" if self.j == 0 else "AWAIT_SELECTION"
        return self._to_party(0, pb.MaskedSize(job_id=self.job_id, value=_b(a_tilde)))

    def _check_comparison_bits(self, bits: pb.ComparisonBits) -> None:
        """The awaited round, its positions a legal next round of the tournament, ℓ and the count of bits."""
        if bits.round < self._round:
            raise_remote(Problem.REPLAY, f"ComparisonBits of round {bits.round} was already taken (awaiting round {self._round})")
        require(bits.round == self._round, Problem.STEP_OUT_OF_ORDER, f"ComparisonBits of round {bits.round}, awaiting round {self._round}")
        positions = list(bits.positions)
        legal = positions == list(range(self.K)) if self._round == 0 else tournament.is_next(self._positions, positions)
        require(legal, Problem.MALFORMED, f"ComparisonBits round {bits.round} lists positions that cannot follow the previous round")
        ell = self.params.compare_bits
        require(bits.bit_length == ell, Problem.MALFORMED, f"ComparisonBits uses ℓ={bits.bit_length}, expected {ell}")
        n = len(tournament.pairs(positions)) * ell
        require(len(bits.ciphertexts) == n, Problem.MALFORMED, f"ComparisonBits must carry {n} ciphertexts, got {len(bits.ciphertexts)}")

    def _step_await_comparison(self) -> list[Output]:
        """S1.6 (leader: the DGK comparison's blinding), one tournament round: blinded comparison terms for each of its pairs (i, j)."""
        prm = self.params
        bits = self._take_again(pb.ComparisonBits, CURATOR.name)
        self._check_comparison_bits(bits)
        ell = prm.compare_bits
        if self._round == 0:
            for name in prm.parties:
                v = int.from_bytes(self._take(pb.MaskedSize, name).value, "big")
                require(v < 1 << (prm.mask_bits + 1), Problem.MALFORMED, f"masked size from {name} is out of range")
                self._a_tilde.append(v)
        dgk = self.res.curator_keys.dgk
        cts = _checked_many(dgk.from_bytes_many, list(bits.ciphertexts))  # one gcd for the message (same refusals)
        out_terms: list[bytes] = []
        offset = 1 << (ell - 1)
        crng = self.rng.child(f"comparison/{self._round}")
        for n, (i, j) in enumerate(tournament.pairs(list(bits.positions))):
            x = self._a_tilde[i] - self._a_tilde[j] + offset  # x = ã_i − ã_j, made non-negative
            terms = comparison.a_blinded_terms(dgk, x, cts[n * ell : (n + 1) * ell], crng, self.res.dgk_pool, ops=self.ops)
            out_terms += [dgk.to_bytes(t) for t in terms]
        blinded = pb.BlindedComparisons(job_id=self.job_id, ciphertexts=out_terms, round=self._round)
        self._positions = list(bits.positions)
        self._round += 1
        if self._round == tournament.rounds(self.K):
            self.state = "AWAIT_SELECTION"
        return [Send(CURATOR, blinded)]

    # -- Stage 2 -------------------------------------------------------------------------
    def _step_await_selection(self) -> list[Output]:
        """S2.2–S2.4: ψ_j = ζ(v_j)^{η̄_j}·ζ(0), multiplied into the chain P_K → … → P_1.
        DISTRIBUTED_GAUSSIAN (S2.2′–S2.3′): ζ(v_j)^{σ̄_j}·ζ(0) to P1, who multiplies them into ζ(σ̄(n₍₁₎)) for everyone."""
        assert self.pi1 is not None
        prm = self.params
        sel = self._take(pb.SelectionVector, CURATOR.name)
        zeta = self.res.curator_keys.paillier
        require(len(sel.ciphertexts) == self.K, Problem.MALFORMED, f"SelectionVector must have {self.K} ciphertexts, got {len(sel.ciphertexts)}")
        v_j = _checked(zeta.from_bytes, sel.ciphertexts[self.pi1[self.j]])
        self.stages.enter("stage2")
        if prm.distributed:
            return self._noise_scale_share(v_j)
        eta = prm.calibration.draw(self.rng, self.n, self.d)
        # η̄ = round(K·2^f·η): the noise on K·ŵ_s at one unit, the scale of the release. Never K·round(2^f·η): the
        # release would then be ≡ Σ_j round(ŵ_j·2^f) (mod K), a residue with no noise in it. The refusals name no
        # magnitude: the noise's size is σ(n_j)'s.
        if not np.all(np.abs(eta) * self.K < 2.0**NOISE_INT_BITS):
            raise LocalProtocolError(Problem.INSUFFICIENT_NOISE, "the noise does not fit the encoding; the job cannot release")
        eta_bar = [round_scaled(float(x), prm.frac_bits, times=self.K) for x in eta]
        if not all(abs(v) < 1 << prm.eta_bits for v in eta_bar):
            raise LocalProtocolError(Problem.INSUFFICIENT_NOISE, "the noise does not fit the encoding; the job cannot release")
        self.noise = eta
        return self._chain(self._packed_psi(v_j, eta_bar))

    def _noise_blocks(self) -> int:
        return self.params.noise_blocks(self.d, self.res.curator_keys.paillier.bits)

    def _packed_psi(self, base: int, exponents: list[int]) -> list[int]:
        """S2.4: ψ_j = base^{e}·ζ(0), packed (:mod:`mpdp.pathak2010.packing`): one re-randomised ciphertext per block."""
        prm, zeta = self.params, self.res.curator_keys.paillier
        packed = packing.scalar_powers(zeta, base, exponents, prm.noise_slot_bits, prm.noise_slots(zeta.bits), self.ops)
        return [zeta.rerandomize(c, self.res.zeta_pool.take(), self.ops) for c in packed]

    def _noise_scale_share(self, v_j: int) -> list[Output]:
        """S2.2′: ζ(v_j·σ̄_j), σ̄_j = ⌈K·σ(n_j)·2^(f+32)⌉ (pathak_noise.noise_units); P1 sums them into ζ(σ̄) (S2.3′)."""
        zeta = self.res.curator_keys.paillier
        try:
            self.noise_units = self.params.calibration.noise_units(self.n, self.d)
        except NoiseOverflow as e:  # the overflowing scale is a function of n_j: the detail names none
            raise LocalProtocolError(Problem.INSUFFICIENT_NOISE, "the noise scale does not fit the encoding; the job cannot release") from e
        share = zeta.rerandomize(zeta.mul_plain(v_j, self.noise_units, self.ops), self.res.zeta_pool.take(), self.ops)
        self.state = "AWAIT_NOISE_SCALE"
        if self.j != 0:
            return self._to_party(0, pb.NoiseScaleShare(job_id=self.job_id, ciphertext=zeta.to_bytes(share)))
        total = share
        for name in self.params.parties[1:]:
            total = zeta.add(total, _checked(zeta.from_bytes, self._take(pb.NoiseScaleShare, name).ciphertext))
        total = zeta.rerandomize(total, self.res.zeta_pool.take(), self.ops)
        scale = pb.NoiseScale(job_id=self.job_id, ciphertext=zeta.to_bytes(total))
        out: list[Output] = []
        for i in range(self.K):
            out += self._to_party(i, scale)
        return out

    def _step_await_noise_scale(self) -> list[Output]:
        """S2.4′: ψ_j = ζ(σ̄)^{z̄_j}·ζ(0) per coordinate, z̄_j = round(z_j·2^fz), z_j ~ N(0, I/(K−t)); then the chain."""
        cal = self.params.calibration
        zeta = self.res.curator_keys.paillier
        scale = _checked(zeta.from_bytes, self._take(pb.NoiseScale, self.params.parties[0]).ciphertext)
        z = cal.draw_share(self.rng, self.d)
        if not np.all(np.abs(z) < 2.0**Z_INT_BITS):
            raise LocalProtocolError(Problem.INSUFFICIENT_NOISE, "a noise factor does not fit the encoding; the job cannot release")
        self.noise = z
        fz = cal.z_frac_bits
        return self._chain(self._packed_psi(scale, [round_scaled(float(x), fz) for x in z]))

    def _chain(self, psi: list[int]) -> list[Output]:
        """S2.4: ψ_j is ready. Every party but P1 sends it straight to P1 (one hop for all, where the paper passes a
        running product along P_K → … → P_1: P1 sees each ψ_j, re-randomised under ζ, which it cannot decrypt);
        P1 awaits them."""
        if self.j == 0 and self.K > 1:
            self._psi = psi
            self.state = "AWAIT_NOISE_CHAIN"
            return []
        return self._forward(psi)

    def _step_await_noise_chain(self) -> list[Output]:
        """S2.4 (P1): ψ = Π_j ψ_j."""
        zeta = self.res.curator_keys.paillier
        psi = self._psi
        for name in self.params.parties[1:]:
            chain = self._take(pb.NoiseChain, name)
            require(len(chain.ciphertexts) == len(psi), Problem.MALFORMED, f"NoiseChain must have {len(psi)} ciphertexts (d={self.d} packed), got {len(chain.ciphertexts)}")
            psi = [zeta.add(_checked(zeta.from_bytes, c), p) for c, p in zip(chain.ciphertexts, psi)]
        return self._forward(psi)

    def _forward(self, psi: list[int]) -> list[Output]:
        """S2.4 and S3.1: ψ_j to P1, or (P1) mask the product for Charlie; then re-share."""
        prm = self.params
        zeta = self.res.curator_keys.paillier
        assert self.w is not None  # trained() preceded S1.2
        try:
            w_enc = prm.ring.to_int(self.w, MODEL_BOUND)
        except EncodingOverflow as e:  # the detail names no coefficient of ŵ_j
            raise LocalProtocolError(Problem.INVALID_JOB, "the local model does not fit the encoding (a larger λ bounds it); the job cannot release") from e
        q = prm.ring_modulus
        if self.j > 0:
            out = self._to_party(0, pb.NoiseChain(job_id=self.job_id, ciphertexts=[zeta.to_bytes(c) for c in psi]))
            self.c = [x % q for x in w_enc]
        else:
            # S3.1: P1 masks ψ with s and keeps c_1 = ŵ_1 − ⌊s/2^g⌋ (g = truncate_bits: 0 in the smallest-party modes).
            # The noise plaintext is already on K·ŵ_s at full resolution, so s enters without a factor K.
            self.stages.enter("stage3")
            srng = self.rng.child("mask")
            s = [(1 << prm.eta_bits) + srng.randbits(prm.eta_bits + prm.kappa) for _ in range(self.d)]
            s_blocks = packing.blocks(s, prm.noise_slots(zeta.bits))  # the mask packed like ψ: slot i carries s_i
            masked = [zeta.add(p, zeta.encrypt(packing.pack(sb, prm.noise_slot_bits), factor=self.res.zeta_pool.take(), ops=self.ops)) for p, sb in zip(psi, s_blocks)]
            out = [Send(CURATOR, pb.MaskedNoise(job_id=self.job_id, ciphertexts=[zeta.to_bytes(c) for c in masked]))]
            self.c = [(w - (si >> prm.truncate_bits)) % q for w, si in zip(w_enc, s)]
        return out + self._reshare()

    # -- Stage 3 -------------------------------------------------------------------------
    def _reshare(self) -> list[Output]:
        """S3.3 (re-sharing): split c_j into K+1 pieces; participant t gets t_{j,t}. Charlie's piece is drawn here and
        sent; P1 also draws and sends its piece for every other party, whose last step therefore waits for P1's S3.1
        (so no party finishes before every ψ_j is in); every other party's pieces are expanded from the seed it
        shares with their receiver (reshare_pair_seed, reshare_piece) and not sent. This party keeps c_j minus all."""
        assert self.c is not None
        q = self.params.ring_modulus
        assert q == 1 << 128  # reshare_piece's words
        rng = self.rng.child("reshare")
        to_charlie = [rng.randbelow(q) for _ in range(self.d)]
        out: list[Output] = [Send(CURATOR, pb.ResharePiece(job_id=self.job_id, piece=sharing.pack_ring(to_charlie, 128)))]
        given = [to_charlie]
        if self.j == 0:
            for n in self.params.parties[1:]:
                piece = [rng.randbelow(q) for _ in range(self.d)]
                given.append(piece)
                out.append(Send(Peer("party", n), pb.ResharePiece(job_id=self.job_id, piece=sharing.pack_ring(piece, 128))))
        else:
            given += [reshare_piece(self.job_id, self.me.name, n, seed, self.d) for n, seed in self._reshare_seeds.items()]
        self.own_piece = [(c - sum(col)) % q for c, col in zip(self.c, zip(*given))]
        self.stages.enter("stage3")
        self.state = "AWAIT_RESHARE_PIECES"
        return out

    def _step_await_reshare_pieces(self) -> list[Output]:
        """Re-sharing, last step: z_t = Σ_p t_{p,t}; publish z_t at Charlie and record the release."""
        assert self.own_piece is not None
        q = self.params.ring_modulus
        senders = [CURATOR.name] + ([self.params.parties[0]] if self.j != 0 else [])
        vecs = [self.own_piece] + [_ring(self._take(pb.ResharePiece, s).piece, self.d, s) for s in senders]
        vecs += [reshare_piece(self.job_id, n, self.me.name, seed, self.d) for n, seed in self._reshare_seeds.items()]
        z = sharing.combine(vecs, q)
        self.stages.stop()
        self.state = "DONE"
        entry = {k: v for k, v in self.charge().items() if k != "accounting"}  # the release's record of what was spent
        return [
            Send(CURATOR, pb.PublishedShare(job_id=self.job_id, share=sharing.pack_ring(z, 128), paillier_ops=dict(self.ops))),  # no duration: it would time n_j
            Record(entry),
        ]


def implausible_local_model(local: LocalModel, params: PathakParams, data_bytes: int) -> str | None:
    """Why a cached ŵ_j cannot be the model :func:`train_local` would give for this job and a data file of
    ``data_bytes`` bytes (None: plausible). A cached entry is trusted to be that model, so that every protocol
    message and the guarantee are unchanged; one planted or damaged is a miss (retrain) instead.

    - ``n``: at most :data:`mpdp.limits.MAX_LOCAL_ROWS`, and at most one row per two bytes of the data file (a row
      is at least a label and a line end, whatever the format).
    - ``‖w‖``: the sensitivity 2/(n·c) the mechanism is calibrated with (Chaudhuri & Monteleoni 2008, Cor. 2;
      Pathak et al. 2010 §3) holds for the exact minimiser of J(w) = (1/n)·Σ log(1 + e^(−y_i·wᵀx_i)) + (c/2)‖w‖²
      over rows with ‖x_i‖ ≤ 1 (c = :func:`mpdp.learn.logreg.reg_coefficient`: λ, or 2λ in the paper's convention).
      Setting ∇J(w*) = 0 gives c·w* = (1/n)·Σ σ(−y_i·w*ᵀx_i)·y_i·x_i, a mean of vectors of norm < 1, so
      ‖w*‖ < 1/c; and J(w*) ≤ J(0) = log 2 with the loss term ≥ 0 gives (c/2)‖w*‖² ≤ log 2, ‖w*‖ ≤ √(2·log 2 / c).
      A cached ‖w‖ above the smaller bound (with 10⁻⁶ relative room for the solver) is no such minimiser.
    """
    n, w = local.n, np.asarray(local.w, dtype=np.float64)
    if not 1 <= n <= limits.MAX_LOCAL_ROWS:
        return f"n = {n} is outside 1..{limits.MAX_LOCAL_ROWS} (mpdp.limits.MAX_LOCAL_ROWS)"
    if n > max(1, data_bytes // 2):
        return f"n = {n} rows cannot come from a {data_bytes}-byte data file"
    c = logreg.reg_coefficient(params.calibration.lam, params.calibration.convention)
    bound = min(1.0 / c, math.sqrt(2.0 * math.log(2.0) / c)) * CLIP_BOUND
    norm = float(np.linalg.norm(w))
    if not math.isfinite(norm) or norm > bound * (1 + 1e-6):
        return f"‖w‖ = {norm:.6g} exceeds the bound {bound:.6g} every minimiser of the job's objective obeys"
    return None


def train_local(X: np.ndarray, y: np.ndarray, params: PathakParams) -> LocalModel:
    """Local training (PRR10 Sec. 3.1): rows clipped to the unit ball (:data:`CLIP_BOUND`), labels ±1, the exact argmin of
    the job's regularised objective. Deterministic in (X, y, λ, convention): what the model cache keys on."""
    Xc = logreg.clip_rows(np.asarray(X, dtype=np.float64), CLIP_BOUND)
    labels = np.asarray(y, dtype=np.float64)
    w = logreg.fit(Xc, labels, params.calibration.lam, params.calibration.convention, tol=FIT_TOL, max_iter=FIT_MAX_ITER)
    return LocalModel(w, int(Xc.shape[0]))


def train_local_rows(src, name: str, params: PathakParams) -> LocalModel:
    """:func:`train_local` over a configured dataset read in batches (:func:`mpdp.learn.logreg.local_logreg`): the same
    clipping, labels and stopping rule ‖∇J‖ < :data:`FIT_TOL`, with bounded memory."""
    from mpdp.learn.logreg import local_logreg

    w, n = local_logreg(src, name, params.calibration.lam, params.calibration.convention, clip=CLIP_BOUND, tol=FIT_TOL, max_iter=FIT_MAX_ITER)
    return LocalModel(w, n)


def round_scaled(x: float, bits: int, *, times: int = 1) -> int:
    """round(times·x·2^bits) exactly (ties up, ⌊·+1/2⌋): a float is m/2^k, so this is integer arithmetic."""
    num, den = x.as_integer_ratio()
    return (2 * num * times * (1 << bits) + den) // (2 * den)


def raise_remote(problem: Problem.ValueType, detail: str) -> None:
    from mpdp.protocol import RemoteProtocolError

    raise RemoteProtocolError(problem, detail)


def _checked(parse, data: bytes) -> int:
    try:
        return parse(data)
    except (CiphertextError, ValueError) as e:
        raise_remote(Problem.MALFORMED, f"bad ciphertext: {e}")
        raise  # unreachable


def _checked_many(parse, data: list[bytes]) -> list[int]:
    """:func:`_checked` for a parser of a whole message's ciphertexts (the same refusal)."""
    try:
        return parse(data)
    except (CiphertextError, ValueError) as e:
        raise_remote(Problem.MALFORMED, f"bad ciphertext: {e}")
        raise  # unreachable


def _ring(data: bytes, d: int, sender: str) -> list[int]:
    try:
        return sharing.unpack_ring(data, 128, d)
    except ValueError as e:
        raise_remote(Problem.MALFORMED, f"re-sharing piece from {sender}: {e}")
        raise


def _b(v: int) -> bytes:
    return int(v).to_bytes(max(1, (int(v).bit_length() + 7) // 8), "big")
