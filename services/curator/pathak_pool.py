"""Charlie's precomputed DGK randomness: h^r factors for the bit encryptions of Stage 1's comparisons (S1.6), drawn
between jobs so that a job's tournament rounds only multiply. One pool for the curator's long-lived DGK key,
each factor used once."""

from __future__ import annotations

import threading
from typing import Callable

from mpdp.math.dgk import DgkBlindingPool, DgkKeyPair
from mpdp.math.drbg import Drbg

TARGET = 8192  # ≥ one K = 64 tournament ((K − 1)·ℓ = 63·115 = 7245 bit encryptions)
BATCH = 16  # factors per fill step (≈ 2 ms at 2048 bits): how long a starting job may wait for the thread


class CuratorDgkPool:
    """Fills :attr:`pool` up to :data:`TARGET` in a daemon thread, only while ``busy()`` is False (gmpy2 holds the
    GIL: filling during a job would slow it down). An empty pool still works: a factor is then drawn on demand."""

    def __init__(self, key: DgkKeyPair, rng: Drbg, busy: Callable[[], bool], target: int = TARGET) -> None:
        self.pool = DgkBlindingPool(key.public, rng, key.blinding_factor_crt)
        self.target = target
        self._busy = busy
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mpdp-curator-dgk-pool", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._busy() or len(self.pool) >= self.target:
                self._stop.wait(0.05)
                continue
            self.pool.fill(BATCH)

    def stop(self) -> None:
        self._stop.set()
