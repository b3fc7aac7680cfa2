"""What a role machine is given besides messages: generators, key sources, pools, counters, clock.

Injected like Fernet's "at time" entry points, so tests can fix randomness and time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from mpdp.math.dgk import DgkBlindingPool, DgkKeyPair, DgkPublicKey
from mpdp.math.drbg import Drbg
from mpdp.math.opcount import OpCounter
from mpdp.math.paillier import KeyPair, PublicKey, RandomnessPool


@dataclass
class CuratorPublicKeys:
    """pk′ (Paillier ζ) and Charlie's DGK public key, as parties know them."""

    paillier: PublicKey
    dgk: DgkPublicKey


@dataclass
class CuratorSecrets:
    """Charlie's long-lived key pairs: ζ and the DGK comparison key. Never leaves Charlie."""

    paillier: KeyPair
    dgk: DgkKeyPair

    @property
    def public(self) -> CuratorPublicKeys:
        return CuratorPublicKeys(self.paillier.public, self.dgk.public)

    @classmethod
    def generate(cls, paillier_bits: int = 2048, dgk_bits: int = 2048) -> "CuratorSecrets":
        """Fresh key pairs from the OS CSPRNG (moduli below 2048 bits are refused outside test mode by the roles)."""
        return cls(KeyPair.generate(paillier_bits), DgkKeyPair.generate(dgk_bits))


@dataclass
class PartyResources:
    rng: Drbg
    curator_keys: CuratorPublicKeys
    zeta_pool: RandomnessPool  # r^N′ factors for pk′
    dgk_pool: DgkBlindingPool  # h^r factors for Charlie's DGK key (leader)
    party_key_source: Callable[[], KeyPair]  # ξ for a job when this party is P1
    test_mode: bool = False
    ops: OpCounter = field(default_factory=OpCounter)
    clock: Callable[[], float] = time.perf_counter
    # The party's public minimum time for its local work (reading its records, training ŵ_j) after ProtocolStart: its
    # first message computed from the records leaves no earlier (PartyMachine.trained), so that time does not show n_j.
    local_work_seconds: float = 0.0

    @classmethod
    def create(cls, rng: Drbg, curator_keys: CuratorPublicKeys, party_key_bits: int, *, test_mode: bool = False, local_work_seconds: float = 0.0) -> "PartyResources":
        return cls(
            rng=rng,
            curator_keys=curator_keys,
            zeta_pool=RandomnessPool(curator_keys.paillier, rng.child("pool/zeta")),
            dgk_pool=DgkBlindingPool(curator_keys.dgk, rng.child("pool/dgk")),
            party_key_source=lambda: KeyPair.generate(party_key_bits),
            test_mode=test_mode,
            local_work_seconds=local_work_seconds,
        )


@dataclass
class CuratorResources:
    rng: Drbg
    secrets: CuratorSecrets
    test_mode: bool = False
    ops: OpCounter = field(default_factory=OpCounter)
    dgk_pool: DgkBlindingPool | None = None  # h^r for Charlie's own DGK key, filled between jobs (S1.6's bit encryptions)
    zeta_pool: RandomnessPool | None = None  # r^N′ for Charlie's own ζ, filled between jobs (S2.1's selection vector)
    clock: Callable[[], float] = time.perf_counter
