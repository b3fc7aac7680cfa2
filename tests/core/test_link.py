"""The party's link at the curator (services/curator/links.py) and its framing bounds (mpdp/limits.py).

The registry is driven in-process with real certificates in a minimal servicer context (what grpc.aio hands a
servicer: the peer's certificate, initial metadata, abort); the network path is in tests/adversarial/test_link.py.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest

from mpdp import limits
from mpdp.messages import common_pb2, link_pb2
from mpdp_services.common import link, pki
from mpdp_services.curator.links import PartyLinks

FED = "fed-link"


class _Aborted(Exception):
    def __init__(self, code, details):
        super().__init__(details)
        self.code, self.details = code, details


class Context:
    """The parts of grpc.aio.ServicerContext the link service reads."""

    def __init__(self, pem: bytes) -> None:
        self._pem = pem
        self.sent_metadata = False

    def auth_context(self):
        return {"x509_pem_cert": [self._pem]}

    async def send_initial_metadata(self, md) -> None:
        self.sent_metadata = True

    async def abort(self, code, details):
        raise _Aborted(code, details)


@pytest.fixture(scope="module")
def certs():
    ca_key, ca = pki.make_ca(FED)
    out = {}
    for name in ("party-1", "party-2"):
        out[name] = pki.pem_cert(pki.issue(ca_key, ca, "party", name)[1])
    out["party-1-twin"] = pki.pem_cert(pki.issue(ca_key, ca, "party", "party-1")[1])  # another key under party-1's name
    return out


def registry(certs, **kw) -> PartyLinks:
    pins = {n: pki.key_fingerprint(certs[n]) for n in ("party-1", "party-2")}
    return PartyLinks(lambda: frozenset(pins), pins.get, **kw)


async def _open(links: PartyLinks, pem: bytes) -> tuple[asyncio.Queue, asyncio.Task, Context]:
    """Open a link as the holder of ``pem``; what comes down it lands in the returned queue."""
    got: asyncio.Queue = asyncio.Queue()
    ctx = Context(pem)

    async def run() -> None:
        async for down in links.Open(link_pb2.LinkHello(), ctx):
            await got.put(down)

    task = asyncio.ensure_future(run())
    while not ctx.sent_metadata and not task.done():
        await asyncio.sleep(0)
    return got, task, ctx


def test_a_call_goes_down_the_link_and_its_answer_comes_back(certs):
    async def main():
        links = registry(certs)
        got, task, ctx = await _open(links, certs["party-1"])
        call = asyncio.ensure_future(links.call("party-1", "mpdp.messages.Party", "AbortJob", common_pb2.JobAbort(job_id="j-1"), common_pb2.Ack, 5.0))
        down = await got.get()
        assert down.method == "/mpdp.messages.Party/AbortJob" and common_pb2.JobAbort.FromString(down.request).job_id == "j-1"
        assert 0 < down.timeout_seconds <= 5.0 and down.call_id >= 1
        limits.check_link_down(down)
        await links.Answer(link_pb2.LinkAnswer(call_id=down.call_id, response=common_pb2.Ack().SerializeToString()), ctx)
        assert await call == common_pb2.Ack()
        # a refusal keeps its status and details end to end
        call = asyncio.ensure_future(links.call("party-1", "mpdp.messages.Party", "AbortJob", common_pb2.JobAbort(job_id="j-2"), common_pb2.Ack, 5.0))
        down = await got.get()
        await links.Answer(link_pb2.LinkAnswer(call_id=down.call_id, code=link.code_of(grpc.StatusCode.NOT_FOUND), details="UNKNOWN_JOB: no job"), ctx)
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await call
        assert e.value.code() == grpc.StatusCode.NOT_FOUND and e.value.details() == "UNKNOWN_JOB: no job"
        # an answer for no call in flight (replayed, or made up) is refused
        with pytest.raises(_Aborted) as refused:
            await links.Answer(link_pb2.LinkAnswer(call_id=down.call_id), ctx)
        assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION
        await links.close()
        await asyncio.wait_for(task, 5)

    asyncio.run(main())


def test_no_link_is_unavailable_a_slow_party_is_a_deadline_and_the_in_flight_bound_holds(certs):
    async def main():
        links = registry(certs, max_calls=2)
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await links.call("party-2", "mpdp.messages.Party", "AbortJob", common_pb2.JobAbort(), common_pb2.Ack, 0.2)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE and "party-2" in e.value.details()
        got, task, ctx = await _open(links, certs["party-1"])
        calls = [asyncio.ensure_future(links.call("party-1", "mpdp.messages.Party", "AbortJob", common_pb2.JobAbort(), common_pb2.Ack, 0.5)) for _ in range(2)]
        await got.get()
        await got.get()  # both in flight
        with pytest.raises(grpc.aio.AioRpcError) as e:  # a third waits its turn: none comes within its deadline
            await links.call("party-1", "mpdp.messages.Party", "AbortJob", common_pb2.JobAbort(), common_pb2.Ack, 0.2)
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert got.empty()  # it never went down the link
        for c in calls:
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await c
            assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        await links.close()
        await asyncio.wait_for(task, 5)

    asyncio.run(main())


def test_a_new_link_replaces_the_old_and_its_calls_fail_unavailable(certs):
    async def main():
        links = registry(certs)
        got1, task1, _ = await _open(links, certs["party-1"])
        call = asyncio.ensure_future(links.call("party-1", "mpdp.messages.Party", "AbortJob", common_pb2.JobAbort(), common_pb2.Ack, 5.0))
        await got1.get()
        got2, task2, ctx2 = await _open(links, certs["party-1"])
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await call
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        await asyncio.wait_for(task1, 5)  # the old stream ended
        call = asyncio.ensure_future(links.call("party-1", "mpdp.messages.Party", "AbortJob", common_pb2.JobAbort(), common_pb2.Ack, 5.0))
        down = await got2.get()
        await links.Answer(link_pb2.LinkAnswer(call_id=down.call_id), ctx2)
        assert await call == common_pb2.Ack()
        assert links.linked() == ["party-1"]
        await links.close()
        await asyncio.wait_for(task2, 5)

    asyncio.run(main())


def test_only_the_registered_key_may_open_a_members_link(certs):
    async def main():
        links = registry(certs)
        with pytest.raises(_Aborted) as e:
            async for _ in links.Open(link_pb2.LinkHello(), Context(certs["party-1-twin"])):
                pass
        assert e.value.code == grpc.StatusCode.PERMISSION_DENIED and e.value.details.startswith("WRONG_ROLE:")
        assert links.linked() == []

    asyncio.run(main())


def test_a_link_down_past_the_grace_loses_the_party_and_one_reopened_in_time_does_not(certs):
    async def main():
        links = registry(certs, lost_after=0.3)
        lost: list[str] = []

        async def on_lost(reason: str) -> None:
            lost.append(reason)

        got, task, _ = await _open(links, certs["party-1"])
        sub = links.subscribe("", "party-1", on_lost)
        links._links["party-1"].close("dropped")  # the stream ends as when the connection drops
        await asyncio.wait_for(task, 5)
        got, task, _ = await _open(links, certs["party-1"])  # reopened within the grace
        await asyncio.sleep(0.5)
        assert lost == []
        links._links["party-1"].close("dropped")
        await asyncio.wait_for(task, 5)
        for _ in range(100):
            if lost:
                break
            await asyncio.sleep(0.05)
        assert len(lost) == 1 and "link" in lost[0]
        links.unsubscribe(sub)
        await links.close()

    asyncio.run(main())


@pytest.mark.parametrize("field,value", [("call_id", 0), ("method", ""), ("method", "/" + "x" * limits.MAX_METHOD), ("timeout_seconds", 0.0),
                                         ("timeout_seconds", limits.MAX_CALL_SECONDS * 2)])
def test_link_down_fields_out_of_range_are_refused(field, value):
    down = link_pb2.LinkDown(call_id=1, method="/mpdp.messages.Party/AbortJob", timeout_seconds=1.0)
    limits.check_link_down(down)
    setattr(down, field, value)
    with pytest.raises(limits.SpecError) as e:
        limits.check_link_down(down)
    assert e.value.field == field


@pytest.mark.parametrize("field,value", [("call_id", 0), ("code", 17), ("details", "d" * (limits.MAX_LINK_DETAILS + 1))])
def test_link_answer_fields_out_of_range_are_refused(field, value):
    answer = link_pb2.LinkAnswer(call_id=1)
    limits.check_link_answer(answer)
    setattr(answer, field, value)
    with pytest.raises(limits.SpecError):
        limits.check_link_answer(answer)


def test_a_sealed_call_is_bounded_field_by_field():
    sealed = link_pb2.SealedCall(federation=FED, sender="party-1", recipient="party-2", method="/mpdp.messages.Party/SendNoiseChain", job_id="j-1",
                                 nonce=bytes(16), deadline=1e9, sender_certificate=b"c", ephemeral_key=bytes(65), gcm_nonce=bytes(12), ciphertext=bytes(16),
                                 signature=bytes(70))
    limits.check_message("SealedCall", sealed)
    for field, value in (("nonce", bytes(15)), ("ephemeral_key", bytes(64)), ("sender", "a/b"), ("sender_certificate", bytes(limits.MAX_CERTIFICATE + 1)),
                         ("signature", bytes(81)), ("job_id", "")):
        bad = link_pb2.SealedCall()
        bad.CopyFrom(sealed)
        setattr(bad, field, value)
        with pytest.raises(limits.SpecError):
            limits.check_message("SealedCall", bad)
