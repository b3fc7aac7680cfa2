"""Charlie's precomputed randomness, drawn between jobs: h^r factors for the bit encryptions of Stage 1's comparisons
(S1.6), so that a job's tournament rounds only multiply, and r^N′ factors for the K encryptions of the selection
vector under ζ (S2.1), which otherwise take K exponentiations on the job's critical path. One pool per long-lived
key, each factor used once."""

from __future__ import annotations

import threading
from typing import Callable

from mpdp.math.dgk import DgkBlindingPool, DgkKeyPair
from mpdp.math.drbg import Drbg
from mpdp.math.paillier import KeyPair, RandomnessPool

TARGET = 8192  # ≥ one K = 64 tournament ((K − 1)·ℓ = 63·115 = 7245 bit encryptions)
ZETA_TARGET = 128  # two K = 64 selection vectors (≈ 3 ms a factor by CRT at 2048 bits)
BATCH = 16  # factors per fill step (≈ 2 ms at 2048 bits): how long a starting job may wait for the thread


class CuratorDgkPool:
    """Fills :attr:`pool` (DGK) up to :data:`TARGET` and :attr:`zeta_pool` (ζ) up to :data:`ZETA_TARGET` in a daemon
    thread, only while ``busy()`` is False (gmpy2 holds the GIL: filling during a job would slow it down). An empty
    pool still works: a factor is then drawn on demand."""

    def __init__(self, key: DgkKeyPair, rng: Drbg, busy: Callable[[], bool], target: int = TARGET, zeta: KeyPair | None = None) -> None:
        self.pool = DgkBlindingPool(key.public, rng, key.blinding_factor_crt)
        self.zeta_pool = RandomnessPool(zeta.public, rng.child("zeta"), zeta.random_factor) if zeta is not None else None
        self.target = target
        self._busy = busy
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mpdp-curator-dgk-pool", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            zeta_short = self.zeta_pool is not None and len(self.zeta_pool) < ZETA_TARGET
            if self._busy() or (len(self.pool) >= self.target and not zeta_short):
                self._stop.wait(0.05)
                continue
            if zeta_short and self.zeta_pool is not None:
                self.zeta_pool.fill(BATCH // 4)
            else:
                self.pool.fill(BATCH)

    def stop(self) -> None:
        self._stop.set()
