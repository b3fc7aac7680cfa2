"""services/common/seal.py: a sealed party-to-party call opens only at its recipient, unaltered, once, from a
party certificate of the federation's CA; its reply opens only for the call it answers."""

from __future__ import annotations

import dataclasses
import time

import pytest
from cryptography.hazmat.primitives import serialization

from mpdp_services.common import pki, seal

FED = "fed-a"


@pytest.fixture(scope="module")
def world():
    ca_key, ca = pki.make_ca(FED)
    other_ca_key, other_ca = pki.make_ca(FED)  # same federation name, another CA: what a curator could mint
    sites = {}
    for name in ("party-1", "party-2", "party-3"):
        key, cert = pki.issue(ca_key, ca, "party", name)
        sites[name] = (key, pki.pem_cert(cert))
    rogue_key, rogue = pki.issue(other_ca_key, other_ca, "party", "party-1")
    node_key, node = pki.issue(ca_key, ca, "compute_node", "party-1")
    other_fed_ca_key, other_fed_ca = pki.make_ca("fed-b")
    return dict(ca=ca, sites=sites, rogue=(rogue_key, pki.pem_cert(rogue)), node=(node_key, pki.pem_cert(node)),
                other_fed=pki.issue(other_fed_ca_key, other_fed_ca, "party", "party-1"), other_fed_ca=other_fed_ca)


def header(sender="party-1", recipient="party-2", **kw) -> seal.Header:
    fields = dict(federation=FED, sender=sender, recipient=recipient, method="/mpdp.messages.Party/SendNoiseChain",
                  job_id="pathak2010-abc", nonce=seal.new_nonce(), deadline=time.time() + 60)
    fields.update(kw)
    return seal.Header(**fields)


def sealed_call(world, body=b"the step", sender="party-1", recipient="party-2", key_cert=None, **kw):
    key, cert = key_cert or world["sites"][sender]
    rkey = world["sites"][recipient][0].public_key()
    return seal.seal(header(sender, recipient, **kw), body, key, cert, rkey)


def open_at(world, sealed, me="party-2", guard=None, **kw):
    return seal.open_sealed(sealed, me, FED, world["sites"][me][0], world["ca"], guard if guard is not None else seal.ReplayGuard(100), **kw)


def test_a_sealed_call_opens_at_its_recipient_and_its_reply_at_its_sender(world):
    sealed, reply_key = sealed_call(world, b"\x00secret step\xff")
    assert b"secret step" not in sealed.ciphertext
    opened = open_at(world, sealed)
    assert opened.request == b"\x00secret step\xff" and opened.header.sender == "party-1"
    nonce, ct = seal.seal_reply(opened, opened.signature, 9, "STEP_OUT_OF_ORDER: no", b"ack")
    assert seal.open_reply(reply_key, sealed.signature, nonce, ct) == (9, "STEP_OUT_OF_ORDER: no", b"ack")


@pytest.mark.parametrize("field", ["ciphertext", "gcm_nonce", "ephemeral_key", "signature"])
def test_a_tampered_call_is_refused(world, field):
    sealed, _ = sealed_call(world)
    raw = bytearray(getattr(sealed, field))
    raw[len(raw) // 2] ^= 1
    with pytest.raises(seal.SealError):
        open_at(world, dataclasses.replace(sealed, **{field: bytes(raw)}))


@pytest.mark.parametrize("change", [lambda h: dict(method="/mpdp.messages.Party/SendNoiseScale"), lambda h: dict(job_id="pathak2010-other"),
                                    lambda h: dict(deadline=h.deadline + 60)], ids=["method", "job", "deadline"])
def test_a_header_the_relay_changed_is_refused(world, change):
    sealed, _ = sealed_call(world)  # the deadline is moved from the call's own (a later one, still valid as a deadline)
    with pytest.raises(seal.SealError, match="signature"):
        open_at(world, dataclasses.replace(sealed, header=dataclasses.replace(sealed.header, **change(sealed.header))))


def test_a_call_for_another_party_is_refused_there_and_cannot_be_readdressed(world):
    sealed, _ = sealed_call(world, recipient="party-2")
    with pytest.raises(seal.SealError, match="another party"):
        open_at(world, sealed, me="party-3")
    readdressed = dataclasses.replace(sealed, header=dataclasses.replace(sealed.header, recipient="party-3"))
    with pytest.raises(seal.SealError):  # signed for party-2; and party-3 cannot derive party-2's key anyway
        open_at(world, readdressed, me="party-3")


def test_a_replayed_call_is_refused_and_a_forgery_burns_no_nonce(world):
    guard = seal.ReplayGuard(100)
    sealed, _ = sealed_call(world)
    forged = dataclasses.replace(sealed, ciphertext=sealed.ciphertext[:-1] + bytes([sealed.ciphertext[-1] ^ 1]))
    with pytest.raises(seal.SealError):
        open_at(world, forged, guard=guard)
    open_at(world, sealed, guard=guard)  # the genuine call still opens once
    with pytest.raises(seal.SealError, match="replay"):
        open_at(world, sealed, guard=guard)


def test_an_expired_or_far_deadline_is_refused(world):
    past, _ = sealed_call(world, deadline=time.time() - 1)
    with pytest.raises(seal.SealError, match="deadline"):
        open_at(world, past)
    far, _ = sealed_call(world, deadline=time.time() + 10 * seal.MAX_DEADLINE_AHEAD)
    with pytest.raises(seal.SealError, match="deadline"):
        open_at(world, far)


def test_a_signer_other_than_the_named_sender_is_refused(world):
    # party-3 signs with its own key and certificate but claims to be party-1
    sealed, _ = sealed_call(world, sender="party-1", key_cert=world["sites"]["party-3"])
    with pytest.raises(seal.SealError, match="another party"):
        open_at(world, sealed)
    # party-3's certificate attached, party-1's name claimed, but signed with party-3's key over party-1's header:
    key3, _ = world["sites"]["party-3"]
    sealed2, _ = sealed_call(world, sender="party-1", key_cert=(key3, world["sites"]["party-1"][1]))
    with pytest.raises(seal.SealError, match="signature"):
        open_at(world, sealed2)


@pytest.mark.parametrize("which", ["rogue", "node"])
def test_a_certificate_not_from_the_ca_or_not_a_party_is_refused(world, which):
    sealed, _ = sealed_call(world, key_cert=world[which])
    with pytest.raises(seal.SealError, match="CA|party"):
        open_at(world, sealed)


def test_check_certificate_refuses_another_federation_and_another_name(world):
    cert = world["sites"]["party-2"][1]
    assert seal.check_certificate(cert, world["ca"], "party-2", FED).public_numbers() == world["sites"]["party-2"][0].public_key().public_numbers()
    with pytest.raises(seal.SealError, match="another party"):
        seal.check_certificate(cert, world["ca"], "party-1", FED)
    with pytest.raises(seal.SealError, match="another federation"):
        seal.check_certificate(cert, world["ca"], "party-2", "fed-b")
    key, other = world["other_fed"]
    with pytest.raises(seal.SealError, match="CA"):
        seal.check_certificate(pki.pem_cert(other), world["ca"], "party-1", FED)
    with pytest.raises(seal.SealError):
        seal.check_certificate(b"not a certificate", world["ca"], "party-1", FED)


def test_a_reply_opens_only_for_its_own_call(world):
    a, key_a = sealed_call(world)
    b, key_b = sealed_call(world)
    opened_a = open_at(world, a)
    nonce, ct = seal.seal_reply(opened_a, opened_a.signature, 0, "", b"")
    with pytest.raises(seal.SealError):
        seal.open_reply(key_b, b.signature, nonce, ct)  # another call's key
    with pytest.raises(seal.SealError):
        seal.open_reply(key_a, b.signature, nonce, ct)  # swapped onto another call
    with pytest.raises(seal.SealError):
        seal.open_reply(key_a, a.signature, nonce, ct[:-1] + bytes([ct[-1] ^ 1]))


def test_the_replay_guard_forgets_only_expired_calls_and_refuses_when_full():
    g = seal.ReplayGuard(4)
    for i in range(4):
        assert g.admit("p", bytes([i]) * 16, deadline=100.0 + i, now=0.0)
    with pytest.raises(seal.SealError, match="too many"):
        g.admit("p", b"\x09" * 16, deadline=200.0, now=0.0)
    assert not g.admit("p", b"\x00" * 16, deadline=100.0, now=50.0)  # unexpired: still a replay
    assert g.admit("p", b"\x09" * 16, deadline=300.0, now=101.5)  # two expired, room again
    assert g.admit("q", b"\x03" * 16, deadline=300.0, now=101.5)  # another sender's nonces are its own
    assert not g.admit("p", b"\x03" * 16, deadline=103.0, now=101.5)
    assert len(g) <= 4


def test_recipient_key_is_the_certificates(world):
    key, cert = world["sites"]["party-2"]
    spki = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert pki.key_fingerprint(cert) == "sha256:" + __import__("hashlib").sha256(spki).hexdigest()


def test_one_sender_filling_its_share_of_the_replay_guard_blocks_only_itself():
    g = seal.ReplayGuard(8, per_sender=2)
    assert g.admit("mallory", b"\x01" * 16, deadline=1e9, now=0.0) and g.admit("mallory", b"\x02" * 16, deadline=1e9, now=0.0)
    with pytest.raises(seal.SealError, match="too many"):
        g.admit("mallory", b"\x03" * 16, deadline=1e9, now=0.0)
    assert g.admit("party-2", b"\x03" * 16, deadline=10.0, now=0.0)  # the others are still served
    assert g.admit("party-2", b"\x04" * 16, deadline=20.0, now=11.0)  # its expired nonce was forgotten: room again
    assert not g.admit("party-2", b"\x04" * 16, deadline=20.0, now=12.0)
