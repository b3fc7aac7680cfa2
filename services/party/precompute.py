"""The party's precompute thread: randomness pools for Charlie's keys and one spare party key ξ, off the
critical path of a Pathak job (it pauses while a job runs and resumes when every job is terminal)."""

from __future__ import annotations

import threading
import time
from typing import Callable

from mpdp.math.paillier import KeyPair
from mpdp.pathak2010.resources import PartyResources

PRECOMPUTE_HEALTH = "mpdp.precompute"  # health service name: SERVING once pools and a spare key are ready
DGK_POOL_TARGET = 1200  # ≥ the leader's blinding factors for K = 5 (10 pairs × ℓ = 115)
REFILL_DELAY_SECONDS = 1.0  # after a job ends here, before refills start (the job's other parties may still be in its last steps)


class Precompute:
    """Background thread that keeps randomness pools and one spare party key ξ ready (off the critical path).

    It works only while no job is running in this party (``pause``/``resume``): gmpy2 holds the GIL, so
    filling pools during a job would slow the job down. ``on_state(ready: bool)`` reports when the pools
    are full (the party publishes it as the health status of ``mpdp.precompute``).
    """

    def __init__(self, resources: PartyResources, paillier_bits: int, zeta_target: int, on_state=lambda ready: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.res = resources
        self._clock = clock
        self._resume_at = 0.0  # refills wait until then (resume's delay)
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

    def resume(self, dimension: int | None = None, comparisons: int | None = None, delay: float = 0.0) -> None:
        """Refill again once every job here is terminal, ``delay`` seconds from now: a party that finished a job
        early would otherwise refill (a core each) while the job's other parties, on the same host in a test
        federation or a small deployment, still run its last steps."""
        self._resume_at = self._clock() + delay
        if dimension:
            self.zeta_target = max(self.zeta_target, 2 * dimension + 8)
        if comparisons:
            self.dgk_target = max(self.dgk_target, comparisons)
        if not self._full():  # not ready, from now: during the delay as when refilling
            self._on_state(False)
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

    def wait_left(self) -> float:
        """Seconds until refills may start (0: now)."""
        return max(0.0, self._resume_at - self._clock())

    def _run(self) -> None:
        while not self._stop:
            self._idle.wait()
            if self._stop:
                return
            left = self.wait_left()
            if left > 0:  # woken early (a resume, a stop) or not: look again at pause, stop and the delay
                self._wake.wait(left)
                self._wake.clear()
                continue
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
