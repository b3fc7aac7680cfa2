"""Charlie's contribution round (mpdp.contribution.ContributionRound) on the one engine.

Invariants:
* happy path: ASK → AWAIT_RECEIPTS → DONE once every listed party's receipt is in; the summary lists the
  receipts in the listed order; ask() sends the request to each listed party once;
* an answer from a party not listed is WRONG_ROLE and never touches the round;
* a second answer (REPLAY) or a receipt naming another party fails the round closed;
* refusals fail the round once all have answered, naming every refusal in listed order: INVALID_JOB when
  every refusal called the request invalid, JOB_FAILED otherwise (the servicer's former rule);
* duplicates or an empty list are refused before the round exists; answers before ask() change nothing.
"""

from __future__ import annotations

import pytest

from mpdp.contribution import ASK, AWAIT_RECEIPTS, DONE, ContributionRound
from mpdp.messages import common_pb2, contribution_pb2 as pb
from mpdp.protocol import FAILED, LocalProtocolError, Peer, ProtocolError, Publish, RemoteProtocolError, check_table

Problem = common_pb2.Problem
PARTIES = ["p1", "p2", "p3"]


def _request(parties=PARTIES) -> pb.ContributionRound:
    req = pb.StatisticRequest(dca_job_id="dca-1", dataset="lin", statistic="linreg/std", bounds=[1.0, 2.0], records_per_client=10)
    return pb.ContributionRound(request=req, parties=parties)


def _asked() -> ContributionRound:
    role = ContributionRound(_request())
    sends = role.ask()
    assert role.state == AWAIT_RECEIPTS
    assert [s.to for s in sends] == [Peer("party", p) for p in PARTIES] and all(s.message == _request().request for s in sends)
    return role


def _receipt(p: str, shares: int = 3) -> pb.ContributionReceipt:
    return pb.ContributionReceipt(party=p, accepted_shares=shares)


def test_table_is_well_formed():
    check_table(ContributionRound)


def test_happy_path_gathers_every_receipt_in_listed_order():
    role = _asked()
    assert role.receipt("p2", _receipt("p2")) == []
    assert role.receipt("p3", _receipt("p3")) == []
    [pub] = role.receipt("p1", _receipt("p1"))
    assert role.state == DONE and isinstance(pub, Publish)
    assert pub.release == pb.ContributionSummary(receipts=[_receipt(p) for p in PARTIES])


def test_an_unlisted_partys_answer_never_touches_the_round():
    role = _asked()
    role.receipt("p1", _receipt("p1"))
    before = (role.state, dict(role.receipts), dict(role.refusals), role.error)
    for call in (lambda: role.receipt("p4", _receipt("p4")), lambda: role.refused("p4", "UNAVAILABLE: x")):
        with pytest.raises(RemoteProtocolError) as e:
            call()
        assert e.value.problem == Problem.WRONG_ROLE
        assert (role.state, dict(role.receipts), dict(role.refusals), role.error) == before
    role.receipt("p2", _receipt("p2"))
    role.receipt("p3", _receipt("p3"))
    assert role.state == DONE


def test_a_second_answer_fails_the_round_closed():
    role = _asked()
    role.refused("p1", "UNAVAILABLE: x")
    with pytest.raises(RemoteProtocolError) as e:
        role.receipt("p1", _receipt("p1"))
    assert e.value.problem == Problem.REPLAY and role.state == FAILED
    with pytest.raises(ProtocolError) as later:
        role.receipt("p2", _receipt("p2"))
    assert later.value.problem == Problem.REPLAY and role.state == FAILED


def test_a_receipt_naming_another_party_fails_the_round_closed():
    role = _asked()
    with pytest.raises(RemoteProtocolError) as e:
        role.receipt("p1", _receipt("p2"))
    assert e.value.problem == Problem.MALFORMED and role.state == FAILED and role.receipts == {}


def test_refusals_fail_the_round_naming_each_in_listed_order():
    role = _asked()
    role.refused("p3", "INVALID_ARGUMENT: no dataset", invalid=True)
    role.receipt("p2", _receipt("p2"))
    assert role.state == AWAIT_RECEIPTS  # waits for every answer
    outs = role.refused("p1", "UNAVAILABLE: down")
    assert role.state == FAILED and not any(isinstance(o, Publish) for o in outs)
    assert role.error.problem == Problem.JOB_FAILED
    assert role.error.detail == "DCA job dca-1: party p1: UNAVAILABLE: down; party p3: INVALID_ARGUMENT: no dataset"


def test_a_round_a_partys_budget_refused_fails_budget_exceeded():
    role = _asked()
    role.receipt("p1", _receipt("p1"))
    role.refused("p2", "UNAVAILABLE: down")
    role.refused("p3", "RESOURCE_EXHAUSTED: BUDGET_EXCEEDED: party p3: needs ε=4, δ=0; left ε=2, δ=0.001")
    assert role.state == FAILED and role.error.problem == Problem.BUDGET_EXCEEDED  # the operator learns why


def test_a_round_every_refusal_calls_invalid_is_an_invalid_job():
    role = _asked()
    role.receipt("p1", _receipt("p1"))
    role.refused("p2", "INVALID_ARGUMENT: unknown statistic", invalid=True)
    role.refused("p3", "INVALID_ARGUMENT: unknown statistic", invalid=True)
    assert role.state == FAILED and role.error.problem == Problem.INVALID_JOB
    assert role.error.detail == "the parties refused the request as invalid: party p2: INVALID_ARGUMENT: unknown statistic"


@pytest.mark.parametrize("parties", [[], ["p1", "p1", "p2"]])
def test_duplicates_or_no_parties_are_refused_before_the_round_exists(parties):
    with pytest.raises(LocalProtocolError) as e:
        ContributionRound(_request(parties))
    assert e.value.problem == Problem.INVALID_JOB


def test_answers_before_ask_change_nothing():
    role = ContributionRound(_request())
    with pytest.raises(LocalProtocolError) as e:
        role.receipt("p1", _receipt("p1"))
    assert e.value.problem == Problem.STEP_OUT_OF_ORDER and role.state == ASK and role.receipts == {} and role.error is None
