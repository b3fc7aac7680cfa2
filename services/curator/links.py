"""The parties' links at the curator: every call to a party travels down the stream the party opened.

A party opens no port (services/common/link.py). It calls ``PartyLink.Open`` and keeps the stream: the curator
sends each call for it as a ``LinkDown`` (call id, full method name, serialized request, timeout) and the party
answers with ``PartyLink.Answer`` (call id, gRPC status code, short details, serialized response). One link per
party: a new Open from the same certificate name replaces the old one (the old one's calls fail UNAVAILABLE, as
calls over a dropped connection do).

:meth:`PartyLinks.call` is what :class:`mpdp_services.common.rpc.PeerChannels` uses for a party (it is the
channels' ``router``): a party with no link answers UNAVAILABLE, exactly as an unreachable party did, so every job's
failure path stays the same (a call first waits up to :data:`RECONNECT_WAIT` seconds for a link being reopened). At most
:data:`mpdp.limits.MAX_LINK_CALLS` calls are in flight on one link (more wait their turn), and each waits at most its
timeout (DEADLINE_EXCEEDED).

Party-to-party steps (Pathak) are relayed: ``PartyLink.Relay`` takes a call sealed by its sender for its recipient
(services/common/seal.py) and sends it down the recipient's link unread; the sealed reply comes back the same way.
The curator checks only what it can: the sender is the caller's certificate name, the recipient a member with a
link. Every PartyLink call must come from the certificate key the party registered with (RegisterParty pins it:
services/curator/registrations.py), so a second certificate minted under a member's name can neither take over its
link nor relay in its name. ``PartyLink.Certificate`` hands a party the certificate another party linked with, which the sender checks
against the federation CA and the exact name before it seals to it.

:meth:`PartyLinks.subscribe` is how a job watches its parties: through their links, one per party, never a stream per
job. A job hears that a party is lost when its link has been down for :data:`LOST_AFTER` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable

import grpc

from mpdp import limits
from mpdp.messages import common_pb2, link_pb2, link_pb2_grpc
from mpdp_services.common import errors, link, tracing
from mpdp_services.common.rpc import caller, caller_key, roles_by_method

log = logging.getLogger("mpdp.curator")

SERVICE = link.SERVICE
PARTY = ("party",)
ROLES = roles_by_method(SERVICE, {"Open": PARTY, "Answer": PARTY, "Relay": PARTY, "Certificate": PARTY})
RECONNECT_WAIT = 10.0  # seconds a call waits for a party's link to be (re)opened before it fails UNAVAILABLE
LOST_AFTER = 10.0  # seconds a party's link may be down (a restart of its connection) before its jobs hear it is lost
Lost = Callable[[str], Awaitable[None]]


@dataclass(eq=False)
class _Link:
    name: str
    queue: "asyncio.Queue[link_pb2.LinkDown | None]" = field(default_factory=asyncio.Queue)
    pending: dict[int, "asyncio.Future[link_pb2.LinkAnswer]"] = field(default_factory=dict)
    ids: Any = field(default_factory=lambda: itertools.count(1))
    closed: bool = False
    slots: asyncio.Semaphore | None = None  # calls in flight on this link (limits.MAX_LINK_CALLS); more wait their turn

    def close(self, why: str) -> None:
        if self.closed:
            return
        self.closed = True
        self.queue.put_nowait(None)
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(link.rpc_error(grpc.StatusCode.UNAVAILABLE, f"party {self.name}'s link closed ({why})"))
        self.pending.clear()


@dataclass(eq=False)
class Subscription:
    site: str
    on_lost: Lost


class PartyLinks(link_pb2_grpc.PartyLinkServicer):
    """The parties' open links (name → stream), the relay, and the watch jobs keep on their parties."""

    def __init__(self, members: Callable[[], frozenset[str]], pinned: Callable[[str], str | None], *, max_calls: int = limits.MAX_LINK_CALLS, lost_after: float = LOST_AFTER) -> None:
        self._members = members
        self._pinned = pinned  # party → the key fingerprint it registered with: only that key may use its link
        self._max_calls = max_calls
        self._lost_after = lost_after
        self._links: dict[str, _Link] = {}
        self._certificates: dict[str, bytes] = {}  # party → the PEM certificate it linked with (for senders to seal to)
        self._subscribers: dict[str, set[Subscription]] = {}
        self._losing: dict[str, asyncio.Task] = {}
        self._stopping = False
        self.changed = asyncio.Event()  # set whenever a link opens or closes (tests and start-up waits)
        self._health: Any = None  # the server's health servicer: link.health_service(party) SERVING while linked

    def attach_health(self, health: Any) -> None:
        """Report each party's link on the curator's health service (:func:`link.health_service`)."""
        self._health = health

    # -- the router (PeerChannels) ---------------------------------------------------------------
    def routes(self, site: str) -> bool:
        return site in self._members()

    def linked(self) -> list[str]:
        return sorted(self._links)

    async def unlinked(self, sites: Iterable[str], wait: float = RECONNECT_WAIT) -> list[str]:
        """The members among ``sites`` that have no open link, once a link being (re)opened had up to ``wait`` seconds
        (as a call waits): what a job checks before it asks any party anything, so that a named party that is down
        fails the job before any other party spends for it."""
        names = list(sites)
        loop = asyncio.get_running_loop()
        end = loop.time() + wait
        while True:
            changed = self.changed
            missing = [s for s in names if self.routes(s) and (s not in self._links or self._links[s].closed)]
            if not missing or loop.time() >= end:
                return missing
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), end - loop.time())

    async def call(self, site: str, service_full_name: str, method: str, request: Any, response_type: Any, timeout: float) -> Any:
        down = link_pb2.LinkDown(method=f"/{service_full_name}/{method}", request=request.SerializeToString(), timeout_seconds=timeout)
        answer = await self._call(site, down, timeout)
        if answer.code != 0:
            raise link.rpc_error(link.status(answer.code), answer.details)
        try:
            return response_type.FromString(answer.response)
        except Exception:  # noqa: BLE001 - the party's answer does not parse: as a direct call's undecodable response
            raise link.rpc_error(grpc.StatusCode.INTERNAL, f"party {site}'s answer does not parse") from None

    async def _call(self, site: str, down: link_pb2.LinkDown, timeout: float) -> link_pb2.LinkAnswer:
        ln = self._links.get(site)
        if ln is None or ln.closed:  # a link being reopened (a dropped connection, a curator restart) gets a moment
            loop = asyncio.get_running_loop()
            end = loop.time() + min(timeout, RECONNECT_WAIT)
            while (ln is None or ln.closed) and loop.time() < end:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.changed.wait(), end - loop.time())
                ln = self._links.get(site)
        if ln is None or ln.closed:
            raise link.rpc_error(grpc.StatusCode.UNAVAILABLE, f"party {site} has no link to the curator (it is down or cannot reach the curator)")
        assert ln.slots is not None
        try:  # at most max_calls in flight on the link: a call past it waits its turn within its own deadline
            await asyncio.wait_for(ln.slots.acquire(), timeout)
        except TimeoutError:
            raise link.rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
        try:
            return await self._send(site, ln, down, timeout)
        finally:
            ln.slots.release()

    async def _send(self, site: str, ln: _Link, down: link_pb2.LinkDown, timeout: float) -> link_pb2.LinkAnswer:
        if ln.closed:
            raise link.rpc_error(grpc.StatusCode.UNAVAILABLE, f"party {site}'s link closed")
        down.call_id = next(ln.ids)
        for key, value in tracing.outgoing() or ():  # the caller's span, as a direct call's metadata carried it
            if key in ("traceparent", "tracestate") and len(value) <= limits.MAX_TRACE_HEADER:
                setattr(down, key, value)
        fut: asyncio.Future[link_pb2.LinkAnswer] = asyncio.get_running_loop().create_future()
        ln.pending[down.call_id] = fut
        ln.queue.put_nowait(down)
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            raise link.rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
        finally:
            ln.pending.pop(down.call_id, None)

    # -- the service ---------------------------------------------------------------------------------
    async def _registered(self, context) -> str:
        """The calling party's name, if its certificate's key is the one it registered with (WRONG_ROLE otherwise): a
        second certificate minted under a member's name can neither take its link nor speak for it."""
        name = caller(context).name  # a member: the gate refused every other party certificate before this ran
        pin = self._pinned(name)
        if pin is None:
            await errors.refuse(context, common_pb2.WRONG_ROLE, f"party {name} has not registered with the curator (RegisterParty first)")
        if pin != caller_key(context):
            await errors.refuse(context, common_pb2.WRONG_ROLE, f"party {name} registered with another certificate key")
        return name

    async def Open(self, request: link_pb2.LinkHello, context):
        ident = caller(context)
        await self._registered(context)
        pems = context.auth_context().get("x509_pem_cert") or []
        ln = _Link(ident.name, slots=asyncio.Semaphore(self._max_calls))
        old = self._links.get(ident.name)
        self._links[ident.name] = ln
        if pems:
            self._certificates[ident.name] = pems[0]
        if old is not None:
            old.close("replaced by a new link from the same party")
        losing = self._losing.pop(ident.name, None)
        if losing is not None:
            losing.cancel()
        log.info("party %s linked%s", ident.name, " (replacing its previous link)" if old is not None else "")
        self._bump()
        self._report(ident.name)
        try:
            await context.send_initial_metadata(((link.LINKED, "1"),))  # tells the party its link is registered
            while True:
                down = await ln.queue.get()
                if down is None:
                    return
                yield down
        finally:
            ln.close("the stream ended")
            if self._links.get(ident.name) is ln:
                del self._links[ident.name]
                log.info("party %s's link closed", ident.name)
                if not self._stopping:
                    self._losing[ident.name] = asyncio.ensure_future(self._lose(ident.name))
            self._bump()
            self._report(ident.name)

    async def Answer(self, request: link_pb2.LinkAnswer, context) -> common_pb2.Ack:
        name = await self._registered(context)
        try:
            limits.check_link_answer(request)
        except limits.SpecError as e:
            await errors.refuse(context, common_pb2.MALFORMED, str(e))
        ln = self._links.get(name)
        fut = ln.pending.get(request.call_id) if ln is not None else None
        if fut is None or fut.done():  # late (timed out), on a replaced link, or never sent: nothing waits for it
            await errors.refuse(context, common_pb2.STEP_OUT_OF_ORDER, "no call in flight on this link has that id")
        fut.set_result(request)
        return common_pb2.Ack()

    async def Relay(self, request: link_pb2.SealedCall, context) -> link_pb2.SealedReply:
        name = await self._registered(context)
        try:
            limits.check_message("SealedCall", request)
        except limits.SpecError as e:
            await errors.refuse(context, common_pb2.MALFORMED, str(e))
        if request.sender != name:
            await errors.refuse(context, common_pb2.WRONG_ROLE, "a party relays only calls it sealed itself")
        if request.recipient == name or request.recipient not in self._members():
            await errors.refuse(context, common_pb2.WRONG_ROLE, "the recipient is not another party of this federation")
        timeout = min(request.deadline - time.time(), limits.MAX_CALL_SECONDS)
        if timeout <= 0:
            await errors.refuse(context, common_pb2.MALFORMED, "the call's deadline has passed")
        down = link_pb2.LinkDown(method=request.method, timeout_seconds=timeout, sealed=request)
        try:
            answer = await self._call(request.recipient, down, timeout)
        except grpc.aio.AioRpcError as e:  # no link (UNAVAILABLE), OVERLOADED, DEADLINE_EXCEEDED: as a direct call's
            await errors.relay(context, e.code(), e.details())
        if not answer.HasField("sealed"):  # the recipient refused it before it could open it (bad seal, replay)
            await errors.relay(context, link.status(answer.code) if answer.code else grpc.StatusCode.INTERNAL, answer.details)
        return answer.sealed

    async def Certificate(self, request: link_pb2.PartyCertificateRequest, context) -> link_pb2.PartyCertificate:
        await self._registered(context)
        pem = self._certificates.get(request.name) if request.name in self._members() else None
        if pem is None:
            await errors.refuse(context, common_pb2.PEER_UNREACHABLE, f"party {errors.shown(request.name)} has not linked to the curator")
        return link_pb2.PartyCertificate(certificate=pem)

    # -- the jobs' watch on their parties ------------------------------------------------------------
    def subscribe(self, address: str, site: str, on_lost: Lost) -> Subscription:
        """``on_lost(reason)`` runs once if ``site``'s link stays down for LOST_AFTER seconds while subscribed."""
        sub = Subscription(site, on_lost)
        self._subscribers.setdefault(site, set()).add(sub)
        if site not in self._links and site not in self._losing and not self._stopping:
            self._losing[site] = asyncio.ensure_future(self._lose(site))
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        subs = self._subscribers.get(sub.site)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subscribers[sub.site]

    async def _lose(self, site: str) -> None:
        try:
            await asyncio.sleep(self._lost_after)
        finally:
            if self._losing.get(site) is asyncio.current_task():
                del self._losing[site]
        if site in self._links:
            return
        for sub in list(self._subscribers.pop(site, ())):
            try:
                await sub.on_lost(f"its link to the curator has been down for {self._lost_after:g} s")
            except Exception:  # noqa: BLE001 - one subscriber's failure path must not keep the others from hearing
                log.exception("party %s lost: a subscriber's handler raised", site)

    async def close(self) -> None:
        self._stopping = True
        for ln in list(self._links.values()):
            ln.close("the curator is stopping")
        tasks = list(self._losing.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _report(self, name: str) -> None:
        if self._health is None:
            return
        from grpc_health.v1 import health_pb2

        status = health_pb2.HealthCheckResponse.SERVING if name in self._links else health_pb2.HealthCheckResponse.NOT_SERVING
        asyncio.ensure_future(self._health.set(link.health_service(name), status))

    def _bump(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


async def require_linked(channels: Any, parties: Iterable[str], *, tolerated: int = 0) -> None:
    """Refuse a job PEER_UNREACHABLE, naming the parties, when more than ``tolerated`` of the ``parties`` it names have
    no link to the curator (:meth:`PartyLinks.unlinked`): checked before any party is asked anything, so no party
    spends for a job a named party cannot take part in. ``channels``: the curator's PeerChannels (its router is the
    links; parties dialed directly are not checked here, their calls fail as before)."""
    router = getattr(channels, "router", None)
    if not isinstance(router, PartyLinks):
        return
    missing = await router.unlinked(parties)
    if len(missing) > tolerated:
        named = ", ".join(errors.shown(p) for p in missing[:4])
        raise errors.Refused(common_pb2.PEER_UNREACHABLE, f"part{'y' if len(missing) == 1 else 'ies'} {named} "
                             f"{'has' if len(missing) == 1 else 'have'} no link to the curator (down or cannot reach it); no party was asked to spend")
