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
