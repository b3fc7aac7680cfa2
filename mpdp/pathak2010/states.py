"""Every transition of the Pathak protocol, as data (style.md §5: one table per protocol).

Each row says: this message, from this kind of sender, may arrive once the role is in
``earliest`` and is consumed in ``consumed``. Earlier is out of order (the peer could not
legitimately have sent it yet), later is out of order or a replay. The windows follow the
protocol's causality, e.g. a ResharePiece can reach P_t only after Charlie's SelectionVector,
which needs P_t's own MaskedSize, so P_t is at least in AWAIT_SELECTION.
``python -m mpdp.pathak2010.states`` prints the tables as Markdown for docs/protocols/pathak2010.md.
"""

from __future__ import annotations

from mpdp.messages import pathak2010_pb2 as pb
from mpdp.protocol import Expect

PARTY_STATES: tuple[str, ...] = (
    "AWAIT_START",
    "AWAIT_PARTY_SECRETS",
    "AWAIT_SIZE_SHARE",
    "AWAIT_MASKED_SIZE_SHARE",
    "AWAIT_COMPARISON",
    "AWAIT_SELECTION",
    "AWAIT_RESHARE_PIECES",
    "DONE",
    "FAILED",
)

PARTY_TABLE: tuple[Expect, ...] = (
    Expect(pb.ProtocolStart, "curator", "AWAIT_START", "AWAIT_START"),
    Expect(pb.PartySecrets, "party", "AWAIT_START", "AWAIT_PARTY_SECRETS"),
    Expect(pb.SizeShare, "party", "AWAIT_START", "AWAIT_SIZE_SHARE"),
    Expect(pb.SealedSizeRemainder, "party", "AWAIT_START", "AWAIT_SIZE_SHARE"),
    Expect(pb.MaskedSizeShare, "curator", "AWAIT_MASKED_SIZE_SHARE", "AWAIT_MASKED_SIZE_SHARE"),
    Expect(pb.ComparisonBits, "curator", "AWAIT_MASKED_SIZE_SHARE", "AWAIT_COMPARISON"),
    Expect(pb.MaskedSize, "party", "AWAIT_MASKED_SIZE_SHARE", "AWAIT_COMPARISON"),
    Expect(pb.SelectionVector, "curator", "AWAIT_SELECTION", "AWAIT_SELECTION"),
    Expect(pb.NoiseChain, "party", "AWAIT_SELECTION", "AWAIT_SELECTION"),
    Expect(pb.ResharePiece, "participant", "AWAIT_SELECTION", "AWAIT_RESHARE_PIECES"),
)

CURATOR_STATES: tuple[str, ...] = (
    "AWAIT_ACCEPTANCES",
    "AWAIT_SIZE_SHARES",
    "AWAIT_BLINDED_COMPARISONS",
    "AWAIT_MASKED_NOISE",
    "AWAIT_PUBLISHED_SHARES",
    "PUBLISHED",
    "FAILED",
)

CURATOR_TABLE: tuple[Expect, ...] = (
    Expect(pb.JobAcceptance, "party", "AWAIT_ACCEPTANCES", "AWAIT_ACCEPTANCES"),
    Expect(pb.PartyPublicKey, "leader", "AWAIT_SIZE_SHARES", "AWAIT_SIZE_SHARES"),
    Expect(pb.SizeRemainders, "leader", "AWAIT_SIZE_SHARES", "AWAIT_SIZE_SHARES"),
    Expect(pb.EncryptedSizeShare, "party", "AWAIT_SIZE_SHARES", "AWAIT_SIZE_SHARES"),
    Expect(pb.BlindedComparisons, "leader", "AWAIT_BLINDED_COMPARISONS", "AWAIT_BLINDED_COMPARISONS"),
    Expect(pb.MaskedNoise, "leader", "AWAIT_MASKED_NOISE", "AWAIT_MASKED_NOISE"),
    Expect(pb.ResharePiece, "party", "AWAIT_MASKED_NOISE", "AWAIT_PUBLISHED_SHARES"),
    Expect(pb.PublishedShare, "party", "AWAIT_PUBLISHED_SHARES", "AWAIT_PUBLISHED_SHARES"),
)

# Which stage (for progress display and stage_seconds) each curator state belongs to.
CURATOR_STAGE = {
    "AWAIT_ACCEPTANCES": "setup",
    "AWAIT_SIZE_SHARES": "stage1",
    "AWAIT_BLINDED_COMPARISONS": "stage1",
    "AWAIT_MASKED_NOISE": "stage2",
    "AWAIT_PUBLISHED_SHARES": "stage3",
    "PUBLISHED": "published",
    "FAILED": "failed",
}


def markdown() -> str:
    lines = []
    for role, table in (("Party P_j", PARTY_TABLE), ("Curator (Charlie)", CURATOR_TABLE)):
        lines += [f"### {role}", "", "| message | from | may arrive from | consumed in |", "|---|---|---|---|"]
        lines += [f"| {r.message.__name__} | {r.sender} | {r.earliest} | {r.consumed} |" for r in table]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown())
