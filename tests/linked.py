"""Test doubles that are reached the way a party is: over a link they open to the curator (parties listen nowhere).

:class:`LinkedServer` serves a test's own servicers (a recording MockParty, a hand-driven participant) on a unix-domain
socket in a 0700 folder and runs the production link client (services/party/link.py) in a background thread's event
loop, dialing the curator with the test's certificate. :func:`sealed_relay` plays a party that seals a call for
another party and hands it to the curator's relay, with every field open to tampering.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any, Callable

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from mpdp.messages import link_pb2, link_pb2_grpc, pathak2010_pb2 as pb
from mpdp_services.common import link, seal
from mpdp_services.common.channels import TlsFiles
from mpdp_services.common.config import Endpoint, PartyConfig, TlsConfig
from mpdp_services.party.link import PartyLink

PARTY_SERVICE = "mpdp.messages.Party"
EVERY_PARTY_METHOD = {f"/{PARTY_SERVICE}/{m.name}": ("curator", "party") for m in pb.DESCRIPTOR.services_by_name["Party"].methods}


class LinkedServer:
    """``add_servicers(server)`` on a local socket, reached over a link opened as ``name`` with ``tls``."""

    def __init__(self, curator_address: str, name: str, tls: TlsFiles, federation: str, add_servicers: Callable[[grpc.Server], None],
                 roles: dict[str, tuple[str, ...]] | None = None) -> None:
        self._folder = tempfile.mkdtemp(prefix="mpdp-test-link-")
        self.socket = f"{self._folder}/party.sock"
        self.server = grpc.server(futures.ThreadPoolExecutor(8))
        add_servicers(self.server)
        if self.server.add_secure_port(f"unix:{self.socket}", grpc.local_server_credentials(grpc.LocalConnectionType.UDS)) == 0:
            raise OSError("could not bind the test's local socket")
        self.server.start()
        self.cfg = PartyConfig(name=name, federation=federation, tls=TlsConfig(cert=Path(tls.cert), key=Path(tls.key), ca=Path(tls.ca)),
                               curator=Endpoint(address=curator_address, name="curator"), http_listen="")
        self._roles = roles or EVERY_PARTY_METHOD
        self._federation = federation
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.link: PartyLink = self._run(self._make())

    async def _make(self) -> PartyLink:
        ln = PartyLink(self.cfg, self.socket, self._federation, self._roles)
        ln.start()
        return ln

    def _run(self, coro, timeout: float = 60.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def wait_up(self, timeout: float = 60.0) -> None:
        self._run(self.link.wait_up(timeout), timeout + 5)

    def drop(self) -> None:
        """Cut the link's stream (its client reopens it)."""
        self.loop.call_soon_threadsafe(self.link.drop)

    def opened(self) -> int:
        return self.link.opened

    def stop(self, grace: float | None = 0) -> None:
        try:
            self._run(self.link.stop(), 30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.server.stop(grace)
            shutil.rmtree(self._folder, ignore_errors=True)


def wait_for(check: Callable[[], bool], timeout: float = 60.0, every: float = 0.05) -> None:
    """Poll ``check`` until true (a condition another process makes true; never a fixed sleep)."""
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            raise TimeoutError("condition not reached")
        time.sleep(every)


def site_key(tls: TlsFiles):
    return serialization.load_pem_private_key(Path(tls.key).read_bytes(), None)


def sealed_call(sender_tls: TlsFiles, federation: str, sender: str, recipient: str, recipient_certificate: bytes, method: str, request: bytes,
                job_id: str, timeout: float = 30.0, **header: Any) -> tuple[link_pb2.SealedCall, bytes, seal.Sealed]:
    """A call sealed exactly as a party seals one (``header`` overrides fields before signing); returns the wire form,
    the reply key and the sealed call."""
    fields = dict(federation=federation, sender=sender, recipient=recipient, method=method, job_id=job_id, nonce=seal.new_nonce(),
                  deadline=time.time() + timeout)
    fields.update(header)
    rkey = x509.load_pem_x509_certificate(recipient_certificate).public_key()
    sealed, reply_key = seal.seal(seal.Header(**fields), request, site_key(sender_tls), Path(sender_tls.cert).read_bytes(), rkey)  # type: ignore[arg-type]
    return link.to_wire(sealed), reply_key, sealed


def relay_stub(channel: grpc.Channel) -> link_pb2_grpc.PartyLinkStub:
    return link_pb2_grpc.PartyLinkStub(channel)


def local_call(socket: str, method: str, body: bytes, metadata: tuple = (), timeout: float = 10.0) -> bytes:
    """A call on a party's local socket as its link client makes one (``metadata`` names the caller): what the gate
    there decides for a caller the link would forward."""
    with grpc.secure_channel(f"unix:{socket}", grpc.local_channel_credentials(grpc.LocalConnectionType.UDS)) as ch:
        return ch.unary_unary(method, request_serializer=None, response_deserializer=None)(body, timeout=timeout, metadata=metadata)


def as_caller(role: str, name: str, federation: str) -> tuple:
    return ((link.CALLER_ROLE, role), (link.CALLER_NAME, name), (link.CALLER_FEDERATION, federation))


def local_serving(socket: str, service: str = "") -> bool:
    """A party's health, read on its local socket (it has no port)."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.secure_channel(f"unix:{socket}", grpc.local_channel_credentials(grpc.LocalConnectionType.UDS)) as ch:
        status = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status
    return status == health_pb2.HealthCheckResponse.SERVING


class PartyChannel:
    """What a site holding ``tls`` can make of a call to party ``party`` now that parties listen nowhere, with the
    interface of a grpc.Channel for unary calls (so the generated stubs work on it):

    - the federation's curator (its certificate, its name) reaches the party down the party's link: this channel makes
      the call the party's link client makes for it, on the party's local socket with the curator as the caller;
    - anyone else can only seal the call to the party and hand it to the curator's relay (PartyLink.Relay) with its own
      certificate: the curator's gate refuses a non-party or a non-member, the recipient refuses what it must, and the
      sealed reply's status comes back as the call's.
    """

    def __init__(self, curator_address: str, party: str, tls: TlsFiles, federation: str, local_socket: str, curator_name: str = "curator") -> None:
        from mpdp_services.common import pki

        self._party, self._tls, self._federation, self._socket = party, tls, federation, local_socket
        self._ident = pki.identity_from_pem(Path(tls.cert).read_bytes())
        self._as_curator = self._ident.role == "curator" and self._ident.name == curator_name and self._ident.federation == federation
        self._curator = None if self._as_curator else grpc.secure_channel(curator_address, tls.channel_credentials(),
                                                                             options=[("grpc.ssl_target_name_override", curator_name)])

    def unary_unary(self, method: str, request_serializer=None, response_deserializer=None, **_: Any):
        def call(request, timeout: float | None = None, metadata=None, **__: Any):
            body = request_serializer(request) if request_serializer else request
            raw = self._call(method, body, timeout or 30.0, getattr(request, "job_id", ""))
            return response_deserializer(raw) if response_deserializer else raw
        return call

    def _call(self, method: str, body: bytes, timeout: float, job_id: str) -> bytes:
        if self._as_curator:
            return local_call(self._socket, method, body, as_caller("curator", self._ident.name, self._federation), timeout)
        from mpdp import limits

        stub = relay_stub(self._curator)
        try:
            cert = stub.Certificate(link_pb2.PartyCertificateRequest(name=self._party), timeout=timeout).certificate
        except grpc.RpcError:
            cert = b""
        if not cert:  # not a party that may ask (the gate refused it): it can only relay blind, sealed to nobody
            cert = Path(self._tls.cert).read_bytes()
        wire, reply_key, sealed = sealed_call(self._tls, self._federation, self._ident.name, self._party, cert, method, body,
                                              job_id if limits.is_id(job_id) else "x", timeout)
        reply = stub.Relay(wire, timeout=timeout)
        code, details, response = seal.open_reply(reply_key, sealed.signature, bytes(reply.gcm_nonce), bytes(reply.ciphertext))
        if code:
            raise link.rpc_error(link.status(code), details)
        return response

    def close(self) -> None:
        if self._curator is not None:
            self._curator.close()

    def __enter__(self) -> "PartyChannel":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def tcp_listeners(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on (IPv4 and IPv6), from /proc: its socket inodes in LISTEN state."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as fh:
            next(fh)
            for row in fh:
                cols = row.split()
                if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


def assert_parties_listen_on_no_grpc_port(fed) -> None:
    for p in fed.parties:
        proc = fed.procs[p]
        assert proc.port == 0 and proc.local_socket
        allowed = {proc.http_port} - {0}  # its local HTTP page (plain HTTP, loopback) may stay
        assert tcp_listeners(proc.popen.pid) <= allowed, (p, tcp_listeners(proc.popen.pid), allowed)
    assert tcp_listeners(fed.procs["curator"].popen.pid) >= {fed.procs["curator"].port}  # the check can see a listener
