"""Hosting a sans-IO role machine in an asyncio server: feed it, forward what comes out.

A :class:`Hosted` job owns one machine and a lock. ``deliver`` runs the machine step in a
worker thread (crypto must not block the event loop), then hands the outputs to the
service's ``route`` callback outside the lock, so two services calling each other can
never deadlock. A failed send fails the job (never a silent partial run) and the abort
notices go to everyone else.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

import grpc

from mpdp.messages import common_pb2
from mpdp.protocol import Machine, Output, Peer, ProtocolError, Send
from services.common import errors

log = logging.getLogger("mpdp")

Route = Callable[["Hosted", list[Output]], Awaitable[None]]
SEND_RETRIES = 3


class Hosted:
    def __init__(self, machine: Machine, route: Route) -> None:
        self.machine = machine
        self.lock = asyncio.Lock()
        self.changed = asyncio.Condition()
        self._route = route
        self._tasks: set[asyncio.Task] = set()
        self.deadline_task: asyncio.Task | None = None

    async def deliver(self, sender: Peer, message: Any, context: grpc.aio.ServicerContext | None = None) -> None:
        async with self.lock:
            try:
                outputs = await asyncio.to_thread(self.machine.receive, sender, message)
            except ProtocolError as e:
                log.warning("job %s: %s from %s refused: %s", self.machine.job_id, type(message).__name__, sender, errors.details(e))
                self.spawn(self._route(self, e.notices))
                await self.notify()
                if context is not None:
                    await errors.abort(context, e)
                raise
        log.info("job %s: %s received %s from %s, now %s", self.machine.job_id, self.machine.me.role, type(message).__name__, sender, self.machine.state)
        await self._route(self, outputs)
        await self.notify()

    async def start(self, outputs: list[Output]) -> None:
        await self._route(self, outputs)
        await self.notify()

    async def fail(self, problem: int, detail: str) -> None:
        async with self.lock:
            notices = self.machine.fail(problem, detail)
        if notices:
            log.warning("job %s failed: %s", self.machine.job_id, detail)
        await self._route(self, notices)
        await self.notify()

    async def notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    def spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def send(self, to: Peer, message: Any, call: Callable[[], Awaitable[Any]]) -> None:
        """Send one message; on failure fail the job naming the peer (aborts themselves are best effort)."""
        is_abort = isinstance(message, common_pb2.JobAbort)
        last: grpc.aio.AioRpcError | None = None
        for attempt in range(SEND_RETRIES):
            try:
                await call()
                return
            except grpc.aio.AioRpcError as e:
                last = e
                if e.code() != grpc.StatusCode.UNAVAILABLE or is_abort:
                    break
                await asyncio.sleep(0.2 * (attempt + 1))  # transient connection failure: back off and retry
        if is_abort or last is None:
            return
        problem = errors.problem_from_status(last.code())
        if last.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            problem = common_pb2.PEER_UNREACHABLE
            detail = f"{to.role} {to.name} is unreachable ({last.code().name}: {last.details()})"
        else:
            detail = f"{to.role} {to.name} refused {type(message).__name__}: {last.details()}"
        await self.fail(problem, detail)
