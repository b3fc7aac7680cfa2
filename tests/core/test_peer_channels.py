"""PeerChannels under a peer that refuses connections: every call fails as an RPC error, never as a usage error.

After UNAVAILABLE the channel is dropped so the next call reconnects at once. Calls of other jobs that looked the
channel up just before must still get an RPC status (the job then fails naming the peer): a call on a closed channel
raises grpc.aio.UsageError, which no job's send path expects, and the job would hang until its deadline.
"""

from __future__ import annotations

import asyncio
import socket

import grpc
import pytest

from mpdp.messages import common_pb2
from mpdp_services.common import pki
from mpdp_services.common.peerwatch import PeerWatch
from mpdp_services.common.rpc import PeerChannels, TlsFiles


@pytest.fixture
def tls(tmp_path) -> TlsFiles:
    ca_key, ca_cert = pki.make_ca("test")
    key, cert = pki.issue(ca_key, ca_cert, "curator", "curator", ["127.0.0.1"])
    pki.write_site(tmp_path, key, cert, ca_cert)
    return TlsFiles(tmp_path / "site.crt", tmp_path / "site.key", tmp_path / "ca.crt")


def dead_address() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"127.0.0.1:{port}"


@pytest.mark.process  # starts a process or opens a socket: not in `make test-fast`
def test_concurrent_calls_to_a_dead_peer_all_end_in_rpc_errors(tls):
    address = dead_address()

    async def main() -> list[BaseException]:
        channels = PeerChannels(tls)

        async def one(i: int) -> BaseException:
            for _ in range(i % 7):  # interleave: some look the channel up while others drop it
                await asyncio.sleep(0)
            try:
                await channels.call(address, "party-9", "mpdp.messages.Party", "AnnounceJob", common_pb2.Ack(), common_pb2.Ack, timeout=10)
            except BaseException as e:  # noqa: BLE001 - the kind of failure is what is tested
                return e
            raise AssertionError("a call to a dead address succeeded")

        try:
            return list(await asyncio.gather(*(one(i) for i in range(60))))
        finally:
            await channels.close()

    errors = asyncio.run(main())
    assert all(isinstance(e, grpc.aio.AioRpcError) for e in errors), {type(e).__name__ for e in errors}
    assert {e.code() for e in errors} <= {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}


@pytest.mark.process  # starts a process or opens a socket: not in `make test-fast`
def test_a_call_in_flight_when_its_channel_closes_ends_as_unavailable(tls):
    """A peer that accepts TCP and never answers the TLS handshake: the call hangs; closing the channel under it
    (as happens when another call to the same peer fails) ends it with UNAVAILABLE, not a bare CancelledError."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    address = f"127.0.0.1:{listener.getsockname()[1]}"

    async def main() -> BaseException:
        channels = PeerChannels(tls)
        call = asyncio.ensure_future(channels.call(address, "party-9", "mpdp.messages.Party", "AnnounceJob", common_pb2.Ack(), common_pb2.Ack, timeout=20))
        while not channels._channels:  # the call has looked its channel up
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        await channels.close()
        try:
            await call
        except BaseException as e:  # noqa: BLE001 - the kind of failure is what is tested
            return e
        raise AssertionError("the call succeeded")

    try:
        e = asyncio.run(main())
    finally:
        listener.close()
    assert isinstance(e, grpc.aio.AioRpcError) and e.code() == grpc.StatusCode.UNAVAILABLE, repr(e)


@pytest.mark.process  # starts a process or opens a socket: not in `make test-fast`
def test_a_watched_peer_that_never_answers_is_lost_within_the_bound(tls):
    """A peer that takes TCP and never speaks (as a reconnect whose name lookup never returns) is reported lost
    once its answer is LOST_AFTER overdue, however many attempts are still left: a job waiting on it fails naming
    it instead of stalling until its deadline."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    address = f"127.0.0.1:{listener.getsockname()[1]}"

    async def main() -> tuple[str, float]:
        channels = PeerChannels(tls)
        watch = PeerWatch(channels, "mpdp.messages.Party", lost_after=1.0)
        heard: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        async def on_lost(reason: str) -> None:
            heard.set_result(reason)

        t0 = asyncio.get_running_loop().time()
        watch.subscribe(address, "party-9", on_lost)
        try:
            reason = await asyncio.wait_for(heard, 30)
            return reason, asyncio.get_running_loop().time() - t0
        finally:
            await watch.close()
            await channels.close()

    try:
        reason, seconds = asyncio.run(main())
    finally:
        listener.close()
    assert reason == "no answer for 1 s" and seconds < 20, (reason, seconds)


@pytest.mark.process  # starts a process or opens a socket: not in `make test-fast`
def test_a_watched_peer_that_serves_then_stops_without_a_word_is_lost(tls, tmp_path):
    """A real health service answers SERVING, then its server goes away without turning NOT_SERVING (a killed
    process): the stream drops, the reconnects fail, and the subscriber hears it once."""
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    async def main() -> str:
        server = grpc.aio.server()
        servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
        ca_key, ca_cert = pki.make_ca("test")
        key, cert = pki.issue(ca_key, ca_cert, "party", "party-9", ["127.0.0.1"])
        pki.write_site(tmp_path / "peer", key, cert, ca_cert)
        peer = TlsFiles(tmp_path / "peer" / "site.crt", tmp_path / "peer" / "site.key", tmp_path / "peer" / "ca.crt")
        port = server.add_secure_port("127.0.0.1:0", peer.server_credentials())
        await server.start()
        await servicer.set("mpdp.messages.Party", health_pb2.HealthCheckResponse.SERVING)
        client_key, client_cert = pki.issue(ca_key, ca_cert, "curator", "curator", ["127.0.0.1"])
        pki.write_site(tmp_path / "mine", client_key, client_cert, ca_cert)
        channels = PeerChannels(TlsFiles(tmp_path / "mine" / "site.crt", tmp_path / "mine" / "site.key", tmp_path / "mine" / "ca.crt"))
        watch = PeerWatch(channels, "mpdp.messages.Party", lost_after=5.0)
        heard: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        async def on_lost(reason: str) -> None:
            assert not heard.done(), "a subscriber heard twice"
            heard.set_result(reason)

        address = f"127.0.0.1:{port}"
        watch.subscribe(address, "party-9", on_lost)
        try:
            # served: a health check on the watch's channel is answered, so the watch's stream is up too
            stub = health_pb2_grpc.HealthStub(channels.channel(address, "party-9"))
            assert (await stub.Check(health_pb2.HealthCheckRequest(service="mpdp.messages.Party"), timeout=10)).status == health_pb2.HealthCheckResponse.SERVING
            assert not heard.done()
            await server.stop(None)  # gone without a word
            return await asyncio.wait_for(heard, 30)
        finally:
            await watch.close()
            await channels.close()

    reason = asyncio.run(main())
    assert reason in {"UNAVAILABLE", "it closed its health stream", "no answer for 5 s"}, reason
