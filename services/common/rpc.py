"""gRPC plumbing shared by every service: mutual TLS, the role interceptor, health, peers.

- Servers require a client certificate from the federation CA (``require_client_auth``).
- :class:`RoleInterceptor` checks, before any servicer code runs, that the caller's
  certificate carries a role allowed for that RPC (PERMISSION_DENIED otherwise); servicers
  then ask :func:`caller` who is calling.
- :func:`start_server` binds (port 0 allowed) and returns the server with the port bound,
  and registers the standard health service, which turns NOT_SERVING on shutdown.
- :class:`PeerChannels` keeps one TLS channel per peer, verifying the peer's certificate for
  its *site name* (TLS server name), so a message can only reach the site it is meant for.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

import grpc
from google.protobuf import descriptor as _descriptor
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from mpdp.messages import common_pb2
from mpdp_services.common import calls, errors, link, memory, metrics, tracing, web
from mpdp_services.common import pki
from mpdp_services.common.channels import CHANNEL_OPTIONS as CHANNEL_OPTIONS, MAX_MESSAGE as MAX_MESSAGE, TlsFiles as TlsFiles  # the roles import them from here too
from mpdp_services.common.pki import Identity, check_server_certificate, identity_from_pem
from mpdp_services.common.transcript import Transcript

if TYPE_CHECKING:
    from mpdp_services.common.readiness import Readiness

log = logging.getLogger("mpdp.rpc")
P = common_pb2.Problem

# Server-side bounds (a connection that never finishes its TLS handshake, or sits idle, is dropped; a
# connection carries a bounded number of concurrent streams; metadata is small).
HANDSHAKE_TIMEOUT_MS = 5_000
MAX_STREAMS_PER_CONNECTION = 256
MAX_CONNECTION_IDLE_MS = 300_000
MAX_METADATA_BYTES = 16 * 1024
PER_CALLER_IN_FLIGHT = 1024  # concurrent RPCs from one certificate (DCA routers stream many clients)
SERVER_OPTIONS = CHANNEL_OPTIONS + [
    ("grpc.server_handshake_timeout_ms", HANDSHAKE_TIMEOUT_MS),
    ("grpc.max_concurrent_streams", MAX_STREAMS_PER_CONNECTION),
    ("grpc.max_connection_idle_ms", MAX_CONNECTION_IDLE_MS),
    ("grpc.max_metadata_size", MAX_METADATA_BYTES),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
]


def caller(context: grpc.aio.ServicerContext) -> Identity:
    """The authenticated identity of the caller: from its verified client certificate, or on a party's local socket
    (no certificate there) the one the gate admitted from its link (:mod:`mpdp_services.common.link`)."""
    ctx = context.auth_context()
    pems = ctx.get("x509_pem_cert") or []
    if not pems:
        return calls.caller() or Identity(role="", name="")
    return identity_from_pem(pems[0])


def linked_caller(metadata) -> Identity:
    """The caller a party's link client names in a call's metadata (trusted on the party's local socket only: the
    gate reads it only with ``linked=True``); an empty identity (refused by the gate) when it names none."""
    values = {k: v for k, v in (metadata or ()) if k in (link.CALLER_ROLE, link.CALLER_NAME, link.CALLER_FEDERATION)}
    if not all(isinstance(values.get(k), str) and values.get(k) for k in (link.CALLER_ROLE, link.CALLER_NAME, link.CALLER_FEDERATION)):
        return Identity(role="", name="")
    return Identity(role=values[link.CALLER_ROLE], name=values[link.CALLER_NAME], federation=values[link.CALLER_FEDERATION], client_auth=True)


def caller_key(context: grpc.aio.ServicerContext) -> str:
    """The SHA-256 fingerprint of the caller's certificate key (:func:`pki.key_fingerprint`), "" without one."""
    pems = context.auth_context().get("x509_pem_cert") or []
    return pki.key_fingerprint(pems[0]) if pems else ""


class RoleInterceptor(grpc.aio.ServerInterceptor):
    """The one gate in front of every servicer.

    In this order, before any servicer code runs and before the request body is parsed:

    1. the RPC must be a method in ``allowed`` of a kind we know how to authorise (unary-unary,
       unary-stream, stream-unary); anything else is refused;
    2. the caller's certificate must be a TLS client certificate (EKU clientAuth) naming a federation (O); its
       role must be allowed for the method, its federation must be ours, and
       for a role in ``pinned`` (e.g. ``{"curator": "curator"}`` at parties and compute nodes) its
       certificate name must be exactly the configured one, and for a method in ``names`` (e.g. the curator's
       RegisterParty) the certificate name must be one of that method's names (the federation's members);
    3. the caller may have at most ``per_caller`` RPCs in flight (OVERLOADED otherwise);
    4. only then is the body read and parsed (unary requests are served as client-streaming, the same bytes on the
       wire, so a refused caller's message is never received into memory); an undecodable body is MALFORMED
       (INVALID_ARGUMENT);
    5. with a ``scope`` (the curator), the job the body names must be one the caller may see (UNKNOWN_JOB otherwise),
       and list answers show only those.

    A certificate with role ``admin`` may call whatever ``operator`` may (:mod:`pki`).

    ``linked``: this gate guards a party's local socket (:func:`start_local_server`), where no certificate is
    presented: the caller is the one the party's link client names in the call's metadata (:func:`linked_caller`),
    checked in the same steps. Only the party's own link client can reach that socket.

    Every refusal goes through :func:`mpdp_services.common.errors.refuse`. An exception a servicer did not
    turn into a refusal is a bug: it is logged once with its traceback and the caller gets INTERNAL
    with no detail about it.
    """

    def __init__(
        self,
        allowed: dict[str, tuple[str, ...]],
        federation: str | None = None,
        transcript: Transcript | None = None,
        *,
        pinned: dict[str, str] | None = None,
        per_caller: int = PER_CALLER_IN_FLIGHT,
        scope: "Scope | None" = None,
        names: dict[str, Callable[[], frozenset[str]]] | None = None,
        linked: bool = False,
    ) -> None:
        self._linked = linked
        self._allowed = allowed  # full method name → roles
        self.federation = federation  # the O every caller's certificate must carry (start_server fills it from the site's own certificate)
        self._transcript = transcript  # test mode: every request this server receives
        self._pinned = dict(pinned or {})
        self._per_caller = per_caller
        self._scope = scope  # which jobs a caller may see (the curator's job ownership), after the body is parsed
        self._in_flight: dict[tuple[str, str], int] = {}
        self._names = dict(names or {})  # method → the certificate names that may call it (read on every call)

    # -- checks ------------------------------------------------------------------------------------
    def _refusal(self, method: str, roles: tuple[str, ...] | None, ident: Identity) -> str | None:
        if roles is None:
            return "this method is not open to any role"
        if not ident.client_auth:
            return "the caller's certificate is not for TLS clients (its extended key usage lacks clientAuth)"
        if not ident.federation:
            return "the caller's certificate names no federation (O)"
        if ident.role not in roles and not (ident.role == pki.ADMIN and pki.OPERATOR in roles):  # an admin may do what an operator may
            return f"requires role {' or '.join(roles)}; the caller's certificate has role {ident.role or 'none'}"
        if self.federation and ident.federation != self.federation:
            return "the caller's certificate belongs to another federation"
        pinned = self._pinned.get(ident.role)
        if pinned is not None and ident.name != pinned:
            return f"only {pinned} may call this as {ident.role}"
        names = self._names.get(method)
        if names is not None and ident.name not in names():
            return f"the caller's certificate names no member of this federation ({ident.role} {errors.shown(ident.name)})"
        return None

    def _enter(self, ident: Identity) -> bool:
        key = (ident.role, ident.name)
        n = self._in_flight.get(key, 0)
        if n >= self._per_caller:
            return False
        self._in_flight[key] = n + 1
        return True

    def _leave(self, ident: Identity) -> None:
        key = (ident.role, ident.name)
        n = self._in_flight.get(key, 1) - 1
        if n <= 0:
            self._in_flight.pop(key, None)
        else:
            self._in_flight[key] = n

    # -- the wrapper ----------------------------------------------------------------------------------
    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if method.startswith("/grpc.health.v1.Health/"):
            return handler
        roles = self._allowed.get(method)
        if handler is None:
            return None  # gRPC answers UNIMPLEMENTED for methods no servicer has
        kind = _kind(handler)
        if kind is None:
            roles = None  # a streaming kind nobody authorises: refused below, whoever calls
        gate = self
        transcript = self._transcript
        metadata = handler_call_details.invocation_metadata

        async def admit(context) -> Identity:
            calls.serving(method)  # refusals and metrics name this method (grpc.aio's context does not)
            ident = linked_caller(metadata) if gate._linked else caller(context)
            reason = gate._refusal(method, roles, ident)
            if reason is not None:
                await errors.refuse(context, P.WRONG_ROLE, reason)
            if not gate._enter(ident):
                await errors.refuse(context, P.OVERLOADED, f"more than {gate._per_caller} calls in flight from {ident.name}; retry later")
            calls.serving(method, ident)
            return ident

        async def in_scope(context, ident: Identity, request) -> None:
            if gate._scope is not None:
                reason = gate._scope.check(method, ident, request)
                if reason is not None:
                    await errors.refuse(context, P.UNKNOWN_JOB, reason)

        def scoped(ident: Identity, response):
            return gate._scope.filter(method, ident, response) if gate._scope is not None else response

        async def parse(context, raw: bytes, deserialize):
            try:
                return deserialize(raw) if deserialize is not None else raw
            except Exception:  # noqa: BLE001 - any parse failure is the sender's malformed body
                await errors.refuse(context, P.MALFORMED, "the request body is not a valid message for this method")

        def seen(context, request) -> None:
            if transcript is not None:
                transcript.record("request", method, caller(context).name, request)

        async def guarded(context, run):
            try:
                return await run()
            except (grpc.aio.AbortError, asyncio.CancelledError, _Undecodable):
                raise
            except Exception:  # noqa: BLE001 - a servicer bug: log it once, say nothing about it
                log.exception("unhandled error in %s", method)
                await errors.refuse(context, P.INTERNAL, "internal error; the operator's log has the cause")

        if kind == "unary_unary":
            inner, deserialize = handler.unary_unary, handler.request_deserializer

            # served as client-streaming (the same bytes on the wire): the gate runs before the body is read, so a caller
            # it refuses never makes this process receive (and allocate) its message
            async def unary(raw_iterator, context):
                ident = await admit(context)
                raw, request, size = b"", None, 0
                try:
                    raw = await _single(raw_iterator, context)
                    size = len(raw)
                    request = await parse(context, raw, deserialize)
                    seen(context, request)
                    await in_scope(context, ident, request)
                    # an admitted caller's span (traceparent) is the current context while served: a job it creates joins its trace
                    with tracing.incoming(metadata):
                        response = await guarded(context, lambda: inner(request, context))
                    metrics.rpc_done(method, "OK")  # refusals are counted where they are made (errors.refuse)
                    return scoped(ident, response)
                except BaseException as e:
                    memory.forget_frames(e)  # a refusal's traceback must not keep the request (services/common/memory.py)
                    raise
                finally:
                    gate._leave(ident)
                    raw = request = None  # also the cell the servicer's lambda reads
                    memory.release(size)

            return grpc.stream_unary_rpc_method_handler(unary, None, handler.response_serializer)
        if kind == "unary_stream":
            inner_s, deserialize = handler.unary_stream, handler.request_deserializer

            async def stream(raw_iterator, context):  # served as bidirectional streaming: gate first, then the body (see unary)
                ident = await admit(context)
                raw, request, size = b"", None, 0
                try:
                    raw = await _single(raw_iterator, context)
                    size = len(raw)
                    request = await parse(context, raw, deserialize)
                    seen(context, request)
                    await in_scope(context, ident, request)
                    try:
                        async for item in inner_s(request, context):
                            yield item
                        metrics.rpc_done(method, "OK")
                    except (grpc.aio.AbortError, asyncio.CancelledError, GeneratorExit):
                        raise
                    except Exception:  # noqa: BLE001 - see guarded()
                        log.exception("unhandled error in %s", method)
                        await errors.refuse(context, P.INTERNAL, "internal error; the operator's log has the cause")
                except BaseException as e:
                    memory.forget_frames(e)  # see unary
                    raise
                finally:
                    gate._leave(ident)
                    raw = request = None
                    memory.release(size)

            return grpc.stream_stream_rpc_method_handler(stream, None, handler.response_serializer)
        if kind == "stream_unary":
            inner_su, deserialize = handler.stream_unary, handler.request_deserializer

            async def stream_unary(raw_iterator, context):
                ident = await admit(context)
                received = [0]  # bytes of the stream's messages so far
                try:
                    requests = _parsed(raw_iterator, deserialize, lambda r: seen(context, r), received)
                    try:
                        response = await guarded(context, lambda: inner_su(requests, context))
                        metrics.rpc_done(method, "OK")
                        return response
                    except _Undecodable:
                        await errors.refuse(context, P.MALFORMED, "a streamed message is not a valid message for this method")
                except BaseException as e:
                    memory.forget_frames(e)  # see unary
                    raise
                finally:
                    gate._leave(ident)
                    memory.release(received[0])

            return grpc.stream_unary_rpc_method_handler(stream_unary, None, handler.response_serializer)

        async def refused(request_iterator, context):  # stream-stream: no RPC of ours has this kind
            calls.serving(method)
            await errors.refuse(context, P.WRONG_ROLE, "this method is not open to any role")
            yield  # pragma: no cover

        return grpc.stream_stream_rpc_method_handler(refused, None, None)


class Scope:
    """Which jobs a caller may touch, checked by the gate once the body is parsed (the curator's job ownership).

    ``check`` returns a refusal reason (refused as UNKNOWN_JOB) or None; ``filter`` may drop what a list answer shows."""

    def check(self, method: str, ident: Identity, request: Any) -> str | None:
        return None

    def filter(self, method: str, ident: Identity, response: Any) -> Any:
        return response


class _Undecodable(Exception):
    """A client-streamed message could not be parsed (turned into MALFORMED by the gate)."""


def _kind(handler: grpc.RpcMethodHandler) -> str | None:
    if handler.unary_unary:
        return "unary_unary"
    if handler.unary_stream:
        return "unary_stream"
    if handler.stream_unary:
        return "stream_unary"
    return None


async def _single(raw_iterator, context) -> bytes:
    """The one request message of a unary call served as client-streaming."""
    try:
        raw = await raw_iterator.__anext__()
    except StopAsyncIteration:
        await errors.refuse(context, P.MALFORMED, "a unary call without a request message")
        raise  # unreachable
    # Read on to the end of the stream (a unary caller half-closes after its one message). Left unread, it kept gRPC's
    # core holding each answered call's received message for a while after the answer, outside Python's heap: under
    # a servicer that holds the event loop on large requests (a compute node verifying validated ShareBatches) those
    # piled up and the process grew with every request taken (tests/core/test_gate_releases_calls.py).
    try:
        await raw_iterator.__anext__()
    except StopAsyncIteration:
        return raw
    await errors.refuse(context, P.MALFORMED, "a unary call with more than one request message")
    raise AssertionError  # unreachable


async def _parsed(raw_iterator, deserialize, record, received: list[int]):
    async for raw in raw_iterator:
        received[0] += len(raw)
        try:
            item = deserialize(raw) if deserialize is not None else raw
        except Exception as e:  # noqa: BLE001 - any parse failure is the sender's malformed body
            raise _Undecodable() from e
        record(item)
        yield item


def roles_by_method(package_service: str, roles: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    return {f"/{package_service}/{m}": r for m, r in roles.items()}


async def start_server(
    tls: TlsFiles,
    listen: str,
    interceptor: RoleInterceptor,
    add_servicers: Callable[[grpc.aio.Server], None],
    service_names: list[str],
    *,
    reuse_port: bool = False,
    serving: bool = True,
) -> tuple[grpc.aio.Server, int, health.aio.HealthServicer]:
    """``reuse_port``: other processes may listen on the same port (SO_REUSEPORT; a compute node's workers).
    ``serving``: False starts every health service name NOT_SERVING, for a role whose start-up steps turn it SERVING
    (services/common/readiness.py)."""
    own = check_server_certificate(tls.read()[0])  # serverAuth EKU and an O, or no start
    if not interceptor.federation:
        interceptor.federation = own  # no federation configured: the one this site's own certificate names
    server = grpc.aio.server(interceptors=[interceptor], options=SERVER_OPTIONS + ([("grpc.so_reuseport", 1)] if reuse_port else []))
    add_servicers(server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = server.add_secure_port(listen, tls.server_credentials())
    if port == 0:
        raise OSError(f"could not bind {listen}")
    await server.start()
    for name in service_names + [""]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING)
    return server, port, health_servicer


async def start_local_server(
    path: str,
    interceptor: RoleInterceptor,
    add_servicers: Callable[[grpc.aio.Server], None],
    service_names: list[str],
    *,
    serving: bool = True,
) -> tuple[grpc.aio.Server, health.aio.HealthServicer]:
    """A party's services on the unix-domain socket ``path`` (its folder must be the party's own, mode 0700): reached
    only by its link client, which names each call's caller (``interceptor`` must be ``linked``). No TCP port."""
    if not interceptor._linked or not interceptor.federation:
        raise ValueError("a local server's gate reads its callers from the link: linked=True, with the federation set")
    server = grpc.aio.server(interceptors=[interceptor], options=SERVER_OPTIONS)
    add_servicers(server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if server.add_secure_port(f"unix:{path}", grpc.local_server_credentials(grpc.LocalConnectionType.UDS)) == 0:
        raise OSError(f"could not bind the local socket {path}")
    await server.start()
    for name in service_names + [""]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING)
    return server, health_servicer


async def stop_server(server: grpc.aio.Server, health_servicer: health.aio.HealthServicer, grace: float = 5.0) -> None:
    await health_servicer.enter_graceful_shutdown()
    await server.stop(grace)


async def serve_until_signal(server: grpc.aio.Server, health_servicer: health.aio.HealthServicer, port: int, ready_fd, http_listen: str = "",
                             http_token_file: str | Path | None = None, *, readiness: "Readiness | None" = None, probes_port: int = 0,
                             on_stop: Callable[[], Any] | None = None, announce: str = "") -> None:
    """Start the HTTP endpoint (``http_listen``: /metrics and the role's pages, services/common/web.py; "" = none;
    ``http_token_file``: the token it requires, needed unless it binds loopback), announce readiness
    (``MPDP-READY <port> [http=<port>] [probes=<port>]``, read by LocalFederation; ``probes_port``: the role's
    /healthz and /readyz, services/common/readiness.py), then serve until SIGTERM or SIGINT; health and ``readiness``
    go not ready before the graceful stop. ``on_stop`` runs first on the way down (the curator ends its parties'
    links, which would otherwise hold the graceful stop); ``announce`` is added to the ready line (a party's
    ``local=<socket>``)."""
    http_port = None
    if http_listen:
        http_server, http_port = web.serve_http(http_listen, http_token_file)
    print(f"MPDP-READY {port}" + (f" http={http_port}" if http_port else "") + (f" probes={probes_port}" if probes_port else "") + (f" {announce}" if announce else ""),
          file=ready_fd, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    if readiness is not None:
        readiness.stop()
    if on_stop is not None:
        done = on_stop()
        if asyncio.iscoroutine(done):
            await done
    if http_port:
        http_server.shutdown()
    await stop_server(server, health_servicer)


def method_for_message(service: _descriptor.ServiceDescriptor) -> dict[str, str]:
    """Message full name → RPC name, for services where each step has its own request type."""
    out: dict[str, str] = {}
    for m in service.methods:
        if m.client_streaming or m.server_streaming:
            continue
        out.setdefault(m.input_type.full_name, m.name)
    return out


RETIRE_GRACE_SECONDS = 30.0  # a channel dropped after UNAVAILABLE lets its other calls finish this long


class Router(Protocol):
    """Sites reached another way than by dialing them (the curator's parties: down their links)."""

    def routes(self, site: str) -> bool: ...

    async def call(self, site: str, service_full_name: str, method: str, request: Any, response_type: Any, timeout: float) -> Any: ...


class PeerChannels:
    """One channel per (address, site name); messages are sent by type to the RPC that takes them. A site the
    ``router`` routes (the curator's parties, :mod:`mpdp_services.curator.links`) is never dialed: its calls go
    through the router, and fail the same way (an AioRpcError with the peer's status)."""

    def __init__(self, tls: TlsFiles, transcript: Transcript | None = None) -> None:
        self.router: Router | None = None
        self._creds = tls.channel_credentials()
        self._channels: dict[tuple[str, str], grpc.aio.Channel] = {}
        self._retiring: set[grpc.aio.Channel] = set()  # channels closing after UNAVAILABLE (see _retire)
        self.transcript = transcript  # test mode: every response to a call this process makes

    def channel(self, address: str, site: str) -> grpc.aio.Channel:
        key = (address, site)
        ch = self._channels.get(key)
        if ch is None:
            opts = CHANNEL_OPTIONS + [("grpc.ssl_target_name_override", site), ("grpc.default_authority", site)]
            ch = grpc.aio.secure_channel(address, self._creds, options=opts)
            self._channels[key] = ch
        return ch

    async def call(self, address: str, site: str, service_full_name: str, method: str, request: Any, response_type: Any, timeout: float = 60.0) -> Any:
        if self.router is not None and self.router.routes(site):
            response = await self.router.call(site, service_full_name, method, request, response_type, timeout)
            if self.transcript is not None:
                self.transcript.record("response", f"/{service_full_name}/{method}", site, response)
            return response
        for attempt in (0, 1):
            ch = self.channel(address, site)
            rpc = ch.unary_unary(
                f"/{service_full_name}/{method}",
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=response_type.FromString,
            )
            try:
                response = await rpc(request, timeout=timeout, metadata=tracing.outgoing())  # the current span, when traces are on
                if self.transcript is not None:
                    self.transcript.record("response", f"/{service_full_name}/{method}", site, response)
                return response
            except grpc.aio.UsageError:  # another call retired this channel between our lookup and our call
                if attempt:
                    raise
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # this task is being cancelled
                # the channel was closed under the call (grpc.aio cancels its calls): to the caller, the peer is
                # unreachable; a bare CancelledError would end its send task silently and stall the job
                raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                           details="the channel to the peer was closed during the call") from None
            except grpc.aio.AioRpcError as e:
                if e.code() == grpc.StatusCode.UNAVAILABLE:
                    self._retire(address, site, ch)
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _retire(self, address: str, site: str, ch: grpc.aio.Channel) -> None:
        """Drop a channel after UNAVAILABLE, so the next call reconnects at once instead of waiting out gRPC's
        backoff. Calls still in flight on it (other jobs') get RETIRE_GRACE_SECONDS to finish: closing it at once would
        cancel them, and a job whose call is cancelled fails as if its peer were gone."""
        current = self._channels.get((address, site))
        if current is not None and current is ch:
            del self._channels[(address, site)]
            self._retiring.add(current)
            task = asyncio.ensure_future(current.close(grace=RETIRE_GRACE_SECONDS))
            task.add_done_callback(lambda _: self._retiring.discard(current))

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self._channels.values()), return_exceptions=True)
        self._channels.clear()
        await asyncio.gather(*(c.close() for c in list(self._retiring)), return_exceptions=True)
        self._retiring.clear()


def tls_failure(e: grpc.aio.AioRpcError) -> bool:
    """This side could not verify the peer's certificate: waiting will not fix it."""
    return e.code() == grpc.StatusCode.UNAVAILABLE and "handshake failed" in (e.details() or "").lower()


def advertised_address(listen: str, advertise: str | None, port: int) -> str:
    """Where peers should dial this site: the configured ``advertise``, else the bound host and port."""
    host = listen.rsplit(":", 1)[0]
    return advertise or f"{'127.0.0.1' if host in ('0.0.0.0', '[::]', '') else host}:{port}"


async def register_at_curator(tls: TlsFiles, curator_address: str, curator_name: str, method: str, request: Any, response_type: Any, patience: float = 120.0) -> Any:
    """Call a curator start-up RPC (e.g. RegisterParty), waiting up to ``patience`` seconds for the curator
    to come up, but giving up at once when the TLS handshake fails on this side (wrong CA, expired or
    misnamed curator certificate), keeping gRPC's reason."""
    channels = PeerChannels(tls)
    loop = asyncio.get_running_loop()
    deadline, delay = loop.time() + patience, 0.25
    try:
        ch = channels.channel(curator_address, curator_name)
        rpc = ch.unary_unary(method, request_serializer=lambda m: m.SerializeToString(), response_deserializer=response_type.FromString)
        while True:
            try:
                return await rpc(request, timeout=min(30.0, max(1.0, deadline - loop.time())))
            except grpc.aio.AioRpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE or tls_failure(e) or loop.time() + delay > deadline:
                    raise
            await asyncio.sleep(delay)  # the curator is not up yet: back off and try again
            delay = min(2 * delay, 5.0)
    finally:
        await channels.close()
