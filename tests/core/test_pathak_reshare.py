"""S3.3's re-share pieces between parties, expanded from the seed each pair derives by X25519 key agreement from the
re-share keys every party commits to with its π1 nonce (P1 relays the openings in PartySecrets).

Invariants checked here:
- a piece is a function of (job, sender, receiver, seed) only: both ends compute the same vector in Z_q^d, and any
  other job, direction, receiver or seed gives another;
- a pair seed is the same at both ends of the pair and differs for every other pair and job; a low-order key is
  refused (ValueError);
- in a job, the only ResharePieces a party receives are Charlie's and P1's (P1 sends its pieces, so no party ends
  before P1's S3.1); no reveal travels between two parties that are not P1, every party holds a seed for each
  other party but P1; and the re-shared z_t still sum to K·ŵ_s.
"""

from __future__ import annotations

import numpy as np

from mpdp.math import sharing
from mpdp.messages import common_pb2
from mpdp.math.drbg import Drbg
from mpdp.messages import pathak2010_pb2 as pb
from mpdp.pathak2010.driver import make_spec
import pytest

from mpdp.pathak2010.party import reshare_pair_seed, reshare_piece, reshare_secret
from mpdp.pathak2010.tester import rebuild
from tests.pathak_helpers import party_data, run_test_job as run_job

Q = 1 << 128


def test_a_piece_depends_on_the_job_both_names_and_the_seed():
    seed = bytes(range(32))
    piece = reshare_piece("job-1", "p1", "p2", seed, 50)
    assert len(piece) == 50 and all(0 <= x < Q for x in piece)
    assert piece == reshare_piece("job-1", "p1", "p2", seed, 50)  # the receiver computes the same
    others = [
        reshare_piece("job-2", "p1", "p2", seed, 50),
        reshare_piece("job-1", "p2", "p1", seed, 50),
        reshare_piece("job-1", "p1", "p3", seed, 50),
        reshare_piece("job-1", "p1", "p2", bytes(31) + b"\x01", 50),
    ]
    for other in others:
        assert sum(a == b for a, b in zip(piece, other)) == 0
    assert len({x >> 120 for x in piece}) > 20  # spread over the ring, not small integers


def test_a_pair_seed_is_shared_by_its_pair_only():
    keys = {n: reshare_secret(Drbg.from_seed(n.encode())) for n in ("p2", "p3", "p4")}
    seed = reshare_pair_seed("job-1", keys["p2"][0], "p2", "p3", keys["p3"][1])
    assert len(seed) == 32 and seed == reshare_pair_seed("job-1", keys["p3"][0], "p3", "p2", keys["p2"][1])
    others = {
        reshare_pair_seed("job-2", keys["p2"][0], "p2", "p3", keys["p3"][1]),  # another job
        reshare_pair_seed("job-1", keys["p2"][0], "p2", "p4", keys["p4"][1]),  # another pair
        reshare_pair_seed("job-1", keys["p3"][0], "p3", "p4", keys["p4"][1]),
        reshare_pair_seed("job-1", keys["p2"][0], "p2", "p3", keys["p4"][1]),  # another key for the same names
    }
    assert seed not in others and len(others) == 4
    with pytest.raises(ValueError):  # the all-zero point (low order): the shared secret would be zero
        reshare_pair_seed("job-1", keys["p2"][0], "p2", "p3", bytes(32))


def test_a_stream_prefix_is_the_drbg_stream():
    key = bytes(range(32))
    for n in (0, 1, 16, 1968, 70_000):
        assert Drbg.stream_prefix(key, n) == Drbg(key, seeded=False).random_bytes(n)


def test_no_piece_travels_between_parties_and_the_shares_still_sum_to_the_model(small_secrets):
    data = party_data([25, 35, 30, 28], 3, 9)
    r = run_job(data, make_spec(list(data), 1.0, 0.1, "corrected", b"reshare"), small_secrets, party_key_bits=768)
    assert r.error is None
    names = list(data)
    p1 = names[0]
    for name in names:
        m = r.parties[name]
        pieces_in = sorted(s.name for s, msg in m.transcript if isinstance(msg, pb.ResharePiece))
        assert pieces_in == (["curator"] if name == p1 else sorted(["curator", p1]))  # Charlie's piece, and P1's
        reveals = sorted(s.name for s, msg in m.transcript if isinstance(msg, pb.Pi1Reveal))
        assert reveals == (sorted(names[1:]) if name == p1 else [])  # every reveal goes to P1 only, which relays them
        secrets = [msg for s, msg in m.transcript if isinstance(msg, pb.PartySecrets)]
        assert len(secrets) == (0 if name == p1 else 1)
        for msg in secrets:  # the openings P1 relays: every party's nonce and re-share key, in party order
            assert list(msg.reshare_keys) == [r.parties[n].reshare_key for n in names]
        seeds = m._reshare_seeds
        assert sorted(seeds) == ([] if name == p1 else sorted(n for n in names[1:] if n != name))
        for other, seed in seeds.items():
            assert seed == r.parties[other]._reshare_seeds[name]  # both ends of the pair derive the same
    pair_seeds = {seed for m in r.parties.values() for seed in m._reshare_seeds.values()}
    assert len(pair_seeds) == (len(names) - 1) * (len(names) - 2) // 2  # one per pair of parties but P1
    from_parties = [s.name for s, msg in r.curator.transcript if isinstance(msg, pb.ResharePiece)]
    assert sorted(from_parties) == sorted(names)
    z = [sharing.unpack_ring(s, 128, 3) for s in r.model.shares]
    assert len(z) == len(names) + 1
    total = sharing.combine(z, Q)
    assert np.allclose(np.array([x - Q if x >= Q // 2 else x for x in total]) / 2.0**32 / len(names), rebuild(r.model))


def test_a_relayed_opening_p1_altered_fails_the_job_before_any_size_share(small_secrets):
    """P1 relays every party's π1 nonce and re-share key in PartySecrets; one it altered does not open its commitment
    (MALFORMED at the receiver), and no size share leaves the receiver."""
    data = party_data([25, 35, 30], 3, 4)
    names = list(data)

    def alter(sender, to, msg):
        if isinstance(msg, pb.PartySecrets) and to.name == names[1]:
            msg = pb.PartySecrets.FromString(msg.SerializeToString())
            msg.reshare_keys[2] = bytes(32)
        return msg

    r = run_job(data, make_spec(names, 1.0, 0.1, "corrected", b"relay"), small_secrets, party_key_bits=768, tamper=alter)
    assert r.model is None and r.error is not None
    m = r.parties[names[1]]
    assert m.state == "FAILED" and m.error.problem == common_pb2.MALFORMED and "does not open" in m.error.detail
    assert not any(isinstance(msg, (pb.SizeShare, pb.SealedSizeRemainder)) for s, msg in r.parties[names[0]].transcript if s.name == names[1])


def test_a_committed_low_order_reshare_key_fails_the_job(small_secrets, monkeypatch):
    """A party that commits to a re-share key whose shared secret is zero (the all-zero point) opens its commitment,
    but no pair seed can be derived with it: refused MALFORMED by the other parties but P1."""
    from mpdp.pathak2010 import party as party_mod

    data = party_data([25, 35, 30], 3, 5)
    names = list(data)
    made: list[int] = []
    honest = party_mod.reshare_secret

    def third_is_zero(rng):
        secret, key = honest(rng)
        made.append(1)
        return (secret, bytes(32)) if len(made) == 3 else (secret, key)

    monkeypatch.setattr(party_mod, "reshare_secret", third_is_zero)
    r = run_job(data, make_spec(names, 1.0, 0.1, "corrected", b"low-order"), small_secrets, party_key_bits=768)
    assert r.model is None and r.error is not None
    m = r.parties[names[1]]
    assert m.state == "FAILED" and m.error.problem == common_pb2.MALFORMED and "not a usable X25519" in m.error.detail
