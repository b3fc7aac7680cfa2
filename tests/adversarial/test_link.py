"""Parties only dial out: no party process listens on a TCP port for gRPC, and the curator relaying party-to-party
steps can neither forge, alter, replay nor misdirect them.

Models: the curator (or anything on the path through it) tampering with a sealed step, replaying one it relayed,
sending it to another party, or a member party posing as another; a link dropped while idle.
Expected: each is refused with the error table's status (at the curator when it can tell, else at the recipient,
before the step reaches the job), the job it names publishes untouched, and a dropped link is reopened.
"""

from __future__ import annotations

import time

import grpc
import pytest

from mpdp.messages import common_pb2, link_pb2, pathak2010_pb2 as pk
from mpdp_services.common import link, seal
from tests.integration.conftest import MockParty
from tests.linked import assert_parties_listen_on_no_grpc_port, relay_stub, sealed_call, wait_for

from .conftest import (
    PARTIES,
    job_host,
    start_federation,
    assert_all_serving,
    assert_clean,
    assert_ledgers_within_budget,
    assert_status,
    channel,
    mint,
    operator_curator,
    pathak_published,
    pathak_spec,
    refused,
    serve_party,
    site_tls,
    submit_pathak,
    wait_pathak,
)

SECRETS = "/mpdp.messages.Party/SendPartySecrets"
EXTRA = ["party-linkdrop", "party-gone"]  # members the tests play with their own link clients


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    f = start_federation(tmp_path_factory.mktemp("link"), nodes=[], members=[*PARTIES, *EXTRA])
    yield f
    f.stop()


def _certificate(fed, asking: str, of: str) -> bytes:
    with channel(fed, "curator", site_tls(fed, asking)) as ch:
        return relay_stub(ch).Certificate(link_pb2.PartyCertificateRequest(name=of), timeout=20).certificate


def _relay(fed, sender_tls, wire) -> link_pb2.SealedReply:
    with channel(fed, "curator", sender_tls) as ch:
        return relay_stub(ch).Relay(wire, timeout=30)


def _running_job(fed, seed: bytes) -> str:
    job = submit_pathak(fed, pathak_spec(seed=seed))
    with operator_curator(fed) as ch:
        for st in job_host(ch).WatchJob(common_pb2.JobRef(job_id=job), timeout=120):
            if st.terminal or st.stage != "setup":
                break
    return job


def _published(fed, job: str) -> None:
    st = wait_pathak(fed, job)
    assert st.state == "PUBLISHED", f"a refused relay touched the job: {st.state} {common_pb2.Problem.Name(st.problem)} {st.detail[:200]!r}"
    assert pathak_published(fed, job)
    assert_ledgers_within_budget(fed)


def test_no_party_listens_on_a_tcp_port_while_jobs_run(fed):
    job = submit_pathak(fed, pathak_spec(seed=b"no-listener"))
    assert_parties_listen_on_no_grpc_port(fed)  # while the job runs
    _published(fed, job)
    assert_parties_listen_on_no_grpc_port(fed)


def test_forged_replayed_and_misaddressed_relays_are_refused_and_the_job_is_untouched(fed):
    job = _running_job(fed, b"relay-forgeries")
    p3 = site_tls(fed, "party-3")  # a member of the federation and of the job; it holds its own key only
    cert1, cert2 = _certificate(fed, "party-3", "party-1"), _certificate(fed, "party-3", "party-2")
    body = pk.PartySecrets(job_id=job, paillier_p=(2**127 - 1).to_bytes(16, "big"), paillier_q=(2**89 - 1).to_bytes(12, "big")).SerializeToString()

    # posing as another party: the curator refuses a sealed call whose sender is not the caller
    wire, _, _ = sealed_call(p3, fed.federation, "party-1", "party-2", cert2, SECRETS, body, job)
    assert_status(refused(lambda: _relay(fed, p3, wire)), grpc.StatusCode.PERMISSION_DENIED)
    # signed by party-3 but claiming party-1 with party-1's certificate attached (the relay cannot tell): the recipient can
    forged = link_pb2.SealedCall()
    forged.CopyFrom(wire)
    forged.sender_certificate = cert1
    with channel(fed, "curator", site_tls(fed, "party-1")) as ch:  # relayed as party-1 would (what a curator could inject)
        e = refused(lambda: relay_stub(ch).Relay(forged, timeout=30))
    assert_status(e, grpc.StatusCode.PERMISSION_DENIED)
    assert_clean(e, job)

    # tampered in transit: a flipped ciphertext bit, a changed method, a changed job id
    for change in ({"ciphertext": None}, {"method": "/mpdp.messages.Party/SendNoiseScale"}, {"job_id": "pathak2010-other"}):
        wire, _, _ = sealed_call(p3, fed.federation, "party-3", "party-2", cert2, SECRETS, body, job)
        if "ciphertext" in change:
            wire.ciphertext = wire.ciphertext[:-1] + bytes([wire.ciphertext[-1] ^ 1])
        else:
            setattr(wire, *next(iter(change.items())))
        assert_status(refused(lambda: _relay(fed, p3, wire)), grpc.StatusCode.PERMISSION_DENIED)

    # misdirected: sealed for party-2, sent to party-1 (the signed recipient changed), or to party-1 as it is
    wire, _, _ = sealed_call(p3, fed.federation, "party-3", "party-2", cert2, SECRETS, body, job)
    wire.recipient = "party-1"
    assert_status(refused(lambda: _relay(fed, p3, wire)), grpc.StatusCode.PERMISSION_DENIED)
    wire, _, _ = sealed_call(p3, fed.federation, "party-3", "party-2", cert1, SECRETS, body, job)  # sealed to party-1's key
    assert_status(refused(lambda: _relay(fed, p3, wire)), grpc.StatusCode.PERMISSION_DENIED)

    # replayed: a genuine sealed step is answered by the recipient's job (party-3 may not send SendPartySecrets: only P1
    # may, so its own job refuses it), and the same bytes again are refused as a replay before they reach the job
    wire, reply_key, sealed = sealed_call(p3, fed.federation, "party-3", "party-1", cert1, "/mpdp.messages.Party/SendPi1Reveal",
                                          pk.Pi1Reveal(job_id="pathak2010-000000000000").SerializeToString(), "pathak2010-000000000000")
    reply = _relay(fed, p3, wire)
    code, details, _ = seal.open_reply(reply_key, sealed.signature, reply.gcm_nonce, reply.ciphertext)
    assert link.status(code) == grpc.StatusCode.NOT_FOUND and details.startswith("UNKNOWN_JOB:")
    e = refused(lambda: _relay(fed, p3, wire))
    assert_status(e, grpc.StatusCode.ALREADY_EXISTS)
    assert e.details().startswith("REPLAY:")

    # expired: a deadline already past is refused at the curator (and would be at the recipient)
    wire, _, _ = sealed_call(p3, fed.federation, "party-3", "party-1", cert1, SECRETS, body, job, deadline=time.time() - 1)
    assert_status(refused(lambda: _relay(fed, p3, wire)), grpc.StatusCode.INVALID_ARGUMENT)

    # a certificate the federation's CA did not issue to that party is refused by a sender (a curator's substitute)
    with pytest.raises(seal.SealError):
        seal.check_certificate(_certificate(fed, "party-3", "party-2"), _ca(fed), "party-1", fed.federation)

    # outsiders may not relay at all: a minted non-member, an operator, the curator's own certificate
    for who in (mint(fed, "party", "party-9"), site_tls(fed, "operator"), site_tls(fed, "curator")):
        assert_status(refused(lambda: _relay(fed, who, wire)), grpc.StatusCode.PERMISSION_DENIED)
    _published(fed, job)
    assert_all_serving(fed)


def _ca(fed):
    from cryptography import x509

    return x509.load_pem_x509_certificate((fed.workdir / "ca" / "ca.crt").read_bytes())


def test_a_link_dropped_while_idle_is_reopened_and_reaches_the_party(fed):
    """A party (the production link client, serving a recording servicer) loses its stream while idle: it reopens it,
    and the curator's next call reaches it over the new one."""
    servicer = MockParty()
    linked, _ = serve_party(fed, "party-linkdrop", servicer)
    try:
        assert linked.opened() == 1
        linked.drop()
        wait_for(lambda: linked.opened() == 2 and linked.link.up.is_set(), timeout=30)
        job = submit_pathak(fed, pathak_spec(parties=["party-linkdrop", "party-1"], seed=b"after-drop", deadline=30.0))
        got = servicer.inbox.get(timeout=30)
        assert isinstance(got, pk.JobAnnouncement) and got.job_id == job
    finally:
        linked.stop()
    st = wait_pathak(fed, job, timeout=90)
    assert st.terminal and st.state == "FAILED"  # the hand-driven party never accepted: the job fails, nothing published
    assert not pathak_published(fed, job)
    assert_all_serving(fed)


def test_a_party_without_a_link_is_unreachable_and_the_job_fails_naming_it(fed):
    """A registered party whose link is gone: the curator's call answers UNAVAILABLE, as for an unreachable party."""
    servicer = MockParty()
    linked, _ = serve_party(fed, "party-gone", servicer)
    linked.stop()
    job = submit_pathak(fed, pathak_spec(parties=["party-1", "party-gone"], seed=b"no-link", deadline=60.0))
    st = wait_pathak(fed, job, timeout=120)
    assert st.state == "FAILED" and "party-gone" in st.detail, st
    assert st.problem in (common_pb2.PEER_UNREACHABLE, common_pb2.JOB_FAILED)
    assert_all_serving(fed)

