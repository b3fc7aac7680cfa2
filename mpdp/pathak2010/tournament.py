"""Stage 1's knockout tournament over π2∘π1 positions (docs/protocols/pathak2010.md, "Stage 1 tournament").

Round 0 holds every position 0..K−1 in order. A round pairs its positions (p[0], p[1]), (p[2], p[3]), …;
an odd one out (the last) has a bye. The next round holds each pair's winner in pair order, then the bye.
After ⌈log2 K⌉ rounds (one empty round when K = 1) one position is left: the minimum of the strict total
order the comparisons decide. K − 1 comparisons in all, every round's in one message each way.
Pure functions of public data: Charlie and the leader run the same code and the leader checks Charlie's lists.
"""

from __future__ import annotations

from collections.abc import Sequence


def rounds(K: int) -> int:
    """⌈log2 K⌉ rounds, at least one (K = 1 sends one round without pairs, as the flow expects)."""
    return max(1, (K - 1).bit_length())


def pairs(positions: Sequence[int]) -> list[tuple[int, int]]:
    """The round's compared pairs: (p[0], p[1]), (p[2], p[3]), …; a last odd position has a bye."""
    return [(positions[m], positions[m + 1]) for m in range(0, len(positions) - 1, 2)]


def advance(positions: Sequence[int], first_wins: Sequence[bool]) -> list[int]:
    """The next round's positions: each pair's winner (the first if ``first_wins``), then the bye if any."""
    ps = pairs(positions)
    if len(first_wins) != len(ps):
        raise ValueError(f"{len(ps)} pairs but {len(first_wins)} results")
    nxt = [i if w else j for (i, j), w in zip(ps, first_wins)]
    if len(positions) % 2:
        nxt.append(positions[-1])
    return nxt


def is_next(previous: Sequence[int], positions: Sequence[int]) -> bool:
    """Whether ``positions`` can follow ``previous``: one of each pair, in order, then the bye."""
    ps = pairs(previous)
    if len(positions) != len(ps) + len(previous) % 2:
        return False
    if any(p not in pair for p, pair in zip(positions, ps)):
        return False
    return not (len(previous) % 2) or positions[-1] == previous[-1]


def comparisons(K: int) -> int:
    """Comparisons over the whole tournament: every one eliminates one position."""
    return max(K - 1, 0)


def most_pairs(K: int) -> int:
    """The largest round's pair count (round 0)."""
    return K // 2
