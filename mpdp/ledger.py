"""A party's privacy ledger (spec decision 9): every release it took part in, composed by a proven accountant.

The rule (one ledger path): a party spends a job's **true** (ε, δ) — the guarantee the release really gives,
not a nominal parameter — in one atomic, durable step *before* the first data-dependent message leaves, or
refuses the job. A job that fails after spending keeps its charge: its data may already have influenced a
message — unless no message at all left the party after its spend, when the charge is **voided**
(:meth:`Ledger.void`): the entry stays, with status ``voided`` and the reason, and no longer counts
(docs/protocols/accounting.md, "Voided charges").

Each entry keeps its per-release guarantee (``epsilon``, ``delta``) and, under ``accounting``, the mechanism that
gave it (:mod:`mpdp.accounting`: Gaussian σ/Δ, pure ε, discrete Gaussian ρ, or only (ε, δ)). The refusal rule:
a job fits when the **composed ε of all entries plus the new one, at the party's budget δ, is at most the
budget ε** (docs/protocols/accounting.md). The composed ε is the smallest of the PLD accountant's, the RDP
accountant's (ledgers with discrete-Gaussian entries) and basic composition's (Σε, valid only while Σδ ≤ δ):
all three are valid upper bounds, so the ledger never admits less than basic composition did.

* :func:`compose` — basic composition (ε and δ add up): one of the three bounds, and what old ledgers used.
* :func:`composition` — the composed guarantee of a list of entries at a target δ (the accountant).
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
from typing import Any, Iterable, Iterator

from mpdp import accounting
from mpdp.accounting import Composition

SPENT, RELEASED, FAILED, VOIDED = "spent", "released", "failed", "voided"
STATUSES = (SPENT, RELEASED, FAILED, VOIDED)
DEFAULT_BUDGET_DELTA = 1e-3
_SLACK = 1e-12  # floating-point slack on the comparison with the budget
MAX_TIMELINE_POINTS = 60  # prefixes composed for the budget-over-time chart (each one accountant run)


class BudgetExceeded(ValueError):
    """A job would exceed the party's privacy budget; says what it needs, what is left, and what the ledger
    with the job would compose to (``composed_epsilon`` at the budget δ; inf when no bound holds at that δ)."""

    def __init__(self, need_epsilon: float, need_delta: float, left_epsilon: float, left_delta: float, composed_epsilon: float | None = None) -> None:
        self.need_epsilon, self.need_delta = need_epsilon, need_delta
        self.left_epsilon, self.left_delta = max(0.0, left_epsilon), max(0.0, left_delta)
        self.composed_epsilon = composed_epsilon
        tail = "" if composed_epsilon is None else f" (with it the ledger composes to ε={composed_epsilon:.6g})"
        super().__init__(f"needs ε={need_epsilon:.6g}, δ={need_delta:.6g}; left ε={self.left_epsilon:.6g}, δ={self.left_delta:.6g}{tail}")


class LedgerError(RuntimeError):
    """The ledger cannot be used (unreadable file, bad entry, conflicting charge for one job)."""


def compose(charges: Iterable[tuple[float, float]]) -> tuple[float, float]:
    """Total (ε, δ) of a sequence of releases on the same data by basic composition (ε and δ add up): a valid
    bound, and one of the three :func:`composition` takes the smallest of."""
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


def release_of(entry: dict) -> accounting.Release:
    """The accountant's view of an entry, checked: a valid charge and a well-formed ``accounting`` record."""
    charge_of(entry)
    try:
        return accounting.release_of(entry)
    except accounting.AccountingError as e:
        raise LedgerError(f"ledger entry {entry.get('job_id', '?')!s:.64}: {e}") from None


def charged(entries: Iterable[dict]) -> list[dict]:
    """The entries that count against the budget: every one but the voided (a voided job released nothing)."""
    return [e for e in entries if e.get("status") != VOIDED]


def composition(entries: Iterable[dict], delta: float, cap: float | None = None) -> Composition:
    """The composed guarantee of ``entries`` at ``delta`` (a party's budget δ): the smallest valid bound of the
    PLD accountant, the RDP accountant and basic composition (:func:`mpdp.accounting.compose`). ``cap``: the
    budget ε, where the accountant also tries the (1 + e^ε)·Σtv term. Voided entries do not count (:func:`charged`)."""
    return accounting.compose([release_of(e) for e in charged(entries)], delta, () if cap is None else (cap,))


def charged_digest(entries: Iterable[dict]) -> str:
    """A digest of what the accountant composes from ``entries``: each charged entry's (ε, δ) and accounting record."""
    import hashlib

    rows = [[e.get("epsilon"), e.get("delta"), e.get("accounting")] for e in charged(entries)]
    return hashlib.sha256(json.dumps(rows, sort_keys=True, allow_nan=True).encode()).hexdigest()


def _stored(record: Any, entries: list[dict], delta: float, cap: float) -> Composition | None:
    """The composition a ledger file stores (``composed``, written with the entries by :meth:`PrivacyLedger.to_json`)
    when it is the one of these entries at this δ and budget ε; None otherwise (then the accountant runs)."""
    if not isinstance(record, dict) or record.get("delta") != delta or record.get("cap") != cap or record.get("charged") != charged_digest(entries):
        return None
    inf = lambda x: math.inf if x is None else float(x)  # noqa: E731 - JSON has no inf
    try:
        return Composition(inf(record["epsilon"]), float(record["delta"]), str(record["method"]), inf(record["pld_epsilon"]), inf(record["rdp_epsilon"]),
                           inf(record["basic_epsilon"]), float(record["basic_delta"]), int(record["releases"]))
    except (KeyError, TypeError, ValueError):
        return None


def _fits(composed: Composition, budget_epsilon: float) -> bool:
    return composed.epsilon <= budget_epsilon + _SLACK


def _spent_at(entry: dict) -> float:
    """When an entry was spent (``spent_at``), or −inf for an entry written without one (such entries come first)."""
    at = entry.get("spent_at")
    return float(at) if isinstance(at, (int, float)) and math.isfinite(at) else -math.inf


def _key(entry: dict) -> tuple[str, str]:
    return str(entry.get("protocol", "")), str(entry.get("job_id", ""))


@dataclass
class PrivacyLedger:
    """Entries in memory: check a charge, record an entry (idempotent per (protocol, job_id))."""

    budget_epsilon: float
    budget_delta: float = DEFAULT_BUDGET_DELTA
    entries: list[dict] = field(default_factory=list)
    stored: Any = field(default=None, repr=False, compare=False)  # the file's ``composed`` record (:meth:`report` only)

    def composition(self, extra: Iterable[dict] = ()) -> Composition:
        """The entries (and ``extra``) composed at the budget δ."""
        return composition([*self.entries, *extra], self.budget_delta, self.budget_epsilon)

    @property
    def spent_epsilon(self) -> float:
        """ε spent: the composed ε at the budget δ (inf if no bound holds at that δ)."""
        return self.composition().epsilon

    @property
    def spent_delta(self) -> float:
        """Σδ of the entries that count (what basic composition spends of δ)."""
        return compose(charge_of(e) for e in charged(self.entries))[1]

    def left(self) -> tuple[float, float]:
        """(budget ε − composed ε, budget δ − Σδ)."""
        return self.budget_epsilon - self.spent_epsilon, self.budget_delta - self.spent_delta

    def check(self, epsilon: float, delta: float = 0.0, mechanism: dict | None = None) -> None:
        """Raise BudgetExceeded unless the entries plus a release of (ε, δ) (its ``accounting`` record:
        ``mechanism``; without one, only its (ε, δ) is known) compose to at most the budget ε at the budget δ."""
        extra = {"epsilon": epsilon, "delta": delta, **({"accounting": mechanism} if mechanism is not None else {})}
        self.check_entry(extra)

    def check_entry(self, entry: dict) -> None:
        """:meth:`check` for a whole entry (its ``epsilon``, ``delta`` and ``accounting``)."""
        need = charge_of(entry)
        after = self.composition([entry])
        if not _fits(after, self.budget_epsilon):
            before = self.composition()
            raise BudgetExceeded(need[0], need[1], self.budget_epsilon - before.epsilon, self.budget_delta - before.basic_delta, after.epsilon)

    def report(self) -> dict:
        """Every entry (protocol, job, status, mechanism, its own (ε, δ)) and what was spent and is left, under the
        accountant and under basic composition (JSON-ready: an ε with no valid bound is None). The composition the
        file stores with these entries is used when it is theirs at this budget (no accountant runs: `mpdp ledger
        show` stays fast); a charge's check always composes afresh (:meth:`check_entry`)."""
        c = _stored(self.stored, self.entries, self.budget_delta, self.budget_epsilon) or self.composition()
        num = lambda x: x if math.isfinite(x) else None  # noqa: E731
        rows: list[dict[str, Any]] = []
        for e in self.entries:
            r = release_of(e)
            rows.append({"protocol": str(e.get("protocol", "")), "job_id": str(e.get("job_id", "")), "status": str(e.get("status", SPENT)),
                         "mechanism": str(e.get("mechanism", "")), "accounted_as": r.describe(), "kind": r.kind,
                         "epsilon": r.epsilon, "delta": r.delta})
        basic_left = self.budget_epsilon - c.basic_epsilon if c.basic_delta <= self.budget_delta * (1 + 1e-12) else -math.inf
        return {
            "budget": {"epsilon": self.budget_epsilon, "delta": self.budget_delta},
            "entries": rows,
            "accountant": {"epsilon": num(c.epsilon), "delta": self.budget_delta, "method": c.method, "pld_epsilon": num(c.pld_epsilon),
                           "rdp_epsilon": num(c.rdp_epsilon), "left_epsilon": num(self.budget_epsilon - c.epsilon)},
            "basic": {"epsilon": math.fsum(r["epsilon"] for r in rows if r["status"] != VOIDED), "delta": c.basic_delta, "left_epsilon": num(basic_left),
                      "left_delta": self.budget_delta - c.basic_delta},
        }

    def timeline(self, max_points: int = MAX_TIMELINE_POINTS) -> list[dict]:
        """Budget spent over time: after each charged entry, in the order they were spent (``spent_at``; entries
        without one first, in file order), the composed ε of the entries so far at the budget δ (the
        accountant; None when no bound holds) and their Σε (basic composition). With more than ``max_points``
        entries, evenly spaced prefixes are composed (the last always), so the cost stays bounded.

        >>> led = PrivacyLedger(10.0, 1e-3, [{"job_id": "a", "epsilon": 1.0, "spent_at": 5.0}, {"job_id": "b", "epsilon": 2.0, "spent_at": 9.0}])
        >>> [(p["job_id"], p["basic_epsilon"]) for p in led.timeline()]
        [('a', 1.0), ('b', 3.0)]
        """
        order = [e for _, e in sorted(enumerate(charged(self.entries)), key=lambda ie: (_spent_at(ie[1]), ie[0]))]
        n = len(order)
        keep = range(n) if n <= max_points else sorted({round(i * (n - 1) / (max_points - 1)) for i in range(max_points)})
        points = []
        for k in keep:
            c = composition(order[:k + 1], self.budget_delta, self.budget_epsilon)
            at = order[k].get("spent_at")
            points.append({"job_id": str(order[k].get("job_id", "")), "at": float(at) if isinstance(at, (int, float)) else None,
                           "epsilon": c.epsilon if math.isfinite(c.epsilon) else None, "basic_epsilon": math.fsum(charge_of(e)[0] for e in order[:k + 1])})
        return points

    def find(self, protocol: str, job_id: str) -> dict | None:
        return next((e for e in self.entries if _key(e) == (protocol, job_id)), None)

    def record(self, entry: dict) -> None:
        if self.find(*_key(entry)) is None:
            self.entries.append(dict(entry))

    def to_json(self) -> str:
        c = self.composition()
        return json.dumps({"budget_epsilon": self.budget_epsilon, "budget_delta": self.budget_delta, "entries": self.entries,
                           "spent_epsilon": c.epsilon if c.epsilon != math.inf else None, "spent_delta": c.basic_delta,
                           "spent_epsilon_basic": c.basic_epsilon if c.basic_epsilon != math.inf else None,
                           "composition": c.method,
                           "composed": {**c.as_dict(), "cap": self.budget_epsilon, "charged": charged_digest(self.entries)}}, indent=2)

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
        led = cls(budget_epsilon, budget_delta, [dict(e) for e in entries], stored=data.get("composed"))
        for entry in led.entries:
            release_of(entry)  # validates every entry's charge and accounting record
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
        return self.spend_new(entry)[0]

    def spend_new(self, entry: dict) -> tuple[dict, bool]:
        """:meth:`spend`, and whether this call created the entry (False: it was spent before)."""
        protocol, job_id = _key(entry)
        if not protocol or not job_id:
            raise LedgerError("a ledger entry needs a protocol and a job_id")
        need = charge_of(entry)
        release_of(entry)
        with self._locked() as led:
            old = led.find(protocol, job_id)
            if old is not None and old.get("status") == VOIDED:
                raise LedgerError(f"job {job_id} ({protocol}) was voided; a voided job never runs again")
            if old is not None:
                if charge_of(old) != need or ("accounting" in old and "accounting" in entry and old["accounting"] != entry["accounting"]):
                    raise LedgerError(f"job {job_id} ({protocol}) was already charged ε={charge_of(old)[0]:.6g}, δ={charge_of(old)[1]:.6g}")
                return dict(old), False
            led.check_entry(entry)
            stored = {**entry, "epsilon": need[0], "delta": need[1], "status": SPENT, "spent_at": time.time()}
            led.entries.append(stored)
            self._write(led)
            return dict(stored), True

    def mark(self, protocol: str, job_id: str, status: str, details: dict | None = None) -> dict | None:
        """Set a spent job's status ("released" or "failed"; a failed job keeps its charge) and merge
        ``details`` (never the charge). Returns the entry, or None if the job never spent."""
        if status not in (RELEASED, FAILED):
            raise ValueError(f"status must be {RELEASED!r} or {FAILED!r}, got {status!r}")
        extra = {k: v for k, v in (details or {}).items() if k not in ("protocol", "job_id", "epsilon", "delta", "accounting", "status")}
        with self._locked() as led:
            e = led.find(protocol, job_id)
            if e is None:
                return None
            if e.get("status") == VOIDED:  # a failed job's charge was voided: it stays voided
                if status == FAILED:
                    return dict(e)
                raise LedgerError(f"job {job_id} ({protocol}) was voided; it cannot be marked {status}")
            if e.get("status") == status and not extra:
                return dict(e)
            e.update(extra)
            e["status"] = status
            self._write(led)
            return dict(e)

    def void(self, protocol: str, job_id: str, reason: str) -> dict | None:
        """Void a job's charge: its entry stays, with status "voided", ``reason`` and ``voided_at``, and no longer
        counts against the budget. Only for a job that failed before any message left this party after its
        spend (docs/protocols/accounting.md, "Voided charges"); the caller decides that, the ledger only refuses
        to void a released job. Returns the entry, or None if the job never spent. Durable like :meth:`spend`."""
        with self._locked() as led:
            e = led.find(protocol, job_id)
            if e is None:
                return None
            if e.get("status") == RELEASED:
                raise LedgerError(f"job {job_id} ({protocol}) was released; its charge cannot be voided")
            if e.get("status") == VOIDED:
                return dict(e)
            e["status"], e["void_reason"], e["voided_at"] = VOIDED, str(reason)[:200], time.time()
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
        """(ε, δ) by basic composition (Σε, Σδ); :meth:`composition` gives the accountant's ε."""
        return compose(charge_of(e) for e in charged(self.entries))

    def composition(self) -> Composition:
        """The entries composed at the budget δ (see :func:`composition`)."""
        return self.snapshot().composition()

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
