"""The party's link to its curator: it only dials out, and every call for it comes back down that stream.

The party serves its gRPC services on a unix-domain socket in a folder only it may open (mode 0700), never on a TCP
port. :class:`PartyLink` dials the curator (the exact curator name checked by TLS, as for every call the party makes),
keeps ``PartyLink.Open`` running, and reconnects with a capped, jittered back-off whenever the stream ends. Each
``LinkDown`` it receives is checked against its bounds (mpdp/limits.py) and forwarded to the local socket with the
authenticated caller in metadata (services/common/link.py), so the gate, the role checks and the one error table work
unchanged; the status code, short details and response go back with ``PartyLink.Answer``. At most
:data:`mpdp.limits.MAX_LINK_CALLS` calls are served at once.

Party-to-party steps are sealed end to end (services/common/seal.py): :meth:`PartyLink.relay` fetches the recipient's
certificate from the curator (checked against the federation CA and the exact name), seals the step to it and signs
it, and hands it to ``PartyLink.Relay``; the recipient's link client opens it (refusing a forgery, a replay, a call
for another party), serves it with the *sender* as the caller, and seals the reply back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from typing import Any

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from mpdp import limits
from mpdp.messages import common_pb2, link_pb2
from mpdp_services.common import errors, link, seal
from mpdp_services.common.channels import CHANNEL_OPTIONS
from mpdp_services.common.config import PartyConfig
from mpdp_services.common.rpc import PeerChannels

log = logging.getLogger("mpdp.party")

SERVICE = link.SERVICE
BACKOFF_FIRST, BACKOFF_MAX = 0.25, 2.0  # seconds between attempts to reopen the link (doubling, with jitter)
ANSWER_SECONDS = 30.0  # an answer's own deadline
CERTIFICATE_SECONDS = 300.0  # a peer's certificate, once checked, is reused this long
REPLAY_CAPACITY = 1 << 16  # sealed calls remembered until their deadlines (seal.ReplayGuard): far above what the link bound lets in
Problem = common_pb2.Problem


class PartyLink:
    """The link client of one party (see the module docstring)."""

    def __init__(self, cfg: PartyConfig, local_socket: str, federation: str, roles: dict[str, tuple[str, ...]]) -> None:
        self.cfg = cfg
        self.federation = federation
        cert, key, ca = cfg.tls.files().read()
        self._certificate = cert
        signing = serialization.load_pem_private_key(key, None)
        if not isinstance(signing, ec.EllipticCurvePrivateKey):
            raise ValueError("this party's key is not an EC key: party-to-party steps are sealed with a P-256 key (`mpdp provision`)")
        self._key = signing
        self._ca = x509.load_pem_x509_certificate(ca)
        self._methods = frozenset(roles)  # what the curator may ask for: the party's own methods
        self._peer_methods = frozenset(m for m, r in roles.items() if "party" in r)  # what another party may send
        self._guard = seal.ReplayGuard(REPLAY_CAPACITY, REPLAY_CAPACITY // 16)  # a sender flooding far deadlines blocks only itself
        self._channels = PeerChannels(cfg.tls.files())  # to the curator only: answers, relays, certificates
        self._creds = cfg.tls.files().channel_credentials()
        self._local = grpc.aio.secure_channel(f"unix:{local_socket}", grpc.local_channel_credentials(grpc.LocalConnectionType.UDS), options=CHANNEL_OPTIONS)
        self._certificates: dict[str, tuple[float, ec.EllipticCurvePublicKey]] = {}
        self._slots = asyncio.Semaphore(limits.MAX_LINK_CALLS)
        self._tasks: set[asyncio.Task] = set()
        self._runner: asyncio.Task | None = None
        self._call: Any = None
        self._stopping = False
        self.up = asyncio.Event()  # set while the link is open
        self.opened = 0  # times the link was (re)opened

    # -- the stream ----------------------------------------------------------------------------------------
    def start(self) -> None:
        self._runner = asyncio.ensure_future(self._run())

    async def wait_up(self, timeout: float) -> None:
        await asyncio.wait_for(self.up.wait(), timeout)

    async def stop(self) -> None:
        self._stopping = True
        if self._call is not None:
            self._call.cancel()
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._channels.close()
        await self._local.close()

    def drop(self) -> None:
        """End the current stream now (it is reopened at once): what a dropped connection does."""
        if self._call is not None:
            self._call.cancel()

    async def _run(self) -> None:
        delay = BACKOFF_FIRST
        curator = self.cfg.curator
        while not self._stopping:
            # a channel of its own for each attempt: gRPC's reconnect back-off on a shared channel grows to minutes while
            # the curator is down, and the link must come back within seconds of the curator's return
            ch = grpc.aio.secure_channel(curator.address, self._creds, options=CHANNEL_OPTIONS + [
                ("grpc.ssl_target_name_override", curator.name), ("grpc.default_authority", curator.name),
                ("grpc.initial_reconnect_backoff_ms", int(BACKOFF_FIRST * 1000)), ("grpc.max_reconnect_backoff_ms", int(BACKOFF_MAX * 1000))])
            opener = ch.unary_stream(f"/{SERVICE}/Open", request_serializer=lambda m: m.SerializeToString(), response_deserializer=link_pb2.LinkDown.FromString)
            call = self._call = opener(link_pb2.LinkHello())
            why = "the curator ended it"
            try:
                metadata = await call.initial_metadata()  # the curator's word that it registered the link (a failed call has none)
                if not any(k == link.LINKED for k, _ in (metadata or ())):
                    await call.wait_for_connection()
                    raise link.rpc_error(grpc.StatusCode.UNAVAILABLE, "the curator did not open the link")
                self.up.set()
                self.opened += 1
                delay = BACKOFF_FIRST
                log.info("party %s: link to curator %s open", self.cfg.name, curator.name)
                async for down in call:
                    await self._slots.acquire()
                    task = asyncio.ensure_future(self._serve(down))
                    self._tasks.add(task)
                    task.add_done_callback(self._done)
            except grpc.aio.AioRpcError as e:
                why = f"{e.code().name}: {e.details()}"
            except asyncio.CancelledError:
                if self._stopping:
                    raise
                why = "dropped"
            finally:
                self.up.clear()
                call.cancel()
                await ch.close()
            if self._stopping:
                return
            log.warning("party %s: link to curator %s closed (%s); reopening in %.2g s", self.cfg.name, curator.name, errors.bounded(why), delay)
            await asyncio.sleep(delay * (0.5 + random.random() / 2))
            delay = min(2 * delay, BACKOFF_MAX)

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        self._slots.release()
        if not task.cancelled() and task.exception() is not None:
            log.error("party %s: a call down the link failed: %r", self.cfg.name, task.exception())

    # -- one call down the link ------------------------------------------------------------------------
    async def _serve(self, down: link_pb2.LinkDown) -> None:
        answer = await self._answer(down)
        curator = self.cfg.curator
        try:
            await self._channels.call(curator.address, curator.name, SERVICE, "Answer", answer, common_pb2.Ack, ANSWER_SECONDS)
        except grpc.aio.AioRpcError as e:  # the curator no longer waits for it (timed out, link replaced): its call fails there
            log.info("party %s: answer %d not taken: %s", self.cfg.name, down.call_id, e.code().name)

    async def _answer(self, down: link_pb2.LinkDown) -> link_pb2.LinkAnswer:
        try:
            limits.check_link_down(down)
        except limits.SpecError as e:
            return _refusal(down.call_id, Problem.MALFORMED, str(e))
        if not down.HasField("sealed"):
            if down.method not in self._methods:
                return _refusal(down.call_id, Problem.WRONG_ROLE, "this method is not open to any role")
            code, details, response = await self._local_call(down.method, down.request, down.timeout_seconds, "curator", self.cfg.curator.name, _trace(down))
            return link_pb2.LinkAnswer(call_id=down.call_id, code=code, details=details, response=response)
        try:
            opened = seal.open_sealed(link.from_wire(down.sealed), self.cfg.name, self.federation, self._key, self._ca, self._guard)
        except seal.Replayed as e:
            return _refusal(down.call_id, Problem.REPLAY, str(e))
        except seal.SealError as e:
            return _refusal(down.call_id, Problem.WRONG_ROLE, f"a relayed call refused: {e}")
        method = opened.header.method
        if method != down.method or method not in self._peer_methods:
            return _refusal(down.call_id, Problem.WRONG_ROLE, "a party may not call this method of another party")
        timeout = min(down.timeout_seconds, opened.header.deadline - time.time())
        code, details, response = await self._local_call(method, opened.request, timeout, "party", opened.header.sender, _trace(down))
        nonce, ciphertext = seal.seal_reply(opened, opened.signature, code, details, response)
        return link_pb2.LinkAnswer(call_id=down.call_id, sealed=link_pb2.SealedReply(gcm_nonce=nonce, ciphertext=ciphertext))

    async def _local_call(self, method: str, request: bytes, timeout: float, role: str, name: str,
                          trace: tuple[tuple[str, str], ...] = ()) -> tuple[int, str, bytes]:
        """Serve one call on the party's local socket as ``role`` ``name``: (status code, details, response)."""
        metadata = ((link.CALLER_ROLE, role), (link.CALLER_NAME, name), (link.CALLER_FEDERATION, self.federation), *trace)
        try:
            response = await self._local.unary_unary(method)(request, timeout=max(timeout, 0.001), metadata=metadata)
            return 0, "", response
        except grpc.aio.AioRpcError as e:
            return link.code_of(e.code()), (e.details() or "")[: limits.MAX_LINK_DETAILS], b""

    # -- party → party, sealed and relayed ---------------------------------------------------------------------
    async def relay(self, to: str, service_full_name: str, method: str, request: Any, response_type: Any, timeout: float, job_id: str) -> Any:
        """Call ``method`` of party ``to`` through the curator, sealed end to end; raises AioRpcError as a direct call."""
        recipient = await self._peer_key(to)
        header = seal.Header(self.federation, self.cfg.name, to, f"/{service_full_name}/{method}", job_id, seal.new_nonce(), time.time() + timeout)
        sealed, reply_key = await asyncio.to_thread(seal.seal, header, request.SerializeToString(), self._key, self._certificate, recipient)
        curator = self.cfg.curator
        reply = await self._channels.call(curator.address, curator.name, SERVICE, "Relay", link.to_wire(sealed), link_pb2.SealedReply, timeout)
        try:
            code, details, response = seal.open_reply(reply_key, sealed.signature, bytes(reply.gcm_nonce), bytes(reply.ciphertext))
        except seal.SealError as e:
            raise link.rpc_error(errors.status_for(Problem.WRONG_ROLE), errors.details_for(Problem.WRONG_ROLE, f"the reply relayed from party {to} is not its own: {e}")) from None
        if code:
            raise link.rpc_error(link.status(code), details)
        return response_type.FromString(response)

    async def _peer_key(self, name: str) -> ec.EllipticCurvePublicKey:
        cached = self._certificates.get(name)
        now = time.monotonic()
        if cached is not None and now - cached[0] < CERTIFICATE_SECONDS:
            return cached[1]
        curator = self.cfg.curator
        answer = await self._channels.call(curator.address, curator.name, SERVICE, "Certificate", link_pb2.PartyCertificateRequest(name=name),
                                           link_pb2.PartyCertificate, ANSWER_SECONDS)
        try:
            key = seal.check_certificate(bytes(answer.certificate), self._ca, name, self.federation)
        except seal.SealError as e:  # the curator handed out a certificate the CA did not issue to that party
            raise link.rpc_error(errors.status_for(Problem.WRONG_ROLE), errors.details_for(Problem.WRONG_ROLE, f"the curator's certificate for party {name}: {e}")) from None
        if len(self._certificates) >= limits.MAX_PARTIES:
            self._certificates.clear()
        self._certificates[name] = (now, key)
        return key


def _trace(down: link_pb2.LinkDown) -> tuple[tuple[str, str], ...]:
    """The caller's span the curator sent with the call, as the metadata a direct call would have carried."""
    return tuple((k, v) for k, v in (("traceparent", down.traceparent), ("tracestate", down.tracestate)) if v)


def _refusal(call_id: int, problem: int, detail: str) -> link_pb2.LinkAnswer:
    log.warning("refused a call down the link: %s", errors.details_for(problem, detail))
    return link_pb2.LinkAnswer(call_id=call_id, code=link.code_of(errors.status_for(problem)), details=errors.details_for(problem, detail))
