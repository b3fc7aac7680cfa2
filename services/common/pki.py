"""Certificates for a federation: a CA, and leaf certificates that carry the role and site name.

Subject CN = site name, OU = role ("party", "curator", "compute_node", "operator", "admin"), O = federation; SAN lists the
site name (used as the TLS server name), "localhost", and any host names or IPs the site is
reached at. Keys are ECDSA P-256 from the OS CSPRNG (via ``cryptography``). Every leaf carries the extended key
usages serverAuth and clientAuth (each site both serves and calls its peers).

What a server requires of a caller's certificate (rpc.RoleInterceptor, on top of the TLS handshake's chain check):
an O equal to the server's federation (a certificate without one is refused, never let through), and an extended key
usage extension that lists clientAuth. The TLS layer already drops an EKU that omits clientAuth; a certificate with
no EKU extension at all (which X.509 reads as "any purpose") is refused by the gate. A server refuses to start with
a certificate of its own whose EKU lacks serverAuth (:func:`check_server_certificate`).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mpdp_services.common.durable import PRIVATE, PUBLIC, write_atomic

OPERATOR, ADMIN = "operator", "admin"
ROLES = ("party", "curator", "compute_node", OPERATOR, ADMIN)  # admin: an operator who sees and cancels every operator's jobs
DEFAULT_DAYS = 365


@dataclass(frozen=True)
class Identity:
    """Who is at the other end of a TLS connection, from its certificate."""

    role: str
    name: str
    federation: str = ""
    client_auth: bool = False  # the certificate's extended key usage lists clientAuth


def _name(common: str, role: str | None, federation: str) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, federation or "mpdp"), x509.NameAttribute(NameOID.COMMON_NAME, common)]
    if role:
        attrs.insert(1, x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role))
    return x509.Name(attrs)


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def make_ca(federation: str, days: int = 3650) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = new_key()
    now = dt.datetime.now(dt.timezone.utc)
    name = _name(f"{federation} CA", None, federation)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def make_csr(key: ec.EllipticCurvePrivateKey, role: str, site: str, federation: str = "") -> x509.CertificateSigningRequest:
    """A CSR an institution creates at home; its private key never leaves it."""
    _check_role(role)
    return x509.CertificateSigningRequestBuilder().subject_name(_name(site, role, federation)).sign(key, hashes.SHA256())


def sign_csr(
    csr: x509.CertificateSigningRequest,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    hosts: list[str] | tuple[str, ...] = (),
    days: int = DEFAULT_DAYS,
) -> x509.Certificate:
    """Sign a leaf certificate for a CSR; the role and site come from the CSR's subject."""
    if not csr.is_signature_valid:
        raise ValueError("CSR signature is invalid")
    role = _attr(csr.subject, NameOID.ORGANIZATIONAL_UNIT_NAME)
    site = _attr(csr.subject, NameOID.COMMON_NAME)
    _check_role(role)
    sans: list[x509.GeneralName] = [x509.DNSName(site), x509.DNSName("localhost")]
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            if h not in (site, "localhost"):
                sans.append(x509.DNSName(h))
    sans.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    now = dt.datetime.now(dt.timezone.utc)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(site, role, _attr(ca_cert.subject, NameOID.ORGANIZATION_NAME)))
        .issuer_name(ca_cert.subject)
        .public_key(csr.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )


def issue(ca_key, ca_cert, role: str, site: str, hosts: list[str] | tuple[str, ...] = (), days: int = DEFAULT_DAYS):
    """Key and certificate in one step (the provisioning host makes both)."""
    key = new_key()
    return key, sign_csr(make_csr(key, role, site), ca_key, ca_cert, hosts, days)


def pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def write_site(folder: Path, key, cert: x509.Certificate, ca_cert: x509.Certificate) -> None:
    """A site's TLS files: ``site.key`` born 0600 (never readable by others, not even briefly), certificates 0644."""
    folder.mkdir(mode=0o755, parents=True, exist_ok=True)  # explicit: others must never be able to swap the key
    write_atomic(folder / "site.key", pem_key(key), PRIVATE)
    write_atomic(folder / "site.crt", pem_cert(cert), PUBLIC)
    write_atomic(folder / "ca.crt", pem_cert(ca_cert), PUBLIC)


_identity_cache: dict[bytes, Identity] = {}


def identity_from_pem(pem: bytes) -> Identity:
    """Role, site and federation named by a peer certificate (cached: called on every RPC)."""
    ident = _identity_cache.get(pem)
    if ident is None:
        cert = x509.load_pem_x509_certificate(pem)
        ident = Identity(
            role=_attr(cert.subject, NameOID.ORGANIZATIONAL_UNIT_NAME),
            name=_attr(cert.subject, NameOID.COMMON_NAME),
            federation=_attr(cert.subject, NameOID.ORGANIZATION_NAME),
            client_auth=ExtendedKeyUsageOID.CLIENT_AUTH in usages(cert),
        )
        if len(_identity_cache) < 4096:
            _identity_cache[pem] = ident
    return ident


def key_fingerprint(pem: bytes) -> str:
    """``sha256:<hex>`` of a certificate's public key (SubjectPublicKeyInfo, DER): the same for every certificate
    issued over one key pair, different for a certificate minted with another key under the same name."""
    fp = _key_cache.get(pem)
    if fp is None:
        cert = x509.load_pem_x509_certificate(pem)
        spki = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        digest = hashes.Hash(hashes.SHA256())
        digest.update(spki)
        fp = "sha256:" + digest.finalize().hex()
        if len(_key_cache) < 4096:
            _key_cache[pem] = fp
    return fp


_key_cache: dict[bytes, str] = {}


def usages(cert: x509.Certificate) -> list:
    """The certificate's extended key usages ([] when it has no EKU extension)."""
    try:
        return list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
    except x509.ExtensionNotFound:
        return []


def check_server_certificate(pem: bytes) -> str:
    """The federation (O) of this server's own certificate; ValueError if it has none or its EKU lacks serverAuth."""
    cert = x509.load_pem_x509_certificate(pem)
    if ExtendedKeyUsageOID.SERVER_AUTH not in usages(cert):
        raise ValueError("this site's certificate has no serverAuth extended key usage; re-issue it with `mpdp provision`")
    federation = _attr(cert.subject, NameOID.ORGANIZATION_NAME)
    if not federation:
        raise ValueError("this site's certificate names no federation (O); re-issue it with `mpdp provision`")
    return federation


def _attr(name: x509.Name, oid) -> str:
    vals = name.get_attributes_for_oid(oid)
    return str(vals[0].value) if vals else ""


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; use one of {ROLES}")
