"""Who may drive a curator-hosted learner job (dp-gd, regression): the federation's operator only.

Raw clients over mutual TLS with the generated messages; every call is the job host's (JobOperations). A party's
or a compute node's own certificate, and an outsider (a party certificate minted from the federation's CA for a
site that is not in it), may not submit, watch, fetch or cancel a learner job: PERMISSION_DENIED from the gate,
before the body is parsed, and the job goes on. A certificate from another CA does not get through the TLS handshake. A replayed submission (the same job id)
is refused ALREADY_EXISTS and never starts a second job; the first one releases.
"""

from __future__ import annotations

import grpc
import pytest

from mpdp.dpgd.model import Task
from mpdp.dpgd.plan import DpgdPlan
from mpdp.messages import common_pb2, operations_pb2 as ops, operations_pb2_grpc
from mpdp_services.common import pki
from mpdp_services.common.rpc import TlsFiles

from .conftest import NODES, PARTIES, assert_ledgers_within_budget, assert_status, channel, mint, operator_curator, refused, site_tls

SIZES = (40, 47, 54)  # conftest.start_federation's synthetic rows per party


def _spec(rounds: int = 1, job_id: str = ""):
    from mpdp_services.operator.dpgd import dpgd_spec

    plan = DpgdPlan(Task("binary"), 4, 1.0, 1e-6, lam=1e-2, rounds=rounds, total_records=sum(SIZES))
    return dpgd_spec("synthetic", PARTIES, NODES, plan, 60, job_id=job_id, seed=b"learner-access")


def _host(ch: grpc.Channel) -> operations_pb2_grpc.JobOperationsStub:
    return operations_pb2_grpc.JobOperationsStub(ch)


def _submit(ch: grpc.Channel, spec, timeout: float = 60) -> str:
    return _host(ch).SubmitJob(ops.JobSubmission(learner=spec), timeout=timeout).job_id


def _watch(ch: grpc.Channel, job: str, timeout: float = 180):
    last = None
    for last in _host(ch).WatchJob(common_pb2.JobRef(job_id=job), timeout=timeout):
        if last.terminal:
            break
    return last


def _calls(ch: grpc.Channel, job: str) -> dict:
    host = _host(ch)
    ref = common_pb2.JobRef(job_id=job)
    return {
        "submit": lambda: _submit(ch, _spec(), timeout=20),
        "watch": lambda: host.WatchJob(ref, timeout=20),
        "model": lambda: host.GetRelease(ref, timeout=20),
        "cancel": lambda: host.CancelJob(ref, timeout=20),
    }


def _other_ca(fed) -> TlsFiles:
    folder = fed.workdir / "minted" / "other-ca-operator"
    if not (folder / "site.crt").exists():
        ca_key, ca_cert = pki.make_ca("elsewhere")
        key, cert = pki.issue(ca_key, ca_cert, "operator", "operator", ["127.0.0.1"])
        pki.write_site(folder, key, cert, ca_cert)
    return TlsFiles(folder / "site.crt", folder / "site.key", folder / "ca.crt")


def test_only_the_operator_drives_a_learner_job(fed):
    with operator_curator(fed) as ch:
        job = _submit(ch, _spec(rounds=3))
    for who, tls in [("party-1", site_tls(fed, "party-1")), ("node-2", site_tls(fed, "node-2")), ("outsider", mint(fed, "party", "party-9"))]:
        with channel(fed, "curator", tls) as ch:
            for name, call in _calls(ch, job).items():
                e = refused(call)
                assert e.code() == grpc.StatusCode.PERMISSION_DENIED, f"{who} {name}: {e.code().name} {e.details()}"
                assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
    with channel(fed, "curator", _other_ca(fed)) as ch:
        for name, call in _calls(ch, job).items():
            e = refused(call)
            assert e.code() == grpc.StatusCode.UNAVAILABLE, f"another CA {name}: {e.code().name}"
    with operator_curator(fed) as ch:  # none of it touched the job
        last = _watch(ch, job)
    assert last is not None and last.state == "DONE", last
    assert_ledgers_within_budget(fed)


def test_a_replayed_submission_is_refused(fed):
    with operator_curator(fed) as ch:
        job = _submit(ch, _spec(job_id="dp-replay000001"))
        e = refused(lambda: _submit(ch, _spec(job_id=job)))
        assert_status(e, grpc.StatusCode.ALREADY_EXISTS)
        last = _watch(ch, job)
        assert last is not None and last.state == "DONE", last
        e = refused(lambda: _submit(ch, _spec(job_id=job)))  # and after it ended
        assert_status(e, grpc.StatusCode.ALREADY_EXISTS)
    assert_ledgers_within_budget(fed)


@pytest.mark.parametrize("job_id", ["", "x" * 65, "../../etc/passwd", "dp-\x00"])
def test_hostile_ids_name_no_job(fed, job_id):
    with operator_curator(fed) as ch:
        host = _host(ch)
        for call in (lambda: host.WatchJob(common_pb2.JobRef(job_id=job_id), timeout=20),
                     lambda: host.GetRelease(common_pb2.JobRef(job_id=job_id), timeout=20)):
            assert_status(refused(call), grpc.StatusCode.NOT_FOUND, job_id)
        if job_id:
            spec = _spec()
            spec.job_id = job_id  # a raw body: the client library would refuse it first
            assert_status(refused(lambda: _submit(ch, spec, timeout=20)), grpc.StatusCode.INVALID_ARGUMENT, job_id)


def test_a_replayed_round_is_refused_by_every_party_and_spends_nothing(fed):
    """Round 1 of a finished dp-gd job sent again to each party, straight from a certificate with the curator's
    name (a curator replaying a round to get a second noisy gradient at the same iterate): each party refuses it
    REPLAY (ALREADY_EXISTS) before it reads its data, and its ledger does not move."""
    from mpdp.dpgd import wire as dpgd_wire
    from mpdp.messages import contribution_pb2, contribution_pb2_grpc

    from .conftest import ledger

    with operator_curator(fed) as ch:
        job = _submit(ch, _spec(rounds=1))
        _watch(ch, job)
        model = _host(ch).GetRelease(common_pb2.JobRef(job_id=job), timeout=30).learner
    req = contribution_pb2.StatisticRequest(dca_job_id=model.dca_jobs[0], dataset="synthetic", statistic=dpgd_wire.STATISTIC, records_per_client=60,
                                            dpgd=model.dpgd.plan, parties=PARTIES)
    before = {p: ledger(fed, p)["entries"] for p in PARTIES}
    rogue = mint(fed, "curator", "curator")
    for p in PARTIES:
        with channel(fed, p, rogue) as ch:
            e = refused(lambda: contribution_pb2_grpc.ContributionPartyStub(ch).Contribute(req, timeout=60))
        assert_status(e, grpc.StatusCode.ALREADY_EXISTS)
        assert ledger(fed, p)["entries"] == before[p]
    assert_ledgers_within_budget(fed)
