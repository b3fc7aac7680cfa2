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


def test_the_curator_hosts_and_lists_every_registered_protocol(tmp_path):
    """The job host's protocols and the catalog's sources are the registry's, in its order (servicers stand-ins: only
    the wiring is under test here; tests/adversarial/test_job_host.py runs the real ones)."""
    from unittest.mock import MagicMock

    from mpdp_services.curator import server

    parts = [MagicMock() for _ in range(5)]  # curator, dca, local, ensemble, learner
    parts[4].tables = {p: MagicMock() for p in server.LEARNERS}
    hosted = server.hosted_protocols(*parts)
    assert [h.protocol for h in hosted] == list(registry.PROTOCOLS)
    catalog = server.job_catalog(tmp_path, *parts)
    assert catalog.protocols() == [p.name for p in registry.PROTOCOLS]


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
