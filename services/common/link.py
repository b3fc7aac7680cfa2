"""What both ends of a party's link share: the marker address, the caller-identity metadata of the party's local
socket, status codes as numbers, and the sealed call's wire form.

A party opens no gRPC port. It dials its curator and keeps ``PartyLink.Open`` running
(:mod:`mpdp_services.party.link`); the curator sends every call for the party down that stream
(:mod:`mpdp_services.curator.links`), and the party answers each with ``PartyLink.Answer``. The party serves its
gRPC services on a unix-domain socket only it can open (a 0700 folder), and its link client forwards each call
there with the authenticated caller in metadata (:data:`CALLER_ROLE`, :data:`CALLER_NAME`,
:data:`CALLER_FEDERATION`): the gate (:class:`mpdp_services.common.rpc.RoleInterceptor` with ``linked=True``) reads
the caller from that metadata on that socket only, and then checks it exactly as it checks a certificate.

The caller is:

- for a call the curator sends: the curator, by the name the party checked in the TLS handshake when it dialed
  (``curator.name`` in its config);
- for a relayed party-to-party call: the sender named in the sealed call, whose certificate and signature the
  recipient verified (:mod:`mpdp_services.common.seal`). The curator cannot pose as a party.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from mpdp.messages import link_pb2
from mpdp_services.common import seal

if TYPE_CHECKING:
    import grpc

LINK_ADDRESS = "link"  # where the curator reaches a party: down its link (the registrations' address of every party)
SERVICE = "mpdp.messages.PartyLink"
CALLER_ROLE, CALLER_NAME, CALLER_FEDERATION = "mpdp-link-role", "mpdp-link-name", "mpdp-link-federation"
LINKED = "mpdp-linked"  # the curator's initial metadata on PartyLink.Open once the link is registered


def health_service(party: str) -> str:
    """The curator's health-service name that is SERVING while ``party``'s link is open (what `mpdp health` asks
    about a party, which has no port to ask itself)."""
    return f"{SERVICE}/{party}"

@functools.cache
def _codes() -> dict[int, grpc.StatusCode]:
    import grpc  # here, not at import: the launcher and provisioning read LINK_ADDRESS before any usage check

    return {c.value[0]: c for c in grpc.StatusCode}


def status(code: int) -> grpc.StatusCode:
    """The gRPC status of a numeric code (UNKNOWN for a number gRPC does not define)."""
    import grpc

    return _codes().get(code, grpc.StatusCode.UNKNOWN)


def code_of(status_code: grpc.StatusCode) -> int:
    return int(status_code.value[0])


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    """The error a call over the link raises: the same type and fields as a direct call's, so every caller's failure
    handling (Hosted.send, errors.problem_from_status) reads it unchanged."""
    import grpc

    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


def to_wire(sealed: seal.Sealed) -> link_pb2.SealedCall:
    h = sealed.header
    return link_pb2.SealedCall(federation=h.federation, sender=h.sender, recipient=h.recipient, method=h.method, job_id=h.job_id, nonce=h.nonce,
                               deadline=h.deadline, sender_certificate=sealed.sender_certificate, ephemeral_key=sealed.ephemeral_key,
                               gcm_nonce=sealed.gcm_nonce, ciphertext=sealed.ciphertext, signature=sealed.signature)


def from_wire(m: link_pb2.SealedCall) -> seal.Sealed:
    header = seal.Header(m.federation, m.sender, m.recipient, m.method, m.job_id, bytes(m.nonce), float(m.deadline))
    return seal.Sealed(header, bytes(m.sender_certificate), bytes(m.ephemeral_key), bytes(m.gcm_nonce), bytes(m.ciphertext), bytes(m.signature))
