"""The one in-memory driver: role machines of one job in one process, the network played by a queue.

:class:`Wire` routes every :class:`~mpdp.protocol.Send` to its recipient's machine, optionally in a random
order (to exercise early arrival), lets a test replace or drop messages in flight, and keeps what the
protocol runner needs: the first failure, each refusal that left its machine untouched, and the outputs
that leave the protocol (releases, ledger entries, replies). Each protocol's ``run_job``
(:mod:`mpdp.pathak2010.driver`, :mod:`mpdp.dca.driver`) builds the machines and feeds the inputs; the
same machines run over gRPC in ``services/``.
"""

from __future__ import annotations

import collections
from typing import Any, Callable

from mpdp.math.drbg import Drbg
from mpdp.protocol import Machine, Output, Peer, ProtocolError, Publish, Record, Reply, Send, Spend

Tamper = Callable[[Peer, Peer, Any], Any | None]


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

    def route(self, sender: Peer, outputs: list[Output]) -> None:
        for o in outputs:
            if isinstance(o, Send):
                self.queue.append((sender, o.to, o.message))
            elif isinstance(o, Publish):
                self.releases.append(o.release)
            elif isinstance(o, Spend):
                self.ledger.setdefault(sender.name, []).extend(o.entries)
            elif isinstance(o, Record):  # a release's record: it marks the entry its Spend made, or is the entry
                entries = self.ledger.setdefault(sender.name, [])
                spent = next((e for e in entries if (e.get("protocol"), e.get("job_id")) == (o.entry.get("protocol"), o.entry.get("job_id"))), None)
                if spent is None:
                    entries.append(o.entry)
                else:
                    spent["status"] = "released"
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
