"""Pathak 2010's π₁ commit and reveal against a hostile party, over real processes and mutual TLS.

The attacker is a party of the job played by the test (the mock of tests/adversarial/test_pathak_malicious.py: a
federation certificate, a server that records what it is sent, raw gRPC calls for what it sends); P1 (party-1) is
a real process. Expected at P1:

- a reveal sent before the sender committed (before ProtocolStart carries the commitments) does not fix π₁: it is
  checked against the commitment once it is known, so the attacker gains nothing by revealing first;
- a reveal over the certificate of a party that is not in the job is refused (WRONG_ROLE), the job unchanged;
- a second reveal from the same party is refused (REPLAY) and does not replace the first (a participant's duplicate
  fails the job closed);
- a commitment copied from another job cannot be opened in this one (the commitment binds the job id): MALFORMED,
  the job fails closed before P1 sends anything derived from its size;
- a reveal without a full re-share key is MALFORMED; a reveal sent to a party that is not P1 is WRONG_ROLE.

P1 relays every opening to every other party in its PartySecrets. With the test playing P1 and party-1 the other
party (a real process), expected at party-1:

- an opening that does not open its commitment (P1's own nonce, or party-1's own key altered) is MALFORMED and the
  job fails before party-1 sends anything derived from its size;
- a PartySecrets from a party that is not P1 is WRONG_ROLE; a second one from P1 is REPLAY (either fails the job).
(Charlie's range check of a sealed size remainder, at both ends, is in tests/adversarial/test_pathak_malicious.py.
A re-share key that opens its commitment but is a low-order point is refused in tests/core/test_pathak_reshare.py:
it needs two parties besides P1.)
"""

from __future__ import annotations

import functools
import os
import time

import grpc
import pytest

from mpdp.messages import common_pb2, pathak2010_pb2 as pk, pathak2010_pb2_grpc as pk_grpc
from mpdp.math.paillier import KeyPair
from mpdp.pathak2010.party import pi1_commitment


from .conftest import assert_clean, assert_ledgers_within_budget, channel, mint, pathak_spec, refused, submit_pathak, wait_pathak
from .test_pathak_malicious import MOCK, REAL, fed, fresh_opening, mock, received  # noqa: F401  (the module's federation and its mock party)

pytestmark = pytest.mark.integration


def _reveal(fed, tls, job: str, nonce: bytes, key: bytes):  # noqa: F811  (fed: the imported fixture's name)
    with channel(fed, REAL, tls) as ch:
        stub = pk_grpc.PartyStub(ch)
        return refused(lambda: stub.SendPi1Reveal(pk.Pi1Reveal(job_id=job, nonce=nonce, reshare_key=key), timeout=60))


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
                pk_grpc.PartyStub(ch).SendPi1Reveal(pk.Pi1Reveal(job_id=job, nonce=bytes(32), reshare_key=bytes(32)), timeout=60)
            break
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.NOT_FOUND and time.monotonic() < end, e
    e = _reveal(fed, mint(fed, "party", "rv-party-x"), job, bytes(32), bytes(32))
    assert e.code() == grpc.StatusCode.PERMISSION_DENIED and "WRONG_ROLE" in e.details(), e
    nonce, key = fresh_opening()
    _accept(fed, mock, job, pi1_commitment(job, MOCK, nonce, key))
    e = _reveal(fed, tls, job, nonce, key)  # never replaces the early one: a REPLAY, or the job already failed on the early one
    assert e.code() in (grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.INVALID_ARGUMENT), e
    assert_clean(e, nonce.hex())
    status = wait_pathak(fed, job)
    assert status.state == "FAILED" and status.problem in (common_pb2.MALFORMED, common_pb2.REPLAY), status
    assert not {type(m).__name__ for m in mock[2] if getattr(m, "job_id", "") == job} & {"SizeShare", "SealedSizeRemainder"}


def test_a_second_reveal_is_refused_and_a_commitment_from_another_job_does_not_open(fed, mock):  # noqa: F811
    tls = mock[0]
    first = submit_pathak(fed, pathak_spec(parties=[REAL, MOCK], seed=b"rv-twice", deadline=60.0))
    nonce, key = fresh_opening()
    commitment = pi1_commitment(first, MOCK, nonce, key)
    _accept(fed, mock, first, commitment)
    with channel(fed, REAL, tls) as ch:
        pk_grpc.PartyStub(ch).SendPi1Reveal(pk.Pi1Reveal(job_id=first, nonce=nonce, reshare_key=key), timeout=60)
    e = _reveal(fed, tls, first, nonce, key)  # the same reveal again: a participant's duplicate fails the job closed
    assert e.code() == grpc.StatusCode.ALREADY_EXISTS and "REPLAY" in e.details(), e
    e = _reveal(fed, tls, first, os.urandom(32), key)  # nor can a second, other nonce replace the first
    assert e.code() == grpc.StatusCode.ALREADY_EXISTS, e
    status = wait_pathak(fed, first)
    assert status.state == "FAILED" and status.problem == common_pb2.REPLAY, status

    second = submit_pathak(fed, pathak_spec(parties=[REAL, MOCK], seed=b"rv-reuse", deadline=60.0))
    _accept(fed, mock, second, commitment)  # the first job's commitment, whose nonce every party of that job has seen
    try:  # refused at once, or held until P1 has the commitments (a reveal may overtake ProtocolStart) and refused then
        with channel(fed, REAL, tls) as ch:
            pk_grpc.PartyStub(ch).SendPi1Reveal(pk.Pi1Reveal(job_id=second, nonce=nonce, reshare_key=key), timeout=60)
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "does not open" in str(e.details()), e
        assert_clean(e, nonce.hex())
    status = wait_pathak(fed, second)
    assert status.state == "FAILED" and status.problem == common_pb2.MALFORMED and "does not open" in status.detail, status
    assert not {type(m).__name__ for m in mock[2] if getattr(m, "job_id", "") == second} & {"SizeShare", "SealedSizeRemainder"}
    assert_ledgers_within_budget(fed)


def test_a_reveal_without_a_full_reshare_key_and_a_party_sent_reshare_piece_are_refused(fed, mock):  # noqa: F811
    """The reveal carries the sender's X25519 re-share key (each pair of parties derives its S3.3 pieces' seed from
    their keys; the pieces between parties are never sent): a key that is not 32 bytes is MALFORMED and fails the
    job before P1 sends anything derived from its size. A ResharePiece from a party is refused (WRONG_ROLE: only
    Charlie and P1 send one) and, from a participant, fails that job closed."""
    tls = mock[0]
    for seed, piece in ((b"rv-key", False), (b"rv-piece", True)):
        job = submit_pathak(fed, pathak_spec(parties=[REAL, MOCK], seed=seed, deadline=60.0))
        nonce, key = fresh_opening()
        _accept(fed, mock, job, pi1_commitment(job, MOCK, nonce, key))
        short = key[:16]
        with channel(fed, REAL, tls) as ch:
            stub = pk_grpc.PartyStub(ch)
            if piece:
                e = refused(lambda: stub.SendResharePiece(pk.ResharePiece(job_id=job, piece=bytes(16 * 4)), timeout=60))
                assert e.code() == grpc.StatusCode.PERMISSION_DENIED and "WRONG_ROLE" in e.details(), e
            else:
                e = refused(lambda: stub.SendPi1Reveal(pk.Pi1Reveal(job_id=job, nonce=nonce, reshare_key=short), timeout=60))
                assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "re-share key" in e.details(), e
                assert_clean(e, short.hex())
        status = wait_pathak(fed, job)
        assert status.state == "FAILED" and status.problem == (common_pb2.WRONG_ROLE if piece else common_pb2.MALFORMED), status
        assert not {type(m).__name__ for m in mock[2] if getattr(m, "job_id", "") == job} & {"SizeShare", "SealedSizeRemainder"}
    assert_ledgers_within_budget(fed)


# -- the test plays P1: PartySecrets relays every opening to party-1 ------------------------------------------------

@functools.lru_cache(maxsize=1)
def _xi() -> KeyPair:
    return KeyPair.generate(768)  # ξ, as P1 would generate it (test-mode size)


def _lead(fed, mock, seed: bytes) -> tuple[str, bytes, bytes, pk.Pi1Reveal]:  # noqa: F811
    """A job [party-mock (P1), party-1]: the mock commits and accepts; party-1 is started first, spends and reveals
    to the mock. The mock's nonce and key and party-1's reveal are returned."""
    job = submit_pathak(fed, pathak_spec(parties=[MOCK, REAL], seed=seed, deadline=60.0))
    nonce, key = fresh_opening()
    _accept(fed, mock, job, pi1_commitment(job, MOCK, nonce, key))
    return job, nonce, key, received(mock, job, pk.Pi1Reveal)


def _secrets(job: str, nonces: list[bytes], keys: list[bytes]) -> pk.PartySecrets:
    xi = _xi()
    b = lambda v: v.to_bytes((v.bit_length() + 7) // 8, "big")  # noqa: E731
    return pk.PartySecrets(job_id=job, paillier_p=b(xi.p), paillier_q=b(xi.q), pi1_nonces=nonces, reshare_keys=keys)


def _sent_nothing_derived(mock, job: str) -> None:  # noqa: F811
    kinds = {type(m).__name__ for m in mock[2] if getattr(m, "job_id", "") == job}
    assert not kinds & {"SizeShare", "SealedSizeRemainder", "MaskedSize"}, kinds


@pytest.mark.parametrize("altered", ["p1-nonce", "own-key"])
def test_a_relayed_opening_that_does_not_open_its_commitment_is_refused(fed, mock, altered):  # noqa: F811
    """P1 relays every party's opening: it cannot alter one (to steer π1, or to substitute a party's re-share key and
    learn its pieces). Either is refused (MALFORMED) at once, the job fails before party-1 sends anything derived
    from its size."""
    tls = mock[0]
    job, nonce, key, theirs = _lead(fed, mock, b"rv-relay-" + altered.encode())
    nonces, keys = [nonce, theirs.nonce], [key, theirs.reshare_key]
    if altered == "p1-nonce":
        nonces[0] = bytes([nonce[0] ^ 1]) + nonce[1:]
    else:
        keys[1] = fresh_opening()[1]
    with channel(fed, REAL, tls) as ch:
        e = refused(lambda: pk_grpc.PartyStub(ch).SendPartySecrets(_secrets(job, nonces, keys), timeout=60))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "does not open" in e.details(), e
    assert_clean(e, nonces[0].hex(), keys[1].hex())
    status = wait_pathak(fed, job)
    assert status.state == "FAILED" and status.problem == common_pb2.MALFORMED, status
    _sent_nothing_derived(mock, job)
    assert_ledgers_within_budget(fed)


def test_party_secrets_from_a_party_that_is_not_p1_and_a_second_copy_are_refused(fed, mock):  # noqa: F811
    tls = mock[0]
    nonce, key = fresh_opening()
    job = submit_pathak(fed, pathak_spec(parties=[REAL, MOCK], seed=b"rv-not-p1", deadline=60.0))
    _accept(fed, mock, job, pi1_commitment(job, MOCK, nonce, key))  # the mock is P2 here
    with channel(fed, REAL, tls) as ch:
        e = refused(lambda: pk_grpc.PartyStub(ch).SendPartySecrets(_secrets(job, [nonce, nonce], [key, key]), timeout=60))
    assert e.code() == grpc.StatusCode.PERMISSION_DENIED and "WRONG_ROLE" in e.details(), e
    status = wait_pathak(fed, job)
    assert status.state == "FAILED" and status.problem == common_pb2.WRONG_ROLE, status
    _sent_nothing_derived(mock, job)

    job, nonce, key, theirs = _lead(fed, mock, b"rv-twice-secrets")  # the mock is P1: an honest PartySecrets, twice
    secrets = _secrets(job, [nonce, theirs.nonce], [key, theirs.reshare_key])
    with channel(fed, REAL, tls) as ch:
        stub = pk_grpc.PartyStub(ch)
        stub.SendPartySecrets(secrets, timeout=60)
        e = refused(lambda: stub.SendPartySecrets(secrets, timeout=60))
    assert e.code() in (grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.FAILED_PRECONDITION), e  # REPLAY, or the job moved on
    status = wait_pathak(fed, job)
    assert status.state == "FAILED" and status.problem in (common_pb2.REPLAY, common_pb2.STEP_OUT_OF_ORDER), status

    job, nonce, key, theirs = _lead(fed, mock, b"rv-reveal-to-p2")  # a reveal goes to P1 only: P1 sends none
    with channel(fed, REAL, tls) as ch:
        e = refused(lambda: pk_grpc.PartyStub(ch).SendPi1Reveal(pk.Pi1Reveal(job_id=job, nonce=nonce, reshare_key=key), timeout=60))
    assert e.code() == grpc.StatusCode.PERMISSION_DENIED and "WRONG_ROLE" in e.details(), e
    status = wait_pathak(fed, job)
    assert status.state == "FAILED" and status.problem == common_pb2.WRONG_ROLE, status
    _sent_nothing_derived(mock, job)
    assert_ledgers_within_budget(fed)
