"""The curator's read-only web dashboard: every protocol's jobs, a job's timeline, and what was published under which guarantee.

Pages (server-rendered HTML on the curator's HTTP endpoint, :mod:`mpdp_services.common.web`; no script, nothing
fetched from the network):

* ``/``               jobs of every protocol, newest first, with state and problem (``?protocol=`` filters; refreshes)
* ``/jobs/<job_id>``  one job: its state timeline and per-stage seconds at the curator, and what it published
* ``/releases``       published Pathak models and LMGC local-model sets, with guarantee and trust model
* ``/dca``            DCA jobs: clients expected and included, dropouts, the compute nodes that agreed on the set
* ``/ensembles``      HCB16 ensemble releases and the DCA vote sums they used

What it shows is what ``mpdp jobs`` and the operator RPCs already give an operator, minus the values: the
:class:`~mpdp_services.curator.catalog.Catalog`'s value-free summaries and, from each protocol's store, a
release's parameters and guarantee. Never a released value, a weight, a share, a dataset size (a DCA job's N and
|A| count clients, which its spec and release make public) or a key.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, TypeVar

from mpdp import registry
from mpdp.messages import common_pb2, dca_pb2, hamm2016_pb2, local_release_pb2, operations_pb2, pathak2010_pb2
from mpdp_services.common import web
from mpdp_services.common.jobs import valid_id
from mpdp_services.common.store import MessageStore
from mpdp_services.common.web import esc
from mpdp_services.curator.catalog import Catalog

LIST_LIMIT = 200  # rows on a list page
REFRESH_SECONDS = 10
NAV = [("/", "Jobs"), ("/releases", "Models & releases"), ("/dca", "DCA"), ("/ensembles", "Ensembles")]
T = TypeVar("T")
View = Callable[[Any, str], "tuple[str, dict[str, float]]"]  # (the protocol's store, job id) → (HTML of its release, its stage seconds)


@dataclass
class Dashboard:
    """The pages over one curator's catalog and stores; ``loop``: the event loop that owns the job tables."""

    site: str
    catalog: Catalog
    models: MessageStore[pathak2010_pb2.PublishedModel]
    dca: Any  # services.curator.dca.DcaStore: spec(), release(), consumed(), failure()
    local: MessageStore[local_release_pb2.LocalModelSet]
    ensembles: MessageStore[hamm2016_pb2.EnsembleRelease]
    loop: asyncio.AbstractEventLoop | None = None
    # protocol → (its view of a released job, its store): every protocol whose registry entry names one (Hooks.view)
    views: dict[str, tuple[View, Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, site: str, catalog: Catalog, hostings: dict[str, Any], loop: asyncio.AbstractEventLoop | None = None) -> "Dashboard":
        """The dashboard over the curator's hosted protocols (services/curator/hosting.py): every protocol's jobs on the
        jobs pages; the release pages of the protocols that have one read their stores."""
        def store(name: str) -> Any:
            return hostings[name].store if name in hostings else None
        views = {name: (view, store(name)) for name, view in registry.hooked("view").items()}
        return cls(site, catalog, store("pathak2010"), store("dca"), store("lmgc"), store("hamm2016"), loop, views)

    def install(self, routes: web.Routes | None = None) -> None:
        add = (routes or web.ROUTES).add
        add("/", self.jobs_page)
        add("/jobs/", self.job_page)
        add("/releases", self.releases_page)
        add("/dca", self.dca_page)
        add("/ensembles", self.ensembles_page)

    def _read(self, fn: Callable[[], T]) -> T:
        return web.on_loop(self.loop, fn) if self.loop is not None else fn()

    def _jobs(self, protocol: str = "") -> list[operations_pb2.JobSummary]:
        return self._read(lambda: self.catalog.jobs(protocol, limit=LIST_LIMIT))

    def _doc(self, title: str, body: str, refresh: int = 0) -> web.Response:
        return web.document(title, self.site, NAV, body, refresh)

    # -- pages -------------------------------------------------------------------------------------------
    def jobs_page(self, rest: str, query: dict[str, str]) -> web.Response | None:
        protocols = self._read(self.catalog.protocols)
        protocol = query.get("protocol", "")
        if protocol and protocol not in protocols:
            return None
        jobs = self._jobs(protocol)
        filters = " · ".join([_link("/", "all"), *(_link(f"/?protocol={p}", p) for p in protocols)])
        rows = "".join(
            f"<tr><td>{job_link(j.job_id)}</td><td>{esc(j.protocol)}</td><td>{_state(j)}</td><td>{_problem(j.problem)}</td>"
            f"<td>{_when(j.created_unix)}</td><td class=n>{_duration(j)}</td><td>{'yes' if j.released else ''}</td></tr>"
            for j in jobs)
        table = (f'<table id="jobs"><tr><th>job</th><th>protocol</th><th>state</th><th>problem</th><th>created</th><th>duration</th>'
                 f"<th>published</th></tr>{rows}</table>") if jobs else '<p class=muted id="jobs">No jobs yet.</p>'
        body = (f"<h1>Jobs{' · ' + esc(protocol) if protocol else ''}</h1><p>{filters} <span class=muted>(newest first, at most {LIST_LIMIT}; "
                f"this page refreshes every {REFRESH_SECONDS} s)</span></p>{table}")
        return self._doc("Jobs", body, REFRESH_SECONDS)

    def job_page(self, rest: str, query: dict[str, str]) -> web.Response | None:
        if not valid_id(rest):
            return None
        job = self._read(lambda: self.catalog.job(rest))
        if job is None:
            return None
        facts = [("protocol", esc(job.protocol)), ("state", _state(job)), ("problem", _problem(job.problem, "none")),
                 ("created", _when(job.created_unix)), ("ended", _when(job.ended_unix) if job.ended_unix else "running"),
                 ("duration", _duration(job)), ("published", "yes" if job.released else "no")]
        if job.detail:
            facts.append(("detail", esc(job.detail)))
        release, stages = self._release(job)
        stages = dict(job.stage_seconds) or stages
        first: dict[str, int] = {}  # stages named after states in the order the job passed them, other stage names (stage1, …) sorted
        for i, e in enumerate(job.events):
            first.setdefault(e.state, i)
        stages = dict(sorted(stages.items(), key=lambda kv: (first.get(kv[0], len(first)), kv[0])))
        body = (f"<h1>Job {esc(job.job_id)}</h1>{_dl(facts)}<h2>State timeline at the curator</h2>{_timeline(job)}"
                f"<h2>Per-stage times</h2>{_stage_table(stages)}{release}")
        return self._doc(f"Job {job.job_id}", body, 0 if job.terminal else REFRESH_SECONDS)

    def releases_page(self, rest: str, query: dict[str, str]) -> web.Response:
        rows = []
        for j in self._jobs("pathak2010"):
            m = self.models.get(j.job_id) if j.released else None
            if m is not None:
                rows.append(f"<tr><td>{job_link(j.job_id)}</td><td class=n>{m.parties}</td><td class=n>{m.dimension}</td><td>{_enum(common_pb2.NoiseMode, m.mode)}</td>"
                            f"<td>{_enum(pathak2010_pb2.PathakNoise, m.noise)}</td>{_guarantee_cells(m.guarantee)}<td>{esc(m.trust_model)}</td></tr>")
        pathak = _table(["job", "parties K", "d", "mode", "noise", "mechanism", "ε", "δ", "guarantee", "trust model"], rows, "models")
        rows = []
        for j in self._jobs("lmgc"):
            s = self.local.get(j.job_id) if j.released else None
            if s is not None:
                parties = ", ".join(esc(r.party) for r in s.releases)
                mech = _first(r.guarantee.mechanism for r in s.releases)
                eps = ", ".join(sorted({_num(r.guarantee.epsilon) for r in s.releases}))
                rows.append(f"<tr><td>{job_link(j.job_id)}</td><td>{parties}</td><td>{esc(mech)}</td><td class=n>{eps}</td><td>{esc(s.aggregate_statement)}</td></tr>")
        local = _table(["job", "parties", "mechanism", "ε (each)", "aggregate"], rows, "local")
        body = (f"<h1>Published models and releases</h1><h2>Pathak 2010 models</h2>{pathak}<h2>LMGC local-model sets</h2>{local}"
                '<p class=muted>DCA sums: <a href="/dca">DCA</a>; ensembles: <a href="/ensembles">Ensembles</a>. '
                "Values, weights and shares are never shown here (fetch a release through the operator RPCs).</p>")
        return self._doc("Models & releases", body)

    def dca_page(self, rest: str, query: dict[str, str]) -> web.Response:
        rows = []
        for j in self._jobs("dca"):
            spec, rel, consumed = self.dca.spec(j.job_id), self.dca.release(j.job_id), self.dca.consumed(j.job_id)
            n = spec.clients if spec is not None else (rel.clients_expected if rel is not None else 0)
            included = rel.clients_included if rel is not None else (consumed or {}).get("clients_included")
            nodes = ", ".join(esc(x) for x in spec.compute_nodes) if spec is not None else ""
            kind = "secure sum" if spec is not None and spec.secure_sum else (_enum(dca_pb2.NoiseKind, spec.noise) if spec is not None else "")
            rows.append(f"<tr><td>{job_link(j.job_id)}</td><td>{_state(j)}</td><td>{_problem(j.problem)}</td><td>{esc(spec.purpose) if spec else ''}</td>"
                        f"<td>{kind}</td><td class=n>{n or ''}</td><td class=n>{spec.max_missing if spec else ''}</td><td class=n>{_opt(included)}</td>"
                        f"<td class=n>{_opt(None if included is None or not n else n - int(included))}</td><td>{nodes}</td>"
                        f"<td class=n>{_num(rel.epsilon) if rel else ''}</td><td class=n>{_num(rel.delta) if rel else ''}</td></tr>")
        table = _table(["job", "state", "problem", "purpose", "noise", "clients N", "max missing T", "included |A|", "dropouts", "compute nodes", "ε", "δ"], rows, "dca")
        body = ("<h1>DCA jobs</h1><p class=muted>Included |A|: the clients whose shares every compute node received and agreed on; "
                f"dropouts = N − |A| (at most T). A secure sum's values never leave the curator.</p>{table}")
        return self._doc("DCA", body)

    def ensembles_page(self, rest: str, query: dict[str, str]) -> web.Response:
        rows = []
        for j in self._jobs("hamm2016"):
            e = self.ensembles.get(j.job_id) if j.released else None
            if e is None:
                rows.append(f"<tr><td>{job_link(j.job_id)}</td><td>{_state(j)}</td><td></td><td></td>{_guarantee_cells(None)}<td></td><td></td></tr>")
                continue
            rows.append(f"<tr><td>{job_link(j.job_id)}</td><td>{_state(j)}</td><td>{esc(e.method)}</td><td class=n>{e.parties_included}</td>"
                        f"{_guarantee_cells(e.guarantee)}<td>{esc(e.trust_model)}</td><td>{job_link(e.dca_job_id) if e.dca_job_id else ''}</td></tr>")
        table = _table(["job", "state", "method", "parties M", "mechanism", "ε", "δ", "guarantee", "trust model", "vote sum (DCA)"], rows, "ensembles")
        return self._doc("Ensembles", f"<h1>Ensemble releases (HCB16)</h1>{table}")

    # -- a job's release -------------------------------------------------------------------------------
    def _release(self, job: operations_pb2.JobSummary) -> tuple[str, dict[str, float]]:
        """(HTML of what the job published, its per-stage seconds if the release records them)."""
        if job.protocol == "pathak2010":
            m = self.models.get(job.job_id)
            if m is None:
                return "", {}
            facts = [("parties K", str(m.parties)), ("dimension d", str(m.dimension)), ("dataset", esc(m.dataset)),
                     ("mode", _enum(common_pb2.NoiseMode, m.mode)), ("noise", _enum(pathak2010_pb2.PathakNoise, m.noise)), ("λ", _num(getattr(m, "lambda")))]
            if m.colluders:
                facts.append(("colluders t", str(m.colluders)))
            if m.paillier_ops:
                facts.append(("Paillier operations", esc(", ".join(f"{k} {v}" for k, v in sorted(m.paillier_ops.items())))))
            return published("Published model", m.guarantee, m.trust_model, m.seeded, facts), dict(m.stage_seconds)
        if job.protocol == "dca":
            return self._dca(job.job_id), {}
        if job.protocol == "lmgc":
            s = self.local.get(job.job_id)
            if s is None:
                return "", {}
            rows = [f"<tr><td>{esc(r.party)}</td><td>{esc(r.mode)}</td>{_guarantee_cells(r.guarantee)}</tr>" for r in s.releases]
            return (f"<h2>Published local models</h2>{_seeded(s.seeded)}{_table(['party', 'mode', 'mechanism', 'ε', 'δ', 'guarantee'], rows, 'release')}"
                    f"<p>Aggregate: {esc(s.aggregate_statement)}</p>"), {}
        if job.protocol == "hamm2016":
            e = self.ensembles.get(job.job_id)
            if e is None:
                return "", {}
            facts = [("method", esc(e.method)), ("parties included M", str(e.parties_included)), ("λ", _num(e.lam)), ("sensitivity Δ₂", _num(e.sensitivity)),
                     ("vote sum", job_link(e.dca_job_id) if e.dca_job_id else "—")]
            return published("Published ensemble", e.guarantee, e.trust_model, e.seeded, facts), dict(e.stage_seconds)
        if job.protocol in self.views:
            view, store = self.views[job.protocol]
            return view(store, job.job_id)
        return "", {}

    def _dca(self, job_id: str) -> str:
        spec, rel, consumed, failure = self.dca.spec(job_id), self.dca.release(job_id), self.dca.consumed(job_id), self.dca.failure(job_id)
        out = []
        if spec is not None:
            facts = [("purpose", esc(spec.purpose) or "—"), ("clients expected N", str(spec.clients)), ("max missing T", str(spec.max_missing)),
                     ("dimension d", str(spec.dimension)), ("compute nodes", esc(", ".join(spec.compute_nodes))),
                     ("noise", "none: secure sum (consumed by the curator inside a DP mechanism)" if spec.secure_sum else _enum(dca_pb2.NoiseKind, spec.noise))]
            out.append(f"<h2>Job spec</h2>{_dl(facts)}")
        included = rel.clients_included if rel is not None else (consumed or {}).get("clients_included")
        if included is not None:
            n = spec.clients if spec is not None else rel.clients_expected if rel is not None else 0
            nodes = rel.compute_nodes if rel is not None else (consumed or {}).get("compute_nodes", 0)
            facts = [("compute nodes agreeing", str(nodes)), ("clients included |A|", str(included)), ("dropouts N − |A|", str(n - int(included)) if n else "—")]
            if rel is not None and rel.agreed_set_digest:
                facts.append(("agreed set digest", f"<code>{esc(rel.agreed_set_digest.hex()[:32])}…</code>"))
            out.append(f"<h2>Node agreement</h2>{_dl(facts)}")
        if rel is not None:
            facts = [("mode", _enum(common_pb2.NoiseMode, rel.mode)), ("noise", _enum(dca_pb2.NoiseKind, rel.noise)), ("σ (central)", _num(rel.sigma_std)),
                     ("σ per client", _num(rel.sigma_client))]
            if rel.sigma_node:  # a validated job: the compute nodes add the noise
                facts.append(("σ per compute node", f"{_num(rel.sigma_node)} (guarantee counts M − c, c = {rel.colluders})"))
            if rel.rho:
                facts.append(("ρ (zCDP)", _num(rel.rho)))
            out.append(published("Released DP sum", rel.guarantee, rel.trust_model, rel.seeded, facts))
        if failure is not None:
            out.append(f"<h2>Failure</h2>{_dl([('problem', _problem(int(failure.get('problem', 0)))), ('detail', esc(str(failure.get('detail', ''))[:240]))])}")
        return "".join(out)


# -- HTML pieces -------------------------------------------------------------------------------------------
def _link(href: str, label: str) -> str:
    return f'<a href="{esc(href)}">{esc(label)}</a>'


def job_link(job_id: str) -> str:
    return _link(f"/jobs/{job_id}", job_id) if valid_id(job_id) else esc(job_id)


def _state(job: operations_pb2.JobSummary) -> str:
    cls = "bad" if job.problem or job.state in ("FAILED", "ABORTED") else "ok" if job.terminal else "run"
    return f'<span class="s {cls}">{esc(job.state)}</span>'


def _problem(problem: int, none: str = "") -> str:
    return none if not problem else f'<span class="s bad">{_enum(common_pb2.Problem, problem)}</span>'


def _enum(enum: Any, value: int) -> str:
    try:
        return esc(enum.Name(value))
    except ValueError:
        return esc(value)


def _num(x: float) -> str:
    return esc(format(x, ".4g"))


def _opt(x: object) -> str:
    return "" if x is None else esc(x)


def _first(items: Any) -> str:
    return next(iter(items), "")


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") if t > 0 else "—"


def _duration(job: operations_pb2.JobSummary) -> str:
    if not job.created_unix or not job.ended_unix:
        return ""
    return f"{max(0.0, job.ended_unix - job.created_unix):.2f} s"


def _dl(facts: list[tuple[str, str]]) -> str:
    """A definition list; the values are already-escaped HTML."""
    return "<dl>" + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>"


def _table(headers: list[str], rows: list[str], ident: str) -> str:
    if not rows:
        return f'<p class=muted id="{esc(ident)}">None yet.</p>'
    return f'<table id="{esc(ident)}"><tr>' + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr>" + "".join(rows) + "</table>"


def _guarantee_cells(g: common_pb2.Guarantee | None) -> str:
    if g is None:
        return "<td></td><td></td><td></td><td></td>"
    return f"<td>{esc(g.mechanism)}</td><td class=n>{_num(g.epsilon)}</td><td class=n>{_num(g.delta)}</td><td>{esc(g.statement)}</td>"


def _seeded(seeded: bool) -> str:
    return '<p class="warn">Seeded (test mode): a simulation seed fixed the noise, so this release is NOT private.</p>' if seeded else ""


def published(title: str, g: common_pb2.Guarantee, trust_model: str, seeded: bool, facts: list[tuple[str, str]]) -> str:
    guarantee = [("guarantee", esc(g.statement) or "—"), ("mechanism", esc(g.mechanism) or "—"), ("ε", _num(g.epsilon)), ("δ", _num(g.delta)),
                 ("sensitivity", f"{_num(g.sensitivity)} ({esc(g.norm)})" if g.norm else _num(g.sensitivity)), ("trust model", esc(trust_model) or "—")]
    return f'<h2>{esc(title)}</h2>{_seeded(seeded)}<div id="guarantee">{_dl(guarantee + facts)}</div>'


PALETTE = ("#3f6fb5", "#5a9b6e", "#b5833f", "#8a5ab5", "#b55a6f", "#3f9bb5", "#7d8a3f", "#6b6b6b")


def _timeline(job: operations_pb2.JobSummary) -> str:
    """The state log as one bar (a segment per state, its width ∝ its time) and a table of the states with their times."""
    events = list(job.events)
    if not events:
        return '<p class=muted id="timeline">The curator holds no state log for this job (it ran before the curator\'s last restart).</p>'
    end = job.ended_unix or max(e.at_unix for e in events)
    spans = [(e.state, e.at_unix, (events[i + 1].at_unix if i + 1 < len(events) else end)) for i, e in enumerate(events)]
    total = max(sum(max(0.0, b - a) for _, a, b in spans), 1e-9)
    segments = "".join(
        f'<div style="flex:{max(0.0, b - a) / total * 100:.3f} 0 auto;min-width:4px;background:{PALETTE[i % len(PALETTE)]}" title="{esc(state)}: {b - a:.3f} s">'
        f"{esc(state)}</div>" for i, (state, a, b) in enumerate(spans))
    rows = "".join(f"<tr><td>{_when(e.at_unix)}</td><td class=n>+{e.at_unix - events[0].at_unix:.3f} s</td><td>{esc(e.state)}</td>"
                   f"<td>{_problem(e.problem)}</td></tr>" for e in events)
    return (f'<div class="tl" id="timeline">{segments}</div>'
            f'<table id="events"><tr><th>at</th><th>since start</th><th>state</th><th>problem</th></tr>{rows}</table>')


def _stage_table(stages: dict[str, float]) -> str:
    if not stages:
        return '<p class=muted id="stages">No per-stage times recorded.</p>'
    top = max(max(stages.values()), 1e-9)
    rows = "".join(f'<tr><td>{esc(name)}</td><td class=n>{secs:.3f} s</td><td><span class="bar" style="width:{secs / top * 300:.0f}px"></span></td></tr>'
                   for name, secs in stages.items())
    return f'<table id="stages"><tr><th>stage</th><th>seconds</th><th></th></tr>{rows}</table>'


def learner_view(store: Any, job_id: str) -> tuple[str, dict[str, float]]:
    """A learner job's release (``Hooks.view`` of dpgd, regression and query; ``store``: the learner host's): its
    guarantee, parties and DCA rounds, never a value."""
    m = store.model(job_id)
    if m is None:
        return "", {}
    facts = [("parties", esc(", ".join(m.parties))), ("DCA rounds", ", ".join(job_link(j) for j in m.dca_jobs) or "—")]
    return published("Published release", m.guarantee, m.trust_model, m.seeded, facts), dict(m.seconds)
