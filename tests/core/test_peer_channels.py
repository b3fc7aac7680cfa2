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
