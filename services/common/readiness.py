"""When a role may serve: its start-up steps, the gRPC health status that follows them, and the plain-HTTP probes.

A role starts NOT_SERVING on the standard gRPC health service and ready on nothing. It names the steps it waits for
(:data:`KERNELS` compiled, :data:`KEYS` loaded, :data:`LEDGER` opened, :data:`REGISTERED` with its curator) and marks
each done; when the last one is, every health service name it serves turns SERVING. So a job never meets a role that
is still compiling its kernels (:func:`mpdp.math.field.warm_up`: tens of seconds on a loaded machine with a cold numba
cache) and a load balancer or an orchestrator never sends one there.

The probes (``probe_listen``, off unless set): plain HTTP, no token, no client certificate, for an orchestrator's
liveness and readiness checks (docs/deploy.md):

* ``GET /healthz`` → 200 ``ok`` while the process answers at all;
* ``GET /readyz`` → 200 ``ready`` once every start-up step is done, else 503 ``starting`` (``stopping`` after SIGTERM).

Nothing else: any other path 404, any other method 405, no body read, no query parsed. The answers are fixed words
that say nothing about keys, jobs, peers or the ledger (the step names stay in the role's own log).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import threading
from http.server import BaseHTTPRequestHandler
from typing import Iterable, TextIO

from grpc_health.v1 import health, health_pb2

from mpdp_services.common import web

log = logging.getLogger("mpdp")

KERNELS = "kernels compiled"
KEYS = "keys loaded"
LEDGER = "ledger opened"
REGISTERED = "registered with the curator"
RECOVERED = "state recovered"  # the curator's jobs of a previous process settled
SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


class Readiness:
    """The start-up steps a role still waits for; thread-safe reads (the probe server's threads)."""

    def __init__(self, *steps: str) -> None:
        self._waiting = set(steps)
        self._stopping = False
        self._lock = threading.Lock()
        self._health: health.aio.HealthServicer | None = None
        self._names: list[str] = []

    @property
    def ready(self) -> bool:
        with self._lock:
            return not self._waiting and not self._stopping

    @property
    def waiting(self) -> list[str]:
        with self._lock:
            return sorted(self._waiting)

    @property
    def stopping(self) -> bool:
        return self._stopping

    async def attach(self, health_servicer: health.aio.HealthServicer, names: Iterable[str]) -> None:
        """Follow readiness on the gRPC health service for ``names`` and the server as a whole (""): NOT_SERVING now
        unless every step is already done."""
        self._health, self._names = health_servicer, [*names, ""]
        await self._publish()

    async def done(self, step: str) -> None:
        """Step ``step`` is over; the last one turns the health service SERVING."""
        with self._lock:
            self._waiting.discard(step)
            left = sorted(self._waiting)
        log.info("start-up: %s%s", step, f" (waiting for: {', '.join(left)})" if left else "; ready")
        await self._publish()

    def stop(self) -> None:
        """The role is stopping (SIGTERM): not ready any more (the health service goes NOT_SERVING on its own)."""
        with self._lock:
            self._stopping = True

    async def _publish(self) -> None:
        if self._health is None:
            return
        status = SERVING if self.ready else NOT_SERVING
        for name in self._names:
            await self._health.set(name, status)


SEED_ENV = "MPDP_KERNEL_CACHE_SEED"  # a read-only folder of kernels compiled ahead of time (the image's), copied into NUMBA_CACHE_DIR


def seed_kernel_cache() -> int:
    """Copy the kernels compiled ahead of time (``$MPDP_KERNEL_CACHE_SEED``, e.g. the image's
    /opt/mpdp/numba-cache) into numba's cache folder ``$NUMBA_CACHE_DIR`` when both are set, without replacing a
    file already there; returns the files copied. numba uses a cache folder only if it can write to it, and a
    container's root filesystem is read-only: so the image keeps its compiled kernels read-only and each start copies
    them (≈ 1.4 MB) to a writable folder (a tmpfs), where a CPU the image was not built on adds its own."""
    seed, cache = os.environ.get(SEED_ENV, ""), os.environ.get("NUMBA_CACHE_DIR", "")
    if not seed or not cache or not os.path.isdir(seed) or os.path.abspath(seed) == os.path.abspath(cache):
        return 0
    copied = 0
    for folder, _, files in os.walk(seed):
        target = os.path.join(cache, os.path.relpath(folder, seed))
        os.makedirs(target, mode=0o700, exist_ok=True)
        for f in files:
            dst = os.path.join(target, f)
            if not os.path.exists(dst):
                shutil.copy2(os.path.join(folder, f), dst)
                copied += 1
    return copied


def compile_kernels() -> None:
    """Every compiled kernel ready for use (:func:`mpdp.math.field.warm_up`), from the ahead-of-time cache when there
    is one (:func:`seed_kernel_cache`); blocking: call it in a worker thread."""
    try:
        seed_kernel_cache()
    except OSError as e:  # no writable cache folder: numba compiles (slower start, never a failed one)
        log.warning("cannot copy the precompiled kernels from %s: %s", os.environ.get(SEED_ENV), e)
    from mpdp.math import field

    field.warm_up()


async def warm_kernels(readiness: Readiness) -> None:
    """:func:`compile_kernels` in a worker thread, then mark :data:`KERNELS` done."""
    await asyncio.to_thread(compile_kernels)
    await readiness.done(KERNELS)


def start_warm_up(readiness: Readiness) -> asyncio.Task:
    """:func:`warm_kernels` as a task started now, so it overlaps the role's other start-up steps; await it before
    the role announces itself (registers, reports ready)."""
    return asyncio.ensure_future(warm_kernels(readiness))


# -- the probes ------------------------------------------------------------------------------------------------
class _ProbeHandler(BaseHTTPRequestHandler):
    timeout = 5
    server_version = "mpdp"
    sys_version = ""
    readiness: Readiness

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = self.path.split("?", 1)[0]
        if self.headers.get("Content-Length") not in (None, "0") or self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            return self._send(405, "GET without a body\n")
        if path == "/healthz":
            return self._send(200, "ok\n")
        if path == "/readyz":
            r = self.readiness
            return self._send(200, "ready\n") if r.ready else self._send(503, "stopping\n" if r.stopping else "starting\n")
        self._send(404, "not found\n")

    def do_POST(self) -> None:  # noqa: N802
        self.close_connection = True  # a body, if any, is never read
        self._send(405, "GET /healthz or /readyz\n", {"Allow": "GET"})

    do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_POST

    def _send(self, status: int, body: str, headers: dict[str, str] | None = None) -> None:
        data = body.encode()
        self.send_response(status)
        for name, value in {**web.HEADERS, "Content-Type": web.TEXT, "Content-Length": str(len(data)), **(headers or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def handle(self) -> None:
        try:
            super().handle()
        except OSError as e:  # the prober hung up or stalled: nothing to answer, nothing to log
            if not web.hung_up(e):
                raise

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
        log.debug("probe %s", format % args)


def serve_probes(listen: str, readiness: Readiness, announce: TextIO | None = None) -> tuple[web._Server, int]:
    """Serve /healthz and /readyz on ``host:port`` (port 0: any free one) in a daemon thread; the server and its port.
    ``announce``: where to print ``MPDP-PROBES <port>`` at once (the role's start-up stream, before ``MPDP-READY``)."""
    host, port = web.split_listen(listen)
    handler = type("ProbeHandler", (_ProbeHandler,), {"readiness": readiness})
    server = web._Server((host or "0.0.0.0", port), handler)
    threading.Thread(target=server.serve_forever, name="mpdp-probes", daemon=True).start()
    log.info("probes (/healthz, /readyz) on %s port %d", host or "0.0.0.0", server.server_address[1])
    if announce is not None:
        print(f"MPDP-PROBES {server.server_address[1]}", file=announce, flush=True)
    return server, server.server_address[1]
