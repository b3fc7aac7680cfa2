"""P1's relay of the π₁ openings and of the pair seeds, with three parties, over real processes and TLS.

The federation has two real parties (party-1, party-2) and the attacker, party-mock (the recording mock of
tests/adversarial/test_pathak_malicious.py). The two-party cases are in tests/adversarial/test_pathak_reveal.py;
what needs a third party is here:

- a malicious party that commits *honestly* to a low-order X25519 key (its opening opens its commitment, so P1
  relays it): the honest party that derives a pair seed with it refuses the key (MALFORMED, naming whose key), the
  job fails, every service keeps serving and every ledger stays within budget;
- a malicious P1 that relays the honest openings to one party and the same openings in another order to the other
  (to make them expand different π₁): the second refuses (MALFORMED), the job fails and nothing is published;
- a party that never sends its reveal: the job fails at its deadline, with nothing of the relay sent to it;
- S0 messages from outside the job (another party of the federation, another federation's certificate, Charlie)
  are refused and change nothing in it; a PartySecrets that arrives before the commitments is held, then refused;
- a party that paid and sent its π1 reveal (no data in it) when another party refuses its spend: accounting rule 3
  says its charge is voided;
- P1 giving one party the factors of another key than the ξ it announced (the one part of PartySecrets no
  commitment binds; in process, since it needs a P1 that computes): the job fails, nothing is released.
"""

from __future__ import annotations

import os
import queue
import time

import grpc
import pytest
from cryptography import x509

from mpdp.ledger import VOIDED
from mpdp.messages import common_pb2, pathak2010_pb2 as pk, pathak2010_pb2_grpc as pk_grpc
from mpdp.pathak2010.party import pi1_commitment
from mpdp_services.common import pki
from mpdp_services.common.rpc import TlsFiles

from .conftest import (
    assert_all_serving,
    assert_clean,
    assert_ledgers_within_budget,
    channel,
    ledger,
    pathak_published,
    pathak_spec,
    mint,
    refused,
    serve_party,
    site_tls,
    start_federation,
    submit_pathak,
    wait_pathak,
)
from .test_pathak_malicious import MOCK, REAL, fresh_opening, mock, received  # noqa: F401  (the module's mock party, over this module's federation)
from .test_pathak_reveal import _secrets

pytestmark = pytest.mark.integration
OTHER = "party-2"
REFUSER = "party-mock2"  # a party that accepts and then refuses its spend (BUDGET_EXCEEDED)
# A point of order 8 on Curve25519 (RFC 7748's list of small-order points): with any clamped scalar the shared
# secret is zero, as with the all-zero encoding.
ORDER_8 = bytes.fromhex("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800")


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    f = start_federation(tmp_path_factory.mktemp("pathakrelay"), parties=[REAL, OTHER], nodes=[], members=[REAL, OTHER, MOCK, REFUSER])
    yield f
    f.stop()


def _accept(fed, mock, job: str, nonce: bytes, key: bytes) -> pk.ProtocolStart:  # noqa: F811
    received(mock, job, pk.JobAnnouncement)
    with channel(fed, "curator", mock[0]) as ch:
        pk_grpc.CuratorStub(ch).AcceptJob(pk.JobAcceptance(job_id=job, dimension=4, pi1_commitment=pi1_commitment(job, MOCK, nonce, key)), timeout=60)
    return received(mock, job, pk.ProtocolStart)


def _all_received(mock, job: str, kind: type, count: int, timeout: float = 120.0) -> list:  # noqa: F811
    """The first ``count`` ``kind`` messages of ``job`` the mock has been sent (waiting for them; the bound is the assertion)."""
    end = time.monotonic() + timeout
    while True:
        got = [m for m in mock[2] if isinstance(m, kind) and m.job_id == job]
        if len(got) >= count:
            return got[:count]
        assert time.monotonic() < end, f"the mock was sent {len(got)} of {count} {kind.__name__} for {job}"
        try:
            mock[2].append(mock[1].inbox.get(timeout=1.0))
        except Exception:  # queue.Empty: look again until the bound
            pass


def _sent_to_mock(mock, job: str) -> list[str]:  # noqa: F811
    return [type(m).__name__ for m in mock[2] if getattr(m, "job_id", "") == job]


@pytest.mark.parametrize("point", ["all-zero", "order-8"])
def test_an_honestly_committed_low_order_key_fails_the_job_at_the_honest_party(fed, mock, point):  # noqa: F811
    """The mock (P3) commits to a low-order X25519 key and opens its commitment correctly: P1 checks only the opening
    and relays it; party-2, which derives its pair seed with the mock, refuses the key (MALFORMED, naming whose key)
    before it sends anything derived from its size. The services keep serving and the ledgers stay within budget."""
    key = bytes(32) if point == "all-zero" else ORDER_8
    job = submit_pathak(fed, pathak_spec(parties=[REAL, OTHER, MOCK], seed=b"relay-low-" + point.encode(), deadline=60.0))
    nonce = fresh_opening()[0]
    start = _accept(fed, mock, job, nonce, key)
    assert list(start.pi1_commitments)[2] == pi1_commitment(job, MOCK, nonce, key)
    try:  # accepted at once (it opens its commitment), or held until P1 has the commitments and accepted then
        with channel(fed, REAL, mock[0]) as ch:
            pk_grpc.PartyStub(ch).SendPi1Reveal(pk.Pi1Reveal(job_id=job, nonce=nonce, reshare_key=key), timeout=60)
    except grpc.RpcError as e:  # the job may already have failed at party-2 (P1 relays once all reveals are in: not before)
        pytest.fail(f"an opening that opens its commitment was refused at P1: {e.code().name} {e.details()}")
    secrets = received(mock, job, pk.PartySecrets)  # P1 relays every opening to every other party, the mock included
    assert list(secrets.reshare_keys)[2] == key
    status = wait_pathak(fed, job)
    assert status.state == "FAILED" and status.problem == common_pb2.MALFORMED, status
    assert MOCK in status.detail and "re-share key" in status.detail, status
    assert key.hex() not in status.detail
    assert not pathak_published(fed, job)
    # party-2 refused before its S1.2: the mock (at some position of π₁) got no SizeShare from party-2; P1 (party-1)
    # may have sent its own, so at most one SizeShare, and P1 is no mock here (nothing goes to it via the mock).
    assert _sent_to_mock(mock, job).count("SizeShare") <= 1, _sent_to_mock(mock, job)
    assert_all_serving(fed)
    assert_ledgers_within_budget(fed)


def test_p1_relaying_the_openings_in_another_order_to_one_party_is_refused(fed, mock):  # noqa: F811
    """Equivocation: the mock is P1 of [mock, party-1, party-2]. It relays the honest openings to party-1 and, to
    party-2, the same openings with party-1's and party-2's swapped (every one a valid opening of some commitment:
    π₁ expanded from them would differ). party-2 checks each opening against the commitment of the party at its
    position and refuses (MALFORMED); the job fails, nothing is published."""
    tls = mock[0]
    job = submit_pathak(fed, pathak_spec(parties=[MOCK, REAL, OTHER], seed=b"relay-equivocate", deadline=60.0))
    nonce, key = fresh_opening()
    start = _accept(fed, mock, job, nonce, key)
    commitments = list(start.pi1_commitments)
    reveals = _all_received(mock, job, pk.Pi1Reveal, 2)
    by_name = {}
    for r in reveals:  # which party sent which reveal: the commitment it opens says
        (name,) = [n for n, c in zip([REAL, OTHER], commitments[1:]) if pi1_commitment(job, n, r.nonce, r.reshare_key) == c]
        by_name[name] = r
    honest = _secrets(job, [nonce, by_name[REAL].nonce, by_name[OTHER].nonce], [key, by_name[REAL].reshare_key, by_name[OTHER].reshare_key])
    swapped = _secrets(job, [nonce, by_name[OTHER].nonce, by_name[REAL].nonce], [key, by_name[OTHER].reshare_key, by_name[REAL].reshare_key])
    with channel(fed, REAL, tls) as ch:
        pk_grpc.PartyStub(ch).SendPartySecrets(honest, timeout=60)
    with channel(fed, OTHER, tls) as ch:
        e = refused(lambda: pk_grpc.PartyStub(ch).SendPartySecrets(swapped, timeout=60))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "does not open" in e.details(), e
    assert_clean(e, by_name[OTHER].nonce.hex())
    status = wait_pathak(fed, job)
    assert status.state == "FAILED" and status.problem == common_pb2.MALFORMED, status
    assert not pathak_published(fed, job)
    assert_all_serving(fed)
    assert_ledgers_within_budget(fed)


def test_a_withheld_reveal_fails_the_job_at_its_deadline_with_nothing_sent_to_the_withholder(fed, mock):  # noqa: F811
    """The mock commits and accepts but never sends its reveal: P1 waits for it and relays nothing. The job ends
    (no hang) at its deadline; nothing of S0's relay or of Stage 1 reaches the mock; the ledgers stay within budget.
    (The deadline's status names the state, not the party whose reveal never came: only P1 knows which.)"""
    job = submit_pathak(fed, pathak_spec(parties=[REAL, MOCK], seed=b"relay-withheld", deadline=20.0))
    nonce, key = fresh_opening()
    _accept(fed, mock, job, nonce, key)
    status = wait_pathak(fed, job)
    assert status.state == "FAILED" and "deadline" in status.detail, status
    assert not {"PartySecrets", "SizeShare"} & set(_sent_to_mock(mock, job)), _sent_to_mock(mock, job)
    assert_all_serving(fed)
    assert_ledgers_within_budget(fed)


def _foreign_party(fed) -> TlsFiles:
    """party-1's name and role, from another federation's CA (the client still trusts this federation's CA, so only
    the server's check of the client certificate can refuse it)."""
    folder = fed.workdir / "minted" / "foreign-party-1"
    if not (folder / "site.crt").exists():
        ca_key, ca_cert = pki.make_ca("other-federation")
        key, cert = pki.issue(ca_key, ca_cert, "party", OTHER, ["127.0.0.1"])
        ours = x509.load_pem_x509_certificate((fed.workdir / "ca" / "ca.crt").read_bytes())
        pki.write_site(folder, key, cert, ours)
    return TlsFiles(folder / "site.crt", folder / "site.key", folder / "ca.crt")


def _once_held(fed, site: str, tls: TlsFiles, call) -> grpc.RpcError:
    """The refusal of ``call`` at ``site`` once the site holds the job (a party admits a job just after its
    announcement is acknowledged, so a first call may find none: UNKNOWN_JOB, tried again within the bound)."""
    end = time.monotonic() + 60
    while True:
        with channel(fed, site, tls) as ch:
            e = refused(lambda: call(pk_grpc.PartyStub(ch)))
        if e.code() != grpc.StatusCode.NOT_FOUND:
            return e
        assert time.monotonic() < end, e


def test_s0_messages_from_outside_the_job_change_nothing_in_it(fed, mock):  # noqa: F811
    """While a job [party-1, party-2, mock] waits in S0: a party of the federation that is not in the job sends P1 a
    reveal and party-2 a PartySecrets (WRONG_ROLE each), and a certificate naming party-2 from another federation's
    CA sends P1 a reveal (refused in the TLS handshake). None of them counts: the mock then accepts and reveals, and
    P1 relays exactly the three committed openings (the job is left to end at its deadline; it publishes nothing)."""
    job = submit_pathak(fed, pathak_spec(parties=[REAL, OTHER, MOCK], seed=b"relay-outsiders", deadline=30.0))
    received(mock, job, pk.JobAnnouncement)  # the job waits for the mock's acceptance from here on
    nonce, key = fresh_opening()
    reveal = pk.Pi1Reveal(job_id=job, nonce=os.urandom(32), reshare_key=key)
    outsider = mint(fed, "party", "party-x")
    e = _once_held(fed, REAL, outsider, lambda stub: stub.SendPi1Reveal(reveal, timeout=60))
    assert e.code() == grpc.StatusCode.PERMISSION_DENIED and "WRONG_ROLE" in e.details(), e
    e = _once_held(fed, OTHER, outsider, lambda stub: stub.SendPartySecrets(_secrets(job, [nonce] * 3, [key] * 3), timeout=60))
    assert e.code() == grpc.StatusCode.PERMISSION_DENIED and "WRONG_ROLE" in e.details(), e
    with channel(fed, REAL, _foreign_party(fed)) as ch:
        e = refused(lambda: pk_grpc.PartyStub(ch).SendPi1Reveal(reveal, timeout=60))
    assert e.code() == grpc.StatusCode.UNAVAILABLE, e
    start = _accept(fed, mock, job, nonce, key)
    with channel(fed, REAL, mock[0]) as ch:
        pk_grpc.PartyStub(ch).SendPi1Reveal(pk.Pi1Reveal(job_id=job, nonce=nonce, reshare_key=key), timeout=60)
    secrets = received(mock, job, pk.PartySecrets)
    names = [REAL, OTHER, MOCK]
    assert [pi1_commitment(job, n, v, k) for n, v, k in zip(names, secrets.pi1_nonces, secrets.reshare_keys)] == list(start.pi1_commitments)
    status = wait_pathak(fed, job)
    assert status.state == "FAILED", status
    assert not pathak_published(fed, job)
    assert_all_serving(fed)
    assert_ledgers_within_budget(fed)


def test_charlie_cannot_pose_as_p1_or_reveal_to_it(fed, mock):  # noqa: F811
    """Charlie relays the commitments but must not take part in the openings (they would give him π₁): a PartySecrets
    or a Pi1Reveal over the curator's certificate is refused (WRONG_ROLE, by the method's roles, before any job is
    looked up), and the job, untouched, publishes."""
    job = submit_pathak(fed, pathak_spec(parties=[REAL, OTHER], seed=b"relay-charlie", deadline=60.0))
    nonce, key = fresh_opening()
    charlie = site_tls(fed, "curator")
    with channel(fed, OTHER, charlie) as ch:
        e = refused(lambda: pk_grpc.PartyStub(ch).SendPartySecrets(_secrets(job, [nonce, nonce], [key, key]), timeout=60))
    assert e.code() == grpc.StatusCode.PERMISSION_DENIED and "WRONG_ROLE" in e.details(), e
    with channel(fed, REAL, charlie) as ch:
        e = refused(lambda: pk_grpc.PartyStub(ch).SendPi1Reveal(pk.Pi1Reveal(job_id=job, nonce=nonce, reshare_key=key), timeout=60))
    assert e.code() == grpc.StatusCode.PERMISSION_DENIED and "WRONG_ROLE" in e.details(), e
    status = wait_pathak(fed, job)
    assert status.state == "PUBLISHED", status
    assert_all_serving(fed)
    assert_ledgers_within_budget(fed)


def test_party_secrets_before_the_commitments_are_known_is_held_and_then_refused(fed, mock):  # noqa: F811
    """The race: the mock, P1 of [mock, party-1], sends its PartySecrets before it has even accepted (party-1 holds
    the job but no commitment yet), guessing party-1's opening. party-1 holds the message (it cannot check it yet),
    and once ProtocolStart brings the commitments it refuses it (MALFORMED) before sending anything derived from its
    size; the early message does not let P1 skip party-1's reveal either (party-1 still reveals to P1 only)."""
    job = submit_pathak(fed, pathak_spec(parties=[MOCK, REAL], seed=b"relay-early-secrets", deadline=60.0))
    received(mock, job, pk.JobAnnouncement)
    nonce, key = fresh_opening()
    guess = fresh_opening()
    early = _secrets(job, [nonce, guess[0]], [key, guess[1]])
    end = time.monotonic() + 60
    while True:  # party-1 admits the job just after acknowledging its announcement: UNKNOWN_JOB until then
        try:
            with channel(fed, REAL, mock[0]) as ch:
                pk_grpc.PartyStub(ch).SendPartySecrets(early, timeout=60)
            break
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.NOT_FOUND and time.monotonic() < end, e
    with channel(fed, "curator", mock[0]) as ch:
        pk_grpc.CuratorStub(ch).AcceptJob(pk.JobAcceptance(job_id=job, dimension=4, pi1_commitment=pi1_commitment(job, MOCK, nonce, key)), timeout=60)
    reveal = received(mock, job, pk.Pi1Reveal)
    assert (reveal.nonce, reveal.reshare_key) != guess
    status = wait_pathak(fed, job)
    assert status.state == "FAILED" and status.problem == common_pb2.MALFORMED and "does not open" in status.detail, status
    assert not {"SizeShare", "SealedSizeRemainder"} & set(_sent_to_mock(mock, job)), _sent_to_mock(mock, job)
    assert_all_serving(fed)
    assert_ledgers_within_budget(fed)


class _RefusesItsSpend(pk_grpc.PartyServicer):
    """A party that records its announcements and refuses ProtocolStart (BUDGET_EXCEEDED), as a party whose budget
    another job used up between its acceptance and its spend does; it answers only once ``ready()`` (bounded)."""

    def __init__(self, ready) -> None:
        self.inbox: queue.Queue = queue.Queue()
        self.ready = ready

    def AnnounceJob(self, request, context):
        self.inbox.put(request)
        return common_pb2.Ack()

    def StartProtocol(self, request, context):
        end = time.monotonic() + 60
        while not self.ready(request.job_id) and time.monotonic() < end:
            time.sleep(0.05)  # polls a condition (the other party's ledger), bounded; not a sleep as synchronisation
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "BUDGET_EXCEEDED: this job no longer fits the budget")


def test_a_refused_spend_voids_the_charge_of_a_party_that_paid_and_revealed(fed):
    """Accounting rule 3 (docs/protocols/accounting.md; the curator's _spend_step says the same): a refusal in the
    spend step fails the job before any data-dependent message left anyone, so the parties that paid void their
    charges. Job [party-1 (P1), party-2, refuser]: the curator starts party-2 and the refuser together; party-2
    spends and sends its π1 reveal to P1 (nonce and key: nothing derived from its data); the refuser then refuses
    its spend (BUDGET_EXCEEDED) and P1 is never started. party-2 must keep no charge for the job."""
    ledger_path = fed.workdir / OTHER / "state" / "ledger.json"
    paid = lambda job: ledger_path.exists() and job in ledger_path.read_text()  # noqa: E731
    servicer = _RefusesItsSpend(paid)
    server, tls = serve_party(fed, REFUSER, servicer)
    try:
        job = submit_pathak(fed, pathak_spec(parties=[REAL, OTHER, REFUSER], seed=b"relay-refused-spend", deadline=60.0))
        ann = servicer.inbox.get(timeout=60)
        assert ann.job_id == job
        nonce, key = fresh_opening()
        with channel(fed, "curator", tls) as ch:
            pk_grpc.CuratorStub(ch).AcceptJob(pk.JobAcceptance(job_id=job, dimension=4, pi1_commitment=pi1_commitment(job, REFUSER, nonce, key)), timeout=60)
        status = wait_pathak(fed, job)
    finally:
        server.stop(0)
    assert status.state == "FAILED" and status.problem == common_pb2.BUDGET_EXCEEDED, status
    assert paid(job), "party-2 did not spend: the case under test did not happen"
    end = time.monotonic() + 60
    while True:  # the party settles its entry once it hears of the failure
        entry = [e for e in ledger(fed, OTHER)["entries"] if e["job_id"] == job][0]
        if entry.get("status") not in ("spent", None) or time.monotonic() > end:
            break
        time.sleep(0.05)  # polls a condition, bounded
    assert entry.get("status") == VOIDED, f"party-2 keeps a charge for a job refused in its spend step: {entry}"
    assert_all_serving(fed)
    assert_ledgers_within_budget(fed)


@pytest.mark.parametrize("shape", ["omitted", "duplicated"])
def test_p1_omitting_or_duplicating_an_opening_is_malformed(fed, mock, shape):  # noqa: F811
    """P1 of [mock, party-1] relays one opening short (party-1's left out: π₁ would be drawn from fewer nonces) or one
    too many (party-1's twice): refused on its shape (MALFORMED, K openings of fixed length), naming no value, and
    the job fails before party-1 sends anything derived from its size."""
    job = submit_pathak(fed, pathak_spec(parties=[MOCK, REAL], seed=b"relay-shape-" + shape.encode(), deadline=60.0))
    nonce, key = fresh_opening()
    _accept(fed, mock, job, nonce, key)
    theirs = received(mock, job, pk.Pi1Reveal)
    if shape == "omitted":
        nonces, keys = [nonce], [key]
    else:
        nonces, keys = [nonce, theirs.nonce, theirs.nonce], [key, theirs.reshare_key, theirs.reshare_key]
    with channel(fed, REAL, mock[0]) as ch:
        e = refused(lambda: pk_grpc.PartyStub(ch).SendPartySecrets(_secrets(job, nonces, keys), timeout=60))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "MALFORMED" in e.details() and "K=2" in e.details(), e
    assert_clean(e, theirs.nonce.hex(), key.hex())
    status = wait_pathak(fed, job)
    assert status.state == "FAILED" and status.problem == common_pb2.MALFORMED, status
    assert not {"SizeShare", "SealedSizeRemainder"} & set(_sent_to_mock(mock, job)), _sent_to_mock(mock, job)
    assert_all_serving(fed)
    assert_ledgers_within_budget(fed)


@pytest.mark.parametrize("mode", ["corrected", "gaussian-distributed"])
def test_p1_giving_one_party_another_xi_fails_the_job_and_releases_nothing(small_secrets, mode):
    """ξ's secret key is the one part of PartySecrets no commitment binds: P1 could give one party the factors of
    another key ξ′ than the ξ it announced to Charlie. In process (the whole protocol needs a P1 that computes), P1
    sends p3 another 768-bit key: p3's ciphertexts or its decryptions of ξ(ã) then fall outside their public ranges,
    the job fails (at Charlie or at the parties) and no model is released, in either noise mode."""
    from mpdp.math.paillier import KeyPair
    from mpdp.pathak2010.driver import make_spec

    from tests.pathak_helpers import party_data, run_test_job

    data = party_data([25, 35, 30], 3, 4)
    names = list(data)
    other = KeyPair.generate(768)

    def alter(sender, to, msg):
        if isinstance(msg, pk.PartySecrets) and to.name == names[2]:
            msg = pk.PartySecrets.FromString(msg.SerializeToString())
            msg.paillier_p, msg.paillier_q = (v.to_bytes((v.bit_length() + 7) // 8, "big") for v in (other.p, other.q))
        return msg

    spec = make_spec(names, 1.0, 0.1, mode, b"relay-xi")
    assert run_test_job(data, spec, small_secrets, party_key_bits=768).model is not None  # the same job, untouched, publishes
    r = run_test_job(data, spec, small_secrets, party_key_bits=768, tamper=alter)
    assert r.model is None and r.error is not None, r.error
    assert all(r.parties[n].state == "FAILED" for n in names), {n: r.parties[n].state for n in names}


def test_charlie_sees_no_pi1_nonce_and_no_one_sees_a_pair_seed_of_others(small_secrets):
    """What each role receives in a whole honest job of four parties (in process, every message recorded): Charlie
    receives no π₁ nonce and no pair seed (so π₁ and the pieces between parties stay unknown to him), and no party
    receives, in any message, the pair seed of a pair it is not in (P1 relays the public keys, never a seed); the
    pair seeds match at both ends, so the release is the honest one."""
    from mpdp.pathak2010.driver import make_spec

    from tests.pathak_helpers import party_data, run_test_job

    data = party_data([25, 35, 30, 28], 3, 4)
    names = list(data)
    r = run_test_job(data, make_spec(names, 1.0, 0.1, "corrected", b"relay-views"), small_secrets, party_key_bits=768)
    assert r.model is not None, r.error
    machines = r.parties
    seeds = {(a, b): machines[a]._reshare_seeds[b] for a in names[1:] for b in names[1:] if a != b}
    assert all(seeds[a, b] == seeds[b, a] for a, b in seeds)
    nonces = [m._pi1_nonce for m in machines.values()]

    def seen(transcript) -> bytes:
        return b"".join(msg.SerializeToString() for _, msg in transcript)

    charlie = seen(r.curator.transcript)
    assert not any(v in charlie for v in nonces + list(seeds.values()))
    for n, m in machines.items():
        view = seen(m.transcript)
        assert not any(s in view for s in seeds.values()), n  # not even its own: pair seeds never travel
