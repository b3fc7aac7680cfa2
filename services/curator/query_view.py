"""A released DP query on the curator's dashboard: its table and, per aggregate, a bar chart over the groups.

What is drawn is the query's release (``LearnerModel.query``, docs/protocols/query.md): every cell's estimate, its 95 %
interval and its noise sd — post-processing of one DP release, the same table ``mpdp jobs show`` and ``mpdp query``
print. Nothing else of the job: no party's vector, no share, no row. The chart is inline SVG drawn here (no script,
nothing fetched: the page's CSP holds): one bar per group from 0 to the estimate, a whisker over the interval; a
cell without an estimate (an average or quantile over no row) has no bar and is labelled "no estimate".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from mpdp.messages import learner_pb2
from mpdp_services.common.web import esc

MAX_BARS = 100  # groups drawn per chart (GROUP BY of two 100-bin columns can hold 10⁴; the table lists them all)


@dataclass(frozen=True)
class Bar:
    """One group's cell of one aggregate."""

    group: str
    estimate: float  # NaN: no estimate
    low: float
    high: float
    noise_sd: float


@dataclass(frozen=True)
class Series:
    """One aggregate over the query's groups, in the release's order."""

    aggregate: str
    bars: list[Bar]


def series(model: learner_pb2.LearnerModel) -> list[Series]:
    """Per aggregate (SELECT order) its bars, one per released row; a row's group is its labels joined by " / "
    ("all" without GROUP BY)."""
    q = model.query
    out = []
    for k, name in enumerate(q.aggregates):
        bars = [Bar(" / ".join(r.groups) or "all", r.cells[k].estimate, r.cells[k].low, r.cells[k].high, r.cells[k].noise_sd)
                for r in q.rows if k < len(r.cells)]
        out.append(Series(name, bars))
    return out


def scale(bars: list[Bar]) -> tuple[float, float]:
    """The chart's y range: it holds 0, every finite estimate and every finite interval end."""
    ys = [v for b in bars for v in (b.estimate, b.low, b.high) if math.isfinite(v)]
    lo, hi = min([0.0, *ys]), max([0.0, *ys])
    return (lo, hi) if hi > lo else (lo, lo + 1.0)


def chart(s: Series, element_id: str, width: int = 760, height: int = 280) -> str:
    """One aggregate as an inline SVG bar chart with interval whiskers; ids and data-* attributes name each bar."""
    bars = s.bars[:MAX_BARS]
    left, right, top, bottom = 64, 16, 24, 64
    pw, ph = width - left - right, height - top - bottom
    y0, y1 = scale(bars)

    def py(y: float) -> float:
        return top + ph - ph * (min(max(y, y0), y1) - y0) / (y1 - y0)

    step = pw / max(len(bars), 1)
    bw = max(2.0, step * 0.6)
    title = f"{s.aggregate} per group: estimate (bar) and 95 % interval (whisker)"
    out = [f'<svg id="{esc(element_id)}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
           f'role="img" aria-labelledby="{esc(element_id)}-title" font-size="11" font-family="system-ui,sans-serif">',
           f'<title id="{esc(element_id)}-title">{esc(title)}</title>',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fff" stroke="#c9ced6"/>']
    for i in range(5):
        v = y0 + (y1 - y0) * i / 4
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{py(v):.1f}" y2="{py(v):.1f}" stroke="#eef1f5"/>'
                   f'<text x="{left - 6}" y="{py(v) + 4:.1f}" text-anchor="end" fill="#6a7280">{esc(format(v, ".4g"))}</text>')
    out.append(f'<line x1="{left}" x2="{left + pw}" y1="{py(0.0):.1f}" y2="{py(0.0):.1f}" stroke="#1d2330"/>')
    for i, b in enumerate(bars):
        cx = left + step * (i + 0.5)
        label = f'<text x="{cx:.1f}" y="{top + ph + 14}" text-anchor="end" transform="rotate(-30 {cx:.1f} {top + ph + 14})" fill="#1d2330">{esc(b.group[:40])}</text>'
        if not math.isfinite(b.estimate):
            out.append(f'<text class="none" x="{cx:.1f}" y="{py(0.0) - 4:.1f}" text-anchor="middle" fill="#6a7280">no estimate</text>{label}')
            continue
        ya, yb = sorted((py(0.0), py(b.estimate)))
        tip = f"{b.group}: {b.estimate:.4g} [{b.low:.4g}, {b.high:.4g}] ±{b.noise_sd:.4g}"
        out.append(f'<rect class="bar" x="{cx - bw / 2:.1f}" y="{ya:.1f}" width="{bw:.1f}" height="{max(yb - ya, 0.5):.1f}" fill="#3f6fb5" '
                   f'data-group="{esc(b.group)}" data-estimate="{b.estimate!r}"><title>{esc(tip)}</title></rect>')
        if math.isfinite(b.low) and math.isfinite(b.high):
            wl, wh = py(b.low), py(b.high)
            out.append(f'<path class="interval" d="M{cx:.1f} {wl:.1f}V{wh:.1f}M{cx - bw / 4:.1f} {wl:.1f}H{cx + bw / 4:.1f}M{cx - bw / 4:.1f} {wh:.1f}H{cx + bw / 4:.1f}" '
                       f'stroke="#1d2330" stroke-width="1.2" fill="none" data-low="{b.low!r}" data-high="{b.high!r}"/>')
        out.append(label)
    if len(s.bars) > MAX_BARS:
        out.append(f'<text x="{left + pw - 4}" y="{top + 13}" text-anchor="end" fill="#6a7280">first {MAX_BARS} of {len(s.bars)} groups (all in the table)</text>')
    out.append("</svg>")
    return "".join(out)


def view(store: Any, job_id: str) -> tuple[str, dict[str, float]]:
    """The query's ``Hooks.view`` (``store``: the learner host's): the dashboard's published block (guarantee, trust
    model, parties, Δ₂, budget split, its DCA job), then the released table and a chart per aggregate."""
    from mpdp_services.curator.dashboard import job_link, learner_view, number, published

    q = store.model(job_id)
    if q is None or not q.HasField("query"):
        return learner_view(store, job_id)
    facts = [("parties", esc(", ".join(q.parties))), ("sensitivity Δ₂ (whole vector)", number(q.query.sensitivity)),
             ("budget split", esc(q.query.budget_split) or "—"), ("DCA job", job_link(q.dca_jobs[0]) if q.dca_jobs else "—")]
    return published("Released DP query", q.guarantee, q.trust_model, q.seeded, facts) + render(q), dict(q.seconds)


def render(model: learner_pb2.LearnerModel) -> str:
    """The release's section of the job page: the SQL, the table (estimate [low, high] ± noise sd) and one chart per aggregate."""
    q = model.query
    head = "".join(f"<th>{esc(c)}</th>" for c in [*q.group_columns, *q.aggregates])
    rows = "".join("<tr>" + "".join(f"<td>{esc(g)}</td>" for g in r.groups)
                   + "".join(f"<td class=n>{_cell(c.estimate, c.low, c.high, c.noise_sd)}</td>" for c in r.cells) + "</tr>" for r in q.rows)
    charts = "".join(f"<h3>{esc(s.aggregate)}</h3>{chart(s, f'query-chart-{i}')}" for i, s in enumerate(series(model)))
    return (f'<h2>Released table</h2><p><code id="query-sql">{esc(q.spec.sql)}</code></p>'
            f'<table id="query-table"><tr>{head}</tr>{rows}</table>'
            f"<p class=muted>Each cell: estimate [{q.confidence:.0%} interval] ± the noise's standard deviation ({esc(q.interval_method)}).</p>"
            f"{charts}")


def _cell(est: float, low: float, high: float, sd: float) -> str:
    return esc(f"{_fmt(est)} [{_fmt(low)}, {_fmt(high)}] ±{format(sd, '.4g') if math.isfinite(sd) else '—'}")


def _fmt(v: float) -> str:
    return "no estimate" if not math.isfinite(v) else format(v, ".4g")
