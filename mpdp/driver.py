"""The one in-memory driver: role machines of one job in one process, the network played by a queue.

:class:`Wire` routes every :class:`~mpdp.protocol.Send` to its recipient's machine, optionally in a random
order (to exercise early arrival), lets a test replace or drop messages in flight, and keeps what the
protocol runner needs: the first failure, each refusal that left its machine untouched, and the outputs
that leave the protocol (releases, ledger entries, replies). Given the parties' in-memory ledgers
(:class:`~mpdp.ledger.PrivacyLedger`), every party's Spend is checked against its budget and recorded there before
any output after it is carried out, as a served party's ledger does: a refused spend stops those outputs, fails
the party's job and raises :class:`SpendRefused`. Each protocol's ``run_job``
(:mod:`mpdp.pathak2010.driver`, :mod:`mpdp.dca.driver`) builds the machines and feeds the inputs; the
same machines run over gRPC in ``services/``.
"""

from __future__ import annotations

import collections
import math
from typing import Any, Callable, Mapping

from mpdp.ledger import RELEASED, SPENT, BudgetExceeded, PrivacyLedger
from mpdp.math.drbg import Drbg
from mpdp.protocol import Machine, Output, Peer, Problem, ProtocolError, Publish, Record, Reply, Send, Spend

Tamper = Callable[[Peer, Peer, Any], Any | None]


class SpendRefused(Exception):
    """A party's ledger refused its Spend (over budget): nothing after the Spend left the party and its job failed
    with BUDGET_EXCEEDED. The message is the one a served party gives (``party P cannot pay job J: needs …``)."""

    def __init__(self, party: str, job_id: str, cause: BudgetExceeded) -> None:
        super().__init__(f"party {party} cannot pay job {job_id}: {cause}")
        self.party, self.job_id, self.cause = party, job_id, cause


class Wire:
    """Delivers queued messages to ``machines`` (by recipient); ``spawn(to, message)`` may build a recipient
    on its first message (an announcement) and return its start outputs, or None when it is not such a message."""

    def __init__(
        self,
        *,
        order: Drbg | None = None,
        tamper: Tamper | None = None,
        spawn: Callable[[Peer, Any], list[Output] | None] | None = None,
        before_each: Callable[[], None] | None = None,
        ledgers: Mapping[str, PrivacyLedger] | None = None,
    ) -> None:
        self.machines: dict[Peer, Machine] = {}
        self.queue: collections.deque[tuple[Peer, Peer, Any]] = collections.deque()
        self.order = order
        self.tamper = tamper
        self.spawn = spawn
        self.before_each = before_each
        self.messages = 0
        self.error: ProtocolError | None = None  # the first failure of any machine
        self.rejections: list[tuple[Peer, Peer, ProtocolError]] = []  # refused, machine untouched: (sender, recipient, error)
        self.releases: list[Any] = []
        self.ledger: dict[str, list[dict]] = {}
        self.replies: list[Any] = []
        self.ledgers = ledgers  # the parties' ledgers, by name: their Spends are checked against the budget

    def spend(self, sender: Peer, entries: tuple[dict, ...]) -> None:
        """A party's Spend: kept with the run's entries and, when the party has a ledger, each entry checked against
        its budget and recorded there (an entry the ledger holds already, e.g. a dp-gd job's one charge spent again
        by a later round, is not charged twice); over budget, the party's job fails and :class:`SpendRefused` stops
        everything after the Spend."""
        led = None if self.ledgers is None else self.ledgers.get(sender.name)
        for entry in entries:
            if led is None:
                break
            protocol, job_id = str(entry.get("protocol", "")), str(entry.get("job_id", ""))
            if led.find(protocol, job_id) is not None:
                continue
            try:
                if math.isfinite(led.budget_epsilon):  # an unlimited ledger only records (no accountant run)
                    led.check_entry(entry)
            except BudgetExceeded as e:
                refused = SpendRefused(sender.name, job_id, e)
                machine = self.machines.get(sender)
                if machine is not None:
                    machine.fail(Problem.BUDGET_EXCEEDED, str(refused))
                    self.error = self.error or machine.error
                raise refused from None
            led.record({**entry, "status": SPENT})
        self.ledger.setdefault(sender.name, []).extend(entries)

    def route(self, sender: Peer, outputs: list[Output]) -> None:
        for o in outputs:
            if isinstance(o, Send):
                self.queue.append((sender, o.to, o.message))
            elif isinstance(o, Publish):
                self.releases.append(o.release)
            elif isinstance(o, Spend):  # spent before any later output is carried out (a refusal raises here)
                self.spend(sender, o.entries)
            elif isinstance(o, Record):  # a release's record: it marks the entry its Spend made, or is the entry
                entries = self.ledger.setdefault(sender.name, [])
                spent = next((e for e in entries if (e.get("protocol"), e.get("job_id")) == (o.entry.get("protocol"), o.entry.get("job_id"))), None)
                if spent is None:
                    entries.append(o.entry)
                else:
                    spent["status"] = RELEASED
                led = None if self.ledgers is None else self.ledgers.get(sender.name)
                if led is not None:
                    mine = led.find(str(o.entry.get("protocol", "")), str(o.entry.get("job_id", "")))
                    if mine is None:
                        led.record(o.entry)
                    else:
                        mine["status"] = RELEASED
            elif isinstance(o, Reply):
                self.replies.append(o.message)

    def deliver(self, sender: Peer, to: Peer, message: Any) -> None:
        """One message to its recipient; a failure is kept (the first) and its abort notices go out."""
        if self.tamper is not None:
            message = self.tamper(sender, to, message)
            if message is None:
                return
        self.messages += 1
        if self.spawn is not None:
            try:
                started = self.spawn(to, message)
            except ProtocolError as e:  # the recipient refuses to take part (e.g. an invalid job)
                self.error = self.error or e
                return
            if started is not None:
                self.route(to, started)
                return
        machine = self.machines[to]
        try:
            self.route(to, machine.receive(sender, message))
        except ProtocolError as e:
            if not machine.failed:
                self.rejections.append((sender, to, e))
            self.route(to, e.notices)
        if machine.failed and self.error is None:
            self.error = machine.error

    def pump(self) -> None:
        """Deliver until the network is quiet."""
        while self.queue:
            if self.order is not None and len(self.queue) > 1:
                self.queue.rotate(-self.order.randbelow(len(self.queue)))
            if self.before_each is not None:
                self.before_each()
            self.deliver(*self.queue.popleft())
