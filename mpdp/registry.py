"""Every protocol mpdp runs, declared once.

An entry names the protocol as the curator's job catalog, the job host and the ledgers know it; the prefix of its job
ids; the field of the job host's ``JobSubmission`` and ``JobRelease`` that carries its spec and its release; the
``mpdp train MODEL`` subcommand that runs it (None: not a model, or not trained by ``train``); its page in
``docs/protocols/``; and the role machines whose transition tables that page shows. The job host
(``services/curator/operations.py``), the catalog, the CLI's model names, ``tools/render_tables.py`` and the layout
tests iterate over :data:`PROTOCOLS`; adding a protocol starts here (``docs/adding-a-protocol.md``).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass


@dataclass(frozen=True)
class Protocol:
    name: str  # the catalog's, the job host's and `mpdp jobs ls --protocol`'s name
    title: str  # one line for people
    prefix: str  # of its job ids
    submission: str  # its field in JobSubmission / JobRelease
    model: str | None  # `mpdp train MODEL` subcommand; None when `train` does not run it
    docs: str  # its page under docs/protocols/
    tables: tuple[str, ...]  # the role machines (module.Class) whose tables its page shows
    stages: tuple[str, ...] = ()  # the curator's stages of its jobs, in the order a job goes through them ((): its states')


PROTOCOLS: tuple[Protocol, ...] = (
    Protocol("pathak2010", "Pathak, Rane & Raj 2010: a DP logistic regression from the parties' local models", "pk-", "pathak2010", "logreg",
             "pathak2010.md", ("mpdp.pathak2010.party.PartyMachine", "mpdp.pathak2010.curator.CuratorMachine")),
    Protocol("dca", "Heikkilä et al. 2017: a DP sum of the clients' vectors (Distributed Compute Algorithm)", "dca-", "dca", None,
             "dca.md", ("mpdp.dca.client.ClientMachine", "mpdp.dca.compute_node.ComputeNodeMachine", "mpdp.dca.aggregator.AggregatorMachine")),
    Protocol("lmgc", "Pathak & Raj: each party's DP large-margin Gaussian classifier and their average", "lm-", "lmgc", "lmgc",
             "local-release.md", ("mpdp.local_release.LocalReleaseCurator", "mpdp.local_release.LocalReleaseParty")),
    Protocol("hamm2016", "Hamm, Cao & Belkin 2016: a DP classifier from the parties' votes on public auxiliary data", "hm-", "hamm2016", "hamm2016",
             "hamm2016.md", ("mpdp.hamm2016.job.CuratorRole",)),
    Protocol("dpgd", "DP gradient descent over the DCA (binary or softmax logistic regression)", "dp-", "learner", "dp-gd",
             "dpgd.md", ("mpdp.dpgd.role.DpgdRole",)),
    Protocol("regression", "DP Bayesian linear regression with projection over the DCA", "rg-", "learner", "regression",
             "regression.md", ("mpdp.regression.role.RegressionRole", "mpdp.contribution.ContributionRound", "mpdp.contribution.Contributor"),
             ("setup", "std_round", "grid_search", "main_round", "posterior")),
    Protocol("query", "DP SQL analytics over the DCA: counts, sums, means and quantiles with intervals", "qy-", "learner", None,
             "query.md", ("mpdp.query.role.QueryRole",)),
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
