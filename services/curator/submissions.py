"""Idempotent submits: the same operator's same ``JobSubmission.idempotency_key`` names one job, once.

An operator whose ``SubmitJob`` answer was lost (a dropped connection, a deadline) cannot tell whether the curator
started the job; a blind resubmit would start a second job, and every party would pay for both. With a key, the
resubmit is answered with the first submit's job instead. The job host keeps, per (operator name, key):

* the SHA-256 of the submission without its key (deterministic serialisation): the same key with another spec is
  refused ``REPLAY`` (``ALREADY_EXISTS``: the key was already taken, for something else);
* the job's id once its servicer admitted it, or ``None`` while the submit is under way.

A key is written durably (``durable.write_atomic``: fsync, rename, fsync of the folder; 0600) **before** the
protocol's servicer sees the spec, and again with the job id after it; a submit the servicer refused removes its key
(no job started, so a retry may try again). So after a crash the file may hold a key without a job id: the curator
cannot know whether that job was admitted (and its parties told), and it refuses the retry ``JOB_FAILED`` rather
than start a job that may run twice. At most :data:`mpdp.limits.MAX_SUBMISSION_KEYS` keys are kept, the oldest
forgotten first. Keys are per operator: two operators' equal keys never meet.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import OrderedDict
from pathlib import Path
from typing import Any

from mpdp import limits
from mpdp_services.common.durable import PRIVATE, write_atomic

log = logging.getLogger("mpdp.curator")

FILE = "submission-keys.json"
Key = tuple[str, str]  # (operator name, idempotency key)


def digest(submission: Any) -> str:
    """SHA-256 of a JobSubmission without its key: equal exactly when the two submissions ask for the same job."""
    copy = type(submission)()
    copy.CopyFrom(submission)
    copy.idempotency_key = ""
    return hashlib.sha256(copy.SerializeToString(deterministic=True)).hexdigest()


class SubmissionKeys:
    """(operator, key) → (digest, job id or None), durable in ``state_dir/submission-keys.json``."""

    def __init__(self, state_dir: Path | None, bound: int = limits.MAX_SUBMISSION_KEYS) -> None:
        self._path = Path(state_dir) / FILE if state_dir is not None else None
        self._bound = bound
        self._entries: OrderedDict[Key, tuple[str, str | None]] = OrderedDict()
        self._load()

    def get(self, key: Key) -> tuple[str, str | None] | None:
        return self._entries.get(key)

    def pending(self, key: Key, spec_digest: str) -> None:
        """Record the key before its submit runs (durably)."""
        self._entries[key] = (spec_digest, None)
        while len(self._entries) > self._bound:
            self._entries.popitem(last=False)
        self._save()

    def started(self, key: Key, job_id: str) -> None:
        """The submit admitted ``job_id`` (durably)."""
        entry = self._entries.get(key)
        if entry is not None:
            self._entries[key] = (entry[0], job_id)
            self._save()

    def forget(self, key: Key) -> None:
        """The submit was refused: nothing started, the key is free again (durably)."""
        if self._entries.pop(key, None) is not None:
            self._save()

    def __len__(self) -> int:
        return len(self._entries)

    def _save(self) -> None:
        if self._path is None:
            return
        rows = [{"operator": op, "key": k, "digest": d, "job": j} for (op, k), (d, j) in self._entries.items()]
        write_atomic(self._path, json.dumps(rows, separators=(",", ":")), PRIVATE)

    def _load(self) -> None:
        if self._path is None or not self._path.exists():
            return
        try:
            rows = json.loads(self._path.read_text())
        except (OSError, ValueError) as e:
            raise RuntimeError(f"{self._path} cannot be read ({e}); the curator will not start without its submission keys") from None
        for row in rows[-self._bound:]:
            job = row.get("job")
            if isinstance(row.get("operator"), str) and limits.is_id(row.get("key")) and isinstance(row.get("digest"), str) and (job is None or limits.is_id(job)):
                self._entries[(row["operator"], row["key"])] = (row["digest"], job)
        unfinished = sum(1 for _, j in self._entries.values() if j is None)
        if unfinished:
            log.warning("%d keyed submits were under way when the curator stopped; their retries are refused (the jobs may have started)", unfinished)
