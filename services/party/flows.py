"""What the party's server asks of each protocol: a :class:`Flow`, made by the factory its registry entry names
(``mpdp.registry.Hooks.party``, a function of the :class:`PartySite` and the registry entry).

The server (``services/party/server.py``) calls every protocol's factory in registry order and serves each flow's
service once (the DCA-based protocols share the one contribution servicer: their factories return the site's one
flow, :meth:`PartySite.part`); a flow may start work once the party has registered with its curator
(``on_registered``, given the curator's public keys) and stop it when the party stops.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from grpc_health.v1 import health_pb2

from mpdp import registry

if TYPE_CHECKING:
    from mpdp.pathak2010.resources import CuratorPublicKeys
    from mpdp_services.party.server import Party

T = TypeVar("T")


@dataclass(frozen=True)
class Flow:
    """One gRPC service of the party, for its curator's (or its peers') calls over the link."""

    service: str  # full name, e.g. "mpdp.messages.LocalModelParty"
    add: Callable[[Any], None]  # adds the servicer to a grpc.aio server
    roles: dict[str, tuple[str, ...]]  # method path → the roles that may call it (rpc.roles_by_method)
    on_registered: Callable[["CuratorPublicKeys"], None] | None = None  # the party registered: the curator's public keys
    on_stop: Callable[[], None] | None = None


@dataclass
class PartySite:
    """What every factory may use: the party (config, ledger, channels), the health service once the server has
    started, and the parts flows share."""

    party: "Party"
    loop: asyncio.AbstractEventLoop
    health: Any = None  # the server's health servicer (set once the server exists)
    parts: dict[str, Any] = field(default_factory=dict)

    def part(self, key: str, make: Callable[[], T]) -> T:
        """The site's one ``key`` (made by ``make`` the first time it is asked for)."""
        if key not in self.parts:
            self.parts[key] = make()
        return self.parts[key]

    def set_health(self, service: str, serving: bool) -> None:
        """Report ``service`` SERVING or NOT_SERVING; callable from any thread, once the server exists."""
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        self.loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self.health.set(service, status)))

    def flows(self) -> list[Flow]:
        """Every protocol's flow, each service once, in registry order (a protocol without ``Hooks.party`` has none)."""
        out: dict[str, Flow] = {}
        for p in registry.PROTOCOLS:
            if p.hooks.party is not None:
                flow = registry.hook(p.hooks.party)(self, p)
                out.setdefault(flow.service, flow)
        return list(out.values())
