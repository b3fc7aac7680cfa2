"""The job host's durable idempotency keys (services/curator/submissions.py): bounded, per operator, reloaded after a
restart, and a submission's digest that ignores only its key."""

from __future__ import annotations

import json

from mpdp.messages import local_release_pb2 as lr, operations_pb2 as ops
from mpdp_services.curator.submissions import FILE, SubmissionKeys, digest


def submission(seed: bytes, key: str = "") -> ops.JobSubmission:
    return ops.JobSubmission(lmgc=lr.LocalModelJobSpec(dataset="d", model="lmgc", epsilon=1.0, parties=["a", "b"], simulation_seed=seed), idempotency_key=key)


def test_the_digest_ignores_the_key_and_nothing_else():
    assert digest(submission(b"x", "k1")) == digest(submission(b"x", "k2")) == digest(submission(b"x"))
    assert digest(submission(b"x", "k1")) != digest(submission(b"y", "k1"))


def test_keys_are_durable_per_operator_and_bounded(tmp_path):
    keys = SubmissionKeys(tmp_path, bound=3)
    keys.pending(("op-1", "k"), "d1")
    keys.started(("op-1", "k"), "lm-000000000001")
    keys.pending(("op-2", "k"), "d2")  # another operator's equal key is another entry
    keys.pending(("op-1", "gone"), "d3")
    keys.forget(("op-1", "gone"))  # a refused submit frees its key
    assert (tmp_path / FILE).stat().st_mode & 0o777 == 0o600
    again = SubmissionKeys(tmp_path, bound=3)
    assert again.get(("op-1", "k")) == ("d1", "lm-000000000001")
    assert again.get(("op-2", "k")) == ("d2", None)  # under way when "the curator stopped": its retry is refused
    assert again.get(("op-1", "gone")) is None
    for i in range(5):
        again.pending(("op-3", f"k{i}"), "d")
    assert len(again) == 3 and again.get(("op-1", "k")) is None  # the oldest forgotten first
    assert len(json.loads((tmp_path / FILE).read_text())) == 3


def test_a_tampered_row_is_not_loaded(tmp_path):
    (tmp_path / FILE).write_text(json.dumps([{"operator": "op", "key": "../x", "digest": "d", "job": None},
                                             {"operator": "op", "key": "ok", "digest": "d", "job": "lm-1"}]))
    keys = SubmissionKeys(tmp_path)
    assert len(keys) == 1 and keys.get(("op", "ok")) == ("d", "lm-1")
