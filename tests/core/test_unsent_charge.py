"""A DCA submission that fails after its spend but before any share was handed to the network voids what it spent;
one that shares an entry with another submission never voids it (docs/protocols/accounting.md, "When a job spends,
and when a charge is voided").

The party's own steps (services/party/server.py ``Party.hold`` / ``settle_unsent`` / ``let_go``) over a real durable
ledger; tests/integration/test_probes_and_charges.py runs the whole contribution over TLS.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from mpdp.ledger import FAILED, SPENT, VOIDED
from mpdp_services.common import config as cfgmod, pki
from mpdp_services.party.server import Party


def _party(tmp_path: Path) -> Party:
    ca_key, ca_cert = pki.make_ca("fed")
    key, cert = pki.issue(ca_key, ca_cert, "party", "party-1", ["127.0.0.1"])
    pki.write_site(tmp_path / "site", key, cert, ca_cert)
    site = tmp_path / "site"
    cfg = cfgmod.PartyConfig(name="party-1", tls={"cert": site / "site.crt", "key": site / "site.key", "ca": site / "ca.crt"},
                             curator={"address": "127.0.0.1:9", "name": "curator"}, ledger=tmp_path / "ledger.json", budget_epsilon=10.0,
                             http_listen="")
    return Party(cfg)


def _entry(job: str, eps: float = 1.0, protocol: str = "dca") -> dict:
    return {"protocol": protocol, "job_id": job, "epsilon": eps, "delta": 0.0}


def _status(party: Party, job: str, protocol: str = "dca") -> str | None:
    e = party.ledger.find(protocol, job)
    return None if e is None else e.get("status", SPENT)


def test_a_submission_that_sent_nothing_voids_what_it_spent(tmp_path):
    party = _party(tmp_path)

    async def run() -> None:
        held = [await party.hold(None, _entry("job-a")), await party.hold(None, _entry("round-a", 0.0, "dpgd-round"))]
        assert [created for _, created in held] == [True, True]
        await party.settle_unsent(held, "no share left: test")

    asyncio.run(run())
    assert _status(party, "job-a") == VOIDED and _status(party, "round-a", "dpgd-round") == VOIDED
    assert party.ledger.composition().epsilon == 0.0  # a voided entry no longer counts
    assert not party._held and not party._reused


def test_an_entry_an_earlier_submission_spent_is_never_voided(tmp_path):
    """dp-gd: every round spends the job's one entry; a later round that sends nothing must not void it."""
    party = _party(tmp_path)

    async def run() -> None:
        first = [await party.hold(None, _entry("dpgd-1", 1.0, "dpgd"))]
        party.let_go(first)  # round 1 sent its shares and finished
        second = [await party.hold(None, _entry("dpgd-1", 1.0, "dpgd"))]
        assert second[0][1] is False  # not created by this round
        await party.settle_unsent(second, "no share left: test")

    asyncio.run(run())
    assert _status(party, "dpgd-1", "dpgd") == FAILED
    assert party.ledger.composition().epsilon > 0.99


def test_an_entry_a_concurrent_submission_spent_too_is_never_voided(tmp_path):
    """The first submission created the entry, a second one spent it again while the first was live (and may have
    sent shares under it): the first one's failure before sending keeps the charge."""
    party = _party(tmp_path)

    async def run() -> None:
        a = [await party.hold(None, _entry("dpgd-2", 1.0, "dpgd"))]
        b = [await party.hold(None, _entry("dpgd-2", 1.0, "dpgd"))]
        assert a[0][1] is True and b[0][1] is False
        party.let_go(b)
        await party.settle_unsent(a, "no share left: test")

    asyncio.run(run())
    assert _status(party, "dpgd-2", "dpgd") == FAILED


def test_a_cancel_that_lands_while_the_ledger_is_written_voids_that_spend(tmp_path):
    """The spend's ledger write runs in a thread a cancel cannot stop: the test holds the ledger's file lock so the
    write is under way when the cancel lands. The write completes after the cancel, and the party voids the entry it
    created (nothing left after it), instead of leaving it "spent"; a spend made before is never voided."""
    import fcntl
    import os

    import pytest

    party = _party(tmp_path)
    party.ledger.spend(_entry("earlier", 1.0))

    async def cancelled_while_writing(entry: dict) -> None:
        fd = os.open(party.ledger.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # the party's write waits for this lock
            task = asyncio.ensure_future(party.spend(None, entry))  # what hold() and every local release call
            while not party.ledger._thread_lock.locked():  # its thread holds the ledger's thread lock, waiting on ours
                await asyncio.sleep(0.01)
            task.cancel()
        finally:
            os.close(fd)  # releases the file lock: the write goes on
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled_while_writing(_entry("job-c", 2.0)))
    assert _status(party, "job-c") == VOIDED and _status(party, "earlier") == SPENT
    assert party.ledger.spent() == (1.0, 0.0)  # only the earlier spend counts
    asyncio.run(cancelled_while_writing(_entry("earlier", 1.0)))  # a spend that created nothing voids nothing
    assert _status(party, "earlier") == SPENT
