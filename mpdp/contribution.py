"""A contribution round: Charlie asks each listed party to contribute a statistic of its own records to a DCA
job as a DCA client (regression's two rounds, and any other statistic), and gathers their receipts.

:class:`ContributionRound` is Charlie's sans-IO role on the one engine (:mod:`mpdp.protocol`):
ASK → AWAIT_RECEIPTS → DONE, or FAILED. ``services/curator/contribution.py`` only moves its messages. A
party's part is one request and one response (spend, compute, submit its shares; ``services/party/contribution.py``
over the DCA client machine), so it has no machine of its own here; the DCA job's roles are in :mod:`mpdp.dca`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from mpdp.messages import contribution_pb2 as pb
from mpdp.protocol import CURATOR, FAILED, LocalProtocolError, Machine, Peer, Problem, Publish, RemoteProtocolError, Send, row

if TYPE_CHECKING:
    from mpdp.dca.params import DcaParams

ASK, AWAIT_RECEIPTS, DONE = "ASK", "AWAIT_RECEIPTS", "DONE"
INTERNAL_FAILURE = "internal error (see the curator's log)"


class ContributionRound(Machine):
    """Charlie in one contribution round, sans-IO: ASK → AWAIT_RECEIPTS → DONE, or FAILED.

    :meth:`ask` gives the StatisticRequest to every listed party; each party's answer is a receipt
    (:meth:`receipt`) or a refusal (:meth:`refused`, ``invalid`` when the party refused the request itself as
    invalid). Once every party has answered: DONE with a :class:`~mpdp.protocol.Publish` of the
    ContributionSummary (receipts in the listed order) if none refused; else FAILED, naming every refusal, with
    INVALID_JOB when every refusal called the request invalid (the round can never run), JOB_FAILED otherwise.

    Answers are the returns of Charlie's own calls, so they are local events (``self``). An answer from a
    party that is not listed is refused WRONG_ROLE and changes nothing; a second answer (REPLAY) or a receipt
    naming another party fails the round closed.
    """

    ROLE = "contribution_curator"
    STATES = (ASK, AWAIT_RECEIPTS, DONE, FAILED)
    TERMINAL = (DONE, FAILED)
    TABLE = (
        row(ASK, "ask", "self", AWAIT_RECEIPTS),
        row(AWAIT_RECEIPTS, "receipt", "self", f"{AWAIT_RECEIPTS}|{DONE}|{FAILED}"),  # a party contributed
        row(AWAIT_RECEIPTS, "refused", "self", f"{AWAIT_RECEIPTS}|{FAILED}"),  # a party refused or was unreachable
    )
    PARTICIPANTS = frozenset()

    def __init__(self, request: pb.ContributionRound) -> None:
        if not request.parties or len(set(request.parties)) != len(request.parties):
            raise LocalProtocolError(Problem.INVALID_JOB, "parties must be distinct and at least one: a party contributes once")
        super().__init__(request.request.dca_job_id, CURATOR, record=False)
        self.request = request
        self.receipts: dict[str, pb.ContributionReceipt] = {}
        self.refusals: dict[str, tuple[str, bool]] = {}  # party → (detail, refused as invalid)

    def ask(self) -> list[Any]:
        return self._local("ask")

    def receipt(self, party: str, receipt: pb.ContributionReceipt) -> list[Any]:
        self._member(party)
        return self._local("receipt", party, receipt)

    def refused(self, party: str, detail: str, *, invalid: bool = False) -> list[Any]:
        self._member(party)
        return self._local("refused", party, detail, invalid)

    # -- engine hooks --------------------------------------------------------------------------------
    def _kinds(self, sender: Peer) -> frozenset[str]:
        return frozenset()  # Charlie's round takes no message

    # -- handlers --------------------------------------------------------------------------------------
    def _on_ask(self) -> list[Any]:
        return [Send(Peer("party", p), self.request.request) for p in self.request.parties]

    def _on_receipt(self, party: str, receipt: pb.ContributionReceipt) -> list[Any]:
        self._first_answer(party)
        if receipt.party != party:
            raise RemoteProtocolError(Problem.MALFORMED, f"DCA job {self.job_id}: party {party} answered for another party")
        self.receipts[party] = receipt
        return self._answered()

    def _on_refused(self, party: str, detail: str, invalid: bool) -> list[Any]:
        self._first_answer(party)
        self.refusals[party] = (detail, invalid)
        return self._answered()

    def _member(self, party: str) -> None:
        """An unlisted party's answer is refused and never touches the round."""
        if party not in self.request.parties:
            raise RemoteProtocolError(Problem.WRONG_ROLE, f"{party} is not asked in the round of DCA job {self.job_id}")

    def _first_answer(self, party: str) -> None:
        if party in self.receipts or party in self.refusals:
            raise RemoteProtocolError(Problem.REPLAY, f"DCA job {self.job_id}: party {party} answered twice")

    def _answered(self) -> list[Any]:
        parties = self.request.parties
        if len(self.receipts) + len(self.refusals) < len(parties):
            return []
        if self.refusals:
            failures = [f"party {p}: {self.refusals[p][0]}" for p in parties if p in self.refusals]
            if all(invalid for _, invalid in self.refusals.values()):
                e = LocalProtocolError(Problem.INVALID_JOB, f"the parties refused the request as invalid: {failures[0]}")
            else:
                e = LocalProtocolError(Problem.JOB_FAILED, f"DCA job {self.job_id}: {'; '.join(failures)}")
            self._fail(e)
            return e.notices
        self.state = DONE
        return [Publish(pb.ContributionSummary(receipts=[self.receipts[p] for p in parties]))]


def check_members(parties: Sequence[str], members: Sequence[str]) -> None:
    """Every party a job names is a member of the federation as this party was provisioned with it (its config's
    ``members``). The compute nodes bind each roster slot to its own certificate, but whoever holds the CA key can
    mint new party names; a party that takes rounds only over members cannot be surrounded by such parties, whose
    zero-noise slices would otherwise thin its own (each adds σ²_std/(N − T − 1) of the job's noise)."""
    if not members:
        raise ValueError("this party has no federation member list (config `members`); it takes no job with other parties")
    outsiders = set(parties) - set(members)
    if outsiders:
        raise ValueError(f"the job names {len(outsiders)} part{'y' if len(outsiders) == 1 else 'ies'} that are not members of this federation")


def check_roster(params: "DcaParams", parties: Sequence[str], me: str | None = None, members: Sequence[str] | None = None) -> None:
    """The DCA job ``params`` is a round of exactly ``parties`` (and of ``me``, a party checking for itself):
    a DP sum whose roster names these parties and no one else, so N = |parties|. Raises ValueError otherwise.

    Why this is enough against a curator or operator who sets N and the roster: each client adds noise of variance
    σ²_std/(N − T − 1), and a release needs at least N − T clients that reached every compute node. A compute node
    takes a named client's share only over that client's own certificate (no relaying), so every delivered slot is a
    party's own, and a roster padded with invented ids would only add missing clients, bounded by T like any other
    (docs/protocols/dca.md, "Rosters"). Checking that the roster *is* the round's parties closes the rest: N cannot
    be inflated to shrink each party's noise slice, nor a slot squatted by a party that was not asked."""
    if params.secure_sum:
        raise ValueError("the DCA job adds no noise; statistics are contributed to DP sums only")
    if params.roster_range is not None or not params.roster:
        raise ValueError("the DCA job must name its clients: its roster must be the round's parties")
    if len(set(parties)) != len(parties) or not parties:
        raise ValueError("the round must name distinct parties")
    if len(params.roster) != len(parties) or set(params.roster) != set(parties):
        raise ValueError(f"the DCA job's roster (N = {params.clients}) is not the round's {len(parties)} parties")
    if me is not None and me not in params.roster:
        raise ValueError("this party is not on the DCA job's roster")
    if members is not None:
        check_members(params.roster, members)
