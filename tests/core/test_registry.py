"""The protocol registry (mpdp.registry) is the one list: the job host's messages, the curator's catalog and the
docs pages agree with it."""

from __future__ import annotations

from pathlib import Path

from mpdp import registry
from mpdp.messages import operations_pb2 as ops

ROOT = Path(__file__).resolve().parents[2]


def test_every_protocol_has_a_submission_and_a_release_field_and_a_docs_page():
    submission = {f.name for f in ops.JobSubmission.DESCRIPTOR.oneofs_by_name["spec"].fields}
    release = {f.name for f in ops.JobRelease.DESCRIPTOR.oneofs_by_name["release"].fields}
    for p in registry.PROTOCOLS:
        assert p.submission in submission and p.submission in release, p.name
        assert (ROOT / "docs" / "protocols" / p.docs).exists(), p.docs
    assert submission == {p.submission for p in registry.PROTOCOLS}  # no field without a protocol


def test_names_prefixes_and_models_are_unique_and_job_ids_map_back():
    names = [p.name for p in registry.PROTOCOLS]
    prefixes = [p.prefix for p in registry.PROTOCOLS]
    models = [p.model for p in registry.PROTOCOLS if p.model]
    assert len(set(names)) == len(names) and len(set(prefixes)) == len(prefixes) and len(set(models)) == len(models)
    for p in registry.PROTOCOLS:
        assert registry.of_job(p.prefix + "0123456789ab") is p
    assert registry.of_job("zz-1") is None


def test_every_hook_names_an_object_of_its_kind():
    """A hook is a path ("module:attribute"): a typo would only fail when a server or the CLI first asks for it."""
    import click

    from mpdp_services.curator.learner import Learner

    kinds = {"curator": callable, "party": callable, "export": callable, "show": callable, "predict": callable, "view": callable,
             "contribution": lambda o: isinstance(o, dict) and bool(o) and all(callable(h) for h in o.values()),
             "learner": lambda o: isinstance(o, Learner), "trainer": lambda o: isinstance(o, click.Command)}
    for p in registry.PROTOCOLS:
        for kind, right in kinds.items():
            path = getattr(p.hooks, kind)
            if path is not None:
                assert right(registry.hook(path)), (p.name, kind, path)
        assert (p.hooks.learner is not None) == (p.hooks.contribution is not None), p.name  # a learner's rounds are the parties' contributions
        if p.hooks.command is not None:
            assert isinstance(registry.hook(p.hooks.command[1]), click.Command), p.name
    statistics = [s for table in registry.hooked("contribution").values() for s in table]
    assert len(set(statistics)) == len(statistics)  # no protocol's statistic shadows another's at the party
    assert set(registry.hooked("trainer")) == {p.name for p in registry.models().values()}  # every model runs (tests/core/test_cli_train.py)


def test_the_curator_hosts_and_lists_every_registered_protocol(tmp_path):
    """The curator's site builds every protocol of the registry from its hook, in registry order: the job host's
    protocols and the catalog's sources are the registry's (the curator's own parts are stand-ins: only the wiring is
    under test; tests/adversarial/test_job_host.py runs the real ones)."""
    import asyncio
    from unittest.mock import MagicMock

    from mpdp_services.curator import server
    from mpdp_services.curator.hosting import CuratorSite

    cfg = MagicMock(state_dir=str(tmp_path), compute_nodes={}, compute_node_members=[], auxiliary={}, test_mode=True, max_dca_deadline_seconds=60.0)
    curator = MagicMock(addresses={})
    curator.registry.folder = tmp_path / "models"

    async def build():
        site = CuratorSite(cfg, curator)
        return site, site.hostings()

    site, hostings = asyncio.run(build())
    hosted = server.hosted_protocols(hostings)
    assert [h.protocol for h in hosted] == list(registry.PROTOCOLS)
    catalog = server.job_catalog(tmp_path, hostings)
    assert catalog.protocols() == [p.name for p in registry.PROTOCOLS]
    assert list(site.recoveries) == ["pathak2010", "dca", "lmgc", "hamm2016", "learner"]  # the learners' shared host recovers once, after the DCA's
    assert site.parts["learner"].dca is site.parts["dca"]  # one DCA host for the ensemble's and the learners' rounds


def _prefix_literals(source: str, prefixes: tuple[str, ...]) -> list[tuple[int, str]]:
    """String literals (plain, or the leading text of an f-string) that are a job-id prefix or a prefix plus hex digits:
    the ways a servicer would hard-code one ("pk-", "pk-" + token, f"pk-{token}", startswith("pk-"), "pk-0123abcd")."""
    import ast
    import re

    pattern = re.compile("^(" + "|".join(re.escape(p) for p in prefixes) + ")[0-9a-f]*$")
    found: set[tuple[int, str]] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant) and isinstance(node.values[0].value, str):
            head = node.values[0].value
            if any(head == p or (head.startswith(p) and pattern.match(head)) for p in prefixes):
                found.add((node.lineno, head))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and pattern.match(node.value):
            found.add((node.lineno, node.value))  # (an f-string's leading text is also a Constant: one entry per line)
    return sorted(found)


def test_job_id_prefixes_are_written_only_in_the_registry():
    prefixes = tuple(p.prefix for p in registry.PROTOCOLS)
    offenders = []
    for folder in ("mpdp", "services"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == "mpdp/registry.py" or rel.startswith("mpdp/messages/"):
                continue
            offenders += [f"{rel}:{line}: {text!r}" for line, text in _prefix_literals(path.read_text(), prefixes)]
    assert not offenders, "job-id prefixes belong in mpdp/registry.py (registry.prefix / registry.new_job_id):\n" + "\n".join(offenders)


def test_the_prefix_scan_finds_each_way_of_hard_coding_one():
    """The scan above can fail: each hard-coded form is found, prose and other names are not."""
    src = 'a = "pk-" + t\nb = f"dca-{t}"\nc = x.startswith("rg-")\nd = "hm-0123abcd"\ne = "dp-gd"\nf = "see the pk- jobs"\n'
    assert [text for _, text in _prefix_literals(src, ("pk-", "dca-", "rg-", "hm-", "dp-"))] == ["pk-", "dca-", "rg-", "hm-0123abcd"]


def test_new_job_ids_carry_their_protocols_prefix_and_differ():
    for p in registry.PROTOCOLS:
        a, b = registry.new_job_id(p.name), registry.new_job_id(p.name)
        assert a != b and registry.of_job(a) is p and len(a) == len(p.prefix) + 12
