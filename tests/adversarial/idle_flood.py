"""Helper process for test_flood: opens N idle TCP connections to host:port (no TLS, no certificate), prints
``READY <opened>``, and holds them until its stdin closes (so it dies with the test, even if the test is
killed). Sockets are closed with an RST (SO_LINGER 0): no TIME_WAIT is left on the shared loopback."""

from __future__ import annotations

import socket
import struct
import sys


def main(host: str, port: int, n: int) -> None:
    held: list[socket.socket] = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.settimeout(2.0)
        try:
            s.connect((host, port))
        except OSError:
            s.close()
            break  # the server's backlog is full or descriptors ran out: what we hold is the flood
        held.append(s)
    print(f"READY {len(held)}", flush=True)
    sys.stdin.read()  # EOF when the parent closes the pipe or dies
    for s in held:
        s.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
