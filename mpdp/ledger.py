"""A party's privacy ledger (spec decision 9): every release it took part in, composed by basic composition.

The rule (one ledger path): a party spends a job's **true** (ε, δ) — the guarantee the release really gives,
not a nominal parameter — in one atomic, durable step *before* the first data-dependent message leaves, or
refuses the job. A job that fails after spending keeps its charge: its data may already have influenced a
message.

* :func:`compose` — how entries add up (basic composition; the one function an accountant would replace).
* :class:`PrivacyLedger` — the pure bookkeeping (entries in memory, check, record), used by in-memory
  drivers and experiments.
* :class:`Ledger` — the durable ledger a party keeps on disk, with the one spend operation
  :meth:`Ledger.spend` and :meth:`Ledger.mark`. Atomic across threads and processes (the party service and
  ``mpdp dca submit --site`` may share one file): every operation holds an ``fcntl.flock`` on a lock file
  beside the ledger, re-reads the file under the lock, and writes tmp + fsync + rename + fsync of the folder.
  Files are created 0600.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

SPENT, RELEASED, FAILED = "spent", "released", "failed"
STATUSES = (SPENT, RELEASED, FAILED)
DEFAULT_BUDGET_DELTA = 1e-3
_SLACK = 1e-12  # floating-point slack on the comparison with the budget


class BudgetExceeded(ValueError):
    """A job would exceed the party's privacy budget; says what it needs and what is left."""

    def __init__(self, need_epsilon: float, need_delta: float, left_epsilon: float, left_delta: float) -> None:
        self.need_epsilon, self.need_delta = need_epsilon, need_delta
        self.left_epsilon, self.left_delta = max(0.0, left_epsilon), max(0.0, left_delta)
        super().__init__(f"needs ε={need_epsilon:.6g}, δ={need_delta:.6g}; left ε={self.left_epsilon:.6g}, δ={self.left_delta:.6g}")


class LedgerError(RuntimeError):
    """The ledger cannot be used (unreadable file, bad entry, conflicting charge for one job)."""


def compose(charges: Iterable[tuple[float, float]]) -> tuple[float, float]:
    """Total (ε, δ) of a sequence of releases on the same data: basic composition (ε and δ add up)."""
    eps = delta = 0.0
    for e, d in charges:
        eps += e
        delta += d
    return eps, delta


def charge_of(entry: dict) -> tuple[float, float]:
    """The (ε, δ) an entry charges, checked: finite and non-negative (a bad entry must not free budget)."""
    try:
        eps, delta = float(entry.get("epsilon", 0.0)), float(entry.get("delta", 0.0))
    except (TypeError, ValueError) as e:
        raise LedgerError("a ledger entry's epsilon or delta is not a number") from e
    if not (math.isfinite(eps) and math.isfinite(delta) and eps >= 0 and delta >= 0):
        raise LedgerError(f"a ledger entry charges ε={eps}, δ={delta}; both must be finite and ≥ 0")
    return eps, delta


def _fits(spent: tuple[float, float], need: tuple[float, float], budget: tuple[float, float]) -> bool:
    return spent[0] + need[0] <= budget[0] + _SLACK and spent[1] + need[1] <= budget[1] + _SLACK * 1e-3


def _key(entry: dict) -> tuple[str, str]:
    return str(entry.get("protocol", "")), str(entry.get("job_id", ""))


@dataclass
class PrivacyLedger:
    """Entries in memory: check a charge, record an entry (idempotent per (protocol, job_id))."""

    budget_epsilon: float
    budget_delta: float = DEFAULT_BUDGET_DELTA
    entries: list[dict] = field(default_factory=list)

    @property
    def spent_epsilon(self) -> float:
        return compose(charge_of(e) for e in self.entries)[0]

    @property
    def spent_delta(self) -> float:
        return compose(charge_of(e) for e in self.entries)[1]

    def left(self) -> tuple[float, float]:
        eps, delta = compose(charge_of(e) for e in self.entries)
        return self.budget_epsilon - eps, self.budget_delta - delta

    def check(self, epsilon: float, delta: float = 0.0) -> None:
        """Raise BudgetExceeded unless (spent + ε, spent + δ) stays within budget."""
        spent = compose(charge_of(e) for e in self.entries)
        need = charge_of({"epsilon": epsilon, "delta": delta})
        if not _fits(spent, need, (self.budget_epsilon, self.budget_delta)):
            raise BudgetExceeded(need[0], need[1], self.budget_epsilon - spent[0], self.budget_delta - spent[1])

    def find(self, protocol: str, job_id: str) -> dict | None:
        return next((e for e in self.entries if _key(e) == (protocol, job_id)), None)

    def record(self, entry: dict) -> None:
        if self.find(*_key(entry)) is None:
            self.entries.append(dict(entry))

    def to_json(self) -> str:
        eps, delta = compose(charge_of(e) for e in self.entries)
        return json.dumps({"budget_epsilon": self.budget_epsilon, "budget_delta": self.budget_delta, "entries": self.entries,
                           "spent_epsilon": eps, "spent_delta": delta}, indent=2)

    @classmethod
    def from_json(cls, text: str, budget_epsilon: float, budget_delta: float = DEFAULT_BUDGET_DELTA) -> "PrivacyLedger":
        """Entries from a ledger file; the budget comes from the caller's configuration, never from the file."""
        try:
            data = json.loads(text)
            entries = data["entries"] if isinstance(data, dict) else None
        except (ValueError, KeyError) as e:
            raise LedgerError("the ledger file is not a ledger (JSON object with entries)") from e
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise LedgerError("the ledger file's entries are not a list of objects")
        led = cls(budget_epsilon, budget_delta, [dict(e) for e in entries])
        led.spent_epsilon  # noqa: B018 - validates every entry's charge
        return led


class Ledger:
    """The durable ledger of one party: ``spend`` before a job's first data-dependent message, ``mark`` after."""

    def __init__(self, path: str | Path, budget_epsilon: float, budget_delta: float = DEFAULT_BUDGET_DELTA) -> None:
        if not (math.isfinite(budget_epsilon) and budget_epsilon >= 0 and math.isfinite(budget_delta) and budget_delta >= 0):
            raise ValueError(f"budgets must be finite and ≥ 0, got ε={budget_epsilon}, δ={budget_delta}")
        self.path = Path(path)
        self.budget_epsilon = float(budget_epsilon)
        self.budget_delta = float(budget_delta)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self._thread_lock = threading.Lock()

    # -- the one spend operation ---------------------------------------------------------------
    def spend(self, entry: dict) -> dict:
        """Charge ``entry``'s (ε, δ) and append it with status "spent", or raise :class:`BudgetExceeded`.

        Check and append are one step under the lock, re-reading the file, so concurrent jobs (threads or
        processes) never overspend. Idempotent per (protocol, job_id): a retry with the same charge returns
        the stored entry without charging again; a different charge for a spent job is a :class:`LedgerError`.
        """
        protocol, job_id = _key(entry)
        if not protocol or not job_id:
            raise LedgerError("a ledger entry needs a protocol and a job_id")
        need = charge_of(entry)
        with self._locked() as led:
            old = led.find(protocol, job_id)
            if old is not None:
                if charge_of(old) != need:
                    raise LedgerError(f"job {job_id} ({protocol}) was already charged ε={charge_of(old)[0]:.6g}, δ={charge_of(old)[1]:.6g}")
                return dict(old)
            led.check(*need)
            stored = {**entry, "epsilon": need[0], "delta": need[1], "status": SPENT, "spent_at": time.time()}
            led.entries.append(stored)
            self._write(led)
            return dict(stored)

    def mark(self, protocol: str, job_id: str, status: str, details: dict | None = None) -> dict | None:
        """Set a spent job's status ("released" or "failed"; a failed job keeps its charge) and merge
        ``details`` (never the charge). Returns the entry, or None if the job never spent."""
        if status not in (RELEASED, FAILED):
            raise ValueError(f"status must be {RELEASED!r} or {FAILED!r}, got {status!r}")
        extra = {k: v for k, v in (details or {}).items() if k not in ("protocol", "job_id", "epsilon", "delta", "status")}
        with self._locked() as led:
            e = led.find(protocol, job_id)
            if e is None:
                return None
            if e.get("status") == status and not extra:
                return dict(e)
            e.update(extra)
            e["status"] = status
            self._write(led)
            return dict(e)

    # -- reading ----------------------------------------------------------------------------------
    def snapshot(self) -> PrivacyLedger:
        """The entries as they are on disk now (read under the lock)."""
        with self._locked() as led:
            return led

    @property
    def entries(self) -> list[dict]:
        return self.snapshot().entries

    def find(self, protocol: str, job_id: str) -> dict | None:
        return self.snapshot().find(protocol, job_id)

    def spent(self) -> tuple[float, float]:
        return compose(charge_of(e) for e in self.entries)

    # -- disk ---------------------------------------------------------------------------------------
    @contextmanager
    def _locked(self) -> Iterator[PrivacyLedger]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._thread_lock:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield self._read()
            finally:
                os.close(fd)  # releases the flock

    def _read(self) -> PrivacyLedger:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return PrivacyLedger(self.budget_epsilon, self.budget_delta)
        return PrivacyLedger.from_json(text, self.budget_epsilon, self.budget_delta)

    def _write(self, led: PrivacyLedger) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            data = led.to_json().encode()
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
