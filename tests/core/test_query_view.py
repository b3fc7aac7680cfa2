"""A released DP query on the curator's dashboard (services/curator/query_view.py) and in `mpdp jobs show`'s table,
without a federation: the chart's data is the release's cells, each bar is drawn to scale with its interval, and the
job page shows the table and the charts with every operator-chosen string escaped."""

from __future__ import annotations

import html.parser
import math
import re
from pathlib import Path

from mpdp.messages import common_pb2, learner_pb2, operations_pb2, query_pb2
from mpdp_services.common import web
from mpdp_services.common.store import MessageStore
from mpdp_services.curator import query_view
from mpdp_services.curator.dashboard import Dashboard
from mpdp_services.curator.dca import DcaStore
from mpdp_services.curator.learner import LearnerStore
from mpdp_services.operator.query import text_table

HOSTILE = '"><script>alert(1)</script><a href="https://evil.example/">'
ROWS = [  # (groups, [(estimate, low, high, sd) per aggregate]): a count and an average per group
    (["Male", ">50K"], [(6660.0, 6630.0, 6690.0, 11.1), (44.75, 44.09, 45.42, 0.1675)]),
    (["Female", HOSTILE], [(-3.5, -33.0, 26.0, 11.1), (math.nan, 17.0, 90.0, math.nan)]),
    (["Female", "<=50K"], [(9592.0, 9562.0, 9622.0, 11.1), (36.46, 36.03, 36.9, 0.1124)]),
]


def _model(job_id: str = "qy-1") -> learner_pb2.LearnerModel:
    q = query_pb2.QueryModel(spec=query_pb2.QueryJobSpec(sql="SELECT sex, income, COUNT(*) AS n, AVG(age) AS mean_age FROM adult GROUP BY sex, income " + HOSTILE),
                             group_columns=["sex", "income"], aggregates=["n", "mean_age"], confidence=0.95, interval_method="sub-Gaussian tail",
                             budget_split="count: Δ₂ = 1.414, ρ share 0.5; sum age: Δ₂ = 1.414, ρ share 0.5", sensitivity=2.0)
    for groups, cells in ROWS:
        q.rows.add(groups=groups, cells=[query_pb2.QueryCell(estimate=e, low=lo, high=hi, noise_sd=sd) for e, lo, hi, sd in cells])
    return learner_pb2.LearnerModel(job_id=job_id, protocol="query", parties=["party-1", "party-2", "party-3"], dca_jobs=["dca-q1"],
                                    guarantee=common_pb2.Guarantee(mechanism="distributed discrete Gaussian", epsilon=1.0, delta=1e-6, statement="(1, 1e-6)-DP"),
                                    trust_model="at least one honest compute node", query=q)


def test_the_series_are_the_released_cells_in_order():
    s = query_view.series(_model())
    assert [x.aggregate for x in s] == ["n", "mean_age"]
    for k, series in enumerate(s):
        assert [b.group for b in series.bars] == [" / ".join(g) for g, _ in ROWS]
        for b, (_, cells) in zip(series.bars, ROWS):
            e, lo, hi, sd = cells[k]
            assert (b.low, b.high) == (lo, hi) and (b.estimate == e or (math.isnan(b.estimate) and math.isnan(e)))


def _bars(svg: str) -> list[dict[str, float]]:
    out = []
    for m in re.finditer(r'<rect class="bar" x="[^"]+" y="([^"]+)" width="[^"]+" height="([^"]+)"[^>]*data-estimate="([^"]+)"', svg):
        out.append({"y": float(m.group(1)), "h": float(m.group(2)), "estimate": float(m.group(3))})
    return out


def test_each_bar_is_drawn_to_scale_from_zero_with_its_interval():
    counts = query_view.series(_model())[0]
    svg = query_view.chart(counts, "c")
    bars = _bars(svg)
    assert [b["estimate"] for b in bars] == [6660.0, -3.5, 9592.0]
    lo, hi = query_view.scale(counts.bars)
    assert lo <= -33.0 and hi >= 9622.0  # every interval end inside the chart
    per_unit = bars[2]["h"] / 9592.0
    assert abs(bars[0]["h"] - 6660.0 * per_unit) < 0.2  # heights proportional to the estimates
    zero = bars[0]["y"] + bars[0]["h"]  # a positive bar ends on the zero line, a negative one starts there
    assert abs(bars[1]["y"] - zero) < 0.05 and abs(bars[2]["y"] + bars[2]["h"] - zero) < 0.05
    whiskers = re.findall(r'class="interval"[^>]*data-low="([^"]+)" data-high="([^"]+)"', svg)
    assert [(float(a), float(b)) for a, b in whiskers] == [(6630.0, 6690.0), (-33.0, 26.0), (9562.0, 9622.0)]


def test_a_cell_without_an_estimate_has_no_bar():
    means = query_view.series(_model())[1]
    svg = query_view.chart(means, "m")
    assert [b["estimate"] for b in _bars(svg)] == [44.75, 36.46]
    assert svg.count("no estimate") == 1 and "nan" not in svg.lower().replace("no estimate", "")


class _Tags(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.urls += [v or "" for k, v in attrs if k in ("href", "src", "action", "srcset", "data", "formaction", "poster")]


class _Catalog:
    def __init__(self, job: operations_pb2.JobSummary) -> None:
        self._job = job

    def protocols(self) -> list[str]:
        return ["query"]

    def jobs(self, protocol: str = "", live_only: bool = False, limit: int = 100) -> list[operations_pb2.JobSummary]:
        return [self._job]

    def job(self, job_id: str) -> operations_pb2.JobSummary | None:
        return self._job if job_id == self._job.job_id else None


def test_the_job_page_shows_the_released_table_and_its_charts_escaped(tmp_path: Path):
    learners = LearnerStore(tmp_path / "learners")
    learners.put_model(_model())
    job = operations_pb2.JobSummary(job_id="qy-1", protocol="query", state="DONE", terminal=True, created_unix=1.7e9, ended_unix=1.7e9 + 4, released=True)
    empty = MessageStore(tmp_path / "m", learner_pb2.LearnerModel)
    d = Dashboard("curator", _Catalog(job), empty, DcaStore(tmp_path / "dca"), empty, empty, None,  # type: ignore[arg-type]
                  {"query": (query_view.view, learners)})  # the query's Hooks.view over the learner host's store
    routes = web.Routes()
    d.install(routes)
    found = routes.find("/jobs/qy-1")
    assert found is not None
    r = found[0](found[1], {})
    assert r is not None and r.status == 200
    body = r.body.decode()
    assert 'id="query-table"' in body and 'id="query-chart-0"' in body and 'id="query-chart-1"' in body
    assert "6660 [6630, 6690] ±11.1" in body and "(1, 1e-6)-DP" in body and 'href="/jobs/dca-q1"' in body
    assert "no estimate [17, 90] ±—" in body  # an average over no row: its interval is the bounds
    assert len(_bars(body)) == 5  # 3 counts, 2 means (one mean has no estimate)
    parser = _Tags()
    parser.feed(body)
    assert "script" not in parser.tags and all(u.startswith("/") and not u.startswith("//") for u in parser.urls)
    assert "<script>" not in body and "&lt;script&gt;" in body


def test_jobs_show_prints_the_same_table():
    lines = text_table(_model()).splitlines()
    assert lines[0].split() == ["sex", "income", "n", "mean_age"]
    assert "6660 [6630, 6690] ±11.1" in lines[1] and "44.75 [44.09, 45.42] ±0.1675" in lines[1]
    assert "nan [17, 90] ±nan" in lines[2] and lines[3].startswith("Female")


def test_a_chart_draws_at_most_max_bars_and_says_so():
    many = query_view.Series("n", [query_view.Bar(f"g{i}", float(i), i - 1.0, i + 1.0, 1.0) for i in range(query_view.MAX_BARS + 50)])
    svg = query_view.chart(many, "many")
    assert len(_bars(svg)) == query_view.MAX_BARS and f"first {query_view.MAX_BARS} of {query_view.MAX_BARS + 50} groups" in svg
