"""A malicious party in a Pathak job: the defences the protocol allows without zero-knowledge proofs.

The attacker is a party of the job played by the test ("party-mock": a federation certificate, a server that
records what it is sent, raw gRPC calls for what it sends); the other party (party-1, P1 here) is a real process.

- *π1 by commit and reveal.* Every party commits to a random nonce with its JobAcceptance, ProtocolStart carries all
  commitments, and π1 is drawn from all the reveals: no party chooses it. A party that reveals a nonce other than
  the one it committed to (to steer π1 once it has seen the others') is refused (MALFORMED) and the job fails.
- *The size remainder's public range.* b_j = n_j − a_j lies in (−2^L, 2^size_bits) for every honest split; a
  sealed remainder outside it (a size above the job's public bound) is refused by Charlie (MALFORMED).

What a malicious party can still do is in docs/limitations.md ("Pathak 2010 under a malicious party").
"""

from __future__ import annotations

import os
import time
from typing import Any

import grpc
import pytest

from mpdp.math.paillier import PublicKey
from mpdp.messages import common_pb2, pathak2010_pb2 as pk, pathak2010_pb2_grpc as pk_grpc
from mpdp.pathak2010.params import PathakParams
from mpdp.math.drbg import Drbg
from mpdp.pathak2010.party import joint_pi1, pi1_commitment, reshare_secret

from tests.integration.conftest import MockParty

from .conftest import assert_clean, assert_ledgers_within_budget, channel, pathak_spec, serve_party, start_federation, submit_pathak, wait_pathak

pytestmark = pytest.mark.integration
REAL, MOCK = "party-1", "party-mock"


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    f = start_federation(tmp_path_factory.mktemp("pathakmalicious"), parties=[REAL], nodes=[], members=[REAL, MOCK])
    yield f
    f.stop()


@pytest.fixture(scope="module")
def mock(fed):
    """The attacker: registered at the curator, its server recording every message it is sent."""
    servicer = MockParty()
    server, tls = serve_party(fed, MOCK, servicer)
    yield tls, servicer, []
    server.stop(0)


def received(mock, job: str, kind: type, timeout: float = 120.0) -> Any:
    """The first ``kind`` message of ``job`` the mock has been sent (waiting for it; the bound is the assertion)."""
    _, servicer, seen = mock
    end = time.monotonic() + timeout
    while True:
        for m in seen:
            if isinstance(m, kind) and m.job_id == job:
                return m
        left = end - time.monotonic()
        assert left > 0, f"the mock was never sent a {kind.__name__} for {job}"
        try:
            seen.append(servicer.inbox.get(timeout=min(left, 1.0)))
        except Exception:  # queue.Empty: look again until the bound
            pass


def fresh_opening() -> tuple[bytes, bytes]:
    """A π1 nonce and an X25519 re-share key, what a party commits to in its JobAcceptance."""
    return os.urandom(32), reshare_secret(Drbg.from_seed(os.urandom(32)))[1]


def accept_and_start(fed, mock, seed: bytes) -> tuple[str, bytes, bytes, pk.JobAnnouncement, pk.ProtocolStart]:
    """A job [party-1 (P1), party-mock]: the mock accepts with a commitment to a fresh nonce and key and is told to
    start (its nonce and key returned)."""
    tls = mock[0]
    job = submit_pathak(fed, pathak_spec(parties=[REAL, MOCK], seed=seed, deadline=60.0))
    ann = received(mock, job, pk.JobAnnouncement)
    nonce, key = fresh_opening()
    with channel(fed, "curator", tls) as ch:
        pk_grpc.CuratorStub(ch).AcceptJob(pk.JobAcceptance(job_id=job, dimension=4, pi1_commitment=pi1_commitment(job, MOCK, nonce, key)), timeout=60)
    start = received(mock, job, pk.ProtocolStart)
    return job, nonce, key, ann, start


@pytest.mark.parametrize("steer", ["nonce", "key"])
def test_a_reveal_that_does_not_open_its_commitment_is_refused(fed, mock, steer):
    """A reveal whose nonce (to steer π1) or re-share key differs from what the party committed to is refused at P1."""
    job, nonce, key, _, start = accept_and_start(fed, mock, b"commit-" + steer.encode())
    assert list(start.pi1_commitments)[1] == pi1_commitment(job, MOCK, nonce, key)  # the curator passed every commitment on
    steered = bytearray(nonce if steer == "nonce" else key)
    steered[0] ^= 1
    reveal = pk.Pi1Reveal(job_id=job, nonce=bytes(steered), reshare_key=key) if steer == "nonce" else pk.Pi1Reveal(job_id=job, nonce=nonce, reshare_key=bytes(steered))
    try:  # refused at once, or held until P1 has the commitments (its ProtocolStart comes after the mock's) and refused then
        with channel(fed, REAL, mock[0]) as ch:
            pk_grpc.PartyStub(ch).SendPi1Reveal(reveal, timeout=60)
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "does not open" in str(e.details()), e
        assert_clean(e, steered.hex())
    status = wait_pathak(fed, job)
    assert status.state == "FAILED" and status.problem == common_pb2.MALFORMED and "does not open" in status.detail, status
    received_kinds = {type(m).__name__ for m in mock[2] if getattr(m, "job_id", "") == job}
    assert not received_kinds & {"SizeShare", "SealedSizeRemainder"}, received_kinds  # P1 sent nothing derived from its size
    assert_ledgers_within_budget(fed)


@pytest.mark.parametrize("side", ["above", "below"])
def test_a_size_remainder_outside_its_public_range_is_refused_by_the_curator(fed, mock, side):
    """Above: b = 2^s + 5 claims a size beyond the public bound whatever a is (within the former |b| < 2^(L+1)).
    Below: b = −2^L claims a negative size whatever a_j (every honest b_j = n_j − a_j > −2^L), to be selected as the
    smallest party. Charlie decrypts b signed and refuses it (MALFORMED), naming no value."""
    job, nonce, key, ann, start = accept_and_start(fed, mock, b"remainder-" + side.encode())
    tls = mock[0]
    with channel(fed, REAL, tls) as ch:  # an honest reveal: π1 is the joint one
        pk_grpc.PartyStub(ch).SendPi1Reveal(pk.Pi1Reveal(job_id=job, nonce=nonce, reshare_key=key), timeout=60)
    secrets = received(mock, job, pk.PartySecrets)  # P1 relays every opening, the mock's own included
    assert list(secrets.pi1_nonces)[1] == nonce and list(secrets.reshare_keys)[1] == key
    pi1 = joint_pi1(job, list(secrets.pi1_nonces), 2, seeded=True)
    zeta = PublicKey(int.from_bytes(ann.curator_keys.paillier_n, "big"))
    xi = PublicKey(int.from_bytes(secrets.paillier_p, "big") * int.from_bytes(secrets.paillier_q, "big"))
    size_bits = ann.spec.size_bits or 32
    b = (1 << size_bits) + 5 if side == "above" else -(1 << PathakParams.from_spec(job, ann.spec).L)
    sealed = pk.SealedSizeRemainder(job_id=job, position=pi1[1], ciphertext=zeta.to_bytes(zeta.encrypt(b % zeta.n, factor=pow(7, zeta.n, zeta.nsquare))))
    with channel(fed, REAL, tls) as ch:
        stub = pk_grpc.PartyStub(ch)
        # every party sends a SizeShare to every other party: its a to the party at its position, cover to the rest
        stub.SendSizeShare(pk.SizeShare(job_id=job, a=b"\x00"), timeout=60)
        stub.SendSealedSizeRemainder(sealed, timeout=60)
    enc_a = pk.EncryptedSizeShare(job_id=job, ciphertext=xi.to_bytes(xi.encrypt(0, factor=pow(11, xi.n, xi.nsquare))))
    with channel(fed, "curator", tls) as ch:
        try:  # the step may complete on this call or on P1's: either way the job fails
            pk_grpc.CuratorStub(ch).SendEncryptedSizeShare(enc_a, timeout=60)
        except grpc.RpcError as e:
            assert e.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.ABORTED), e
            assert_clean(e, str(b))
    status = wait_pathak(fed, job)
    assert status.state == "FAILED" and status.problem == common_pb2.MALFORMED, status
    assert "remainder" in status.detail and str(b) not in status.detail
