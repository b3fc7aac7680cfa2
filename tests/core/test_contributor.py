"""The party's one contribution step (mpdp.contribution.Contributor) and the engine's spend rule (mpdp.protocol).

A spending role may not output a data-dependent Send before its Spend; the contributor holds the announced DCA job
to the round the party accepted before it builds a single share, and its Spend carries the round's own charge."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mpdp.contribution import AcceptedRound, Contributor
from mpdp.dca.client import ClientMachine
from mpdp.math.drbg import Drbg
from mpdp.messages import common_pb2
from mpdp.protocol import FAILED, LocalProtocolError, Machine, Peer, Problem, ProtocolError, Send, Spend, row

from tests.dca.helpers import NODES, make_params

PARTIES = ("party-1", "party-2", "party-3")
MEMBERS = PARTIES


def params(**kw):
    base: dict[str, Any] = dict(clients=3, max_missing=0, roster=PARTIES, simulation_seed=b"")
    base.update(kw)
    return make_params(**base)


def contributor(accepted: AcceptedRound | None = None, *, test_mode: bool = False, me: str = "party-1") -> Contributor:
    return Contributor(accepted or AcceptedRound("job-1", PARTIES), me, MEMBERS, test_mode)


# -- the spend rule -------------------------------------------------------------------------------------------
class _Leaky(Machine):
    ROLE = "leaky"
    STATES = ("READY", "DONE", FAILED)
    TERMINAL = ("DONE", FAILED)
    TABLE = (row("READY", "go", "self", "DONE"),)
    PARTICIPANTS = frozenset()
    SPENDS = True

    def __init__(self, spend_first: bool) -> None:
        super().__init__("job-x", Peer("party", "p"))
        self.spend_first = spend_first

    def _kinds(self, sender: Peer) -> frozenset[str]:
        return frozenset()

    def go(self):
        return self._local("go")

    def _on_go(self):
        data = Send(Peer("compute_node", "n"), b"z")
        spend = Spend(({"protocol": "t", "job_id": "job-x", "epsilon": 1.0, "delta": 0.0},))
        abort = Send(Peer("compute_node", "n"), common_pb2.JobAbort(job_id="job-x"))  # a PUBLIC kind may go first
        return [abort, spend, data] if self.spend_first else [abort, data, spend]


def test_a_data_dependent_send_before_the_spend_fails_the_role_and_nothing_leaves():
    m = _Leaky(spend_first=False)
    with pytest.raises(LocalProtocolError) as e:
        m.go()
    assert e.value.problem == Problem.INTERNAL and m.state == FAILED and not m.spent


def test_a_spend_then_data_passes_the_rule():
    m = _Leaky(spend_first=True)
    out = m.go()
    assert isinstance(out[1], Spend) and m.spent and m.state == "DONE"


def test_the_dca_client_spends_before_its_first_share():
    p = make_params()
    out = ClientMachine(p, "client-1", np.zeros(p.dimension), Drbg.from_seed(b"tests/dca").child("client/client-1")).submit()
    assert isinstance(out[0], Spend) and out[0].entries == (p.ledger_entry(),)
    assert all(isinstance(o, Send) for o in out[1:]) and len(out) == 1 + len(NODES)


# -- holding the round ---------------------------------------------------------------------------------------
def test_an_honest_round_spends_its_charge_then_sends_one_share_per_node():
    charge = ({"protocol": "dpgd", "job_id": "dp-1", "epsilon": 0.5, "delta": 1e-6}, {"protocol": "dpgd-round", "job_id": "dp-1.r0", "epsilon": 0.0, "delta": 0.0})
    c = contributor(AcceptedRound("job-1", PARTIES, nodes=NODES, charge=lambda p: charge))
    assert c.announced(params()) == []
    out = c.computed(np.zeros(4), Drbg.from_os())
    assert out[0] == Spend(charge) and [o.to.name for o in out[1:]] == list(NODES)
    assert c.receipts(3, []) == [] and c.state == "DONE"


def test_without_its_own_charge_the_round_spends_the_sums_guarantee():
    c = contributor()
    c.announced(p := params())
    assert c.computed(np.zeros(4), Drbg.from_os())[0] == Spend((p.ledger_entry(),))


@pytest.mark.parametrize("announced, accepted, why", [
    (dict(clients=4, roster=(*PARTIES, "party-9")), {}, "roster"),  # an inflated N thins the noise slice
    (dict(clients=2, roster=("party-2", "party-3")), dict(parties=("party-2", "party-3")), "not on the DCA job's roster"),
    (dict(secure_sum=True, epsilon=0.0, delta=0.0, sensitivity=0.0), {}, "adds no noise"),
    (dict(), dict(secure_sum=True), "adds noise"),
    (dict(simulation_seed=b"s"), {}, "test mode"),
    (dict(), dict(seeded=True), "seed"),
    (dict(nodes=("node-a", "node-b", "node-x")), dict(nodes=NODES), "compute nodes"),
    (dict(job_id="job-2"), {}, "not the one asked for"),
])
def test_a_job_that_is_not_the_accepted_round_is_refused_before_any_share(announced, accepted, why):
    kw = {"parties": PARTIES, **accepted}
    c = contributor(AcceptedRound("job-1", **kw))
    with pytest.raises(ProtocolError) as e:
        c.announced(params(**announced))
    assert e.value.problem == Problem.INVALID_JOB and why in e.value.detail and c.state == FAILED
    with pytest.raises(ProtocolError):  # a failed contributor never builds a share
        c.computed(np.zeros(4), Drbg.from_os())


def test_a_round_over_non_members_is_refused():
    c = Contributor(AcceptedRound("job-1", PARTIES), "party-1", ("party-1", "party-2"), False)
    with pytest.raises(ProtocolError) as e:
        c.announced(params())
    assert e.value.problem == Problem.INVALID_JOB and "members" in e.value.detail


def test_the_protocols_own_check_runs():
    def check(p):
        raise ValueError("the DCA job's σ_std is not round 0's of the plan")

    c = contributor(AcceptedRound("job-1", PARTIES, check=check))
    with pytest.raises(ProtocolError) as e:
        c.announced(params())
    assert "σ_std" in e.value.detail


def test_out_of_order_steps_are_refused_and_a_rejected_share_fails_the_round():
    c = contributor()
    with pytest.raises(ProtocolError) as e:
        c.computed(np.zeros(4), Drbg.from_os())  # a vector before the job is held
    assert e.value.problem == Problem.STEP_OUT_OF_ORDER
    c = contributor()
    c.announced(params())
    c.computed(np.zeros(4), Drbg.from_os())
    with pytest.raises(ProtocolError) as e:
        c.receipts(2, ["rejected"])
    assert e.value.problem == Problem.JOB_FAILED and c.state == FAILED


def test_every_role_that_holds_records_is_bound_by_the_spend_rule():
    """The roles whose messages derive from a party's records: the Pathak party, the DCA client and the contributor.
    Each may send only its PUBLIC kinds (acceptance, abort) before its Spend."""
    from mpdp.pathak2010.party import PartyMachine

    assert PartyMachine.SPENDS and ClientMachine.SPENDS and Contributor.SPENDS
    assert PartyMachine.PUBLIC == {"JobAbort", "JobAcceptance"} and ClientMachine.PUBLIC == {"JobAbort"}
