"""`mpdp health`: ask a service's standard gRPC health service, over mutual TLS, whether it serves.

With ``--address``: one service (exit status 0 when it answers SERVING, 1 otherwise, with the reason on stderr), so it
works as a container health check. Without: every role the federation's endpoints.json lists (the curator, each
party and compute node), asked at once with the operator's certificate; ``--wait`` keeps asking (and waits for the
file itself), which is how a script waits for `mpdp federation up`. Runnable as ``python -m mpdp_services.cli.health`` too: it imports only grpc and
cryptography, which keeps a health probe cheap.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from mpdp_services.cli.errors import CliError
from mpdp_services.cli.options import endpoints_option


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


def probe_federation(endpoints: Path, timeout: float) -> tuple[bool, dict[str, dict], str]:
    """Every role endpoints.json lists (curator, parties, compute nodes) asked at once, with the operator's
    certificate; returns (all serving, {site: {address, healthy, status}}, what happened)."""
    from concurrent.futures import ThreadPoolExecutor

    path = _endpoints_file(str(endpoints))
    try:
        doc = json.loads(path.read_text())
        roles = {doc["curator"].get("name", "curator"): doc["curator"]["address"]}
        for group in ("parties", "compute_nodes"):
            roles.update({str(k): str(v) for k, v in (doc.get(group) or {}).items()})
        here = path.resolve().parent  # relative TLS paths (as `mpdp provision` writes them) are relative to the file
        cert, key, ca = (here / doc["operator_tls"][k] for k in ("cert", "key", "ca"))
    except FileNotFoundError:
        return False, {}, f"{path} not found (yet): `mpdp federation up` writes it once every role is up"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        return False, {}, f"{path} is not an endpoints file (JSON with curator, operator_tls): {type(e).__name__}: {e}"
    missing = [str(f) for f in (cert, key, ca) if not f.exists()]
    if missing:
        return False, {}, f"TLS files missing: {', '.join(missing)}"
    from mpdp_services.common.link import LINK_ADDRESS, health_service

    curator_name, curator_address = next(iter(roles.items()))

    def ask(name: str, address: str) -> tuple[bool, str]:
        if address == LINK_ADDRESS:  # a party listens nowhere: the curator says whether its link is open
            ok, what = _check(curator_address, cert, key, ca, curator_name, health_service(name), timeout)
            return ok, f"{name}'s link to the curator: " + ("open" if ok else f"not open ({what})")
        return _check(address, cert, key, ca, name, "", timeout)

    with ThreadPoolExecutor(max_workers=min(16, len(roles))) as pool:
        answers = dict(zip(roles, pool.map(lambda item: ask(*item), roles.items())))
    report = {name: {"address": roles[name], "healthy": ok, "status": what} for name, (ok, what) in answers.items()}
    down = [name for name, r in report.items() if not r["healthy"]]
    if down:
        return False, report, "; ".join(report[n]["status"] for n in down)
    return True, report, f"{len(report)} roles serving ({', '.join(report)})"


@click.command("health")
@endpoints_option
@click.option("--address", default=None, help="host:port of one service (with --tls-dir)  [default: every role of the federation in --endpoints]")
@click.option("--tls-dir", default=None, type=click.Path(file_okay=False, exists=True), help="with --address: folder with site.crt, site.key, ca.crt (any certificate of the federation)")
@click.option("--server-name", default=None, help="site name to verify in the server's certificate  [default: this site's own name if the server "
              "has it, else the name on the certificate the server presents, signed by the CA of --tls-dir]")
@click.option("--service", default="", help="health service name, e.g. mpdp.messages.Party (party registered with the curator)  [default: the server]")
@click.option("--timeout", type=click.FloatRange(min=0.0, min_open=True), default=5.0, show_default=True, help="seconds per attempt")
@click.option("--wait", type=click.FloatRange(min=0.0), default=0.0, show_default=True,
              help="keep asking for up to this many seconds until SERVING (an endpoints file not written yet is waited for too)")
@click.option("--quiet", is_flag=True, help="print nothing when healthy")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object (healthy or not; the exit code still says which)")
def health(address: str | None, tls_dir: str | None, endpoints: str, server_name: str | None, service: str, timeout: float, wait: float,
           quiet: bool, as_json: bool) -> None:
    """Exit 0 if the service at ADDRESS, or every role of the federation, reports SERVING over mutual TLS, else 1 with the reason."""
    if address is not None and tls_dir is None:
        raise click.UsageError("--address needs --tls-dir (a folder with site.crt, site.key and ca.crt of the federation)")
    if address is None and (tls_dir is not None or server_name is not None or service):
        raise click.UsageError("--tls-dir, --server-name and --service go with --address (without it every role in --endpoints is asked)")
    roles: dict[str, dict] = {}
    where = address or endpoints
    deadline = time.monotonic() + wait
    while True:
        if address is not None:
            assert tls_dir is not None
            ok, what = probe(address, Path(tls_dir), server_name, service, timeout)
        else:
            ok, roles, what = probe_federation(Path(str(where)), timeout)  # read again each time: the file appears when the federation is up
        if ok or time.monotonic() >= deadline:
            break
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))  # polling a remote service: nothing to wait on locally
    if address is not None:
        hint = ("is the service running at that address, and is --tls-dir a site of the same federation? "
                "--server-name names the site the address should be (default: the name on its certificate)")
    else:
        hint = ("start the federation (`mpdp federation up`; `--wait SECONDS` waits for it), or point --endpoints / --profile at the one you meant; "
                "each role's log is WORKDIR/<site>/service.log")
    code = "unhealthy"
    if address is None and not roles and not _endpoints_file(str(where)).exists():
        code, what = "endpoints", f"{_endpoints_file(str(where))} not found: start a federation with `mpdp federation up`, or pass --endpoints (or set MPDP_ENDPOINTS) to the endpoints.json of yours"
    if as_json:  # one object either way; a failure's carries "error" too
        doc: dict[str, object] = ({"address": address, "service": service or None} if address is not None else {"endpoints": str(where), "roles": roles})
        doc.update({"healthy": ok, "status": what})
        if not ok:
            doc["error"] = {"code": code, "message": what if code == "endpoints" else f"unhealthy: {what}", "hint": hint}
        click.echo(json.dumps(doc))
        sys.exit(0 if ok else 1)
    if ok:
        if not quiet:
            click.echo(what)
        return
    raise CliError(what if code == "endpoints" else f"unhealthy: {what}", code=code, hint=hint)


def _endpoints_file(where: str) -> Path:
    """WHERE/endpoints.json for a folder, or one that does not exist yet and is not named *.json (the federation's
    workdir before `mpdp federation up` made it); else WHERE."""
    p = Path(where)
    return p / "endpoints.json" if p.is_dir() or (not p.exists() and p.suffix != ".json") else p


if __name__ == "__main__":
    health()
