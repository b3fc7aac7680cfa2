"""The job host's idempotency key, over real processes and mutual TLS.

An operator whose SubmitJob answer was lost sends the same submission again with the same key: it gets the first
submit's job, and every party pays once (its ledger holds one entry for the job). The same key with another spec is
refused REPLAY; another operator's equal key is its own; a key that is not an id is refused MALFORMED; a retry after
a curator restart (kill -9) still gets the first job, and two submits racing with one key start one job.
"""

from __future__ import annotations

import signal

import grpc
import pytest

from mpdp.messages import common_pb2, local_release_pb2 as lr, operations_pb2 as ops, operations_pb2_grpc as ops_grpc

from .conftest import PARTIES, assert_all_serving, assert_status, channel, ledger, mint, operator_curator, refused

pytestmark = pytest.mark.integration


def lmgc_submission(seed: bytes, key: str) -> ops.JobSubmission:
    spec = lr.LocalModelJobSpec(dataset="synthetic", model="lmgc", epsilon=1.0, parties=PARTIES, mode=common_pb2.CORRECTED, ridge=1e-3, data_norm=1.0,
                                simulation_seed=seed)
    setattr(spec, "lambda", 1e-3)
    return ops.JobSubmission(lmgc=spec, idempotency_key=key)


def charges(fed, job_id: str) -> dict[str, int]:
    """How many ledger entries each party holds for ``job_id``."""
    return {p: sum(1 for e in ledger(fed, p)["entries"] if e.get("job_id") == job_id) for p in PARTIES}


def entries(fed) -> dict[str, int]:
    return {p: len(ledger(fed, p)["entries"]) for p in PARTIES}


def finished(ch: grpc.Channel, job_id: str) -> ops.JobSummary:
    return list(ops_grpc.JobOperationsStub(ch).WatchJob(common_pb2.JobRef(job_id=job_id), timeout=300))[-1]


def test_a_retried_submit_with_its_key_is_one_job_and_one_charge_at_each_party(fed):
    before = entries(fed)
    with operator_curator(fed) as ch:
        stub = ops_grpc.JobOperationsStub(ch)
        first = stub.SubmitJob(lmgc_submission(b"key-1", "retry-1"), timeout=60)
        again = stub.SubmitJob(lmgc_submission(b"key-1", "retry-1"), timeout=60)  # the first answer "was lost"
        assert again.job_id == first.job_id and again.protocol == "lmgc"
        assert finished(ch, first.job_id).state == "PUBLISHED"
        after_end = stub.SubmitJob(lmgc_submission(b"key-1", "retry-1"), timeout=60)  # a retry after the job ended
        assert after_end.job_id == first.job_id and after_end.terminal
        e = refused(lambda: stub.SubmitJob(lmgc_submission(b"key-other-spec", "retry-1"), timeout=60))
        assert_status(e, grpc.StatusCode.ALREADY_EXISTS, "retry-1")
        for bad in ("../etc", "k" * 65, "a key"):
            assert_status(refused(lambda: stub.SubmitJob(lmgc_submission(b"key-1", bad), timeout=60)), grpc.StatusCode.INVALID_ARGUMENT, bad)
    assert charges(fed, first.job_id) == {p: 1 for p in PARTIES}
    assert entries(fed) == {p: before[p] + 1 for p in PARTIES}  # nothing else was charged: not the refused ones either
    assert_all_serving(fed)


def test_keys_are_per_operator(fed):
    with operator_curator(fed) as ch:
        mine = ops_grpc.JobOperationsStub(ch).SubmitJob(lmgc_submission(b"key-2", "shared-key"), timeout=60)
        assert finished(ch, mine.job_id).state == "PUBLISHED"
    with channel(fed, "curator", mint(fed, "operator", "operator-2")) as ch:
        theirs = ops_grpc.JobOperationsStub(ch).SubmitJob(lmgc_submission(b"key-2", "shared-key"), timeout=60)
        assert theirs.job_id != mine.job_id  # their key is theirs: a job of their own, not an answer about ours
        assert finished(ch, theirs.job_id).state == "PUBLISHED"
    assert charges(fed, mine.job_id) == charges(fed, theirs.job_id) == {p: 1 for p in PARTIES}


def test_two_racing_submits_with_one_key_start_one_job(fed):
    before = entries(fed)
    with operator_curator(fed) as ch:
        stub = ops_grpc.JobOperationsStub(ch)
        calls = [stub.SubmitJob.future(lmgc_submission(b"key-3", "race-1"), timeout=60) for _ in range(4)]
        ids = {c.result().job_id for c in calls}
        assert len(ids) == 1
        assert finished(ch, ids.pop()).state == "PUBLISHED"
    assert entries(fed) == {p: before[p] + 1 for p in PARTIES}


def test_a_key_survives_a_curator_restart(fed):
    with operator_curator(fed) as ch:
        first = ops_grpc.JobOperationsStub(ch).SubmitJob(lmgc_submission(b"key-4", "restart-1"), timeout=60)
        assert finished(ch, first.job_id).state == "PUBLISHED"
    before = entries(fed)
    fed.kill("curator", signal.SIGKILL)
    fed.restart("curator")
    with operator_curator(fed) as ch:
        stub = ops_grpc.JobOperationsStub(ch)
        again = stub.SubmitJob(lmgc_submission(b"key-4", "restart-1"), timeout=60)
        assert again.job_id == first.job_id and again.terminal
        e = refused(lambda: stub.SubmitJob(lmgc_submission(b"key-4-other", "restart-1"), timeout=60))
        assert_status(e, grpc.StatusCode.ALREADY_EXISTS)
    assert entries(fed) == before
    keys = fed.workdir / "curator" / "state" / "submission-keys.json"
    assert keys.stat().st_mode & 0o777 == 0o600
    assert_all_serving(fed)


def test_a_refused_keyed_submit_frees_its_key(fed):
    """A submit the servicer refuses started nothing: its key is free, and the corrected submission under it runs."""
    bad = lmgc_submission(b"key-5", "fix-me")
    bad.lmgc.parties[:] = ["party-1", "party-1"]
    with operator_curator(fed) as ch:
        stub = ops_grpc.JobOperationsStub(ch)
        assert_status(refused(lambda: stub.SubmitJob(bad, timeout=60)), grpc.StatusCode.INVALID_ARGUMENT)
        good = stub.SubmitJob(lmgc_submission(b"key-5", "fix-me"), timeout=60)
        assert finished(ch, good.job_id).state == "PUBLISHED"
    assert charges(fed, good.job_id) == {p: 1 for p in PARTIES}
