"""Waiting for a service process started by a test: the ``MPDP-READY <port>`` line it prints once it serves."""

from __future__ import annotations

import selectors
import subprocess
import time
from pathlib import Path


def wait_ready(proc: subprocess.Popen, log: Path, timeout: float = 120.0) -> int:
    """Block until the process prints MPDP-READY <port> (the services' start-up signal); the port (0 for a party,
    which listens nowhere)."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                raise TimeoutError(f"not ready in {timeout:g} s; log:\n{log.read_text()[-3000:]}")
            line = proc.stdout.readline().decode()  # type: ignore[union-attr]
            if not line:
                raise RuntimeError(f"exited during start-up (code {proc.wait()}); log:\n{log.read_text()[-3000:]}")
            if line.startswith("MPDP-READY "):
                return int(line.split()[1])
    finally:
        sel.close()
