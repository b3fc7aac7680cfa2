"""Charlie's local-release role (LMGC), mpdp.local_release.LocalReleaseCurator, on the one engine.

Invariants:
* happy path: ASK_RELEASES → AWAIT_RELEASES → PUBLISHED; the published set is the parties' releases in the
  job's order and their average exactly as average_releases gives it (a real LMGC release per party);
* an answer from a party not in the job is WRONG_ROLE and leaves state, releases and failures untouched;
* a second answer (REPLAY) and a release that cannot be published (another job/party, another mode,
  bad shape, a guarantee above the spec's ε, none) fail the job closed: FAILED, nothing published, and every
  later answer is refused with the failure's problem;
* a party's failure fails the job once all have answered, naming every failed party in the job's order;
* answers before ask() are refused and change nothing.
"""

from __future__ import annotations

import numpy as np
import pytest

from mpdp.local_release import (
    ASK_RELEASES,
    AWAIT_RELEASES,
    PUBLISHED,
    LocalReleaseCurator,
    average_releases,
    party_release,
)
from mpdp.math.drbg import Drbg
from mpdp.messages import common_pb2, local_release_pb2 as pb
from mpdp.protocol import FAILED, LocalProtocolError, Peer, ProtocolError, Publish, RemoteProtocolError, Send, check_table

Problem = common_pb2.Problem
PARTIES = ["p1", "p2", "p3"]


def _spec(**kw) -> pb.LocalModelJobSpec:
    spec = pb.LocalModelJobSpec(dataset="d", model="lmgc", epsilon=5.0, parties=PARTIES, mode=common_pb2.CORRECTED, ridge=1e-3, data_norm=1.0,
                                simulation_seed=b"role", **kw)
    setattr(spec, "lambda", 1e-3)
    return spec


@pytest.fixture(scope="module")
def releases() -> dict[str, pb.LocalModelRelease]:
    """One real corrected-mode release per party, for job lm-1."""
    g = np.random.default_rng(0)
    req = pb.LocalModelRequest(job_id="lm-1", spec=_spec())
    out = {}
    for p in PARTIES:
        X = g.normal(size=(80, 3)) / 3
        y = (X[:, 0] + 0.1 * g.normal(size=80) > 0).astype(int)
        out[p], _ = party_release(p, req, X, y, Drbg.from_seed(b"role").child(p))
    return out


def _asked(spec: pb.LocalModelJobSpec | None = None) -> LocalReleaseCurator:
    role = LocalReleaseCurator("lm-1", spec or _spec())
    sends = role.ask()
    assert role.state == AWAIT_RELEASES
    assert [s.to for s in sends] == [Peer("party", p) for p in PARTIES]
    assert all(isinstance(s, Send) and s.message == pb.LocalModelRequest(job_id="lm-1", spec=role.spec) for s in sends)
    return role


def _snapshot(role: LocalReleaseCurator):
    return role.state, dict(role.releases), dict(role.failures), role.error


def test_table_is_well_formed():
    check_table(LocalReleaseCurator)


def test_happy_path_publishes_the_set_in_job_order_and_their_average(releases):
    role = _asked()
    outs = []
    for p in ["p3", "p1", "p2"]:  # answers arrive in any order
        outs = role.release(p, releases[p])
        assert (role.state == PUBLISHED) == (p == "p2")
    assert role.state == PUBLISHED and role.terminal
    [pub] = outs
    assert isinstance(pub, Publish)
    published = pub.release
    assert [r.party for r in published.releases] == PARTIES
    avg, statement = average_releases("lm-1", [releases[p] for p in PARTIES])
    assert published.aggregate == avg and published.aggregate_statement == statement and published.seeded
    assert published.job_id == "lm-1"


def test_an_outsiders_answer_is_refused_and_never_touches_the_job(releases):
    role = _asked()
    role.release("p1", releases["p1"])
    before = _snapshot(role)
    outsider = pb.LocalModelRelease()
    outsider.CopyFrom(releases["p2"])
    outsider.party = "mallory"
    for call in (lambda: role.release("mallory", outsider), lambda: role.release_failed("mallory", "UNAVAILABLE: gone")):
        with pytest.raises(RemoteProtocolError) as e:
            call()
        assert e.value.problem == Problem.WRONG_ROLE
        assert _snapshot(role) == before
    role.release("p2", releases["p2"])
    role.release("p3", releases["p3"])
    assert role.state == PUBLISHED


def test_a_second_answer_fails_the_job_closed(releases):
    role = _asked()
    role.release("p1", releases["p1"])
    with pytest.raises(ProtocolError) as e:
        role.release("p1", releases["p1"])
    assert e.value.problem == Problem.REPLAY
    assert role.state == FAILED and role.error.problem == Problem.REPLAY
    with pytest.raises(ProtocolError) as later:  # the rest cannot revive it: refused with the failure's problem
        role.release("p2", releases["p2"])
    assert later.value.problem == Problem.REPLAY and role.state == FAILED


def test_a_failure_after_a_release_is_a_replay_too(releases):
    role = _asked()
    role.release_failed("p2", "UNAVAILABLE: gone")
    with pytest.raises(ProtocolError) as e:
        role.release("p2", releases["p2"])
    assert e.value.problem == Problem.REPLAY and role.state == FAILED


def _altered(release: pb.LocalModelRelease, **changes) -> pb.LocalModelRelease:
    r = pb.LocalModelRelease()
    r.CopyFrom(release)
    for k, v in changes.items():
        if k == "guarantee_epsilon":
            r.guarantee.epsilon = v
        elif k == "guarantee_delta":
            r.guarantee.delta = v
        elif k == "no_guarantee":
            r.ClearField("guarantee")
        elif k == "theta":
            del r.theta[:]
            r.theta.extend(v)
        else:
            setattr(r, k, v)
    return r


@pytest.mark.parametrize("changes", [
    {"job_id": "lm-2"},
    {"party": "p2"},
    {"mode": "paper"},
    {"theta": [0.0] * 5},
    {"dimension": 7},
    {"guarantee_epsilon": 5.5},
    {"guarantee_delta": 1e-6},
    {"no_guarantee": True},
], ids=lambda c: next(iter(c)))
def test_a_release_that_cannot_be_published_fails_the_job_closed(releases, changes):
    role = _asked()
    role.release("p2", releases["p2"])
    with pytest.raises(RemoteProtocolError) as e:
        role.release("p1", _altered(releases["p1"], **changes))
    assert e.value.problem == Problem.MALFORMED and "published nothing" in e.value.detail
    assert role.state == FAILED and "p1" not in role.releases
    with pytest.raises(ProtocolError):
        role.release("p3", releases["p3"])
    assert role.state == FAILED


def test_a_party_failure_fails_the_job_naming_every_failed_party_in_job_order(releases):
    role = _asked()
    assert role.release_failed("p3", "RESOURCE_EXHAUSTED: BUDGET_EXCEEDED: p3 has 0 left") == []
    assert role.state == AWAIT_RELEASES  # waits for every answer
    role.release("p2", releases["p2"])
    outs = role.release_failed("p1", "UNAVAILABLE: down")
    assert role.state == FAILED and not any(isinstance(o, Publish) for o in outs)
    assert role.error.problem == Problem.BUDGET_EXCEEDED  # a party's budget says why
    assert role.error.detail == "job lm-1 published nothing: party p1: UNAVAILABLE: down; party p3: RESOURCE_EXHAUSTED: BUDGET_EXCEEDED: p3 has 0 left"


def test_answers_before_ask_are_refused_and_change_nothing(releases):
    role = LocalReleaseCurator("lm-1", _spec())
    with pytest.raises(LocalProtocolError) as e:
        role.release("p1", releases["p1"])
    assert e.value.problem == Problem.STEP_OUT_OF_ORDER
    assert role.state == ASK_RELEASES and role.releases == {} and role.error is None
    role.ask()
    with pytest.raises(LocalProtocolError):
        role.ask()  # asked once
    assert role.state == AWAIT_RELEASES and role.error is None


def test_an_answer_after_publishing_is_refused_and_changes_nothing(releases):
    role = _asked()
    for p in PARTIES:
        role.release(p, releases[p])
    with pytest.raises(ProtocolError):
        role.release_failed("p1", "late")
    assert role.state == PUBLISHED and role.failures == {}


def test_an_invalid_spec_is_refused_before_the_role_exists():
    from mpdp.local_release import ReleaseError

    with pytest.raises(ReleaseError):
        LocalReleaseCurator("lm-1", _spec().__class__(dataset="d", model="lmgc", epsilon=5.0, parties=["p1", "p1"], mode=common_pb2.CORRECTED))


# -- the party's role -------------------------------------------------------------------------------------------
def test_the_party_spends_before_it_trains_and_answers_with_its_checked_release(releases):
    from mpdp.local_release import RELEASED, LocalReleaseParty, ledger_entry
    from mpdp.protocol import Reply, Spend

    req = pb.LocalModelRequest(job_id="lm-1", spec=_spec())
    role = LocalReleaseParty("p1", req)
    with pytest.raises(ProtocolError) as e:  # a release before the request (and its spend) is out of order
        role.trained(releases["p1"])
    assert e.value.problem == Problem.STEP_OUT_OF_ORDER
    role = LocalReleaseParty("p1", req)
    assert role.requested() == [Spend((ledger_entry(req),))]
    assert role.trained(releases["p1"]) == [Reply(releases["p1"])] and role.state == RELEASED


def test_the_party_never_answers_with_a_release_the_job_cannot_publish(releases):
    from mpdp.local_release import LocalReleaseParty

    role = LocalReleaseParty("p1", pb.LocalModelRequest(job_id="lm-1", spec=_spec()))
    role.requested()
    with pytest.raises(ProtocolError) as e:  # another party's release (or one with a weaker guarantee) is refused
        role.trained(releases["p2"])
    assert e.value.problem == Problem.INTERNAL and role.state == FAILED
    check_table(LocalReleaseParty)
