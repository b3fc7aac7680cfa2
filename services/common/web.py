"""Each role's read-only HTTP endpoint: a small routing table, the token check and the response headers.

One server per role process (a daemon thread beside the gRPC server). Pages are registered by the role that
serves them: :mod:`mpdp_services.common.metrics` adds ``/metrics`` in every role, the curator adds its dashboard
(:mod:`mpdp_services.curator.dashboard`), a party its ledger page (:mod:`mpdp_services.party.ledger_page`).

What every response obeys:

* **Read-only.** GET only (and the login form's POST); POST elsewhere, PUT, DELETE, PATCH, HEAD → 405. A request
  line longer than :data:`MAX_TARGET` → 414; a GET that sends a body → 405 before the body is read.
* **Token first, bounded parse.** The token is checked before the query is parsed; a query of more than
  :data:`MAX_QUERY_FIELDS` pairs → 400. A client's doing (a bad request, hanging up or resetting mid-answer) never
  puts a traceback in the role's log: a client that went away is dropped quietly.
* **Known paths only.** Anything not registered → 404 with a short fixed body (the path is never echoed).
* **No network fetch, no script.** Pages are server-rendered HTML; every response carries a Content-Security-Policy
  that allows inline styles and ``data:`` images only, ``nosniff`` and ``X-Frame-Options: DENY``.
* **Authentication when exposed.** Bound to loopback, no token is needed (only this host can connect). Bound to any
  other address, a token is required (``http_token_file``; a role refuses to start without one): each request must
  carry ``Authorization: Bearer <token>`` (Prometheus: ``authorization: credentials_file``) or a session cookie (a
  browser). A browser logs in at ``/login``: a form that POSTs the token in the body (never in a URL, which ends up
  in history, logs and Referer headers; ``GET /login?token=…`` is refused with 400). The reply sets
  ``mpdp_session``: not the token but ``expiry.nonce.HMAC(key, expiry.nonce)`` with a key derived from the token, valid
  :data:`SESSION_SECONDS`, ``HttpOnly; SameSite=Strict; Path=/``, plus ``Secure`` when the request came over TLS (a
  TLS-terminating proxy in front that sends ``X-Forwarded-Proto: https``; the port itself speaks plain HTTP). A
  stolen cookie expires; rotating the token ends every session. Tokens and sessions are compared in constant time;
  a wrong one gets 401, never a hint.
"""

from __future__ import annotations

import asyncio
import errno
import hmac
import html
import ipaddress
import logging
import math
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, TypeVar
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger("mpdp.web")

MAX_TARGET = 2048  # bytes of a request target (path and query)
MAX_QUERY_FIELDS = 16  # name=value pairs in a query; more → 400
COOKIE = "mpdp_session"
SESSION_SECONDS = 8 * 3600  # a browser session's lifetime
MAX_LOGIN_BODY = 1024  # bytes of the login form's body
MIN_TOKEN = 16  # characters: a token file with less is refused (`openssl rand -hex 32` gives 64)
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
TEXT, HTML = "text/plain; charset=utf-8", "text/html; charset=utf-8"


class WebConfigError(ValueError):
    """The HTTP endpoint's configuration is unsafe or unusable (raised before anything listens)."""


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = HTML
    headers: dict[str, str] = field(default_factory=dict)


def page(status: int, body: str) -> Response:
    return Response(status, body.encode(), HTML)


def text(status: int, body: str) -> Response:
    return Response(status, body.encode(), TEXT)


NOT_FOUND = text(404, "not found\n")

# A handler gets the rest of the path after its prefix ("" for an exact page) and the query (name → first value);
# it returns a Response, or None for "no such page" (404).
Handler = Callable[[str, dict[str, str]], "Response | None"]


@dataclass
class Routes:
    """Exact paths and prefixes ("/jobs/" matches "/jobs/<rest>"), longest prefix first."""

    exact: dict[str, Handler] = field(default_factory=dict)
    prefixes: dict[str, Handler] = field(default_factory=dict)

    def add(self, path: str, handler: Handler) -> None:
        if not path.startswith("/"):
            raise ValueError(f"a page path starts with '/', got {path!r}")
        (self.prefixes if path.endswith("/") and path != "/" else self.exact)[path] = handler

    def find(self, path: str) -> tuple[Handler, str] | None:
        if path in self.exact:
            return self.exact[path], ""
        for prefix in sorted(self.prefixes, key=len, reverse=True):
            if path.startswith(prefix) and len(path) > len(prefix):
                return self.prefixes[prefix], path[len(prefix):]
        return None


ROUTES = Routes()  # this process's pages (one role per process)


def add_page(path: str, handler: Handler) -> None:
    """Serve ``handler`` at ``path`` (exact), or under it when ``path`` ends with ``/`` (``"/"`` itself is exact)."""
    ROUTES.add(path, handler)


# -- authentication -----------------------------------------------------------------------------------------
def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and "localhost"; an empty host, a wildcard or any other name is not loopback."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def split_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise WebConfigError(f"http_listen must be host:port, got {listen!r}")
    return host.strip("[]"), int(port)


def read_token(path: str | Path) -> str:
    try:
        token = Path(path).read_text().strip()
    except OSError as e:
        raise WebConfigError(f"cannot read http_token_file {path}: {e.strerror or e}") from e
    if len(token) < MIN_TOKEN or not token.isprintable() or any(c.isspace() for c in token) or ";" in token or "," in token:
        raise WebConfigError(f"http_token_file {path} must hold one token of at least {MIN_TOKEN} printable characters without spaces, ';' or ',' "
                             "(e.g. `openssl rand -hex 32`)")
    return token


def check_exposure(listen: str, token_file: str | Path | None) -> str | None:
    """The token the endpoint requires (None: none), or WebConfigError if ``listen`` is not loopback and no token is set."""
    host, _ = split_listen(listen)
    if token_file:
        return read_token(token_file)
    if not is_loopback(host or "0.0.0.0"):
        raise WebConfigError(f"http_listen {listen} is not a loopback address: set http_token_file (or MPDP_HTTP_TOKEN_FILE) to a file holding "
                             "a random token, e.g. `openssl rand -hex 32 > http.token` (docs/deploy.md §4), or bind 127.0.0.1")
    return None


def _session_key(token: str) -> bytes:
    return hmac.new(token.encode(), b"mpdp http session v1", "sha256").digest()


def new_session(token: str, now: float | None = None) -> str:
    """A session cookie value for ``token``: ``expiry.nonce.mac`` (the token itself never leaves the server)."""
    expiry = int((time.time() if now is None else now) + SESSION_SECONDS)
    body = f"{expiry}.{secrets.token_urlsafe(18)}"
    return body + "." + hmac.new(_session_key(token), body.encode(), "sha256").hexdigest()


def valid_session(token: str, value: str, now: float | None = None) -> bool:
    """The cookie was made by :func:`new_session` for this token and has not expired."""
    expiry, _, rest = value.partition(".")
    nonce, _, mac = rest.partition(".")
    if not (expiry.isdigit() and len(expiry) <= 12 and nonce and len(mac) == 64):
        return False
    want = hmac.new(_session_key(token), f"{expiry}.{nonce}".encode(), "sha256").hexdigest()
    return hmac.compare_digest(mac.encode(), want.encode()) and int(expiry) > (time.time() if now is None else now)


def authorized(token: str | None, authorization: str | None, cookie: str | None) -> bool:
    """The request carries ``token`` (Bearer header) or a live session cookie; no token configured: everyone (loopback)."""
    if token is None:
        return True
    ok = False
    if authorization and authorization[:7].lower() == "bearer ":
        ok |= hmac.compare_digest(authorization[7:].strip().encode(), token.encode())
    for part in (cookie or "").split(";")[:32]:
        name, _, value = part.strip().partition("=")
        if name == COOKIE:
            ok |= valid_session(token, value)
    return ok


LOGIN_FORM = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>mpdp · log in</title></head>
<body><form method="post" action="/login"><label>Token <input type="password" name="token" autocomplete="current-password"></label>
<button type="submit">Log in</button></form></body></html>
"""


# -- the server ----------------------------------------------------------------------------------------------
class _Handler(BaseHTTPRequestHandler):
    timeout = 10
    server_version = "mpdp"
    sys_version = ""
    routes: Routes = ROUTES
    token: str | None = None

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if len(self.path) > MAX_TARGET:
            return self._send(text(414, "request target too long\n"))
        if self.headers.get("Content-Length") not in (None, "0") or self.headers.get("Transfer-Encoding"):
            return self._send(text(405, "read-only: GET without a body\n"))
        parts = urlsplit(self.path)
        if parts.path == "/login":
            if parts.query:  # a token in a URL lands in history, proxy logs and Referer headers: never accepted
                return self._send(text(400, "the token is never sent in a URL: open /login and submit the form (POST)\n"))
            return self._send(page(200, LOGIN_FORM) if self.token is not None else Response(303, b"", TEXT, {"Location": "/"}))
        # the token first: nothing a caller without it sent (its query) is parsed
        if not authorized(self.token, self.headers.get("Authorization"), self.headers.get("Cookie")):
            return self._send(Response(401, b"unauthorized: send Authorization: Bearer <token>, or log in at /login\n", TEXT,
                                       {"WWW-Authenticate": 'Bearer realm="mpdp"'}))
        query = parse_query(parts.query)
        if query is None:
            return self._send(text(400, f"bad query: at most {MAX_QUERY_FIELDS} name=value pairs\n"))
        found = self.routes.find(parts.path)
        if found is None:
            return self._send(NOT_FOUND)
        handler, rest = found
        try:
            response = handler(rest, query)
        except TimeoutError:  # the role's event loop did not answer in time (on_loop)
            response = Response(503, b"busy; try again\n", TEXT, {"Retry-After": "5"})
        except Exception:  # noqa: BLE001 - a page that fails must not reveal why to the client
            log.exception("http: the page handler failed")
            response = text(500, "internal error; see the role's log\n")
        self._send(response or NOT_FOUND)

    def _login(self, offered: str) -> Response:
        """A browser's way in: a session cookie (not the token), then to the role's front page."""
        if self.token is None:
            return Response(303, b"", TEXT, {"Location": "/"})
        if not hmac.compare_digest(offered.encode(), self.token.encode()):
            return text(401, "unauthorized: wrong token\n")
        secure = "; Secure" if self._over_tls() else ""
        cookie = f"{COOKIE}={new_session(self.token)}; Path=/; Max-Age={SESSION_SECONDS}; HttpOnly; SameSite=Strict{secure}"
        return Response(303, b"", TEXT, {"Location": "/", "Set-Cookie": cookie})

    def _over_tls(self) -> bool:
        """The browser reached us over TLS: this socket is TLS, or a TLS-terminating proxy says so."""
        import ssl

        return isinstance(self.connection, ssl.SSLSocket) or (self.headers.get("X-Forwarded-Proto") or "").strip().lower() == "https"

    def do_POST(self) -> None:  # noqa: N802
        if urlsplit(self.path).path != "/login" or len(self.path) > MAX_TARGET:
            self.close_connection = True  # a body, if any, is never read
            return self._send(Response(405, b"read-only\n", TEXT, {"Allow": "GET"}))
        self.close_connection = True
        length = self.headers.get("Content-Length") or ""
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if self.headers.get("Transfer-Encoding") or not length.isdigit() or int(length) > MAX_LOGIN_BODY:
            return self._send(text(413 if length.isdigit() else 411, f"a login form of at most {MAX_LOGIN_BODY} bytes, with Content-Length\n"))
        if ctype != "application/x-www-form-urlencoded":
            return self._send(text(415, "send the login form (application/x-www-form-urlencoded)\n"))
        form = parse_query(self.rfile.read(int(length)).decode("utf-8", errors="replace"))
        if form is None:
            return self._send(text(400, "bad form\n"))
        self._send(self._login(form.get("token", "")))

    def do_PUT(self) -> None:  # noqa: N802
        self.close_connection = True  # a body, if any, is never read
        self._send(Response(405, b"read-only\n", TEXT, {"Allow": "GET"}))

    do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_PUT

    def _send(self, r: Response) -> None:
        self.send_response(r.status)
        for name, value in {**HEADERS, "Content-Type": r.content_type, "Content-Length": str(len(r.body)), **r.headers}.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(r.body)

    def handle(self) -> None:
        try:
            super().handle()
        except OSError as e:  # the client hung up or stalled mid-request: nothing to answer, nothing to log
            if not hung_up(e):
                raise

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
        log.debug("http %s", format % args)


def parse_query(query: str) -> dict[str, str] | None:
    """``a=1&b=2`` → name → first value; None when there are more than :data:`MAX_QUERY_FIELDS` pairs (400)."""
    if not query:
        return {}
    if query.count("&") + query.count(";") >= MAX_QUERY_FIELDS:  # bounded before parsing, whatever parse_qs counts
        return None
    try:
        return {k: v[0] for k, v in parse_qs(query, max_num_fields=MAX_QUERY_FIELDS).items()}
    except ValueError:
        return None


_HUNG_UP = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError, socket.timeout)


def hung_up(e: BaseException) -> bool:
    """A client that went away (closed, reset, timed out): not an error of this server."""
    return isinstance(e, _HUNG_UP) or (isinstance(e, OSError) and e.errno in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.ETIMEDOUT))


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        """socketserver prints a traceback to stderr (the role's log, with this host's paths); never for a client's doing."""
        import sys

        e = sys.exc_info()[1]
        if e is None or hung_up(e):
            return
        log.warning("http: a request failed (%s); the client got no answer", type(e).__name__)


def serve_http(listen: str, token_file: str | Path | None = None, routes: Routes | None = None) -> tuple[ThreadingHTTPServer, int]:
    """Serve this role's pages on ``host:port`` (port 0: any free port) in a daemon thread; returns the server and its port.

    Raises :class:`WebConfigError` before binding when ``listen`` is not loopback and no token file is given."""
    token = check_exposure(listen, token_file)
    host, port = split_listen(listen)
    handler = type("Handler", (_Handler,), {"routes": routes or ROUTES, "token": token})
    server = _Server((host or "0.0.0.0", port), handler)
    threading.Thread(target=server.serve_forever, name="mpdp-http", daemon=True).start()
    return server, server.server_address[1]


# -- helpers for pages ---------------------------------------------------------------------------------------
R = TypeVar("R")


def on_loop(loop: asyncio.AbstractEventLoop, fn: Callable[[], R], timeout: float = 5.0) -> R:
    """Run ``fn`` on the role's event loop (whose thread owns the job tables) and wait for its result."""

    async def call() -> R:
        return fn()

    return asyncio.run_coroutine_threadsafe(call(), loop).result(timeout)


def esc(value: object) -> str:
    """Text for HTML (element content and quoted attributes)."""
    return html.escape(str(value), quote=True)


CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2b45;color:#fff;padding:10px 24px;display:flex;gap:24px;align-items:baseline}
header b{font-size:16px}header a{color:#cfe0ff;text-decoration:none}header a:hover{text-decoration:underline}
main{padding:16px 24px;max-width:1200px}h1{font-size:20px;margin:8px 0 12px}h2{font-size:16px;margin:20px 0 8px}
table{border-collapse:collapse;background:#fff;width:100%;margin-bottom:12px}
th,td{border:1px solid #dde1e7;padding:4px 8px;text-align:left;vertical-align:top}th{background:#eef1f5;font-weight:600}
td.n{text-align:right;font-variant-numeric:tabular-nums}dl{display:grid;grid-template-columns:max-content auto;gap:2px 16px;background:#fff;
padding:8px 12px;border:1px solid #dde1e7}dt{font-weight:600}dd{margin:0}
.s{display:inline-block;padding:0 6px;border-radius:3px;font-size:12px;font-weight:600;background:#e3e7ee}
.ok{background:#d6f0dc;color:#17612b}.bad{background:#f8d7d7;color:#8a1c1c}.run{background:#dbe8fb;color:#1b4a8f}
.tl{display:flex;height:26px;border:1px solid #c9ced6;background:#fff;margin:6px 0}.tl div{overflow:hidden;white-space:nowrap;
font-size:11px;line-height:26px;padding:0 3px;color:#fff;border-right:1px solid #fff}
.bar{background:#6b8cc7;height:12px;display:inline-block;vertical-align:middle}.muted{color:#6a7280}.warn{color:#8a1c1c;font-weight:600}
"""


@dataclass(frozen=True)
class Line:
    """One series of :func:`step_chart`: ``ys[i]`` holds from ``xs[i]`` until the next point (None: no value there)."""

    id: str
    label: str
    ys: list[float | None]
    color: str
    dash: str = ""


def step_chart(element_id: str, title: str, xs: list[float], lines: list[Line], levels: list[tuple[str, str, float, str]],
               x_ticks: tuple[str, str], y_label: str, width: int = 760, height: int = 260) -> str:
    """An inline SVG step chart rendered here (no script, nothing fetched: the page's CSP holds): every line starts at
    0 before ``xs[0]`` and steps at each x; ``levels`` are horizontal lines (id, label, y, color), e.g. a budget (one
    more than 3× above the lines sits on the top edge, labelled as above the scale, so the lines stay readable).
    ``x_ticks``: the labels under the first and the last x. Numbers and text are escaped; ids name the elements."""
    left, right, top, bottom = 56, 16, 28, 34
    pw, ph = width - left - right, height - top - bottom
    drawn = max([y for ln in lines for y in ln.ys if y is not None and math.isfinite(y)] + [1e-12])
    near = [lv[2] for lv in levels if lv[2] <= 3 * drawn]  # a level far above the lines is drawn at the top edge, marked off scale
    y_max = max([drawn, *near]) * (1.08 if near else 1.25)
    lo, hi = (xs[0], xs[-1]) if xs else (0.0, 1.0)
    span = hi - lo if hi > lo else 1.0

    def px(x: float) -> float:  # the first step sits a little right of the axis so the rise from 0 shows
        return left + 0.04 * pw + 0.94 * pw * (x - lo) / span if hi > lo else left + pw / 2

    def py(y: float) -> float:
        return top + ph - ph * min(y, y_max) / y_max

    out = [f'<svg id="{esc(element_id)}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
           f'role="img" aria-labelledby="{esc(element_id)}-title" font-size="11" font-family="system-ui,sans-serif">',
           f'<title id="{esc(element_id)}-title">{esc(title)}</title>',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fff" stroke="#c9ced6"/>']
    for i in range(5):  # y grid and ticks
        v = y_max / 1.08 * i / 4
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{py(v):.1f}" y2="{py(v):.1f}" stroke="#eef1f5"/>'
                   f'<text x="{left - 6}" y="{py(v) + 4:.1f}" text-anchor="end" fill="#6a7280">{esc(format(v, ".3g"))}</text>')
    out.append(f'<text x="12" y="{top + ph / 2:.1f}" transform="rotate(-90 12 {top + ph / 2:.1f})" text-anchor="middle" fill="#1d2330">{esc(y_label)}</text>')
    out.append(f'<text x="{px(lo):.1f}" y="{height - 12}" text-anchor="start" fill="#6a7280">{esc(x_ticks[0])}</text>'
               f'<text x="{left + pw}" y="{height - 12}" text-anchor="end" fill="#6a7280">{esc(x_ticks[1])}</text>')
    for lid, label, y, color in levels:
        out.append(f'<line id="{esc(lid)}" x1="{left}" x2="{left + pw}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="{esc(color)}" stroke-width="1.5" '
                   f'stroke-dasharray="6 3" data-value="{y!r}"/>')
        if y > y_max:
            out.append(f'<text x="{left + pw - 4}" y="{top + 13}" text-anchor="end" fill="{esc(color)}">↑ {esc(label)}: above this scale</text>')
    for ln in lines:
        pts, prev = [(float(left), py(0.0))], 0.0
        for x, maybe in zip(xs, ln.ys):
            y = prev if maybe is None else maybe
            pts += [(px(x), py(prev)), (px(x), py(y))]
            prev = y
        pts.append((float(left + pw), py(prev)))
        dash = f' stroke-dasharray="{esc(ln.dash)}"' if ln.dash else ""
        out.append(f'<polyline id="{esc(ln.id)}" fill="none" stroke="{esc(ln.color)}" stroke-width="2"{dash} data-last="{prev!r}" '
                   f'points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in pts)}"/>')
        out += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" fill="{esc(ln.color)}"/>' for x, y in zip(xs, ln.ys) if y is not None]
    legend = [(ln.label, ln.color, ln.dash) for ln in lines] + [(lv[1], lv[3], "6 3") for lv in levels]
    lx = left
    for label, color, dash in legend:
        d = f' stroke-dasharray="{esc(dash)}"' if dash else ""
        out.append(f'<line x1="{lx}" x2="{lx + 22}" y1="12" y2="12" stroke="{esc(color)}" stroke-width="2"{d}/>'
                   f'<text x="{lx + 27}" y="16" fill="#1d2330">{esc(label)}</text>')
        lx += 40 + 6 * len(label)
    out.append("</svg>")
    return "".join(out)


def document(title: str, site: str, nav: list[tuple[str, str]], body: str, refresh: int = 0) -> Response:
    """One page: escaped title and site, a nav bar of local links, ``body`` (already-escaped HTML), no script."""
    links = "".join(f'<a href="{esc(href)}">{esc(label)}</a>' for href, label in nav)
    meta = f'<meta http-equiv="refresh" content="{int(refresh)}">' if refresh > 0 else ""
    return page(200, f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">{meta}
<title>{esc(title)} · mpdp {esc(site)}</title><style>{CSS}</style></head>
<body><header><b>mpdp · {esc(site)}</b>{links}</header><main>
{body}
</main></body></html>
""")
