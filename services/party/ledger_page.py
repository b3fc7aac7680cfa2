"""A party's ledger page on its own HTTP endpoint (``/``): every entry and the ε spent and left, as `mpdp ledger show` prints it.

Served only by the party whose ledger it is (:mod:`mpdp_services.common.web`: loopback by default, a token when
exposed). The ledger holds no data, only what this party spent on which job; the figures are the same as its
``mpdp_ledger_*`` metrics.
"""

from __future__ import annotations

import logging
import math

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
            report = self.ledger.snapshot().report()
        except (LedgerError, OSError) as e:
            log.error("ledger page: the ledger %s cannot be read: %s", self.ledger.path, e)
            return web.text(503, "this party's ledger cannot be read; see its log\n")
        return web.document("Privacy ledger", self.site, NAV, render(self.site, report), REFRESH_SECONDS)


def render(site: str, report: dict) -> str:
    """The body of the ledger page from :meth:`mpdp.ledger.PrivacyLedger.report`."""
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
    return (f"<h1>Privacy ledger of {esc(site)}</h1>{dl}<h2>Entries</h2>{table}"
            "<p class=muted>Each entry was charged before the job's first data-dependent message; a failed job keeps its charge.</p>")
