"""The pad on a party's local work: nothing computed from its records leaves before ``local_work_seconds``.

A party's work on its records (a round's statistic or gradient sum, an ensemble's local classifier and votes, a local
release's training) takes a time that grows with its row count n_j. Whoever sees when the result arrives (the
curator, the compute nodes, anyone on the network) could time n_j from it. So each such step opens a
:class:`LocalWork` *before* it touches the records, which fixes the step's deadline at ``local_work_seconds`` (party
config) from then; whatever the step sends next — its shares, its release, or a refusal that reads the records (a
dataset that does not fit, a training that fails) — waits for :meth:`LocalWork.done`. Then the time from the
request to the party's answer is the pad plus steps whose work does not depend on n_j (fetching the job, connecting
to the compute nodes, the durable spend, the shares of a fixed dimension).

A step that outlasts its pad is not stopped: its message leaves when the work ends, and its length shows to whoever
times it. The party logs that overrun (a WARNING naming the job and the pad) so that its operator raises the pad
above the largest dataset's work (docs/protocols/job-model.md §9, docs/limitations.md). Pathak jobs keep their own deadline in the party's machine
(:attr:`mpdp.pathak2010.party.PartyMachine.local_work_until`), with the same setting.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

log = logging.getLogger("mpdp.party")


class LocalWork:
    """One step's work on the party's records, padded to ``seconds`` from its creation (see the module docstring).

    ``job`` and ``what`` name the job and the work in the overrun warning (the party's own log only)."""

    def __init__(self, seconds: float, job: str, what: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        if not seconds >= 0:
            raise ValueError("local_work_seconds must be at least 0")
        self.seconds = float(seconds)
        self.job = job
        self.what = what
        self._clock = clock
        self.began = clock()
        self.until = self.began + self.seconds

    async def done(self) -> float:
        """Return at the deadline (at once if it passed), having logged an overrun; the work's own length in seconds
        (for this party's log; never sent)."""
        took = self._clock() - self.began
        if took > self.seconds > 0:  # 0: no pad, by the operator's choice
            log.warning("job %s: %s took %.3f s, over local_work_seconds = %.3f s: the curator can time this job's local work "
                        "(raise local_work_seconds above the largest dataset's work)", self.job, self.what, took, self.seconds)
        while (left := self.until - self._clock()) > 0:
            await asyncio.sleep(left)
        return took
