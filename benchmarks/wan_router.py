"""A delaying IPv4 router between TUN interfaces: the WAN benchmark's stand-in for ``tc netem`` on kernels without it.

Started by benchmarks/wan.py with ``NAME=IP`` pairs: it opens one TUN interface per pair (before they are moved
into the sites' namespaces; the open descriptors keep working there), prints ``READY``, and then forwards every
IPv4 packet read from any interface to the interface whose site holds the destination address, ``delay``
seconds after it arrived (one heap, so packets of a flow keep their order). Lines on stdin change the one-way
delay (``delay 0.025``); EOF on stdin stops it. Packets to unknown addresses and non-IPv4 packets are dropped.
"""

from __future__ import annotations

import fcntl
import heapq
import os
import select
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000


def open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def main() -> None:
    routes: dict[bytes, int] = {}
    fds: list[int] = []
    for arg in sys.argv[1:]:
        name, ip = arg.split("=")
        fd = open_tun(name)
        fds.append(fd)
        routes[bytes(int(x) for x in ip.split("."))] = fd
    delay = 0.0
    print("READY", flush=True)
    ep = select.epoll()
    for fd in fds:
        ep.register(fd, select.EPOLLIN)
    stdin = sys.stdin.fileno()
    ep.register(stdin, select.EPOLLIN)
    queue: list[tuple[float, int, int, bytes]] = []  # (due, sequence, destination fd, packet)
    seq = 0
    while True:
        timeout = max(0.0, queue[0][0] - time.monotonic()) if queue else -1
        for fd, _ in ep.poll(timeout):
            if fd == stdin:
                line = sys.stdin.readline()
                if not line:
                    return
                words = line.split()
                if words[:1] == ["delay"]:
                    delay = float(words[1])
                    print(f"delay {delay}", flush=True)
                continue
            while True:
                try:
                    pkt = os.read(fd, 65536)
                except BlockingIOError:
                    break
                except OSError:  # the interface went away with its namespace
                    ep.unregister(fd)
                    break
                if len(pkt) < 20 or pkt[0] >> 4 != 4:
                    continue
                dst = routes.get(pkt[16:20])
                if dst is None:
                    continue
                seq += 1
                heapq.heappush(queue, (time.monotonic() + delay, seq, dst, pkt))
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            _, _, dst, pkt = heapq.heappop(queue)
            try:
                os.write(dst, pkt)
            except (BlockingIOError, OSError):
                pass  # a full interface queue drops the packet, as a router would


if __name__ == "__main__":
    main()
