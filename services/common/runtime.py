"""Hosting a sans-IO role machine in an asyncio server: feed it, forward what comes out.

A :class:`Hosted` job owns one machine and a lock. ``deliver`` runs the machine step in a
worker thread (crypto must not block the event loop), then hands the outputs to the
service's ``route`` callback outside the lock, so two services calling each other can
never deadlock. A failed send fails the job (never a silent partial run) and the abort
notices go to everyone else.

Every change of the machine is made under the lock. While a step runs in a worker thread (:meth:`Hosted.in_thread`)
the machine is half-changed, so nothing on the event loop reads it then: a watcher reads it under the lock, and the
job table's outcome (:meth:`Hosted.outcome`) is the one from before the step until the step has ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Awaitable, Callable, Generic, TypeVar

import grpc

from mpdp.messages import common_pb2
from mpdp.protocol import Machine, Output, Peer, ProtocolError, Reply, Send
from mpdp_services.common import errors, jobs, logs, tracing

log = logging.getLogger("mpdp")

Route = Callable[["Hosted[Any]", list[Output]], Awaitable[None]]
SEND_RETRIES = 3
M = TypeVar("M", bound=Machine)
R = TypeVar("R")


class Hosted(Generic[M]):
    def __init__(self, machine: M, route: Route) -> None:
        self.machine: M = machine
        self.lock = asyncio.Lock()
        self.changed = asyncio.Condition()
        self._route = route
        self._tasks: set[asyncio.Task] = set()
        self.deadline_task: asyncio.Task | None = None
        self.version = 0  # bumped on every change; watchers wait for it to move
        self.on_change: Callable[[str], None] | None = None  # e.g. the job table noting a terminal state at once
        self.emitted = 0  # messages (abort notices aside) the machine has produced to send, counted as they are made
        self._before: tuple[str, bool, int] | None = None  # the outcome before the step a worker thread is running
        self._protocol = type(machine).__module__.split(".")[1]  # mpdp.<protocol>.…: names the job in log lines
        logs.in_job(machine.job_id, self._protocol, str(machine.state))  # the creating call's own log lines name the job
        # the job's spans at this role (services/common/tracing.py): a child of the caller's span, if it sent one
        self.trace = tracing.job(machine.job_id, self._protocol, machine.me.role)
        self._traced()

    async def deliver(self, sender: Peer, message: Any, context: grpc.aio.ServicerContext | None = None, *, inline: bool = False) -> list[Any]:
        """Feed one message; returns the machine's replies to this RPC (``Reply`` outputs), routes the rest.

        ``inline`` runs the step on the event loop (for cheap, frequent steps such as one DCA share).
        """
        logs.in_job(self.machine.job_id, self._protocol, str(self.machine.state))
        async with self.lock:
            try:
                if inline:
                    outputs = self.machine.receive(sender, message)
                else:
                    outputs = await self.in_thread(self.machine.receive, sender, message)
                self._count(outputs)
            except ProtocolError as e:
                log.warning("job %s: %s from %s refused: %s", self.machine.job_id, type(message).__name__, sender, errors.details(e))
                with self.traced():
                    self.spawn(self._route(self, e.notices))
                await self.notify()
                if context is not None:
                    await errors.abort(context, e)
                raise
        logs.in_job(self.machine.job_id, self._protocol, str(self.machine.state))
        self._traced()
        replies = [o.message for o in outputs if isinstance(o, Reply)]
        outputs = [o for o in outputs if not isinstance(o, Reply)]
        if log.isEnabledFor(logging.DEBUG) or not inline:
            log.info("job %s: %s received %s from %s, now %s", self.machine.job_id, self.machine.me.role, type(message).__name__, sender, self.machine.state)
        if outputs:
            with self.traced():
                await self._route(self, outputs)
        await self.notify()
        return replies

    async def local(self, action) -> None:
        """Run a local event of the machine (e.g. ``close_submissions``) and route its outputs."""
        async with self.lock:
            try:
                outputs = action()
                self._count(outputs)
            except ProtocolError as e:
                outputs = e.notices
        with self.traced():
            await self._route(self, outputs)
        await self.notify()

    async def in_thread(self, step: Callable[..., R], *args: Any) -> R:
        """Run a step of the machine in a worker thread; the caller holds :attr:`lock`. The step always runs to its end
        before the caller goes on (a cancelled caller waits for it, then is cancelled): the lock is never let go
        while a thread is changing the machine. Meanwhile :meth:`outcome` is the one from before the step."""
        self._before = jobs.read_outcome(self.machine)
        running = asyncio.ensure_future(asyncio.to_thread(step, *args))
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            while not running.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait({running})
            if not running.cancelled():
                running.exception()  # the step's own failure is the machine's; the cancel wins
            raise
        finally:
            self._before = None

    @property
    def stepping(self) -> bool:
        """A worker thread is running a step of the machine now: read nothing of it but :meth:`outcome`."""
        return self._before is not None

    def outcome(self) -> tuple[str, bool, int]:
        """The machine's (state, terminal, problem), read whole: while a worker thread runs a step, the one from before it."""
        before = self._before
        return before if before is not None else jobs.read_outcome(self.machine)

    def _count(self, outputs: list[Output]) -> None:
        self.emitted += sum(1 for o in outputs if isinstance(o, Send) and not isinstance(o.message, common_pb2.JobAbort))

    async def start(self, outputs: list[Output]) -> None:
        self._count(outputs)
        with self.traced():
            await self._route(self, outputs)
        await self.notify()

    async def fail(self, problem: int, detail: str) -> None:
        async with self.lock:
            notices = self.machine.fail(problem, detail)
        if notices:
            log.warning("job %s failed: %s", self.machine.job_id, detail)
        with self.traced():
            await self._route(self, notices)
        await self.notify()

    def traced(self) -> contextlib.AbstractContextManager[Any]:
        """Bring the job's spans up to the machine's state and make its stage span current: calls made meanwhile
        carry it to their peers, tasks spawned meanwhile inherit it (for sends a service makes outside ``route``).
        Traces off: a shared no-op context."""
        self._traced()
        return self.trace.use()

    def _traced(self) -> None:
        """Move the job's stage span to the machine's state (a terminal state ends the job's spans at this role)."""
        t = self.trace
        if t.ended:
            return
        m = self.machine
        state = str(m.state)
        if state == t.state:
            return
        if m.terminal:
            error = getattr(m, "error", None)
            t.end(state, errors.problem_name(error.problem) if error is not None and error.problem else "")
        else:
            stage = getattr(m, "stage", None)
            t.enter(state, stage if isinstance(stage, str) else None)

    async def notify(self) -> None:
        self._traced()
        if self.on_change is not None:
            self.on_change(self.machine.job_id)
        async with self.changed:
            self.version += 1
            self.changed.notify_all()
        jobs.changes.bump()  # the operators' watchers of any job (JobOperations.WatchJob)

    async def watch(self, status):
        """Yield ``status()`` now and after every change until the machine is terminal.

        ``status()`` runs under the job's lock (a step in a worker thread ends first), so it never mixes the state
        before a step with the state after it. Neither lock is held across a ``yield``: a slow watcher cannot stall
        the job.
        """
        while True:
            async with self.lock:  # never while a step is changing the machine: every read of one status sees one state
                seen = self.version
                st = status()
            yield st
            if st.terminal:  # decide on what was sent, not on a state that may have moved since
                return
            async with self.changed:
                await self.changed.wait_for(lambda: self.version != seen)

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
        problem = errors.problem_from_status(last.code(), last.details())
        # CANCELLED comes from a peer whose server stopped with our call in flight: it is gone, not refusing
        if last.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
            problem = common_pb2.PEER_UNREACHABLE
            detail = f"{to.role} {to.name} is unreachable ({last.code().name}: {last.details()})"
        else:
            detail = f"{to.role} {to.name} refused {type(message).__name__}: {last.details()}"
        await self.fail(problem, detail)
