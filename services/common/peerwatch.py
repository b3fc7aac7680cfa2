"""One health watch per peer, shared by every job that needs to know when that peer goes away.

A job that waits for a peer's next message would stall until its deadline if the peer died meanwhile, so a
service follows the peer's standard health stream (``grpc.health.v1.Health/Watch``) while the job runs. A stream
per job per peer is one long-lived HTTP/2 stream each on the one connection to that peer, and a server accepts a
bounded number of concurrent streams per connection (``rpc.MAX_STREAMS_PER_CONNECTION``): past it, every further
call to the peer, protocol steps included, queues behind streams that end only when their jobs end, and the jobs
stall. So :class:`PeerWatch` keeps **one** stream per peer, opened when the first job subscribes and closed when
the last one leaves, and tells every subscriber when the peer stops serving or cannot be reached.

A peer without a health service (UNIMPLEMENTED) is simply not watched. A transient failure is retried with a
short back-off (as :meth:`mpdp_services.common.runtime.Hosted.send` does) before the peer is reported lost.

Every attempt must be answered within :data:`LOST_AFTER` seconds of the peer's last answer (or of the watch's
start): a reconnect can otherwise hang for minutes where the peer's name no longer resolves (a stopped
container's name sent on to a DNS server that never replies) or where its host takes TCP and never speaks, and
the jobs waiting on the peer would stall with it. An established stream is kept honest by HTTP/2 keepalive
(``grpc.keepalive_time_ms`` in services/common/channels.py): a peer that stops answering pings drops the stream,
and the bound above starts.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Awaitable, Callable

import grpc
from grpc_health.v1 import health_pb2

from mpdp_services.common.rpc import PeerChannels

log = logging.getLogger("mpdp.rpc")

Lost = Callable[[str], Awaitable[None]]  # called with the reason the peer is lost
RETRIES = 3
LOST_AFTER = 45.0  # seconds a peer may go without answering its health stream before it is reported lost (a frozen
# process, a name that no longer resolves); an established stream that answered is timed by keepalive instead


@dataclass(eq=False)
class Subscription:
    key: tuple[str, str]
    on_lost: Lost


@dataclass(eq=False)
class _Watch:
    subscribers: set[Subscription] = field(default_factory=set)
    task: asyncio.Task | None = None


class PeerWatch:
    """Health watches of the peers a service talks to, one stream per (address, site), shared by subscribers."""

    def __init__(self, channels: PeerChannels, service: str, *, retries: int = RETRIES, lost_after: float = LOST_AFTER) -> None:
        self._channels = channels
        self._service = service  # the health service name the peer reports (e.g. its protocol servicer)
        self._retries = retries
        self._lost_after = lost_after
        self._watches: dict[tuple[str, str], _Watch] = {}

    def streams(self) -> int:
        """Health streams open (or being retried) now: one per watched peer."""
        return sum(1 for w in self._watches.values() if w.task is not None and not w.task.done())

    def subscribe(self, address: str, site: str, on_lost: Lost) -> Subscription:
        """Follow ``site`` at ``address``; ``on_lost(reason)`` runs once if it stops serving while subscribed."""
        key = (address, site)
        sub = Subscription(key, on_lost)
        w = self._watches.setdefault(key, _Watch())
        w.subscribers.add(sub)
        if w.task is None or w.task.done():
            w.task = asyncio.ensure_future(self._follow(key, w))
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        w = self._watches.get(sub.key)
        if w is None:
            return
        w.subscribers.discard(sub)
        if not w.subscribers:
            self._watches.pop(sub.key, None)
            if w.task is not None:
                w.task.cancel()

    async def close(self) -> None:
        tasks = [w.task for w in self._watches.values() if w.task is not None]
        self._watches.clear()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _follow(self, key: tuple[str, str], w: _Watch) -> None:
        address, site = key
        reason = ""
        if not address:
            reason = "no address"
        else:
            reason = await self._stream(address, site, w)
        if not reason:
            return
        if self._watches.get(key) is w:  # lost: every subscriber hears it once; a later subscriber starts a new watch
            self._watches.pop(key, None)
        subs, w.subscribers = list(w.subscribers), set()
        for sub in subs:
            try:
                await sub.on_lost(reason)
            except Exception:  # noqa: BLE001 - one subscriber's failure path must not keep the others from hearing
                log.exception("peer %s lost: a subscriber's handler raised", site)

    async def _stream(self, address: str, site: str, w: _Watch) -> str:
        """Follow the peer's health stream while anyone subscribes; the reason it was lost, "" if it was not."""
        loop = asyncio.get_running_loop()
        due: float | None = loop.time() + self._lost_after  # the next answer is due by then; None while the stream is live
        reason, failures = "", 0
        request = health_pb2.HealthCheckRequest(service=self._service)
        while failures < self._retries and w.subscribers:
            watch = self._channels.channel(address, site).unary_stream(
                "/grpc.health.v1.Health/Watch", request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=health_pb2.HealthCheckResponse.FromString,
            )
            call = watch(request)
            try:
                while True:
                    try:
                        resp = await (call.read() if due is None else asyncio.wait_for(call.read(), max(due - loop.time(), 0.0)))
                    except TimeoutError:
                        return f"no answer for {self._lost_after:g} s"
                    if resp is grpc.aio.EOF:
                        return "it closed its health stream"
                    if resp.status != health_pb2.HealthCheckResponse.SERVING:
                        return f"it stopped serving: health {health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)}"
                    reason, failures, due = "", 0, None
            except grpc.aio.AioRpcError as e:
                if e.code() in (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.CANCELLED):
                    return ""  # not watchable (or we closed the channel): its calls will tell
                reason = e.code().name
            finally:
                call.cancel()  # a no-op once it ended; a stream being given up (or cancelled with its task) ends now
            if due is None:
                due = loop.time() + self._lost_after  # it answered until now: the bound starts here
            failures += 1
            await asyncio.sleep(0.2 * failures)  # a transient connection failure: back off and look again
        return reason if w.subscribers else ""
