"""End-to-end sealing of one party-to-party call that a relay (the curator) carries but must not read or alter.

A party that sends a protocol step to another party hands it to the curator, which forwards it over the recipient's
link. The curator must learn nothing it did not learn when parties called each other directly, and it must not be
able to alter, replay, misdirect or forge a step. So the sender *seals* each call:

* **Confidentiality.** An ephemeral P-256 key ``e`` is drawn for the call; ``s = ECDH(e, R)`` with the recipient's
  certificate key ``R``. HKDF-SHA256 over ``s`` (info binding the ephemeral key and the recipient's certificate key)
  gives two 256-bit AES-GCM keys: one for the request, one for the reply. The request body is encrypted under the
  first with a fresh 96-bit nonce and the header (below) as associated data.
* **Authenticity and binding.** The sender signs, with its own certificate's ECDSA P-256 key, the header (version,
  federation, sender, recipient, full method name, job id, a random 128-bit call nonce, the call's deadline), the
  ephemeral public key, the AES-GCM nonce and the ciphertext. The recipient verifies the sender's certificate
  against the federation CA (issuer, signature, validity, role ``party``, the federation's O, the exact sender name in
  the header) and the signature, and that the header names *it*.
* **Replays.** :class:`ReplayGuard` remembers every call nonce it accepted until that call's deadline has passed; a
  nonce seen again, or a call whose deadline is past or implausibly far, is refused. Memory is bounded (its
  capacity, and a share of it per sender, so a party flooding far deadlines blocks only its own calls; when full,
  new calls are refused, never an unexpired nonce forgotten).
* **The reply** (gRPC status code, short details, response bytes) is encrypted under the reply key with the request's
  signature as associated data: only the recipient could derive that key, so the curator can neither read nor forge
  nor swap replies. A reply the relay withholds leaves the sender's call to fail (the job fails, never silently).

The recipient's certificate comes from the relay (:func:`check_certificate` accepts it only if the federation CA
issued it to a party of exactly that name), so a curator cannot substitute a key of its own: it holds no CA key.

Pure functions over bytes; keys and nonces from the OS CSPRNG (``os.urandom`` via ``cryptography``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import struct
from collections import OrderedDict
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.x509.oid import NameOID

VERSION = b"mpdp-seal-v1"
CALL_NONCE_BYTES = 16
GCM_NONCE_BYTES = 12
POINT_BYTES = 65  # an uncompressed P-256 point
MAX_CERTIFICATE_BYTES = 8192
MAX_DEADLINE_AHEAD = 86400.0 + 600.0  # a call's deadline at most this far ahead (a job's deadline and its grace)


class SealError(Exception):
    """A sealed call or reply that must be refused; ``str()`` says why in a few words and echoes nothing it carried."""


class Replayed(SealError):
    """A sealed call whose nonce was accepted before (its deadline not yet past)."""


@dataclass(frozen=True)
class Header:
    """What the sender signs besides the ciphertext: who, to whom, which RPC, which job, which call."""

    federation: str
    sender: str
    recipient: str
    method: str  # full method name, "/mpdp.messages.Party/SendNoiseChain"
    job_id: str
    nonce: bytes  # CALL_NONCE_BYTES random bytes: this call, once
    deadline: float  # seconds since the epoch; the recipient refuses the call after it

    def encode(self) -> bytes:
        out = [VERSION]
        for s in (self.federation, self.sender, self.recipient, self.method, self.job_id):
            b = s.encode()
            out.append(struct.pack(">H", len(b)) + b)
        out.append(struct.pack(">H", len(self.nonce)) + self.nonce)
        out.append(struct.pack(">d", self.deadline))
        return b"".join(out)


@dataclass(frozen=True)
class Sealed:
    """One sealed call as it travels (the fields of the SealedCall message)."""

    header: Header
    sender_certificate: bytes  # PEM
    ephemeral_key: bytes  # POINT_BYTES
    gcm_nonce: bytes
    ciphertext: bytes
    signature: bytes  # DER ECDSA-SHA256


@dataclass(frozen=True)
class Opened:
    """A verified, decrypted call and what the recipient needs to seal its reply."""

    header: Header
    request: bytes
    reply_key: bytes
    signature: bytes


def _signed(header: Header, ephemeral_key: bytes, gcm_nonce: bytes, ciphertext: bytes) -> bytes:
    h = header.encode()
    return b"".join(struct.pack(">I", len(p)) + p for p in (h, ephemeral_key, gcm_nonce, ciphertext))


def _keys(shared: bytes, ephemeral_key: bytes, recipient_key: ec.EllipticCurvePublicKey) -> tuple[bytes, bytes]:
    spki = recipient_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    info = VERSION + ephemeral_key + hashlib.sha256(spki).digest()
    okm = HKDF(algorithm=hashes.SHA256(), length=64, salt=None, info=info).derive(shared)
    return okm[:32], okm[32:]


def _attr(name: x509.Name, oid) -> str:
    vals = name.get_attributes_for_oid(oid)
    return str(vals[0].value) if vals else ""


def check_certificate(pem: bytes, ca: x509.Certificate, name: str, federation: str, now: float | None = None) -> ec.EllipticCurvePublicKey:
    """The P-256 key of ``pem`` if the CA ``ca`` issued it to the party ``name`` of ``federation`` and it is valid
    now; SealError otherwise."""
    if not pem or len(pem) > MAX_CERTIFICATE_BYTES:
        raise SealError("the certificate is missing or too large")
    try:
        cert = x509.load_pem_x509_certificate(pem)
    except ValueError:
        raise SealError("the certificate does not parse") from None
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        raise SealError("the certificate is not from the federation's CA") from None
    when = dt.datetime.fromtimestamp(now if now is not None else _now(), dt.timezone.utc)
    if not (cert.not_valid_before_utc <= when <= cert.not_valid_after_utc):
        raise SealError("the certificate is not valid now")
    if _attr(cert.subject, NameOID.ORGANIZATIONAL_UNIT_NAME) != "party":
        raise SealError("the certificate is not a party's")
    if _attr(cert.subject, NameOID.ORGANIZATION_NAME) != federation:
        raise SealError("the certificate belongs to another federation")
    if _attr(cert.subject, NameOID.COMMON_NAME) != name:
        raise SealError("the certificate names another party")
    key = cert.public_key()
    if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, ec.SECP256R1):
        raise SealError("the certificate's key is not P-256")
    return key


def _now() -> float:
    return dt.datetime.now(dt.timezone.utc).timestamp()


def seal(header: Header, request: bytes, sender_key: ec.EllipticCurvePrivateKey, sender_certificate: bytes,
         recipient_key: ec.EllipticCurvePublicKey) -> tuple[Sealed, bytes]:
    """Seal ``request`` for the recipient; returns the sealed call and the key its reply will be sealed under."""
    if len(header.nonce) != CALL_NONCE_BYTES:
        raise ValueError("a call nonce is 16 random bytes")
    eph = ec.generate_private_key(ec.SECP256R1())
    eph_pub = eph.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    request_key, reply_key = _keys(eph.exchange(ec.ECDH(), recipient_key), eph_pub, recipient_key)
    gcm_nonce = os.urandom(GCM_NONCE_BYTES)
    ciphertext = AESGCM(request_key).encrypt(gcm_nonce, request, header.encode())
    signature = sender_key.sign(_signed(header, eph_pub, gcm_nonce, ciphertext), ec.ECDSA(hashes.SHA256()))
    return Sealed(header, sender_certificate, eph_pub, gcm_nonce, ciphertext, signature), reply_key


def new_nonce() -> bytes:
    return os.urandom(CALL_NONCE_BYTES)


def open_sealed(sealed: Sealed, me: str, federation: str, recipient_key: ec.EllipticCurvePrivateKey, ca: x509.Certificate,
                guard: "ReplayGuard", now: float | None = None) -> Opened:
    """Verify and decrypt a call sealed for party ``me``; SealError if anything is off. The guard remembers the call
    only once everything else checked out (a forgery cannot burn a genuine call's nonce)."""
    h = sealed.header
    t = now if now is not None else _now()
    if h.recipient != me:
        raise SealError("the call is sealed for another party")
    if h.federation != federation:
        raise SealError("the call names another federation")
    if h.sender == me:
        raise SealError("a party does not relay to itself")
    if len(h.nonce) != CALL_NONCE_BYTES or len(sealed.ephemeral_key) != POINT_BYTES or len(sealed.gcm_nonce) != GCM_NONCE_BYTES:
        raise SealError("a sealed field has the wrong length")
    if not (t < h.deadline <= t + MAX_DEADLINE_AHEAD):
        raise SealError("the call's deadline has passed or is implausible")
    sender_key = check_certificate(sealed.sender_certificate, ca, h.sender, federation, t)
    try:
        sender_key.verify(sealed.signature, _signed(h, sealed.ephemeral_key, sealed.gcm_nonce, sealed.ciphertext), ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise SealError("the sender's signature does not verify") from None
    try:
        eph = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), sealed.ephemeral_key)
    except ValueError:
        raise SealError("the ephemeral key is not a P-256 point") from None
    request_key, reply_key = _keys(recipient_key.exchange(ec.ECDH(), eph), sealed.ephemeral_key, recipient_key.public_key())
    try:
        request = AESGCM(request_key).decrypt(sealed.gcm_nonce, sealed.ciphertext, h.encode())
    except InvalidTag:
        raise SealError("the ciphertext does not decrypt") from None
    if not guard.admit(h.sender, h.nonce, h.deadline, t):
        raise Replayed("the call was seen before (a replay)")
    return Opened(h, request, reply_key, sealed.signature)


def seal_reply(opened_or_key: "Opened | bytes", signature: bytes, code: int, details: str, response: bytes) -> tuple[bytes, bytes]:
    """The recipient's reply (status code, short details, response bytes) sealed under the call's reply key, bound to
    the call's signature; returns (gcm nonce, ciphertext)."""
    key = opened_or_key.reply_key if isinstance(opened_or_key, Opened) else opened_or_key
    body = struct.pack(">IH", code, len(details.encode())) + details.encode() + response
    nonce = os.urandom(GCM_NONCE_BYTES)
    return nonce, AESGCM(key).encrypt(nonce, body, VERSION + b"reply" + signature)


def open_reply(reply_key: bytes, signature: bytes, gcm_nonce: bytes, ciphertext: bytes) -> tuple[int, str, bytes]:
    """(code, details, response bytes) of a sealed reply; SealError if it was not sealed for this call."""
    if len(gcm_nonce) != GCM_NONCE_BYTES:
        raise SealError("a sealed field has the wrong length")
    try:
        body = AESGCM(reply_key).decrypt(gcm_nonce, ciphertext, VERSION + b"reply" + signature)
    except InvalidTag:
        raise SealError("the reply was not sealed for this call") from None
    if len(body) < 6:
        raise SealError("the reply is truncated")
    code, n = struct.unpack(">IH", body[:6])
    if len(body) < 6 + n:
        raise SealError("the reply is truncated")
    return code, body[6:6 + n].decode(errors="replace"), body[6 + n:]


class ReplayGuard:
    """Call nonces accepted and not yet past their deadline, per sender; at most ``capacity`` at once. A nonce is
    never forgotten before its deadline (else it could be replayed): when full, new calls are refused until some
    expire (the link's in-flight bound and the job bounds keep live calls far below the capacity)."""

    def __init__(self, capacity: int, per_sender: int | None = None) -> None:
        self.capacity = capacity
        self.per_sender = per_sender or capacity  # one sender filling its share (far deadlines) blocks only itself
        self._seen: OrderedDict[tuple[str, bytes], float] = OrderedDict()
        self._by_sender: dict[str, int] = {}

    def admit(self, sender: str, nonce: bytes, deadline: float, now: float) -> bool:
        """True for a call not seen before (remembered until its deadline); False for a replay; SealError when full."""
        self._expire(now)
        key = (sender, nonce)
        if key in self._seen:
            return False
        if len(self._seen) >= self.capacity or self._by_sender.get(sender, 0) >= self.per_sender:
            raise SealError("too many sealed calls are live; retry later")
        self._seen[key] = deadline
        self._by_sender[sender] = self._by_sender.get(sender, 0) + 1
        return True

    def _forget(self, key: tuple[str, bytes]) -> None:
        del self._seen[key]
        n = self._by_sender[key[0]] - 1
        if n:
            self._by_sender[key[0]] = n
        else:
            del self._by_sender[key[0]]

    def _expire(self, now: float) -> None:
        if len(self._seen) >= self.capacity // 2 or any(n >= self.per_sender for n in self._by_sender.values()):
            for k in [k for k, d in self._seen.items() if d < now]:  # insertion order is not deadline order: sweep all
                self._forget(k)
            return
        while self._seen:  # else drop the expired prefix
            k, d = next(iter(self._seen.items()))
            if d >= now:
                break
            self._forget(k)

    def __len__(self) -> int:
        return len(self._seen)
