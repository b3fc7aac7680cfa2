"""Stage 1's knockout tournament (docs/protocols/pathak2010.md, "Stage 1 tournament").

Invariants checked here:
- the bracket: ⌈log2 K⌉ rounds (one when K = 1), K − 1 comparisons, each round one of every pair then the bye;
- over the in-memory driver, for K = 1, 2, 3, 5, 7, 8 and sizes with ties: Charlie's j̃ is the minimum of
  (n, τ) over the π2∘π1 positions, the selected party is that position's party, its size is min n_j, and
  among tied smallest parties the one with the smallest τ wins (the documented rule);
- one ComparisonBits and one BlindedComparisons per round, carrying the round and exactly its pairs' bits;
- a leader's message of another round, or positions that cannot follow the last round, fail the job.
"""

from __future__ import annotations

import numpy as np
import pytest

from mpdp.math import sharing
from mpdp.math.drbg import Drbg
from mpdp.messages import common_pb2, pathak2010_pb2 as pb
from mpdp.pathak2010 import tournament
from mpdp.pathak2010.driver import make_spec
from tests.pathak_helpers import party_data, run_test_job as run_job


def _data(sizes, d=2, seed=0):
    return party_data(sizes, d, seed)


@pytest.mark.parametrize("K", list(range(1, 18)) + [31, 32, 33, 50, 64])
def test_bracket_has_k_minus_one_comparisons_in_log_rounds(K):
    g = Drbg.from_seed(f"bracket-{K}".encode())
    positions = list(range(K))
    total = 0
    for r in range(tournament.rounds(K)):
        ps = tournament.pairs(positions)
        assert r > 0 or len(ps) == tournament.most_pairs(K)
        total += len(ps)
        nxt = tournament.advance(positions, [bool(g.randbelow(2)) for _ in ps])
        assert tournament.is_next(positions, nxt)
        positions = nxt
    assert len(positions) == 1 and total == tournament.comparisons(K) == K - 1
    assert tournament.rounds(K) == max(1, int(np.ceil(np.log2(K))) if K > 1 else 1)


def test_is_next_refuses_what_cannot_follow():
    prev = [4, 1, 0, 3, 2]  # pairs (4, 1), (0, 3), bye 2
    assert tournament.is_next(prev, [1, 0, 2])
    assert tournament.is_next(prev, [4, 3, 2])
    for bad in ([1, 0], [1, 0, 2, 3], [0, 1, 2], [1, 2, 0], [1, 4, 2], [1, 0, 3], [1, 1, 2]):
        assert not tournament.is_next(prev, bad), bad
    with pytest.raises(ValueError):
        tournament.advance(prev, [True])


def _expected_position(r, sizes):
    """The documented winner: the minimum of (n, τ) over π2∘π1 positions (computed from the roles' secrets)."""
    names = list(r.parties)
    pi1 = r.parties[names[0]].pi1
    by_position = sharing.apply_permutation(r.curator._pi2, sharing.apply_permutation(pi1, list(sizes)))
    tau = r.curator._tau
    return min(range(len(sizes)), key=lambda k: (by_position[k], tau[k])), by_position


def _party_at(r, position):
    """The party whose size sits at a π2∘π1 position."""
    names = list(r.parties)
    pi1 = r.parties[names[0]].pi1
    pi2 = r.curator._pi2
    return next(n for j, n in enumerate(names) if pi2[pi1[j]] == position)  # P_j's size sits at π2(π1(j))


def _selected(r, name) -> bool:
    m = r.parties[name]
    sel = next(msg for s, msg in m.transcript if isinstance(msg, pb.SelectionVector))
    v = r.curator.res.secrets.paillier.decrypt(int.from_bytes(sel.ciphertexts[m.pi1[m.j]], "big"))
    assert v in (0, 1)
    return v == 1


@pytest.mark.parametrize(
    "sizes",
    [
        (17,),
        (30, 22),
        (22, 22),
        (25, 21, 29),
        (21, 21, 29),
        (40, 33, 27, 35, 31),
        (27, 33, 27, 35, 27),
        (44, 39, 23, 51, 23, 47, 30),
        (20, 20, 20, 20, 20, 20, 20, 20),
    ],
)
@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_tournament_selects_the_documented_minimum(small_secrets, sizes):
    for seed in (b"t1", b"t2"):
        data = _data(sizes, seed=len(sizes))
        r = run_job(data, make_spec(list(data), 1.0, 0.1, "corrected", seed + bytes(sizes)), small_secrets, party_key_bits=768)
        assert r.error is None and r.model is not None
        K = len(sizes)
        expected, by_position = _expected_position(r, sizes)
        assert r.curator.smallest_position == expected
        assert by_position[expected] == min(sizes)  # the plain minimum of the sizes
        winner = _party_at(r, expected)
        assert len(data[winner][1]) == min(sizes)
        assert [n for n in data if _selected(r, n)] == [winner]
        # ties: among the tied smallest, the one whose position has the smallest τ
        tied = [k for k in range(K) if by_position[k] == min(sizes)]
        assert expected == min(tied, key=lambda k: r.curator._tau[k])
        # one message each way per round, each carrying its round and exactly its pairs' bits
        leader = r.parties[next(iter(data))]
        bits = [m for s, m in leader.transcript if isinstance(m, pb.ComparisonBits)]
        blinded = [m for s, m in r.curator.transcript if isinstance(m, pb.BlindedComparisons)]
        assert [m.round for m in bits] == [m.round for m in blinded] == list(range(tournament.rounds(K)))
        assert list(bits[0].positions) == list(range(K))
        ell = r.curator.params.compare_bits
        assert sum(len(m.ciphertexts) for m in bits) == sum(len(m.ciphertexts) for m in blinded) == (K - 1) * ell
        for prev, nxt in zip(bits, bits[1:]):
            assert tournament.is_next(list(prev.positions), list(nxt.positions))


def test_leader_refuses_a_round_that_cannot_follow(small_secrets):
    data = _data([30, 22, 41, 26, 35], seed=3)

    def reorder(sender, to, msg):
        if isinstance(msg, pb.ComparisonBits) and msg.round == 1:
            msg.positions[0], msg.positions[1] = msg.positions[1], msg.positions[0]  # pair 1's winner first
        return msg

    r = run_job(data, make_spec(list(data), 1.0, 0.1, "corrected", b"reorder"), small_secrets, party_key_bits=768, tamper=reorder)
    assert r.model is None and r.curator.state == "FAILED"
    assert r.error.problem == common_pb2.MALFORMED


@pytest.mark.parametrize("shift, problem", [(-1, common_pb2.REPLAY), (1, common_pb2.STEP_OUT_OF_ORDER)])
def test_a_message_of_another_round_fails_the_job(small_secrets, shift, problem):
    data = _data([30, 22, 41, 26], seed=4)

    def wrong_round(sender, to, msg):
        if isinstance(msg, pb.BlindedComparisons) and msg.round == 1:
            msg.round = 1 + shift
        return msg

    r = run_job(data, make_spec(list(data), 1.0, 0.1, "corrected", b"round"), small_secrets, party_key_bits=768, tamper=wrong_round)
    assert r.model is None and r.curator.state == "FAILED"
    assert r.error.problem == problem


def test_only_the_leader_and_charlie_see_the_tournament(small_secrets):
    data = _data([30, 22, 41, 26, 35], seed=5)
    r = run_job(data, make_spec(list(data), 1.0, 0.1, "corrected", b"views"), small_secrets, party_key_bits=768)
    assert r.error is None
    for name in list(data)[1:]:
        assert not any(isinstance(m, (pb.ComparisonBits, pb.BlindedComparisons)) for s, m in r.parties[name].transcript)


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_leader_sees_a_uniform_bracket_even_when_every_size_ties(small_secrets):
    """Four equal sizes: the positions P1 sees in round 1 are uniform over the 4 possible lists (χ², α = 10⁻³),
    as for distinct sizes. A position tie-break would always show (0, 2)."""
    data = _data([20, 20, 20, 20], seed=6)
    counts: dict[tuple[int, ...], int] = {}
    runs = 80
    for i in range(runs):
        r = run_job(data, make_spec(list(data), 1.0, 0.1, "corrected", f"uniform-{i}".encode()), small_secrets, party_key_bits=768)
        assert r.error is None
        leader = r.parties["p1"]
        seen = next(tuple(m.positions) for s, m in leader.transcript if isinstance(m, pb.ComparisonBits) and m.round == 1)
        counts[seen] = counts.get(seen, 0) + 1
    assert set(counts) <= {(0, 2), (0, 3), (1, 2), (1, 3)}
    expected = runs / 4
    chi2 = sum((counts.get(k, 0) - expected) ** 2 / expected for k in [(0, 2), (0, 3), (1, 2), (1, 3)])
    assert chi2 < 16.27, counts  # χ²(3) at α = 10⁻³


def test_call_deadline_is_sized_from_the_work():
    """Per-call deadlines grow with K (a tournament round), d (the per-coordinate steps) and the key size, never below
    the floor; at K = 50 the leader's first round fits with room (the fixed 60 s did not fit all 1,225 pairs)."""
    from mpdp.pathak2010.params import CALL_FLOOR_SECONDS, DGK_OP_SECONDS, PathakParams

    def params(K):
        return PathakParams.from_spec("j", make_spec([f"p{i}" for i in range(K)], 1.0, 0.1, "corrected"))

    small, k50, k64 = params(2), params(50), params(64)
    assert small.call_seconds(0, 2048) == CALL_FLOOR_SECONDS
    assert k64.call_seconds(4096, 2048) > k64.call_seconds(123, 2048) > CALL_FLOOR_SECONDS
    assert k64.call_seconds(123, 4096) == pytest.approx(8 * k64.call_seconds(123, 2048))
    assert k50.step_work(123)[1] == 3 * 25 * k50.compare_bits
    assert k50.call_seconds(123, 2048) >= 2 * k50.step_work(123)[1] * DGK_OP_SECONDS


@pytest.mark.parametrize("kind", ["ComparisonBits", "MaskedSize"])
def test_comparison_bits_reaching_another_party_is_wrong_role(small_secrets, kind):
    """Only the leader takes ComparisonBits and MaskedSize: a copy sent to P2 (in its window for them) is refused
    WRONG_ROLE, not kept in P2's inbox (as a NoiseScaleShare reaching anyone but P1 is)."""
    from mpdp.protocol import Peer

    from mpdp.protocol import CURATOR, ProtocolError

    data = _data([30, 22, 41], seed=7)
    seen: list[int] = []

    def inject(result):
        p2 = result.parties.get("p2")
        if seen or p2 is None or p2.state != "AWAIT_MASKED_SIZE_SHARE":
            return
        K, ell = 3, p2.params.compare_bits
        bits = pb.ComparisonBits(job_id=p2.job_id, bit_length=ell, ciphertexts=[b"\x01"] * ell, round=0, positions=range(K))
        sender, msg = (CURATOR, bits) if kind == "ComparisonBits" else (Peer("party", "p3"), pb.MaskedSize(job_id=p2.job_id, value=b"\x01"))
        try:
            p2.receive(sender, msg)
            seen.append(-1)
        except ProtocolError as e:
            seen.append(e.problem)

    run_job(data, make_spec(list(data), 1.0, 0.1, "corrected", b"stray"), small_secrets, party_key_bits=768, before_each=inject)
    assert seen == [common_pb2.WRONG_ROLE]


def test_a_late_copy_of_the_last_round_is_a_replay_at_charlie(small_secrets):
    """The last round's BlindedComparisons sent again after Charlie moved on is a REPLAY (as at the leader), not
    STEP_OUT_OF_ORDER."""
    from mpdp.protocol import ProtocolError

    data = _data([30, 22, 41], seed=8)
    seen: list[int] = []
    last: list[tuple] = []

    def tamper(sender, to, msg):
        if isinstance(msg, pb.BlindedComparisons):
            last[:] = [(sender, pb.BlindedComparisons.FromString(msg.SerializeToString()))]
        return msg

    def inject(result):
        c = result.curator
        if seen or not last or c.state != "AWAIT_MASKED_NOISE" or last[0][1].round != tournament.rounds(3) - 1:
            return
        try:
            c.receive(*last[0])
            seen.append(-1)
        except ProtocolError as e:
            seen.append(e.problem)

    run_job(data, make_spec(list(data), 1.0, 0.1, "corrected", b"late"), small_secrets, party_key_bits=768, tamper=tamper, before_each=inject)
    assert seen == [common_pb2.REPLAY]


@pytest.mark.parametrize("kind", ["ComparisonBits", "BlindedComparisons"])
def test_a_non_unit_dgk_ciphertext_fails_the_job(small_secrets, kind):
    """A ciphertext sharing a factor with the DGK modulus, amid valid ones, is refused by the message's one gcd check
    with the per-item refusal (MALFORMED, "out of range"), whichever side receives it."""
    data = _data([30, 22, 41, 26], seed=6)
    dgk = small_secrets.dgk

    def non_unit(sender, to, msg):
        if type(msg).__name__ == kind and msg.round == 0:
            msg.ciphertexts[1] = dgk.public.to_bytes(dgk.p * 5)
        return msg

    r = run_job(data, make_spec(list(data), 1.0, 0.1, "corrected", b"unit" + kind.encode()), small_secrets, party_key_bits=768, tamper=non_unit)
    assert r.model is None and r.curator.state == "FAILED"
    assert r.error.problem == common_pb2.MALFORMED and "out of range" in r.error.detail
