"""A security review of Pathak 2010's π₁ commit and reveal, over real processes and mutual TLS.

The attacker is a party of the job played by the test (the mock of tests/adversarial/test_pathak_malicious.py: a
federation certificate, a server that records what it is sent, raw gRPC calls for what it sends); P1 (party-1) is
a real process. Expected at P1:

- a reveal sent before the sender committed (before ProtocolStart carries the commitments) does not fix π₁: it is
  checked against the commitment once it is known, so the attacker gains nothing by revealing first;
- a reveal over the certificate of a party that is not in the job is refused (WRONG_ROLE), the job unchanged;
- a second reveal from the same party is refused (REPLAY) and does not replace the first (a participant's duplicate
  fails the job closed);
- a commitment copied from another job cannot be opened in this one (the commitment binds the job id): MALFORMED,
  the job fails closed before P1 sends anything derived from its size.
(Charlie's range check of a sealed size remainder, at both ends, is in tests/adversarial/test_pathak_malicious.py.)
"""

from __future__ import annotations

import os
import time

import grpc
import pytest

from mpdp.messages import common_pb2, pathak2010_pb2 as pk, pathak2010_pb2_grpc as pk_grpc
from mpdp.pathak2010.party import pi1_commitment

from .conftest import assert_clean, assert_ledgers_within_budget, channel, mint, pathak_spec, refused, submit_pathak, wait_pathak
from .test_pathak_malicious import MOCK, REAL, fed, mock, received  # noqa: F401  (the module's federation and its mock party)

pytestmark = pytest.mark.integration


def _reveal(fed, tls, job: str, nonce: bytes):  # noqa: F811  (fed: the imported fixture's name)
    with channel(fed, REAL, tls) as ch:
        stub = pk_grpc.PartyStub(ch)
        return refused(lambda: stub.SendPi1Reveal(pk.Pi1Reveal(job_id=job, nonce=nonce, reshare_seed=bytes(32)), timeout=60))


def _accept(fed, mock, job: str, commitment: bytes) -> pk.ProtocolStart:  # noqa: F811
    received(mock, job, pk.JobAnnouncement)
    with channel(fed, "curator", mock[0]) as ch:
        pk_grpc.CuratorStub(ch).AcceptJob(pk.JobAcceptance(job_id=job, dimension=4, pi1_commitment=commitment), timeout=60)
    return received(mock, job, pk.ProtocolStart)


def test_an_early_reveal_binds_its_sender_and_an_outsiders_reveal_is_refused(fed, mock):  # noqa: F811
    """The mock reveals (zeros) before it has committed, then commits to another nonce and reveals that: P1 held the early
    reveal, checks it against the commitment once ProtocolStart brings it, and the job fails; the later reveal does not
    replace it. A party outside the job cannot reveal for it."""
    tls = mock[0]
    job = submit_pathak(fed, pathak_spec(parties=[REAL, MOCK], seed=b"rv-early", deadline=60.0))
    received(mock, job, pk.JobAnnouncement)
    end = time.monotonic() + 60
    while True:  # held until the commitments are known (a reveal may overtake ProtocolStart); P1 may not hold the job yet
        try:
            with channel(fed, REAL, tls) as ch:
                pk_grpc.PartyStub(ch).SendPi1Reveal(pk.Pi1Reveal(job_id=job, nonce=bytes(32), reshare_seed=bytes(32)), timeout=60)
            break
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.NOT_FOUND and time.monotonic() < end, e
    e = _reveal(fed, mint(fed, "party", "rv-party-x"), job, bytes(32))
    assert e.code() == grpc.StatusCode.PERMISSION_DENIED and "WRONG_ROLE" in e.details(), e
    nonce = os.urandom(32)
    _accept(fed, mock, job, pi1_commitment(job, MOCK, nonce))
    e = _reveal(fed, tls, job, nonce)  # never replaces the early one: a REPLAY, or the job already failed on the early one
    assert e.code() in (grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.INVALID_ARGUMENT), e
    assert_clean(e, nonce.hex())
    status = wait_pathak(fed, job)
    assert status.state == "FAILED" and status.problem in (common_pb2.MALFORMED, common_pb2.REPLAY), status
    assert not {type(m).__name__ for m in mock[2] if getattr(m, "job_id", "") == job} & {"SizeShare", "SealedSizeRemainder"}


def test_a_second_reveal_is_refused_and_a_commitment_from_another_job_does_not_open(fed, mock):  # noqa: F811
    tls = mock[0]
    first = submit_pathak(fed, pathak_spec(parties=[REAL, MOCK], seed=b"rv-twice", deadline=60.0))
    nonce = os.urandom(32)
    commitment = pi1_commitment(first, MOCK, nonce)
    _accept(fed, mock, first, commitment)
    with channel(fed, REAL, tls) as ch:
        pk_grpc.PartyStub(ch).SendPi1Reveal(pk.Pi1Reveal(job_id=first, nonce=nonce, reshare_seed=bytes(32)), timeout=60)
    e = _reveal(fed, tls, first, nonce)  # the same reveal again: a participant's duplicate fails the job closed
    assert e.code() == grpc.StatusCode.ALREADY_EXISTS and "REPLAY" in e.details(), e
    e = _reveal(fed, tls, first, os.urandom(32))  # nor can a second, other nonce replace the first
    assert e.code() == grpc.StatusCode.ALREADY_EXISTS, e
    status = wait_pathak(fed, first)
    assert status.state == "FAILED" and status.problem == common_pb2.REPLAY, status

    second = submit_pathak(fed, pathak_spec(parties=[REAL, MOCK], seed=b"rv-reuse", deadline=60.0))
    _accept(fed, mock, second, commitment)  # the first job's commitment, whose nonce every party of that job has seen
    try:  # refused at once, or held until P1 has the commitments (a reveal may overtake ProtocolStart) and refused then
        with channel(fed, REAL, tls) as ch:
            pk_grpc.PartyStub(ch).SendPi1Reveal(pk.Pi1Reveal(job_id=second, nonce=nonce, reshare_seed=bytes(32)), timeout=60)
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "does not open" in str(e.details()), e
        assert_clean(e, nonce.hex())
    status = wait_pathak(fed, second)
    assert status.state == "FAILED" and status.problem == common_pb2.MALFORMED and "does not open" in status.detail, status
    assert not {type(m).__name__ for m in mock[2] if getattr(m, "job_id", "") == second} & {"SizeShare", "SealedSizeRemainder"}
    assert_ledgers_within_budget(fed)


def test_a_reveal_without_a_full_reshare_seed_and_a_party_sent_reshare_piece_are_refused(fed, mock):  # noqa: F811
    """The reveal also carries the seed of the sender's S3.3 piece for P1 (the pieces between parties are expanded
    from these seeds, never sent): a seed that is not 32 bytes is MALFORMED and fails the job before P1 sends
    anything derived from its size. A ResharePiece from a party is refused (WRONG_ROLE: only Charlie sends one) and,
    from a participant, fails that job closed."""
    tls = mock[0]
    for seed, piece in ((b"rv-seed", False), (b"rv-piece", True)):
        job = submit_pathak(fed, pathak_spec(parties=[REAL, MOCK], seed=seed, deadline=60.0))
        nonce = os.urandom(32)
        _accept(fed, mock, job, pi1_commitment(job, MOCK, nonce))
        short = os.urandom(16)
        with channel(fed, REAL, tls) as ch:
            stub = pk_grpc.PartyStub(ch)
            if piece:
                e = refused(lambda: stub.SendResharePiece(pk.ResharePiece(job_id=job, piece=bytes(16 * 4)), timeout=60))
                assert e.code() == grpc.StatusCode.PERMISSION_DENIED and "WRONG_ROLE" in e.details(), e
            else:
                e = refused(lambda: stub.SendPi1Reveal(pk.Pi1Reveal(job_id=job, nonce=nonce, reshare_seed=short), timeout=60))
                assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "re-share seed" in e.details(), e
                assert_clean(e, short.hex())
        status = wait_pathak(fed, job)
        assert status.state == "FAILED" and status.problem == (common_pb2.WRONG_ROLE if piece else common_pb2.MALFORMED), status
        assert not {type(m).__name__ for m in mock[2] if getattr(m, "job_id", "") == job} & {"SizeShare", "SealedSizeRemainder"}
    assert_ledgers_within_budget(fed)
