"""A Pathak party sends nothing derived from its records before its spend is durable, whatever is already in.

The spend step (ProtocolStart) outputs the party's Spend; the party writes it to its ledger outside the job's lock.
P1 is asked to spend last, and every other party's π1 reveal may already be in when its ProtocolStart comes: its
next step (PartySecrets to the others and its size shares, S1.2) is then ready at once, while the spend is still
being written. Those messages must wait for the spend, and if the ledger refuses it, never leave at all. Here the
other party is played by the test ("party-mock", a server that records), which reveals before P1 takes ProtocolStart;
P1's ledger write is held by holding the ledger's own lock (``fcntl.flock``, the lock every ledger operation takes),
and the budget is used up by another job meanwhile: the spend is refused after the step that follows it was ready.
"""

from __future__ import annotations

import fcntl
import os
import time

import pytest

from mpdp import accounting
from mpdp.ledger import Ledger
from mpdp.math.drbg import Drbg
from mpdp.messages import common_pb2, pathak2010_pb2 as pk, pathak2010_pb2_grpc as pk_grpc
from mpdp.pathak2010.party import pi1_commitment, reshare_secret

from tests.integration.conftest import MockParty

from .conftest import BUDGET, channel, ledger_job_ids, pathak_spec, serve_party, start_federation, submit_pathak, wait_pathak

pytestmark = pytest.mark.integration
REAL, OTHER = "party-1", "party-mock"


def wait_for(condition, timeout: float, what: str):
    """Poll ``condition`` (a log the services write) until it holds; the bound is the assertion."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {timeout:g} s")


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    f = start_federation(tmp_path_factory.mktemp("spendrace"), parties=[REAL], nodes=[], members=[REAL, OTHER])
    yield f
    f.stop()


def test_a_step_ready_while_the_spend_is_written_waits_for_it_and_a_refused_spend_lets_nothing_out(fed):
    other = MockParty()  # the other party the test plays: it records what it is sent and acknowledges it
    server, tls = serve_party(fed, OTHER, other)
    try:
        job = submit_pathak(fed, pathak_spec(parties=[REAL, OTHER], seed=b"race"))
        curator_log, party_log = fed.workdir / "curator" / "service.log", fed.workdir / REAL / "service.log"
        wait_for(lambda: f"received JobAcceptance from party:{REAL}" in curator_log.read_text(), 60, "the real party accepting")
        nonce, key = os.urandom(32), reshare_secret(Drbg.from_seed(os.urandom(32)))[1]
        with channel(fed, REAL, tls) as ch:  # the reveal is in before P1's ProtocolStart (it is held until then)
            pk_grpc.PartyStub(ch).SendPi1Reveal(pk.Pi1Reveal(job_id=job, nonce=nonce, reshare_key=key), timeout=60)

        ledger_path = fed.workdir / REAL / "state" / "ledger.json"
        fd = os.open(str(ledger_path) + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)  # P1's spend now waits for this lock
        try:
            with channel(fed, "curator", tls) as ch:  # the mock accepts: the curator starts it, then P1 (last)
                pk_grpc.CuratorStub(ch).AcceptJob(pk.JobAcceptance(job_id=job, dimension=4, pi1_commitment=pi1_commitment(job, OTHER, nonce, key)), timeout=30)
            wait_for(lambda: "received ProtocolStart" in party_log.read_text(), 60, "P1 taking ProtocolStart")
            # another job uses the budget up meanwhile (written as the ledger writes, under the lock held here)
            held = Ledger(ledger_path, BUDGET)
            led = held._read()
            led.record({"protocol": "other", "job_id": "elsewhere", "epsilon": BUDGET, "delta": 0.0, "accounting": accounting.pure_epsilon("spherical Laplace"),
                        "status": "spent", "spent_at": time.time()})
            held._write(led)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        status = wait_pathak(fed, job)
        assert status.state == "FAILED" and status.problem == common_pb2.BUDGET_EXCEEDED, status
        wait_for(lambda: f"job {job} failed" in party_log.read_text(), 60, "P1 failing the job")
        sent = []
        while not other.inbox.empty():
            sent.append(other.inbox.get())
        data = [type(m).__name__ for m in sent if isinstance(m, (pk.SizeShare, pk.SealedSizeRemainder, pk.PartySecrets))]
        assert not data, f"P1 sent {data} although its spend was refused"
        assert job not in ledger_job_ids(fed, REAL)  # nothing spent for it
    finally:
        server.stop(0)
