"""A party's ledger page on its own HTTP endpoint (``/``): every entry and the ε spent and left, as `mpdp ledger show` prints it,
and a chart of the budget spent over time (the composed ε under the accountant and under basic composition after each
job, and the budget line), an SVG drawn here like the job page's timeline: no script, the same CSP.

Served only by the party whose ledger it is (:mod:`mpdp_services.common.web`: loopback by default, a token when
exposed). The ledger holds no data, only what this party spent on which job; the figures are the same as its
``mpdp_ledger_*`` metrics.
"""

from __future__ import annotations

import logging
import math
import time

from mpdp.ledger import Ledger, LedgerError
from mpdp_services.common import web
from mpdp_services.common.web import esc

log = logging.getLogger("mpdp.party")
NAV = [("/", "Ledger"), ("/metrics", "Metrics")]
REFRESH_SECONDS = 30


def _num(x: float | None, fmt: str = ".4g") -> str:
    return "—" if x is None or not math.isfinite(x) else esc(format(x, fmt))


class LedgerPage:
    def __init__(self, site: str, ledger: Ledger) -> None:
        self.site, self.ledger = site, ledger

    def install(self, routes: web.Routes | None = None) -> None:
        (routes or web.ROUTES).add("/", self.page)

    def page(self, rest: str, query: dict[str, str]) -> web.Response:
        try:
            snapshot = self.ledger.snapshot()
            report, timeline = snapshot.report(), snapshot.timeline()
        except (LedgerError, OSError) as e:
            log.error("ledger page: the ledger %s cannot be read: %s", self.ledger.path, e)
            return web.text(503, "this party's ledger cannot be read; see its log\n")
        return web.document("Privacy ledger", self.site, NAV, render(self.site, report, timeline), REFRESH_SECONDS)


def _when(at: float | None) -> str:
    return "—" if at is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def chart(report: dict, timeline: list[dict]) -> str:
    """Budget spent over time (:meth:`mpdp.ledger.PrivacyLedger.timeline`) as an inline SVG, or a line saying nothing was spent."""
    if not timeline:
        return '<p class=muted id="budget-chart">Nothing spent yet: the chart starts with the first job.</p>'
    timed = all(p["at"] is not None for p in timeline) and timeline[-1]["at"] > timeline[0]["at"]
    xs = [float(p["at"]) for p in timeline] if timed else [float(i) for i in range(len(timeline))]
    ticks = (_when(timeline[0]["at"]), _when(timeline[-1]["at"])) if timed else ("first job", f"job {len(timeline)}")
    acc = f"composed ε ({report['accountant']['method']})"
    lines = [web.Line("accountant-line", acc, [p["epsilon"] for p in timeline], "#1b4a8f"),
             web.Line("basic-line", "basic composition Σε", [p["basic_epsilon"] for p in timeline], "#c27a14", "4 3")]
    budget = report["budget"]["epsilon"]
    title = f"privacy budget spent over {len(timeline)} jobs: composed ε and basic composition against the budget ε = {budget:g}"
    return web.step_chart("budget-chart", title, xs, lines, [("budget-line", f"budget ε = {budget:g}", budget, "#8a1c1c")], ticks, "ε spent")


def render(site: str, report: dict, timeline: list[dict] | None = None) -> str:
    """The body of the ledger page from :meth:`mpdp.ledger.PrivacyLedger.report` and its :meth:`~mpdp.ledger.PrivacyLedger.timeline`."""
    b, acc, basic = report["budget"], report["accountant"], report["basic"]
    summary = [
        ("budget", f"ε = {_num(b['epsilon'])}, δ = {_num(b['delta'], '.3g')}"),
        ("spent ε (accountant)", f'<span id="spent-epsilon">{_num(acc["epsilon"])}</span> <span class=muted>({esc(acc["method"])} at δ = {_num(b["delta"], ".3g")})</span>'),
        ("left ε (accountant)", f'<span id="left-epsilon">{_num(acc["left_epsilon"])}</span>'),
        ("spent, basic composition", f"ε = {_num(basic['epsilon'])}, δ = {_num(basic['delta'], '.3g')}"),
        ("left, basic composition", f"ε = {_num(basic['left_epsilon'])}, δ = {_num(basic['left_delta'], '.3g')}"),
        ("entries", str(len(report["entries"]))),
    ]
    dl = "<dl id=\"summary\">" + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in summary) + "</dl>"
    rows = "".join(
        f"<tr><td>{esc(e['protocol'])}</td><td>{esc(e['job_id'])}</td><td>{esc(e['status'])}</td><td>{esc(e['mechanism'])}</td><td>{esc(e['accounted_as'])}</td>"
        f"<td class=n>{_num(e['epsilon'])}</td><td class=n>{_num(e['delta'], '.3g')}</td></tr>" for e in report["entries"])
    table = ('<table id="entries"><tr><th>protocol</th><th>job</th><th>status</th><th>mechanism</th><th>accounted as</th><th>ε</th><th>δ</th></tr>'
             f"{rows}</table>") if rows else '<p class=muted id="entries">No entries: this party has spent nothing.</p>'
    return (f"<h1>Privacy ledger of {esc(site)}</h1>{dl}<h2>Budget spent over time</h2>{chart(report, timeline or [])}<h2>Entries</h2>{table}"
            "<p class=muted>Each entry was charged before the job's first data-dependent message; a failed job keeps its charge.</p>")
