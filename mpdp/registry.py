"""Every protocol mpdp runs, declared once.

An entry names the protocol as the curator's job catalog, the job host and the ledgers know it; the prefix of its job
ids; the field of the job host's ``JobSubmission`` and ``JobRelease`` that carries its spec and its release; the
``mpdp train MODEL`` subcommand that runs it (None: not a model, or not trained by ``train``); its page in
``docs/protocols/``; the role machines whose transition tables that page shows; and its :class:`Hooks`, where the
services find the code that runs it. The curator's and the party's servers, the job host
(``services/curator/operations.py``), the catalog, the CLI (its commands, ``mpdp train``'s models, ``mpdp jobs``),
``mpdp model export``, ``tools/render_tables.py`` and the layout tests iterate over :data:`PROTOCOLS`; adding a
protocol starts here (``docs/adding-a-protocol.md``).
"""

from __future__ import annotations

import importlib
import secrets
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Hooks:
    """Where the services find a protocol's code: each a path ``"module:attribute"``, imported only when a service
    asks for it (:func:`hook`), so the core never imports the services (tests/core/test_import_cycles.py)."""

    curator: str  # the curator's factory of its host: (curator site) → ``services.curator.hosting.Hosting``
    party: str | None = None  # the party's factory of its servicer: (party site) → ``services.party.flows.Flow``
    contribution: str | None = None  # a DCA-based protocol's party rounds: {statistic: handler} (services/party/contribution.py)
    learner: str | None = None  # a multi-round learner the curator drives: its ``services.curator.learner.Learner``
    export: str | None = None  # its release → (document, arrays) for `mpdp model export` (services/operator/export.py)
    show: str | None = None  # its release → the text `mpdp jobs show` prints under the job (None: nothing more)
    view: str | None = None  # the curator dashboard's view of a released job: (its store, job id) → (HTML, stage seconds)
    predict: str | None = None  # `mpdp predict --job`: (endpoints, job id, data file, format, **options) → the prediction's summary
    trainer: str | None = None  # the `mpdp train MODEL` click command (only with a model)
    command: tuple[str, str, str] | None = None  # a top-level `mpdp` command of its own: (name, "module:attribute", one-line help)


@dataclass(frozen=True)
class Protocol:
    name: str  # the catalog's, the job host's and `mpdp jobs ls --protocol`'s name
    title: str  # one line for people
    prefix: str  # of its job ids
    submission: str  # its field in JobSubmission / JobRelease
    model: str | None  # `mpdp train MODEL` subcommand; None when `train` does not run it
    docs: str  # its page under docs/protocols/
    tables: tuple[str, ...]  # the role machines (module.Class) whose tables its page shows
    hooks: Hooks  # where the services find its code
    stages: tuple[str, ...] = ()  # the curator's stages of its jobs, in the order a job goes through them ((): its states')


_C, _P, _O = "mpdp_services.curator.", "mpdp_services.party.", "mpdp_services.operator."
_LEARNER = _C + "learner:hosting"  # dpgd, regression and query: jobs the curator's learner host drives over the DCA
_CONTRIBUTOR = _P + "contribution:flow"  # their party side: the one contribution servicer (services/party/contribution.py)
_VIEW = _C + "dashboard:learner_view"  # their release on the curator's dashboard (a LearnerModel's guarantee and rounds)

PROTOCOLS: tuple[Protocol, ...] = (
    Protocol("pathak2010", "Pathak, Rane & Raj 2010: a DP logistic regression from the parties' local models", "pk-", "pathak2010", "logreg",
             "pathak2010.md", ("mpdp.pathak2010.party.PartyMachine", "mpdp.pathak2010.curator.CuratorMachine"),
             Hooks(_C + "server:hosting", party=_P + "pathak2010:flow", export=_O + "export:pathak", predict="mpdp_services.cli.jobs:predict_pathak",
                   trainer="mpdp_services.cli.train:logreg")),
    Protocol("dca", "Heikkilä et al. 2017: a DP sum of the clients' vectors (Distributed Compute Algorithm)", "dca-", "dca", None,
             "dca.md", ("mpdp.dca.client.ClientMachine", "mpdp.dca.compute_node.ComputeNodeMachine", "mpdp.dca.aggregator.AggregatorMachine"),
             Hooks(_C + "dca:hosting", export=_O + "export:dca",
                   command=("dca", "mpdp_services.cli.dca:dca", "Distributed Compute Algorithm (Heikkilä et al. 2017): secret-shared Gaussian sums over compute nodes."))),
    Protocol("lmgc", "Pathak & Raj: each party's DP large-margin Gaussian classifier and their average", "lm-", "lmgc", "lmgc",
             "local-release.md", ("mpdp.local_release.LocalReleaseCurator", "mpdp.local_release.LocalReleaseParty"),
             Hooks(_C + "local:hosting", party=_P + "local:flow", export=_O + "export:lmgc", predict=_O + "local:predict_local",
                   trainer="mpdp_services.cli.train:lmgc")),
    Protocol("hamm2016", "Hamm, Cao & Belkin 2016: a DP classifier from the parties' votes on public auxiliary data", "hm-", "hamm2016", "hamm2016",
             "hamm2016.md", ("mpdp.hamm2016.job.CuratorRole",),
             Hooks(_C + "ensemble:hosting", party=_P + "ensemble:flow", export=_O + "export:ensemble", predict=_O + "ensemble:predict_ensemble",
                   trainer="mpdp_services.cli.train:hamm2016")),
    Protocol("dpgd", "DP gradient descent over the DCA (binary or softmax logistic regression)", "dp-", "learner", "dp-gd",
             "dpgd.md", ("mpdp.dpgd.role.DpgdRole",),
             Hooks(_LEARNER, party=_CONTRIBUTOR, view=_VIEW, contribution=_P + "contribution:DPGD_ROUNDS", learner=_C + "learner:DPGD",
                   export=_O + "export:dpgd", predict="mpdp_services.cli.jobs:predict_dpgd", trainer="mpdp_services.cli.train:dpgd")),
    Protocol("regression", "DP Bayesian linear regression with projection over the DCA", "rg-", "learner", "regression",
             "regression.md", ("mpdp.regression.role.RegressionRole", "mpdp.contribution.ContributionRound", "mpdp.contribution.Contributor"),
             Hooks(_LEARNER, party=_CONTRIBUTOR, view=_VIEW, contribution=_P + "contribution:REGRESSION_ROUNDS", learner=_C + "learner:REGRESSION",
                   export=_O + "export:regression", predict=_O + "regression:predict_regression", trainer="mpdp_services.cli.regress:regress",
                   command=("regress", "mpdp_services.cli.regress:regress",
                            "Fit DP Bayesian linear regression with projection over the parties' data (Heikkilä et al. 2017, Alg. 2).")),
             ("setup", "std_round", "grid_search", "main_round", "posterior")),
    Protocol("query", "DP SQL analytics over the DCA: counts, sums, means and quantiles with intervals", "qy-", "learner", None,
             "query.md", ("mpdp.query.role.QueryRole",),
             Hooks(_LEARNER, party=_CONTRIBUTOR, view=_C + "query_view:view", contribution=_P + "query:ROUNDS", learner=_C + "query:LEARNER", export=_O + "query:export",
                   show=_O + "query:shown",
                   command=("query", "mpdp_services.cli.query:query",
                            "Answer one SQL query across the parties with DP: counts, sums, means, quantiles, each with a 95 % interval."))),
)

BY_NAME: dict[str, Protocol] = {p.name: p for p in PROTOCOLS}


def of_job(job_id: str) -> Protocol | None:
    """The protocol whose job ids start like ``job_id`` (None: no protocol's)."""
    return next((p for p in PROTOCOLS if job_id.startswith(p.prefix)), None)


def prefix(name: str) -> str:
    """The prefix of ``name``'s job ids (the one place they are written)."""
    return BY_NAME[name].prefix


def new_job_id(name: str) -> str:
    """A fresh id for a job of protocol ``name``: its prefix and 48 random bits (CSPRNG), e.g. ``pk-3f9c0a1b2c4d``."""
    return prefix(name) + secrets.token_hex(6)


def seeded_job_id(name: str, seed: bytes) -> str:
    """The id of a seeded (test-mode, non-private) job of protocol ``name`` run on simulation seed ``seed``: its
    prefix and 48 bits of the seed's SHA-256, so the in-process federation and a live one name the same seeded job
    alike (:meth:`mpdp.Federation.connect` with ``seed``)."""
    import hashlib

    return prefix(name) + hashlib.sha256(seed).hexdigest()[:12]


def round_dca_job_id(job_id: str, r: int) -> str:
    """The DCA job of round ``r`` of a job that runs its rounds as DCA jobs (a learner's round, an ensemble's vote
    sum): ``dca-<job>.r<r>``. The in-memory drivers name every round so; a federation's curator names a seeded job's
    rounds so (its seeded noise streams are keyed by the DCA job's id) and an unseeded job's with fresh ids."""
    return prefix("dca") + f"{job_id}.r{r}"


def models() -> dict[str, Protocol]:
    """`mpdp train MODEL` subcommand → protocol."""
    return {p.model: p for p in PROTOCOLS if p.model is not None}


def pages() -> dict[str, tuple[str, ...]]:
    """docs/protocols page → the role machines whose tables it shows (``tools/render_tables.py``)."""
    out: dict[str, tuple[str, ...]] = {}
    for p in PROTOCOLS:
        out[p.docs] = out.get(p.docs, ()) + p.tables
    return out


def hook(path: str) -> Any:
    """The object a hook names (``"package.module:attribute"``), its module imported now."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


def hooked(kind: str) -> dict[str, Any]:
    """Protocol name → the object its ``kind`` hook names, for every protocol that has one (in registry order)."""
    return {p.name: hook(getattr(p.hooks, kind)) for p in PROTOCOLS if getattr(p.hooks, kind) is not None}
