"""Mutual TLS for the Dask cluster a party starts (``dask: local``), and where its workers work.

A Dask scheduler runs whatever task a connected client submits, in worker processes that can read what the party
can. So the party's local cluster never listens in the clear: :func:`local_security` makes a throwaway CA and one
certificate each for the scheduler, the workers and the party's client (ECDSA P-256 from the OS CSPRNG, through
``cryptography``), written 0600 into a private folder (0700) made for this cluster, and requires TLS with client
certificates on every connection (``require_encryption``). A client without a certificate of that CA — a plain TCP
client, or one with any other certificate — cannot connect. The folder (and the workers' scratch space in it) is
removed when the cluster closes.

Workers run with that folder as their working directory (:func:`dask_setup`, a Dask preload run as each worker
starts), never the party's own folder, where its ``site.key`` is.

An external scheduler is the party's own cluster: it must be named ``tls://…`` with the party's certificate, key and
the cluster's CA (:func:`external_security`).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import tempfile
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

ROLES = ("scheduler", "worker", "client")
DAYS = 3650  # the cluster lives as long as the party process; its CA is thrown away with it


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _cert(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name, signer: ec.EllipticCurvePrivateKey, ca: bool) -> x509.Certificate:
    now = dt.datetime.now(dt.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])).issuer_name(issuer)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=DAYS))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True))
    if not ca:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    return b.sign(signer, hashes.SHA256())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def new_folder() -> Path:
    """A private folder (0700) for one local cluster: its TLS files in ``tls/``, its workers' scratch space in ``work/``."""
    folder = Path(tempfile.mkdtemp(prefix="mpdp-dask-"))
    for sub in ("tls", "work"):
        (folder / sub).mkdir(mode=0o700)
    return folder


def local_security(folder: Path) -> Any:
    """A ``distributed.security.Security`` for a cluster of this process only: a new CA and a certificate per role in
    ``folder/tls`` (keys 0600), TLS required on every connection, each side's certificate checked against that CA."""
    from distributed.security import Security

    tls = folder / "tls"
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mpdp party dask CA")])
    _write(tls / "ca.crt", _cert("mpdp party dask CA", ca_key, ca_name, ca_key, True).public_bytes(serialization.Encoding.PEM))
    files: dict[str, str] = {}
    for role in ROLES:
        key = ec.generate_private_key(ec.SECP256R1())
        _write(tls / f"{role}.key", _pem_key(key))
        _write(tls / f"{role}.crt", _cert(f"mpdp dask {role}", key, ca_name, ca_key, False).public_bytes(serialization.Encoding.PEM))
        files[f"tls_{role}_cert"], files[f"tls_{role}_key"] = str(tls / f"{role}.crt"), str(tls / f"{role}.key")
    del ca_key  # nothing else is ever signed
    return Security(require_encryption=True, tls_ca_file=str(tls / "ca.crt"), **files)


def external_security(address: str, ca: Path, cert: Path, key: Path) -> Any:
    """The party's client security for its own external scheduler: ``tls://`` only, with the configured files."""
    from distributed.security import Security

    if not address.startswith("tls://"):
        raise RuntimeError("a Dask scheduler address must be tls://host:port (the party never talks to a cluster in the clear)")
    return Security(require_encryption=True, tls_ca_file=str(ca), tls_client_cert=str(cert), tls_client_key=str(key))


def dask_setup(worker: Any) -> None:
    """Dask preload (run in each worker process as it starts): work in the worker's own scratch folder, which lies in
    the cluster's private folder, not in the party's folder."""
    os.chdir(worker.local_directory)
