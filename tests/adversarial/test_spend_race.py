"""A Pathak party sends nothing derived from its records before its spend is durable, whoever pushes the next step.

The spend step (ProtocolStart) outputs the party's Spend; the party writes it to its ledger outside the job's lock.
A leader (P1) who does not wait for the party's answer to StartProtocol can push PartySecrets while that write is
still under way: the party's next step (its size shares, S1.2, once PartySecrets and the leader's π1 reveal are in) must wait for the spend, and if the ledger refuses
the spend, never leave at all. Here the leader is played by the test ("party-mock", a server that records), the
party's ledger write is held by holding the ledger's own lock (``fcntl.flock``, the lock every ledger operation
takes), and the budget is used up by another job meanwhile: the spend is refused after PartySecrets arrived.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from concurrent import futures

import grpc
import pytest

from mpdp import accounting
from mpdp.ledger import Ledger
from mpdp.math.paillier import KeyPair
from mpdp.messages import common_pb2, pathak2010_pb2 as pk, pathak2010_pb2_grpc as pk_grpc
from mpdp.pathak2010.party import pi1_commitment

from tests.integration.conftest import MockParty

from .conftest import BUDGET, channel, ledger_job_ids, mint, pathak_spec, start_federation, submit_pathak, wait_pathak

pytestmark = pytest.mark.integration
REAL, LEADER = "party-1", "party-mock"


def wait_for(condition, timeout: float, what: str):
    """Poll ``condition`` (a log the services write) until it holds; the bound is the assertion."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {timeout:g} s")


def _b(v: int) -> bytes:
    return v.to_bytes((v.bit_length() + 7) // 8, "big")


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    f = start_federation(tmp_path_factory.mktemp("spendrace"), parties=[REAL], nodes=[], members=[REAL, LEADER])
    yield f
    f.stop()


def test_a_step_pushed_while_the_spend_is_written_waits_for_it_and_a_refused_spend_lets_nothing_out(fed):
    tls = mint(fed, "party", LEADER)
    leader = MockParty()  # the leader the test plays: it records what it is sent and acknowledges it
    server = grpc.server(futures.ThreadPoolExecutor(4))
    pk_grpc.add_PartyServicer_to_server(leader, server)
    port = server.add_secure_port("127.0.0.1:0", tls.server_credentials())
    server.start()
    try:
        with channel(fed, "curator", tls) as ch:
            pk_grpc.CuratorStub(ch).RegisterParty(pk.PartyRegistration(address=f"127.0.0.1:{port}"), timeout=30)
        job = submit_pathak(fed, pathak_spec(parties=[LEADER, REAL], seed=b"race"))
        curator_log, party_log = fed.workdir / "curator" / "service.log", fed.workdir / REAL / "service.log"
        wait_for(lambda: f"received JobAcceptance from party:{REAL}" in curator_log.read_text(), 60, "the real party accepting")

        ledger_path = fed.workdir / REAL / "state" / "ledger.json"
        fd = os.open(str(ledger_path) + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)  # the party's spend now waits for this lock
        try:
            nonce = os.urandom(32)
            with channel(fed, "curator", tls) as ch:  # the leader accepts: the curator sends StartProtocol to the real party
                pk_grpc.CuratorStub(ch).AcceptJob(pk.JobAcceptance(job_id=job, dimension=4, pi1_commitment=pi1_commitment(job, LEADER, nonce)), timeout=30)
            wait_for(lambda: "received ProtocolStart" in party_log.read_text(), 60, "the party taking ProtocolStart")
            key = KeyPair.generate(768)
            secrets = pk.PartySecrets(job_id=job, paillier_p=_b(key.p), paillier_q=_b(key.q))
            reveal = pk.Pi1Reveal(job_id=job, nonce=nonce)  # P1 gives no re-share seed (it sends its pieces)
            answered: list = []

            def push() -> None:  # the leader does not wait for the party's spend
                with channel(fed, REAL, tls) as ch:
                    try:
                        pk_grpc.PartyStub(ch).SendPi1Reveal(reveal, timeout=120)
                        answered.append(pk_grpc.PartyStub(ch).SendPartySecrets(secrets, timeout=120))
                    except grpc.RpcError as e:
                        answered.append(e)

            pusher = threading.Thread(target=push)
            pusher.start()
            wait_for(lambda: "received PartySecrets" in party_log.read_text(), 60, "the party taking PartySecrets")
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
        pusher.join(timeout=120)
        assert answered, "the party never answered PartySecrets"
        wait_for(lambda: f"job {job} failed" in party_log.read_text(), 60, "the party failing the job")
        sent = []
        while not leader.inbox.empty():
            sent.append(leader.inbox.get())
        data = [type(m).__name__ for m in sent if isinstance(m, (pk.SizeShare, pk.SealedSizeRemainder))]
        assert not data, f"the party sent {data} although its spend was refused"
        assert job not in ledger_job_ids(fed, REAL)  # nothing spent for it
    finally:
        server.stop(0)
