"""The read-only HTTP endpoint and its pages, without a federation: the curator's dashboard over a stub catalog and
real stores, a party's ledger page over a real ledger file, and the server's rules (known paths only, read-only,
bounded, token when exposed, security headers).

Invariants: every string a peer or operator could choose is escaped; no page links, loads or posts to another
host; nothing but GET reaches a page; with a token configured, nothing but /login answers without it, and the login cookie is a session, never the token."""

from __future__ import annotations

import html.parser
import http.client
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from mpdp.ledger import Ledger
from mpdp.messages import common_pb2, dca_pb2, hamm2016_pb2, learner_pb2, local_release_pb2, operations_pb2, pathak2010_pb2, query_pb2
from mpdp_services.common import config as cfgmod
from mpdp_services.common import web
from mpdp_services.common.store import MessageStore
from mpdp_services.curator.dashboard import Dashboard, learner_view
from mpdp_services.curator.dca import DcaStore
from mpdp_services.curator.learner import LearnerStore
from mpdp_services.party.ledger_page import LedgerPage

HOSTILE = '"><script>alert(1)</script><img src="http://evil.example/x.png"><a href="https://evil.example/">'
T0 = 1_760_000_000.0


class StubCatalog:
    def __init__(self, jobs: list[operations_pb2.JobSummary]) -> None:
        self._jobs = jobs

    def protocols(self) -> list[str]:
        return ["pathak2010", "dca", "lmgc", "hamm2016"]

    def jobs(self, protocol: str = "", live_only: bool = False, limit: int = 100) -> list[operations_pb2.JobSummary]:
        return [j for j in self._jobs if not protocol or j.protocol == protocol][:limit]

    def job(self, job_id: str) -> operations_pb2.JobSummary | None:
        return next((j for j in self._jobs if j.job_id == job_id), None)


def _summary(job_id: str, protocol: str, state: str, problem: int = 0, detail: str = "", stages: dict | None = None) -> operations_pb2.JobSummary:
    s = operations_pb2.JobSummary(job_id=job_id, protocol=protocol, state=state, terminal=True, problem=problem, detail=detail,  # type: ignore[arg-type]
                                  created_unix=T0, ended_unix=T0 + 3.5, released=not problem)
    for i, st in enumerate(["ADMITTED", "RUNNING", state]):
        s.events.add(at_unix=T0 + i * 1.5, state=st)
    s.stage_seconds.update(stages or {"setup": 1.25, "comparisons": 2.0})
    return s


def _guarantee() -> common_pb2.Guarantee:
    return common_pb2.Guarantee(mechanism="Gaussian" + HOSTILE, epsilon=1.0, delta=1e-5, sensitivity=2.0, norm="l2", statement="(1, 1e-5)-DP " + HOSTILE)


@pytest.fixture
def dashboard(tmp_path: Path) -> Dashboard:
    models = MessageStore(tmp_path / "models", pathak2010_pb2.PublishedModel)
    models.put("pk-1", pathak2010_pb2.PublishedModel(job_id="pk-1", parties=3, dimension=4, epsilon=1.0, guarantee=_guarantee(),
                                                     trust_model="honest-but-curious " + HOSTILE, dataset=HOSTILE, stage_seconds={"setup": 0.5}))
    dca = DcaStore(tmp_path / "dca")
    dca.put_spec("dca-1", dca_pb2.DcaJobSpec(dimension=3, clients=5, max_missing=1, epsilon=1.0, delta=1e-5, compute_nodes=["node-1", "node-2"], purpose=HOSTILE))
    dca.put_release(dca_pb2.DpSum(job_id="dca-1", values=[123456.75, 7.0], clients_expected=5, clients_included=4, compute_nodes=2, epsilon=1.0, delta=1e-5,
                                  guarantee=_guarantee(), trust_model="non-colluding nodes", agreed_set_digest=b"\x01" * 32))
    dca.put_failure("dca-2", common_pb2.PEER_UNREACHABLE, HOSTILE)
    local = MessageStore(tmp_path / "local", local_release_pb2.LocalModelSet)
    local.put("lm-1", local_release_pb2.LocalModelSet(job_id="lm-1", releases=[local_release_pb2.LocalModelRelease(party="party-1", theta=[987654.25], guarantee=_guarantee())],
                                                      aggregate_statement=HOSTILE))
    ensembles = MessageStore(tmp_path / "ensembles", hamm2016_pb2.EnsembleRelease)
    ensembles.put("en-1", hamm2016_pb2.EnsembleRelease(job_id="en-1", method="hcb16", weights=[555555.5], parties_included=3, auxiliary_rows=4242,
                                                       guarantee=_guarantee(), trust_model=HOSTILE, dca_job_id="dca-1"))
    catalog = StubCatalog([
        _summary("pk-1", "pathak2010", "PUBLISHED"),
        _summary("pk-2", "pathak2010", "FAILED", common_pb2.JOB_FAILED, detail=HOSTILE),
        _summary("dca-1", "dca", "RELEASED"),
        _summary("dca-2", "dca", "FAILED", common_pb2.PEER_UNREACHABLE),
        _summary("lm-1", "lmgc", "PUBLISHED"),
        _summary("en-1", "hamm2016", "PUBLISHED", stages={HOSTILE: 1.0}),
        _summary("qy-1", "query", "PUBLISHED"),
    ])
    learners = LearnerStore(tmp_path / "learners")  # a protocol shown through its registry view (Hooks.view)
    cell = query_pb2.QueryCell(estimate=313131.5)
    learners.put_model(learner_pb2.LearnerModel(job_id="qy-1", protocol="query", parties=["party-1", HOSTILE], dca_jobs=["dca-1"], guarantee=_guarantee(),
                                                trust_model=HOSTILE, seconds={"round": 0.75},
                                                query=query_pb2.QueryModel(aggregates=["n"], rows=[query_pb2.QueryRow(cells=[cell])])))
    return Dashboard("curator" + HOSTILE, catalog, models, dca, local, ensembles, views={"query": (learner_view, learners)})  # type: ignore[arg-type]


def _pages(d: Dashboard) -> dict[str, str]:
    routes = web.Routes()
    d.install(routes)
    out = {}
    for path in ["/", "/?protocol=dca", "/releases", "/dca", "/ensembles", "/jobs/pk-1", "/jobs/pk-2", "/jobs/dca-1", "/jobs/dca-2", "/jobs/lm-1", "/jobs/en-1",
                 "/jobs/qy-1"]:
        p, _, q = path.partition("?")
        found = routes.find(p)
        assert found is not None, path
        r = found[0](found[1], dict(x.split("=") for x in q.split("&")) if q else {})
        assert r is not None and r.status == 200, path
        out[path] = r.body.decode()
    return out


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.urls += [v or "" for k, v in attrs if k in ("href", "src", "action", "srcset", "data", "formaction", "poster")]


def test_hostile_strings_are_escaped_and_no_page_reaches_another_host(dashboard):
    for path, body in _pages(dashboard).items():
        parser = _Links()
        parser.feed(body)
        assert not parser.tags & {"script", "img", "iframe", "object", "embed", "form", "link", "base"}, path
        assert parser.urls and all(u.startswith("/") and not u.startswith("//") for u in parser.urls), (path, parser.urls)
        assert "<script>" not in body and "&lt;script&gt;" in body, path  # the hostile text is shown, as text


def test_the_pages_show_jobs_timelines_and_guarantees_but_no_values(dashboard):
    pages = _pages(dashboard)
    jobs = pages["/"]
    assert all(f'href="/jobs/{j}"' in jobs for j in ("pk-1", "pk-2", "dca-1", "dca-2", "lm-1", "en-1"))
    assert "JOB_FAILED" in jobs and "PEER_UNREACHABLE" in jobs and 'http-equiv="refresh"' in jobs
    assert "pk-1" not in pages["/?protocol=dca"]
    job = pages["/jobs/pk-1"]
    assert 'id="timeline"' in job and 'id="stages"' in job and "comparisons" in job and "2.000 s" in job
    assert "ADMITTED" in job and "RUNNING" in job and "honest-but-curious" in job and "(1, 1e-5)-DP" in job
    assert "JOB_FAILED" in pages["/jobs/pk-2"]
    dca = pages["/jobs/dca-1"]
    assert "Node agreement" in dca and "clients included |A|" in dca and "node-1, node-2" in dca and "non-colluding nodes" in dca
    assert "<td class=n>1</td>" in pages["/dca"]  # dropouts = N − |A| = 5 − 4
    assert "PEER_UNREACHABLE" in pages["/jobs/dca-2"]
    assert 'href="/jobs/dca-1"' in pages["/jobs/en-1"] and 'href="/jobs/dca-1"' in pages["/ensembles"]
    query = pages["/jobs/qy-1"]  # a learner's release, by its registry view
    assert "Published release" in query and 'href="/jobs/dca-1"' in query and "(1, 1e-5)-DP" in query
    everything = "".join(pages.values())
    for value in ("123456", "987654", "555555", "4242", "313131"):  # released values, weights, the auxiliary set's size
        assert value not in everything


def test_unknown_and_malformed_job_ids_are_404(dashboard):
    routes = web.Routes()
    dashboard.install(routes)
    for path in ["/jobs/pk-404", "/jobs/../../etc/passwd", "/jobs/a/b", "/jobs/" + "x" * 65, "/jobs/%3Cscript%3E"]:
        found = routes.find(path)
        assert found is None or found[0](found[1], {}) is None, path
    assert routes.find("/nothing") is None
    assert routes.find("/")[0]("", {"protocol": "nope"}) is None  # type: ignore[index]


# -- the server -------------------------------------------------------------------------------------------------
@pytest.fixture
def served(dashboard):
    routes = web.Routes()
    dashboard.install(routes)
    routes.add("/metrics", lambda rest, q: web.text(200, "mpdp_up 1\n"))
    servers = []

    def start(token_file: Path | None = None) -> str:
        server, port = web.serve_http("127.0.0.1:0", token_file, routes)
        servers.append(server)
        return f"http://127.0.0.1:{port}"

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def _get(url: str, headers: dict[str, str] | None = None, method: str = "GET", data: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers or {}, method=method, data=data)
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
        return None


@pytest.mark.process  # serves HTTP on a socket: not in `make test-fast`
def test_known_paths_only_read_only_and_hardened_headers(served):
    url = served()
    status, headers, body = _get(url + "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert headers["Content-Security-Policy"].startswith("default-src 'none'; style-src 'unsafe-inline'; img-src data:")
    assert headers["X-Content-Type-Options"] == "nosniff" and headers["X-Frame-Options"] == "DENY"
    status, headers, body = _get(url + "/secret-<script>-path")
    assert status == 404 and b"secret" not in body and b"script" not in body and len(body) < 64 and headers["X-Frame-Options"] == "DENY"
    assert _get(url + "/jobs/pk-404")[0] == 404 and _get(url + "/jobs/..%2F..%2Fetc")[0] == 404
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        assert _get(url + "/", method=method, data=b"x" * 10)[0] == 405, method
    assert _get(url + "/metrics", method="POST", data=b"x")[0] == 405
    assert _get(url + "/?" + "a" * 5000)[0] == 414
    conn = http.client.HTTPConnection(url[7:], timeout=10)  # a GET that sends a body is refused before the body is read
    conn.request("GET", "/", body=b"y" * 1000)
    assert conn.getresponse().status == 405
    conn.close()


@pytest.mark.process  # serves HTTP on a socket: not in `make test-fast`
def test_a_failing_or_busy_page_says_nothing_about_why(tmp_path):
    routes = web.Routes()

    def boom(rest: str, q: dict) -> web.Response:
        raise RuntimeError("secret detail /etc/passwd")

    def busy(rest: str, q: dict) -> web.Response:
        raise TimeoutError

    routes.add("/boom", boom)
    routes.add("/busy", busy)
    server, port = web.serve_http("127.0.0.1:0", None, routes)
    try:
        status, _, body = _get(f"http://127.0.0.1:{port}/boom")
        assert status == 500 and b"secret" not in body
        assert _get(f"http://127.0.0.1:{port}/busy")[0] == 503
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.process  # serves HTTP on a socket: not in `make test-fast`
def test_a_token_guards_every_page_and_a_browser_logs_in_with_a_cookie(served, tmp_path):
    token = "t0k3n-" + "a" * 40
    (tmp_path / "http.token").write_text(token + "\n")
    url = served(tmp_path / "http.token")
    for path in ("/", "/metrics", "/jobs/pk-1", "/nothing"):
        status, headers, _ = _get(url + path)
        assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer"), path
    assert _get(url + "/", {"Authorization": "Bearer wrong-" + "a" * 40})[0] == 401
    assert _get(url + "/", {"Authorization": f"Basic {token}"})[0] == 401
    assert _get(url + "/metrics", {"Authorization": f"Bearer {token}"})[0] == 200
    assert _get(url + "/nothing", {"Authorization": f"Bearer {token}"})[0] == 404  # 404 only once authorized
    assert _get(url + "/login?token=" + token)[0] == 400  # a token in a URL is refused, and sets nothing
    assert "Set-Cookie" not in _get(url + "/login?token=" + token)[1]
    status, _, form = _get(url + "/login")
    assert status == 200 and b'method="post"' in form and b'action="/login"' in form
    assert _login(url, "nope")[0] == 401
    status, headers, _ = _login(url, token)
    assert status == 303 and headers["Location"] == "/"
    cookie = headers["Set-Cookie"]
    attrs = [a.strip() for a in cookie.split(";")]
    assert "HttpOnly" in attrs and "SameSite=Strict" in attrs and "Path=/" in attrs and f"Max-Age={web.SESSION_SECONDS}" in attrs
    assert "Secure" not in attrs  # plain HTTP, no TLS proxy in front
    value = attrs[0].split("=", 1)[1]
    assert attrs[0].startswith(web.COOKIE + "=") and token not in cookie and value != token
    assert _get(url + "/jobs/pk-1", {"Cookie": attrs[0]})[0] == 200
    assert _get(url + "/jobs/pk-1", {"Cookie": f"{web.COOKIE}={token}"})[0] == 401  # the raw token is no cookie
    assert _get(url + "/jobs/pk-1", {"Cookie": "mpdp_token=" + token})[0] == 401
    forged = value.rsplit(".", 1)[0] + "." + "0" * 64
    assert _get(url + "/jobs/pk-1", {"Cookie": f"{web.COOKIE}={forged}"})[0] == 401
    expired = web.new_session(token, now=time.time() - web.SESSION_SECONDS - 1)
    assert _get(url + "/jobs/pk-1", {"Cookie": f"{web.COOKIE}={expired}"})[0] == 401
    assert not web.valid_session("another-token-" + "d" * 30, value)  # rotating the token ends every session
    status, headers, _ = _login(url, token, {"X-Forwarded-Proto": "https"})
    assert status == 303 and "Secure" in [a.strip() for a in headers["Set-Cookie"].split(";")]
    assert _get(url + "/login", method="POST", data=b"token=" + token.encode(), headers={"Content-Type": "text/plain"})[0] == 415
    assert _get(url + "/login", method="POST", data=b"token=" + b"x" * 5000, headers={"Content-Type": "application/x-www-form-urlencoded"})[0] == 413
    assert _get(url + "/metrics", method="POST", data=b"token=" + token.encode(), headers={"Content-Type": "application/x-www-form-urlencoded"})[0] == 405


def _login(url: str, token: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """What the login form sends: the token in a POST body."""
    import urllib.parse

    body = urllib.parse.urlencode({"token": token}).encode()
    return _get(url + "/login", {"Content-Type": "application/x-www-form-urlencoded", **(headers or {})}, method="POST", data=body)


def test_an_exposed_endpoint_needs_a_token(tmp_path):
    assert web.is_loopback("127.0.0.1") and web.is_loopback("::1") and web.is_loopback("[::1]") and web.is_loopback("localhost") and web.is_loopback("127.8.0.1")
    assert not any(web.is_loopback(h) for h in ("0.0.0.0", "", "::", "10.0.4.17", "example.org"))
    with pytest.raises(web.WebConfigError, match="http_token_file"):
        web.serve_http("0.0.0.0:0")
    with pytest.raises(web.WebConfigError, match="http_token_file"):
        web.check_exposure(":0", None)
    assert web.check_exposure("127.0.0.1:0", None) is None
    (tmp_path / "short").write_text("abc")
    with pytest.raises(web.WebConfigError, match="at least"):
        web.check_exposure("10.0.0.1:9464", tmp_path / "short")
    with pytest.raises(web.WebConfigError, match="cannot read"):
        web.check_exposure("10.0.0.1:9464", tmp_path / "missing")
    (tmp_path / "ok").write_text("x" * 32)
    assert web.check_exposure("10.0.0.1:9464", tmp_path / "ok") == "x" * 32
    tls = {"cert": "a", "key": "b", "ca": "c"}
    with pytest.raises(ValueError, match="not a loopback address"):
        cfgmod.CuratorConfig(name="c", tls=tls, http_listen="0.0.0.0:9464")  # type: ignore[arg-type]
    assert cfgmod.CuratorConfig(name="c", tls=tls, http_listen="0.0.0.0:9464", http_token_file=tmp_path / "ok").http_token_file  # type: ignore[arg-type]
    assert cfgmod.CuratorConfig(name="c", tls=tls, http_listen="").http_listen == ""  # type: ignore[arg-type]


def test_the_ledger_page_shows_entries_and_spent_epsilon(tmp_path):
    ledger = Ledger(tmp_path / "ledger.json", 10.0, 1e-3)
    page = LedgerPage("party-1" + HOSTILE, ledger)
    empty = page.page("", {}).body.decode()
    assert "No entries" in empty and 'id="spent-epsilon">0<' in empty
    ledger.spend({"protocol": "pathak2010", "job_id": "pk-1", "epsilon": 0.5, "delta": 0.0, "mechanism": HOSTILE, "status": "spent"})
    ledger.mark("pathak2010", "pk-1", "released")
    body = page.page("", {}).body.decode()
    assert 'id="spent-epsilon">0.4984<' in body and 'id="left-epsilon">9.502<' in body  # the PLD accountant's ε at δ = 1e-3 and "pk-1" in body and "released" in body
    assert "<script>" not in body and "&lt;script&gt;" in body
    (tmp_path / "ledger.json").write_text("not json")
    assert page.page("", {}).status == 503


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_the_ledger_page_draws_budget_spent_over_time_as_inline_svg(tmp_path):
    """One point per job in the order spent: the accountant's composed ε (never above basic composition), Σε, and
    the budget line; an inline SVG with no script, the hostile job name escaped."""
    import re

    from mpdp.ledger import PrivacyLedger

    ledger = Ledger(tmp_path / "ledger.json", 10.0, 1e-3)
    page = LedgerPage("party-1", ledger)
    assert 'id="budget-chart">Nothing spent yet' in page.page("", {}).body.decode()
    g = {"kind": "gaussian", "noise_multiplier": 3.0}
    for i, eps in enumerate([1.0, 2.0, 0.5]):
        ledger.spend({"protocol": "pathak2010", "job_id": f"pk-{i}{HOSTILE}", "epsilon": eps, "delta": 1e-6, "mechanism": "m", "status": "spent", "accounting": g})
    snap = ledger.snapshot()
    tl = snap.timeline()
    assert [round(p["basic_epsilon"], 9) for p in tl] == [1.0, 3.0, 3.5]
    assert all(p["epsilon"] <= p["basic_epsilon"] + 1e-9 for p in tl) and tl[-1]["epsilon"] == pytest.approx(snap.report()["accountant"]["epsilon"])
    assert [p["at"] for p in tl] == sorted(p["at"] for p in tl)
    body = page.page("", {}).body.decode()
    svg = body[body.index('<svg id="budget-chart"'):body.index("</svg>")]
    assert "<script" not in body and HOSTILE not in body
    basic = re.search(r'<polyline id="basic-line"[^>]* data-last="([^"]+)" points="([^"]+)"', svg)
    acc = re.search(r'<polyline id="accountant-line"[^>]* data-last="([^"]+)"', svg)
    budget = re.search(r'<line id="budget-line"[^>]* data-value="([^"]+)"', svg)
    assert basic and acc and budget
    assert float(basic.group(1)) == pytest.approx(3.5) and float(acc.group(1)) == pytest.approx(tl[-1]["epsilon"]) and float(budget.group(1)) == 10.0
    assert len(basic.group(2).split()) == 2 + 2 * 3  # from 0 at the axis, a rise at each of the 3 jobs, on to the right edge
    # more entries than points: bounded prefixes, the last always composed
    many = PrivacyLedger(1000.0, 1e-3, [{"job_id": f"j{i}", "epsilon": 1.0, "spent_at": float(i)} for i in range(200)])
    pts = many.timeline(max_points=20)
    assert len(pts) == 20 and pts[-1]["basic_epsilon"] == 200.0 and pts[0]["job_id"] == "j0"


def test_reads_run_on_the_roles_event_loop(dashboard):
    """With a loop given, the catalog is read on the loop's thread (which owns the job tables)."""
    import asyncio
    import threading

    seen: list[str] = []
    inner = dashboard.catalog.jobs

    def jobs(*a, **kw):  # noqa: ANN002, ANN003
        seen.append(threading.current_thread().name)
        return inner(*a, **kw)

    dashboard.catalog.jobs = jobs

    async def main() -> None:
        dashboard.loop = asyncio.get_running_loop()
        threading.current_thread().name = "the-loop"
        r = await asyncio.to_thread(dashboard.jobs_page, "", {})
        assert r is not None and r.status == 200

    asyncio.run(main())
    assert seen == ["the-loop"]
    time.sleep(0)


@pytest.mark.process  # serves HTTP on a socket: not in `make test-fast`
def test_the_token_is_checked_before_the_query_is_parsed_and_a_long_query_is_400(served, tmp_path):
    token = "t0k3n-" + "c" * 40
    (tmp_path / "http.token").write_text(token)
    url = served(tmp_path / "http.token")
    many = "&".join(f"a{i}=1" for i in range(17))
    assert _get(url + "/?" + many)[0] == 401  # no token: refused before anything in the query is looked at
    assert _get(url + "/?" + many, {"Authorization": f"Bearer {token}"})[0] == 400
    assert _get(url + "/metrics?" + "&".join(f"a{i}=1" for i in range(16)), {"Authorization": f"Bearer {token}"})[0] == 200
