"""S3.3's re-share pieces between parties, expanded from the seeds each party gives the other in its Pi1Reveal.

Invariants checked here:
- a piece is a function of (job, sender, receiver, seed) only: both ends compute the same vector in Z_q^d, and any
  other job, direction, receiver or seed gives another;
- in a job, the only ResharePieces a party receives are Charlie's and P1's (P1 sends its pieces, so no party ends
  before P1's S3.1); every other party's reveal to each party carries its own 32-byte seed, P1's none; and the
  re-shared z_t still sum to K·ŵ_s.
"""

from __future__ import annotations

import numpy as np

from mpdp.math import sharing
from mpdp.math.drbg import Drbg
from mpdp.messages import pathak2010_pb2 as pb
from mpdp.pathak2010.driver import make_spec
from mpdp.pathak2010.party import RESHARE_SEED_BYTES, reshare_piece
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
        seeds = {s.name: msg.reshare_seed for s, msg in m.transcript if isinstance(msg, pb.Pi1Reveal)}
        assert sorted(seeds) == sorted(n for n in names if n != name)
        for other, seed in seeds.items():
            if other == p1:
                assert seed == b""  # P1 sends its pieces
            else:
                assert len(seed) == RESHARE_SEED_BYTES and seed == r.parties[other]._reshare_to[name]
    assert r.parties[p1]._reshare_to == {}
    assert len({seed for m in r.parties.values() for seed in m._reshare_to.values()}) == (len(names) - 1) ** 2
    from_parties = [s.name for s, msg in r.curator.transcript if isinstance(msg, pb.ResharePiece)]
    assert sorted(from_parties) == sorted(names)
    z = [sharing.unpack_ring(s, 128, 3) for s in r.model.shares]
    assert len(z) == len(names) + 1
    total = sharing.combine(z, Q)
    assert np.allclose(np.array([x - Q if x >= Q // 2 else x for x in total]) / 2.0**32 / len(names), rebuild(r.model))
