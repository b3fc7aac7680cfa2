"""The party's precompute thread: randomness pools for Charlie's keys and one spare party key ξ, off the
critical path of a Pathak job (it pauses while a job runs and resumes when every job is terminal)."""

from __future__ import annotations

import threading

from mpdp.math.paillier import KeyPair
from mpdp.pathak2010.resources import PartyResources

PRECOMPUTE_HEALTH = "mpdp.precompute"  # health service name: SERVING once pools and a spare key are ready
DGK_POOL_TARGET = 1200  # ≥ the leader's blinding factors for K = 5 (10 pairs × ℓ = 115)


class Precompute:
    """Background thread that keeps randomness pools and one spare party key ξ ready (off the critical path).

    It works only while no job is running in this party (``pause``/``resume``): gmpy2 holds the GIL, so
    filling pools during a job would slow the job down. ``on_state(ready: bool)`` reports when the pools
    are full (the party publishes it as the health status of ``mpdp.precompute``).
    """

    def __init__(self, resources: PartyResources, paillier_bits: int, zeta_target: int, on_state=lambda ready: None) -> None:
        self.res = resources
        self.bits = paillier_bits
        self.zeta_target = zeta_target
        self.dgk_target = DGK_POOL_TARGET
        self._spare: list[KeyPair] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._stop = False
        self._on_state = on_state
        resources.party_key_source = self.take_key
        self._thread = threading.Thread(target=self._run, name="mpdp-precompute", daemon=True)
        self._thread.start()

    def take_key(self) -> KeyPair:
        with self._lock:
            key = self._spare.pop() if self._spare else None
        return key or KeyPair.generate(self.bits)

    def pause(self) -> None:
        self._idle.clear()

    def resume(self, dimension: int | None = None, comparisons: int | None = None) -> None:
        if dimension:
            self.zeta_target = max(self.zeta_target, 2 * dimension + 8)
        if comparisons:
            self.dgk_target = max(self.dgk_target, comparisons)
        self._idle.set()
        self._wake.set()

    def stop(self) -> None:
        self._stop = True
        self._idle.set()
        self._wake.set()

    def levels(self) -> dict[str, int]:
        """Items ready per pool (the metrics endpoint reads this; sizes only, never an item)."""
        return {"paillier_zeta": len(self.res.zeta_pool), "dgk": len(self.res.dgk_pool), "spare_keys": len(self._spare)}

    def targets(self) -> dict[str, int]:
        return {"paillier_zeta": self.zeta_target, "dgk": self.dgk_target, "spare_keys": 1}

    def _full(self) -> bool:
        return bool(self._spare) and len(self.res.zeta_pool) >= self.zeta_target and len(self.res.dgk_pool) >= self.dgk_target

    def _run(self) -> None:
        while not self._stop:
            self._idle.wait()
            if self._stop:
                return
            if self._full():
                self._on_state(True)
                self._wake.wait()
                self._wake.clear()
                continue
            self._on_state(False)
            with self._lock:
                need_key = not self._spare
            if need_key:
                k = KeyPair.generate(self.bits)
                with self._lock:
                    self._spare.append(k)
            elif len(self.res.zeta_pool) < self.zeta_target:
                self.res.zeta_pool.fill(4)
            else:
                self.res.dgk_pool.fill(32)
