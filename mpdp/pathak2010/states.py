"""Every transition of the Pathak protocol, as data (one table per protocol; engine: mpdp/protocol.py).

Messages are kept rows: each may arrive once the role is in its first state and is consumed by the step
of its last (``until``). Earlier is out of order (the peer could not legitimately have sent it yet), later
is out of order or a replay. The windows follow the protocol's causality, e.g. a ResharePiece can reach
P_t only after Charlie's SelectionVector, which needs P_t's own MaskedSize, so P_t is at least in
AWAIT_SELECTION; a NoiseScale (DISTRIBUTED_GAUSSIAN) leaves P1 only once every party's NoiseScaleShare is in,
so every party is in AWAIT_NOISE_SCALE. NoiseChain's window spans both noise modes: it is consumed in
AWAIT_NOISE_CHAIN, which P1 enters once its own ψ_1 is made (every other party sends its ψ_j straight to P1). A step runs (joint event ``ready``) once every input it needs is in; where a step has
two possible next states, the role's handler chooses (P1 leads, the others follow). Stage 1's tournament
repeats the leader's AWAIT_COMPARISON and Charlie's AWAIT_BLINDED_COMPARISONS once per round: ComparisonBits and
BlindedComparisons recur, each carrying its round (a copy of a round already taken is a REPLAY).
``python tools/render_tables.py`` writes the tables into docs/protocols/pathak2010.md.
"""

from __future__ import annotations

from mpdp.protocol import ANY, FAILED, Row, kept, row

PARTY_STATES: tuple[str, ...] = (
    "AWAIT_START",
    "AWAIT_PARTY_SECRETS",
    "AWAIT_SIZE_SHARE",
    "AWAIT_MASKED_SIZE_SHARE",
    "AWAIT_COMPARISON",
    "AWAIT_SELECTION",
    "AWAIT_NOISE_SCALE",
    "AWAIT_NOISE_CHAIN",
    "AWAIT_RESHARE_PIECES",
    "DONE",
    FAILED,
)

PARTY_TABLE: tuple[Row, ...] = (
    kept("ProtocolStart", "curator", "AWAIT_START", "AWAIT_START"),
    kept("PartySecrets", "leader", "AWAIT_START", "AWAIT_PARTY_SECRETS"),  # ξ's sk and every π1 opening, relayed by P1
    kept("Pi1Reveal", "party", "AWAIT_START", "AWAIT_PARTY_SECRETS"),  # to P1, once ProtocolStart has every commitment
    kept("SizeShare", "party", "AWAIT_START", "AWAIT_SIZE_SHARE"),
    kept("SealedSizeRemainder", "party", "AWAIT_START", "AWAIT_SIZE_SHARE"),
    kept("MaskedSizeShare", "curator", "AWAIT_MASKED_SIZE_SHARE", "AWAIT_MASKED_SIZE_SHARE"),
    kept("ComparisonBits", "curator", "AWAIT_MASKED_SIZE_SHARE", "AWAIT_COMPARISON"),
    kept("MaskedSize", "party", "AWAIT_MASKED_SIZE_SHARE", "AWAIT_COMPARISON"),
    kept("SelectionVector", "curator", "AWAIT_SELECTION", "AWAIT_SELECTION"),
    kept("NoiseScaleShare", "party", "AWAIT_SELECTION", "AWAIT_SELECTION"),  # DISTRIBUTED_GAUSSIAN, to P1 only
    kept("NoiseScale", "leader", "AWAIT_NOISE_SCALE", "AWAIT_NOISE_SCALE"),  # DISTRIBUTED_GAUSSIAN
    kept("NoiseChain", "party", "AWAIT_SELECTION", "AWAIT_NOISE_CHAIN"),  # P_j → P1; may come before P1's own ψ_1 is made
    kept("ResharePiece", "curator|leader", "AWAIT_SELECTION", "AWAIT_RESHARE_PIECES"),  # the other parties' pieces: from pair seeds
    row("AWAIT_START", "ready", "self", "AWAIT_PARTY_SECRETS"),  # P1 generates ξ; every other party reveals its π1 opening to P1
    row("AWAIT_PARTY_SECRETS", "trained", "self", "AWAIT_PARTY_SECRETS"),  # ŵ_j, n_j after the spend, no earlier than the local-work time
    row("AWAIT_PARTY_SECRETS", "ready", "self", "AWAIT_SIZE_SHARE"),  # once the local model is in too
    row("AWAIT_SIZE_SHARE", "ready", "self", "AWAIT_MASKED_SIZE_SHARE"),
    row("AWAIT_MASKED_SIZE_SHARE", "ready", "self", "AWAIT_COMPARISON|AWAIT_SELECTION"),  # P1 leads the comparisons
    row("AWAIT_COMPARISON", "ready", "self", "AWAIT_COMPARISON|AWAIT_SELECTION"),  # one tournament round per step; the last moves on
    row("AWAIT_SELECTION", "ready", "self", "AWAIT_NOISE_SCALE|AWAIT_NOISE_CHAIN|AWAIT_RESHARE_PIECES"),  # DISTRIBUTED_GAUSSIAN first fetches σ̄; P_K starts the chain
    row("AWAIT_NOISE_SCALE", "ready", "self", "AWAIT_NOISE_CHAIN|AWAIT_RESHARE_PIECES"),
    row("AWAIT_NOISE_CHAIN", "ready", "self", "AWAIT_RESHARE_PIECES"),
    row("AWAIT_RESHARE_PIECES", "ready", "self", "DONE"),
    row(ANY, "JobAbort", "curator|party", FAILED),
)

CURATOR_STATES: tuple[str, ...] = (
    "AWAIT_ACCEPTANCES",
    "AWAIT_SIZE_SHARES",
    "AWAIT_BLINDED_COMPARISONS",
    "AWAIT_MASKED_NOISE",
    "AWAIT_PUBLISHED_SHARES",
    "PUBLISHED",
    FAILED,
)

CURATOR_TABLE: tuple[Row, ...] = (
    kept("JobAcceptance", "party", "AWAIT_ACCEPTANCES", "AWAIT_ACCEPTANCES"),
    kept("PartyPublicKey", "leader", "AWAIT_SIZE_SHARES", "AWAIT_SIZE_SHARES"),
    kept("SizeRemainders", "leader", "AWAIT_SIZE_SHARES", "AWAIT_SIZE_SHARES"),
    kept("EncryptedSizeShare", "party", "AWAIT_SIZE_SHARES", "AWAIT_SIZE_SHARES"),
    kept("BlindedComparisons", "leader", "AWAIT_BLINDED_COMPARISONS", "AWAIT_BLINDED_COMPARISONS"),
    kept("MaskedNoise", "leader", "AWAIT_MASKED_NOISE", "AWAIT_MASKED_NOISE"),
    kept("ResharePiece", "party", "AWAIT_MASKED_NOISE", "AWAIT_PUBLISHED_SHARES"),
    kept("PublishedShare", "party", "AWAIT_MASKED_NOISE", "AWAIT_PUBLISHED_SHARES"),  # Charlie's pieces left with S2.1: a party may publish first
    row("AWAIT_ACCEPTANCES", "ready", "self", "AWAIT_SIZE_SHARES"),
    row("AWAIT_SIZE_SHARES", "ready", "self", "AWAIT_BLINDED_COMPARISONS"),
    row("AWAIT_BLINDED_COMPARISONS", "ready", "self", "AWAIT_BLINDED_COMPARISONS|AWAIT_MASKED_NOISE"),  # one tournament round per step
    row("AWAIT_MASKED_NOISE", "ready", "self", "AWAIT_PUBLISHED_SHARES"),
    row("AWAIT_PUBLISHED_SHARES", "ready", "self", "PUBLISHED"),
    row(ANY, "JobAbort", "party", FAILED),
)

# Which stage (for progress display and stage_seconds) each curator state belongs to.
CURATOR_STAGE = {
    "AWAIT_ACCEPTANCES": "setup",
    "AWAIT_SIZE_SHARES": "stage1",
    "AWAIT_BLINDED_COMPARISONS": "stage1",
    "AWAIT_MASKED_NOISE": "stage2",
    "AWAIT_PUBLISHED_SHARES": "stage3",
    "PUBLISHED": "published",
    FAILED: "failed",
}
