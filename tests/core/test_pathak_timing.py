"""No duration leaves a party, and a Pathak party's timing does not show n_j before its spend.

* No message a party sends carries a field that could hold a duration: every message type of every protocol that
  has such a field is a spec (the operator's public deadline) or something the curator measures and sends itself,
  and none of those is reachable from a message a party sends.
* A party accepts before any work on its records: the acceptance leaves before training starts, carries the
  schema's d, and a training failure after the spend leaves nothing computed from the records (the charge is then
  voided by the served party: tests/adversarial/test_size_leaks.py runs that over real processes).
* The party's first message computed from its records leaves no earlier than its local-work time after
  ProtocolStart, on an injected clock; a model handed in earlier fails the job and nothing leaves.
"""

from __future__ import annotations

import importlib
import pkgutil
import re

import numpy as np

import mpdp.messages as messages
from mpdp.messages import common_pb2, pathak2010_pb2 as pb
from mpdp.pathak2010.driver import make_spec
from mpdp.pathak2010.party import DATA_FREE_MESSAGES, train_local
from mpdp.protocol import CURATOR, Peer
from tests.pathak_helpers import party_data, run_test_job as run_job

DURATION = re.compile(r"second|time|elapsed|duration|latency|clock|_ms$", re.IGNORECASE)
# Message types allowed a duration-like field, and why: a spec's deadline is the operator's public choice; the rest
# are measured by the curator and sent by it (to operators), never by a party.
ALLOWED = {
    "mpdp.messages.PathakJobSpec": "deadline_seconds",
    "mpdp.messages.DcaJobSpec": "deadline_seconds",
    "mpdp.messages.EnsembleJobSpec": "deadline_seconds",
    "mpdp.messages.LearnerJobSpec": "deadline_seconds",
    "mpdp.messages.PublishedModel": "stage_seconds",
    "mpdp.messages.EnsembleRelease": "stage_seconds",
    "mpdp.messages.LearnerModel": "seconds",
    "mpdp.messages.JobSummary": "stage_seconds",
    "mpdp.messages.LinkDown": "timeout_seconds",  # the curator's call down a party's link: the caller's own deadline
}
# What a party sends: the Pathak steps it calls on Charlie and on other parties, and the answers of every service a
# party serves (each answer is a message the party sends back).
PARTY_CALLS = {
    "mpdp.messages.Curator": {"RegisterParty", "AcceptJob", "SendPartyPublicKey", "ForwardSizeRemainders", "SendEncryptedSizeShare",
                              "SendBlindedComparisons", "SendMaskedNoise", "SendResharePiece", "PublishShare", "AbortJob"},
    "mpdp.messages.Party": {"SendPartySecrets", "SendPi1Reveal", "SendSizeShare", "SendSealedSizeRemainder", "SendMaskedSize",
                            "SendNoiseChain", "SendNoiseScaleShare", "SendNoiseScale", "SendResharePiece", "AbortJob"},
    "mpdp.messages.ComputeNode": {"SubmitShares", "SubmitShareBatch", "AbortJob"},  # a party is a DCA client
    "mpdp.messages.PartyLink": {"Open", "Answer", "Relay", "Certificate"},  # its link: the answers, the sealed steps it relays
}
PARTY_SERVICES = ("mpdp.messages.Party", "mpdp.messages.ContributionParty", "mpdp.messages.EnsembleParty", "mpdp.messages.LocalModelParty")


def _modules():
    for info in pkgutil.iter_modules(messages.__path__):
        if info.name.endswith("_pb2"):
            yield importlib.import_module(f"mpdp.messages.{info.name}")


def _all_messages():
    def walk(d):
        yield d
        for n in d.nested_types:
            yield from walk(n)

    for mod in _modules():
        for d in mod.DESCRIPTOR.message_types_by_name.values():
            yield from walk(d)


def _services():
    return {s.full_name: s for mod in _modules() for s in mod.DESCRIPTOR.services_by_name.values()}


def _reachable(roots):
    """Every message type a value of ``roots`` can contain (fields, map entries, nested), by full name."""
    seen, todo = {}, list(roots)
    while todo:
        d = todo.pop()
        if d.full_name in seen:
            continue
        seen[d.full_name] = d
        todo += [f.message_type for f in d.fields if f.message_type is not None]
    return seen


def _party_sent():
    services = _services()
    roots = [m.input_type for name, calls in PARTY_CALLS.items() for m in services[name].methods if m.name in calls]
    roots += [m.output_type for name in PARTY_SERVICES for m in services[name].methods]
    return _reachable(roots)


def test_only_specs_and_curator_reports_have_duration_fields():
    found = {d.full_name: f.name for d in _all_messages() for f in d.fields if DURATION.search(f.name)}
    assert found == ALLOWED, "a new duration-like field: is it measured by a party? then it must not exist"


def test_no_message_a_party_sends_carries_a_duration():
    sent = _party_sent()
    assert "mpdp.messages.PublishedShare" in sent and "mpdp.messages.JobAcceptance" in sent  # the walk covers them
    assert {"mpdp.messages.LinkAnswer", "mpdp.messages.SealedCall"} <= set(sent)  # and the link's messages
    assert {"mpdp.messages.VoteResponse", "mpdp.messages.ClientShare"} & set(sent), sorted(sent)  # and other protocols
    for name, d in sent.items():
        assert name not in ALLOWED, f"a party sends {name}, which has a duration field"
        assert not [f.name for f in d.fields if DURATION.search(f.name)], name
    assert "stage_seconds" not in pb.PublishedShare.DESCRIPTOR.fields_by_name
    assert 4 not in pb.PublishedShare.DESCRIPTOR.fields_by_number


def _recording():
    """A tamper hook that records every message with its sender, in delivery order (and changes none)."""
    log: list[tuple[Peer, Peer, object]] = []

    def tamper(sender, to, msg):
        log.append((sender, to, msg))
        return msg

    return log, tamper


def _data_dependent(msg) -> bool:
    return not isinstance(msg, (pb.JobAcceptance, common_pb2.JobAbort, *DATA_FREE_MESSAGES))


def test_party_accepts_before_training_and_a_training_failure_after_the_spend_sends_nothing_from_its_data(small_secrets):
    data = party_data([60, 40, 50], d=3)
    log, tamper = _recording()
    trained_at: dict[str, int] = {}

    def train(X, y, params):
        name = next(n for n, (Xn, _) in data.items() if Xn is X)
        trained_at[name] = len(log)
        if name == "p2":
            raise ValueError("this party's records cannot be trained on")
        return train_local(X, y, params)

    r = run_job(data, make_spec(list(data), 1.0, 0.1, "corrected", b"accept-first"), small_secrets, party_key_bits=768, tamper=tamper, train=train)
    assert r.model is None and r.error is not None and r.error.problem == common_pb2.INVALID_JOB
    acceptances = [(i, s.name, m) for i, (s, to, m) in enumerate(log) if isinstance(m, pb.JobAcceptance)]
    assert sorted(n for _, n, _ in acceptances) == sorted(data)  # p2 accepted too: it had not read its records yet
    assert all(m.dimension == 3 for _, _, m in acceptances)  # d from the column count (the schema's), not from ŵ_j
    starts = [i for i, (s, to, m) in enumerate(log) if isinstance(m, pb.ProtocolStart) and to.name == "p2"]
    assert starts and trained_at["p2"] > max(i for i, _, _ in acceptances) and trained_at["p2"] > starts[0]
    assert [e["job_id"] for e in r.ledger["p2"]] == ["job-1"]  # it spent at ProtocolStart, then failed in training
    from_p2 = [m for s, _, m in log if s.name == "p2"]
    assert from_p2 and not [m for m in from_p2 if _data_dependent(m)], [type(m).__name__ for m in from_p2]
    assert any(isinstance(m, common_pb2.JobAbort) for m in from_p2)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def wait_until(self, t: float) -> None:
        self.now = max(self.now, t)


def test_first_data_dependent_message_waits_for_the_local_work_time(small_secrets):
    data = party_data([30, 70], d=3)
    clock, pad = FakeClock(), 7.5
    log, tamper = _recording()
    sent_at: list[tuple[str, str, object, float]] = []

    def timed(sender, to, msg):
        sent_at.append((sender.name, to.name, msg, clock.now))
        return tamper(sender, to, msg)

    def train(X, y, params):
        clock.now += 0.25 * X.shape[0] / 10  # a training that takes longer the more rows (below the pad)
        return train_local(X, y, params)

    r = run_job(data, make_spec(list(data), 1.0, 0.1, "corrected", b"pad"), small_secrets, party_key_bits=768, tamper=timed, clock=clock,
                train=train, local_work_seconds=pad, wait_until=clock.wait_until)
    assert r.model is not None, r.error
    for name in data:
        start = next(t for s, to, m, t in sent_at if isinstance(m, pb.ProtocolStart) and s == CURATOR.name and to == name)
        first = next(t for s, _, m, t in sent_at if s == name and _data_dependent(m))
        assert first >= start + pad, (name, first - start)


def test_a_local_model_before_the_local_work_time_fails_the_job_and_sends_nothing(small_secrets):
    data = party_data([30, 70], d=3)
    clock = FakeClock()  # never moves: no wait reaches the pad
    log, tamper = _recording()
    r = run_job(data, make_spec(list(data), 1.0, 0.1, "corrected", b"early"), small_secrets, party_key_bits=768, tamper=tamper, clock=clock,
                local_work_seconds=5.0)
    assert r.model is None and r.error is not None and r.error.problem == common_pb2.INTERNAL
    assert not [m for s, _, m in log if s.role == "party" and _data_dependent(m)]


def test_zero_pad_runs_and_matches_the_unpadded_release(small_secrets):
    data = party_data([30, 70], d=3)
    spec = make_spec(list(data), 1.0, 0.1, "corrected", b"same")
    clock = FakeClock()
    a = run_job(data, spec, small_secrets, party_key_bits=768)
    b = run_job(data, spec, small_secrets, party_key_bits=768, clock=clock, local_work_seconds=3.0, wait_until=clock.wait_until)
    assert a.model is not None and b.model is not None
    np.testing.assert_array_equal(np.array(a.model.shares), np.array(b.model.shares))
