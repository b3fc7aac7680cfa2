"""What the curator's server asks of each protocol: a :class:`Hosting`, made by the factory its registry entry names
(``mpdp.registry.Hooks.curator``, a function of the :class:`CuratorSite` and the registry entry).

The server (``services/curator/server.py``) calls every protocol's factory in registry order and gives the job host
(``operations.py``) each ``submit``/``release``/``cancel``, the catalog each :class:`~catalog.Source`, the gRPC server
each :class:`Servicer` (once per service: protocols may share one), and runs each recovery once, in the order the
factories asked for them, after a restart. Parts two protocols share (the DCA host, the learner host) are made once
per site with :meth:`CuratorSite.part`; a factory that needs another protocol's part asks for it the same way, so the
order of the registry does not matter for construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, TypeVar

from mpdp import registry
from mpdp_services.common import config as cfgmod, jobs
from mpdp_services.curator.catalog import Source

if TYPE_CHECKING:
    from mpdp_services.curator.server import Curator

T = TypeVar("T")


@dataclass(frozen=True)
class Servicer:
    """A gRPC service a protocol serves at the curator, for its parties' or compute nodes' calls (never the operator's:
    the job host serves those)."""

    service: str  # full name, e.g. "mpdp.messages.DcaCurator"
    add: Callable[[Any], None]  # adds the servicer to a grpc.aio server
    roles: dict[str, tuple[str, ...]]  # method path → the roles that may call it (rpc.roles_by_method)
    registering: dict[str, Any] = field(default_factory=dict)  # method path → the members allowed to register through it


@dataclass(frozen=True)
class Hosting:
    """One protocol at the curator: the job host's three calls, its catalog source, its services."""

    submit: Callable[[Any], Awaitable[str]]  # its spec → the job's id, at once (errors.Refused otherwise)
    release: Callable[[str], Any]  # job id → what it published, or None
    cancel: Callable[[str], Awaitable[bool]]
    source: Source
    servicers: tuple[Servicer, ...] = ()
    store: Any = None  # its release store, for the dashboard's pages


@dataclass
class CuratorSite:
    """What every factory may use: the config, the curator's site (channels, parties' addresses, admission), the
    bounds of its job tables, and the parts protocols share."""

    cfg: cfgmod.CuratorConfig
    curator: "Curator"
    retention: float = jobs.RETENTION_SECONDS
    max_live: int = jobs.MAX_LIVE
    parts: dict[str, Any] = field(default_factory=dict)
    recoveries: dict[str, Callable[[], Awaitable[Any]]] = field(default_factory=dict)

    @property
    def state_dir(self) -> Path:
        return Path(self.cfg.state_dir)

    def part(self, key: str, make: Callable[[], T]) -> T:
        """The site's one ``key`` (made by ``make`` the first time it is asked for)."""
        if key not in self.parts:
            self.parts[key] = make()
        return self.parts[key]

    def on_restart(self, key: str, recover: Callable[[], Awaitable[Any]]) -> None:
        """Run ``recover`` once after a restart (a key asked twice keeps its first); recoveries run in this order."""
        self.recoveries.setdefault(key, recover)

    def hostings(self) -> dict[str, Hosting]:
        """Every protocol of the registry hosted here, in registry order (its factory: ``(site, protocol) → Hosting``)."""
        return {p.name: registry.hook(p.hooks.curator)(self, p) for p in registry.PROTOCOLS}

    async def recover(self) -> None:
        for recover in list(self.recoveries.values()):
            await recover()
