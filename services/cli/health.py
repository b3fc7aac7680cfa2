"""`mpdp health`: ask a service's standard gRPC health service, over mutual TLS, whether it serves.

Exit status 0 when the service answers SERVING, 1 otherwise (with the reason on stderr), so it works as
a container health check. Runnable as ``python -m mpdp_services.cli.health`` too: it imports only grpc and
cryptography, which keeps a health probe cheap.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from mpdp_services.cli.errors import CliError


def probe(address: str, tls_dir: Path, server_name: str | None, service: str, timeout: float) -> tuple[bool, str]:
    """One Health.Check call (two when the server's name must be found); returns (serving, what happened)."""
    cert, key, ca = (tls_dir / "site.crt", tls_dir / "site.key", tls_dir / "ca.crt")
    missing = [str(p) for p in (cert, key, ca) if not p.exists()]
    if missing:
        return False, f"TLS files missing: {', '.join(missing)}"
    if server_name is not None:
        return _check(address, cert, key, ca, server_name, service, timeout)
    # default: this site's own name (a service probing itself, as a container health check does), else the name on the
    # certificate the server presents, signed by this federation's CA (an operator probing another site)
    own = _common_name(cert.read_bytes(), pem=True)
    ok, what = _check(address, cert, key, ca, own, service, timeout)
    if ok or ": UNAVAILABLE:" not in what:  # it answered (serving or not): the name was right
        return ok, what
    try:
        der = _server_certificate(address, cert, key, ca, timeout)
    except (OSError, ValueError) as e:
        return False, f"{what}; and {address} is not reachable over TLS with this federation's CA: {e}"
    found = _common_name(der, pem=False)
    return (ok, what) if found == own else _check(address, cert, key, ca, found, service, timeout)


def _common_name(data: bytes, *, pem: bool) -> str:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    c = x509.load_pem_x509_certificate(data) if pem else x509.load_der_x509_certificate(data)
    return str(c.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


def _check(address: str, cert: Path, key: Path, ca: Path, server_name: str, service: str, timeout: float) -> tuple[bool, str]:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    creds = grpc.ssl_channel_credentials(root_certificates=ca.read_bytes(), private_key=key.read_bytes(), certificate_chain=cert.read_bytes())
    with grpc.secure_channel(address, creds, options=[("grpc.ssl_target_name_override", server_name)]) as ch:
        try:
            resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as e:
            return False, f"{address} ({server_name}): {e.code().name}: {e.details()}"
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)
    return resp.status == health_pb2.HealthCheckResponse.SERVING, f"{address} ({server_name}) service {service or '(server)'!r}: {status}"


def _server_certificate(address: str, cert: Path, key: Path, ca: Path, timeout: float) -> bytes:
    """The DER certificate the service at ``address`` presents in a mutual-TLS handshake, its chain verified against
    ``ca`` (the name is what we learn here, so it is not checked; the gRPC call then verifies it)."""
    import socket
    import ssl

    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{address!r} is not HOST:PORT")
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca))
    ctx.check_hostname = False
    ctx.load_cert_chain(str(cert), str(key))
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as raw, ctx.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    if not der:
        raise ValueError("the service presented no certificate")
    return der


@click.command("health")
@click.option("--address", required=True, help="host:port of the service")
@click.option("--tls-dir", required=True, type=click.Path(file_okay=False, exists=True), help="folder with site.crt, site.key, ca.crt (any certificate of the federation)")
@click.option("--server-name", default=None, help="site name to verify in the server's certificate  [default: this site's own name if the server "
              "has it, else the name on the certificate the server presents, signed by the CA of --tls-dir]")
@click.option("--service", default="", help="health service name, e.g. mpdp.messages.Party (party registered with the curator)  [default: the server]")
@click.option("--timeout", type=float, default=5.0, show_default=True, help="seconds per attempt")
@click.option("--wait", type=float, default=0.0, show_default=True, help="keep asking for up to this many seconds until SERVING")
@click.option("--quiet", is_flag=True, help="print nothing when healthy")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object (healthy or not; the exit code still says which)")
def health(address: str, tls_dir: str, server_name: str | None, service: str, timeout: float, wait: float, quiet: bool, as_json: bool) -> None:
    """Exit 0 if the service at ADDRESS reports SERVING over mutual TLS, else 1 with the reason."""
    deadline = time.monotonic() + wait
    while True:
        ok, what = probe(address, Path(tls_dir), server_name, service, timeout)
        if ok or time.monotonic() >= deadline:
            break
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))  # polling a remote service: nothing to wait on locally
    hint = ("is the service running at that address, and is --tls-dir a site of the same federation? "
            "--server-name names the site the address should be (default: the name on its certificate)")
    if as_json:  # one object either way; a failure's carries "error" too
        doc: dict[str, object] = {"address": address, "service": service or None, "healthy": ok, "status": what}
        if not ok:
            doc["error"] = {"code": "unhealthy", "message": f"unhealthy: {what}", "hint": hint}
        click.echo(json.dumps(doc))
        sys.exit(0 if ok else 1)
    if ok:
        if not quiet:
            click.echo(what)
        return
    raise CliError(f"unhealthy: {what}", code="unhealthy", hint=hint)


if __name__ == "__main__":
    health()
