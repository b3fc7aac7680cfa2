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
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import grpc
from google.protobuf import descriptor as _descriptor
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from services.common.pki import Identity, identity_from_pem
from services.common.transcript import Transcript

MAX_MESSAGE = 64 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE),
    ("grpc.max_receive_message_length", MAX_MESSAGE),
    ("grpc.keepalive_time_ms", 30000),
]


@dataclass(frozen=True)
class TlsFiles:
    cert: Path
    key: Path
    ca: Path

    def read(self) -> tuple[bytes, bytes, bytes]:
        missing = [str(p) for p in (self.cert, self.key, self.ca) if not Path(p).exists()]
        if missing:
            raise FileNotFoundError(f"TLS files missing: {', '.join(missing)}; run `mpdp provision` or check the config paths")
        return Path(self.cert).read_bytes(), Path(self.key).read_bytes(), Path(self.ca).read_bytes()

    def server_credentials(self) -> grpc.ServerCredentials:
        cert, key, ca = self.read()
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=True)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        cert, key, ca = self.read()
        return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)


def caller(context: grpc.aio.ServicerContext) -> Identity:
    """The authenticated identity of the caller (from its verified client certificate)."""
    ctx = context.auth_context()
    pems = ctx.get("x509_pem_cert") or []
    if not pems:
        return Identity(role="", name="")
    return identity_from_pem(pems[0])


class RoleInterceptor(grpc.aio.ServerInterceptor):
    """Refuse an RPC unless the caller's certificate role is allowed for it."""

    def __init__(self, allowed: dict[str, tuple[str, ...]], federation: str | None = None, transcript: Transcript | None = None) -> None:
        self._allowed = allowed  # full method name → roles
        self._federation = federation
        self._transcript = transcript  # test mode: every request this server receives

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith("/grpc.health"):
            return handler
        roles = self._allowed.get(method)
        federation = self._federation
        transcript = self._transcript

        def seen(context, request) -> None:
            if transcript is not None:
                transcript.record("request", method, caller(context).name, request)

        def check(context) -> str | None:
            ident = caller(context)
            if roles is None:
                return f"method {method} is not open to any role"
            if ident.role not in roles:
                return f"{method} requires role {' or '.join(roles)}; caller {ident.name or '?'} has role {ident.role or 'none'}"
            if federation and ident.federation and ident.federation != federation:
                return f"caller belongs to federation {ident.federation!r}, not {federation!r}"
            return None

        if handler.unary_unary:
            inner = handler.unary_unary

            async def unary(request, context):
                problem = check(context)
                if problem:
                    await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"WRONG_ROLE: {problem}")
                seen(context, request)
                return await inner(request, context)

            return grpc.unary_unary_rpc_method_handler(unary, handler.request_deserializer, handler.response_serializer)
        if handler.unary_stream:
            inner_s = handler.unary_stream

            async def stream(request, context):
                problem = check(context)
                if problem:
                    await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"WRONG_ROLE: {problem}")
                seen(context, request)
                async for item in inner_s(request, context):
                    yield item

            return grpc.unary_stream_rpc_method_handler(stream, handler.request_deserializer, handler.response_serializer)
        if handler.stream_unary:
            inner_su = handler.stream_unary

            async def stream_unary(request_iterator, context):
                problem = check(context)
                if problem:
                    await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"WRONG_ROLE: {problem}")
                if transcript is not None:
                    request_iterator = _recorded(request_iterator, lambda r: seen(context, r))
                return await inner_su(request_iterator, context)

            return grpc.stream_unary_rpc_method_handler(stream_unary, handler.request_deserializer, handler.response_serializer)
        return handler


async def _recorded(iterator, record):
    async for item in iterator:
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
) -> tuple[grpc.aio.Server, int, health.aio.HealthServicer]:
    server = grpc.aio.server(interceptors=[interceptor], options=CHANNEL_OPTIONS)
    add_servicers(server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = server.add_secure_port(listen, tls.server_credentials())
    if port == 0:
        raise OSError(f"could not bind {listen}")
    await server.start()
    for name in service_names + [""]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return server, port, health_servicer


async def stop_server(server: grpc.aio.Server, health_servicer: health.aio.HealthServicer, grace: float = 5.0) -> None:
    await health_servicer.enter_graceful_shutdown()
    await server.stop(grace)


async def serve_until_signal(server: grpc.aio.Server, health_servicer: health.aio.HealthServicer, port: int, ready_fd) -> None:
    """Announce readiness (``MPDP-READY <port>``, read by LocalFederation), then serve until SIGTERM or
    SIGINT; health goes NOT_SERVING before the graceful stop."""
    print(f"MPDP-READY {port}", file=ready_fd, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await stop_server(server, health_servicer)


def method_for_message(service: _descriptor.ServiceDescriptor) -> dict[str, str]:
    """Message full name → RPC name, for services where each step has its own request type."""
    out: dict[str, str] = {}
    for m in service.methods:
        if m.client_streaming or m.server_streaming:
            continue
        out.setdefault(m.input_type.full_name, m.name)
    return out


class PeerChannels:
    """One channel per (address, site name); messages are sent by type to the RPC that takes them."""

    def __init__(self, tls: TlsFiles, transcript: Transcript | None = None) -> None:
        self._creds = tls.channel_credentials()
        self._channels: dict[tuple[str, str], grpc.aio.Channel] = {}
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
        ch = self.channel(address, site)
        rpc = ch.unary_unary(
            f"/{service_full_name}/{method}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response_type.FromString,
        )
        try:
            response = await rpc(request, timeout=timeout)
            if self.transcript is not None:
                self.transcript.record("response", f"/{service_full_name}/{method}", site, response)
            return response
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.UNAVAILABLE:
                # drop the channel: a new one reconnects at once instead of waiting out gRPC's backoff
                self._channels.pop((address, site), None)
                await ch.close()
            raise

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self._channels.values()), return_exceptions=True)
        self._channels.clear()


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
