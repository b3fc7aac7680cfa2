"""Contributing to a DCA job: Charlie asks each listed party to contribute a vector computed from its own records
(regression's statistics, a dp-gd round's clipped gradient sum, an ensemble's votes) to a DCA job as a DCA client.

Two sans-IO roles on the one engine (:mod:`mpdp.protocol`):

* :class:`ContributionRound`, Charlie's: ASK → AWAIT_RECEIPTS → DONE, or FAILED (``services/curator/contribution.py``
  only moves its messages);
* :class:`Contributor`, the party's one contribution step, the same for every protocol that sums through the DCA:
  AWAIT_JOB → AWAIT_VECTOR → AWAIT_RECEIPTS → DONE, or FAILED. It holds the announced DCA job to the round the party
  accepted (:class:`AcceptedRound`: roster, N, the compute nodes, secure sum or noise, seeding, the validation mode
  and its bounds, and the protocol's own check of σ, Δ₂, the dimension and the purpose), then outputs the party's Spend before its shares (the engine's spend
  rule). ``services/party/contribute.py`` carries it out; the DCA job's own roles are in :mod:`mpdp.dca`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from mpdp.messages import contribution_pb2 as pb
from mpdp.protocol import CURATOR, FAILED, LocalProtocolError, failure_problem, Machine, Output, Peer, Problem, Publish, RemoteProtocolError, Send, row

if TYPE_CHECKING:
    from mpdp.dca.params import DcaParams
    from mpdp.math.drbg import Drbg

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
                e = LocalProtocolError(failure_problem(d for d, _ in self.refusals.values()), f"DCA job {self.job_id}: {'; '.join(failures)}")
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


def check_agreed_bound(field: str, asked: int, agreed: int | None) -> None:
    """A job's public size bound ``asked`` (Pathak's size_bits, a round's records_per_client) is the one the federation
    agreed for the dataset (``agreed``, the party's dataset config; None: no agreement, any bound is taken). A party
    that takes only the agreed bound answers the same for every job, whatever its size: accepting or refusing a job no
    longer compares the job's bound with n_j (docs/protocols/pathak2010.md, "Public size bounds are the federation's").
    The refusal names the agreed (public) value and not the job's."""
    if agreed is not None and asked != agreed:
        raise ValueError(f"the job's public bound {field} is not the one agreed for this dataset ({field} = {agreed})")


def check_roster(params: "DcaParams", parties: Sequence[str], me: str | None = None, members: Sequence[str] | None = None, *,
                 secure_sum: bool = False) -> None:
    """The DCA job ``params`` is a round of exactly ``parties`` (and of ``me``, a party checking for itself):
    a DP sum whose roster names these parties and no one else, so N = |parties|. Raises ValueError otherwise.

    Why this is enough against a curator or operator who sets N and the roster: each client adds noise of variance
    σ²_std/(N − T − 1), and a release needs at least N − T clients that reached every compute node. A compute node
    takes a named client's share only over that client's own certificate (no relaying), so every delivered slot is a
    party's own, and a roster padded with invented ids would only add missing clients, bounded by T like any other
    (docs/protocols/dca.md, "Rosters"). Checking that the roster *is* the round's parties closes the rest: N cannot
    be inflated to shrink each party's noise slice, nor a slot squatted by a party that was not asked.

    ``secure_sum``: the round is a plain secure sum (an ensemble's votes, released later with the ensemble's own
    noise), which the DCA job must then be; otherwise it must be a DP sum."""
    if params.secure_sum != secure_sum:
        raise ValueError("the DCA job adds no noise; statistics are contributed to DP sums only" if params.secure_sum
                         else "the DCA job adds noise where the round is a plain secure sum")
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


# -- the party's one contribution step ---------------------------------------------------------------------------
@dataclass(frozen=True)
class AcceptedRound:
    """The DCA job a party agreed to contribute to, as the job that asked says it must be.

    ``parties`` is the round's roster (the job's must be exactly it); ``nodes`` the compute nodes the job names (None:
    any); ``secure_sum`` whether the round is a plain secure sum; ``seeded`` whether it may carry a simulation seed
    (None: as the party's test mode allows); ``check`` the protocol's own test that the job is the round accepted (its
    σ, Δ₂, dimension, purpose), raising ValueError; ``charge`` the entries the party spends for its shares (None: the
    sum's own guarantee); ``validate`` the validation mode the round's plan says the job has (None: not held) and
    ``bounds`` the clip bounds that mode proves (None: not held) — a curator cannot silently turn validation off or
    loosen the bound another party's contribution is proven within."""

    dca_job: str
    parties: tuple[str, ...]
    nodes: tuple[str, ...] | None = None
    secure_sum: bool = False
    seeded: bool | None = None
    check: Callable[["DcaParams"], None] | None = None
    charge: Callable[["DcaParams"], tuple[dict, ...]] | None = None
    validate: str | None = None
    bounds: tuple[float, ...] | None = None


def hold_round(params: "DcaParams", accepted: AcceptedRound, me: str, members: Sequence[str], test_mode: bool) -> None:
    """The announced job ``params`` is the round ``accepted`` (ValueError otherwise): the checks every protocol's
    contribution makes, whoever created the DCA job."""
    if params.job_id != accepted.dca_job:
        raise ValueError("the announced job is not the one asked for")
    if params.seeded and not test_mode:
        raise ValueError("simulation_seed is refused outside test mode")
    if accepted.seeded is not None and params.seeded != accepted.seeded:
        raise ValueError("the DCA job's simulation seed does not match the job that asked for it")
    check_roster(params, list(accepted.parties), me, members, secure_sum=accepted.secure_sum)
    if accepted.nodes is not None and params.nodes != tuple(accepted.nodes):
        raise ValueError("the DCA job's compute nodes are not the job's")
    if accepted.validate is not None and params.validate != accepted.validate:
        raise ValueError(f"the DCA job's validation ({params.validate}) is not the round's ({accepted.validate})")
    if accepted.bounds is not None and params.clip_bounds != tuple(float(b) for b in accepted.bounds):
        raise ValueError("the DCA job's bounds are not the ones the round's plan proves")
    if params.node_noise and params.colluders != params.M - 1:  # a party counts on one honest node, as for its shares
        raise ValueError("the DCA job's noise counts on more than one honest compute node (colluders below M − 1)")
    if accepted.check is not None:
        accepted.check(params)


AWAIT_JOB, AWAIT_VECTOR = "AWAIT_JOB", "AWAIT_VECTOR"


class Contributor(Machine):
    """A party's contribution to one DCA job, sans-IO: AWAIT_JOB → AWAIT_VECTOR → AWAIT_RECEIPTS → DONE, or FAILED.

    :meth:`announced` holds the job the curator announces to the accepted round (:func:`hold_round`; INVALID_JOB
    otherwise); :meth:`computed` takes the party's vector and outputs its Spend, then its shares (a DCA client
    machine's, with this round's charge); :meth:`receipts` takes the compute nodes' answers (JOB_FAILED if any
    share was rejected). Every event is the party's own (``self``); the role takes no message.
    """

    ROLE = "contributor"
    STATES = (AWAIT_JOB, AWAIT_VECTOR, AWAIT_RECEIPTS, DONE, FAILED)
    TERMINAL = (DONE, FAILED)
    TABLE = (
        row(AWAIT_JOB, "announced", "self", AWAIT_VECTOR),
        row(AWAIT_VECTOR, "computed", "self", AWAIT_RECEIPTS),
        row(AWAIT_RECEIPTS, "receipts", "self", DONE),
    )
    PARTICIPANTS = frozenset()
    SPENDS = True

    def __init__(self, accepted: AcceptedRound, me: str, members: Sequence[str], test_mode: bool) -> None:
        super().__init__(accepted.dca_job, Peer("party", me), record=False)
        self.accepted = accepted
        self.members = tuple(members)
        self.test_mode = test_mode
        self.params: "DcaParams | None" = None
        self.charge: tuple[dict, ...] = ()

    def announced(self, params: "DcaParams") -> list[Output]:
        return self._local("announced", params)

    def computed(self, z: np.ndarray, rng: "Drbg") -> list[Output]:
        return self._local("computed", z, rng)

    def receipts(self, accepted: int, rejected: Sequence[Any]) -> list[Output]:
        return self._local("receipts", accepted, rejected)

    def _kinds(self, sender: Peer) -> frozenset[str]:
        return frozenset()  # the party's own steps only

    def _on_announced(self, params: "DcaParams") -> list[Output]:
        try:
            hold_round(params, self.accepted, self.me.name, self.members, self.test_mode)
            self.charge = self.accepted.charge(params) if self.accepted.charge is not None else (params.ledger_entry(),)
        except ValueError as e:
            raise LocalProtocolError(Problem.INVALID_JOB, str(e)) from None
        self.params = params
        return []

    def _on_computed(self, z: np.ndarray, rng: "Drbg") -> list[Output]:
        from mpdp.dca.client import ClientMachine  # the DCA core imports this module's roster checks

        assert self.params is not None
        client = ClientMachine(self.params, self.me.name, z, rng, record=False, charge=self.charge)
        return client.submit()  # its Spend (this round's charge), then one share per compute node

    def _on_receipts(self, accepted: int, rejected: Sequence[Any]) -> list[Output]:
        if rejected:
            raise LocalProtocolError(Problem.JOB_FAILED, f"the compute nodes refused {len(rejected)} of this party's shares")
        return []
