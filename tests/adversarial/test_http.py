"""The roles' HTTP ports (metrics, dashboard, ledger page) against raw sockets.

Invariants: every request gets an answer with a status (400 for a query past the bound, never a dropped
connection); nothing a client does (too many query fields, hanging up before or while the answer is written,
resetting the connection) puts a traceback, or any path of the host, into the role's log; the role keeps serving.
"""

from __future__ import annotations

import http.client
import socket
import struct
import time

import pytest

from .conftest import assert_all_serving

SITES = ["curator", "party-1", "node-1"]
MANY_FIELDS = "&".join(f"a{i}=1" for i in range(17))


def _log_from(fed, site: str, offset: int) -> str:
    return fed.procs[site].log.read_bytes()[offset:].decode(errors="replace")


def _get(port: int, target: str, headers: dict | None = None) -> tuple[int, bytes]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", target, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


@pytest.mark.parametrize("site", SITES)
def test_too_many_query_fields_get_400_and_no_traceback(fed, site):
    proc = fed.procs[site]
    assert proc.http_port, f"{site} serves no HTTP port"
    before = proc.log.stat().st_size
    for target in ("/?" + MANY_FIELDS, "/metrics?" + MANY_FIELDS, "/?" + ";".join(["x"] * 40), "/?" + "&" * 100):
        status, body = _get(proc.http_port, target)
        assert status == 400, (target, status, body[:100])
        assert b"/" not in body.replace(b"name=value", b"")  # no path in the answer
    assert _get(proc.http_port, "/metrics?a=1")[0] == 200  # a bounded query still works
    time.sleep(0.3)
    tail = _log_from(fed, site, before)
    assert "Traceback" not in tail and "ValueError" not in tail and ".py" not in tail, tail[-2000:]


@pytest.mark.parametrize("site", SITES)
def test_clients_that_hang_up_early_leave_no_traceback(fed, site):
    proc = fed.procs[site]
    before = proc.log.stat().st_size
    for _ in range(20):
        # ask for a large page and close without reading (BrokenPipe/ConnectionReset on the server's write)
        s = socket.create_connection(("127.0.0.1", proc.http_port), timeout=5)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close → RST
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        s.close()
        # half a request line, then a reset
        s = socket.create_connection(("127.0.0.1", proc.http_port), timeout=5)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.sendall(b"GET /metr")
        s.close()
    time.sleep(0.5)
    assert _get(proc.http_port, "/metrics")[0] == 200
    tail = _log_from(fed, site, before)
    assert "Traceback" not in tail and "BrokenPipe" not in tail and "ConnectionReset" not in tail, tail[-2000:]
    assert_all_serving(fed)


def test_login_takes_the_token_by_post_only_and_the_cookie_is_not_the_token(tmp_path):
    """A raw client against an endpoint with a token (as an exposed role runs it): the token in a URL is refused and
    sets nothing; the form POST sets a session cookie that is not the token and opens the pages; the raw token as
    a cookie does not."""
    from mpdp_services.common import web

    token = "tok-" + "e" * 44
    (tmp_path / "http.token").write_text(token)
    routes = web.Routes()
    routes.add("/metrics", lambda rest, q: web.text(200, "mpdp_up 1\n"))
    server, port = web.serve_http("127.0.0.1:0", tmp_path / "http.token", routes)
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", f"/login?token={token}")
        r = c.getresponse()
        assert r.status == 400 and r.getheader("Set-Cookie") is None
        r.read()
        c.close()
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("POST", "/login", body=f"token={token}", headers={"Content-Type": "application/x-www-form-urlencoded"})
        r = c.getresponse()
        cookie = r.getheader("Set-Cookie") or ""
        r.read()
        c.close()
        assert r.status == 303 and token not in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Max-Age=" in cookie
        assert _get(port, "/metrics", {"Cookie": cookie.split(";")[0]})[0] == 200
        assert _get(port, "/metrics", {"Cookie": f"{web.COOKIE}={token}"})[0] == 401
        assert _get(port, "/metrics", {"Cookie": f"mpdp_token={token}"})[0] == 401
    finally:
        server.shutdown()
        server.server_close()
