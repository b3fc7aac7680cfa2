"""A unary call served through the gate is released as soon as it is answered.

The gate serves every unary method as client-streaming, so that it reads the body only after admitting the caller.
It used to read the one request message and never the end of the stream; gRPC's core then kept each answered call's
received message (its buffers, outside Python's heap) for a while after the answer. With a servicer that holds the
event loop while it works on a large request — a compute node verifying a validated job's ShareBatch inline — these
calls piled up, and the process grew by a fraction of every request it had taken: ≈ 280 KB a client on the node
taking full validated shares at d = 10³. Here a client keeps two 8 MB calls in flight while the servicer hashes each
request on the event loop; the memory the process's allocator has in use, sampled in every handler, must stay
within a few requests' worth (without the fix it reached ≈ 33). A unary call whose stream carries a second
message is refused (MALFORMED), never half-read.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import hashlib
import threading

import grpc
import pytest

from mpdp_services.common import pki
from mpdp_services.common.rpc import RoleInterceptor, TlsFiles, start_server

METHOD = "/test.Echo/Call"
CALLS, SIZE = 48, 8 << 20
BOUND = 12  # requests' worth in use at once: two in flight and their copies at both ends (≈ 7 measured; ≈ 33 before the fix)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _in_use() -> int:
    """Bytes the C allocator has handed out and not taken back (glibc's mallinfo2: heap chunks + mmapped chunks)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.mallinfo2.restype = _MallInfo2
    m = libc.mallinfo2()
    return int(m.uordblks + m.hblkhd)


def _site(folder, ca_key, ca_cert, role: str, name: str) -> TlsFiles:
    key, cert = pki.issue(ca_key, ca_cert, role, name, ["127.0.0.1"])
    pki.write_site(folder, key, cert, ca_cert)
    return TlsFiles(folder / "site.crt", folder / "site.key", folder / "ca.crt")


@pytest.fixture
def sites(tmp_path) -> tuple[TlsFiles, TlsFiles]:
    ca_key, ca_cert = pki.make_ca("test")
    return (_site(tmp_path / "server", ca_key, ca_cert, "compute_node", "node-1"),
            _site(tmp_path / "client", ca_key, ca_cert, "operator", "router"))


def _client(port: int, tls: TlsFiles, out: dict) -> None:
    """Two calls in flight at a time, each answered before the next but one is sent (a load generator's window)."""
    options = [("grpc.ssl_target_name_override", "node-1"), ("grpc.max_send_message_length", 64 << 20)]
    with grpc.secure_channel(f"127.0.0.1:{port}", tls.channel_credentials(), options=options) as ch:
        call = ch.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
        body, pending, answers = bytes(SIZE), [], []
        for _ in range(CALLS):
            pending.append(call.future(body, timeout=120))
            while len(pending) >= 2:
                answers.append(pending.pop(0).result())
        answers += [f.result() for f in pending]
        out["answers"] = answers
        two = ch.stream_unary(METHOD, request_serializer=None, response_deserializer=None)
        try:
            two(iter([b"a", b"b"]), timeout=30)
        except grpc.RpcError as e:
            out["two"] = e.code()


async def _run(sites: tuple[TlsFiles, TlsFiles]) -> tuple[dict, list[int], int]:
    server_tls, client_tls = sites
    samples: list[int] = []

    async def hash_on_the_loop(request: bytes, context) -> bytes:  # the servicer's work, holding the event loop
        digest = request
        for _ in range(3):
            digest = hashlib.sha256(request + digest[:32]).digest()
        samples.append(_in_use())
        return digest

    def add(server: grpc.aio.Server) -> None:
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Echo", {
            "Call": grpc.unary_unary_rpc_method_handler(hash_on_the_loop, request_deserializer=None, response_serializer=None)}),))

    server, port, _ = await start_server(server_tls, "127.0.0.1:0", RoleInterceptor({METHOD: ("operator",)}), add, [])
    try:
        base = _in_use()
        out: dict = {}
        client = threading.Thread(target=_client, args=(port, client_tls, out))
        client.start()
        await asyncio.to_thread(client.join)
        return out, samples, base
    finally:
        await server.stop(0)


@pytest.mark.process  # starts a process or opens a socket: not in `make test-fast`
def test_answered_calls_release_their_requests(sites):
    out, samples, base = asyncio.run(_run(sites))
    assert len(out["answers"]) == CALLS
    held = (max(samples[:CALLS]) - base) / SIZE
    assert held <= BOUND, f"{held:.1f} requests' worth of memory in use at once over {CALLS} calls"
    assert out["two"] == grpc.StatusCode.INVALID_ARGUMENT
