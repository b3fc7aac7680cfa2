"""The engine every DCA role machine shares: table lookup, failure policy, transcript (spec dca.md §4.3).

One message in, a list of outputs out (:class:`~mpdp.protocol.Send`, :class:`~mpdp.protocol.Publish`,
:class:`~mpdp.protocol.Record`, and :class:`Reply` — the answer to the RPC that carried the message).
The table is :data:`mpdp.dca.states.TABLE`; a handler ``_on_<event>`` validates everything before it
changes anything, so a rejected message leaves the machine as it was.

Failure policy: the one of :mod:`mpdp.protocol` (:func:`~mpdp.protocol.admit_sender`,
:func:`~mpdp.protocol.fails_job`), with DCA's sender kinds:

* The participants of a job are its compute nodes and the curator (:data:`PARTICIPANTS`). Clients and
  routers are senders the job takes shares from, but not participants: a problem with a client's or a
  router's message rejects that one submission, and the machine is unchanged. One client cannot kill a job.
* A message from an outsider (no sender kind of this job) or naming another job is refused (WRONG_ROLE,
  UNKNOWN_JOB) and never touches the job, its state or its transcript.
* Any other refusal of a participant's message (wrong step, replay, bad shape, a message it may not send)
  fails the job; so does a local refusal (insufficient noise, an encoding overflow).
* A FAILED machine raises its failure's Problem on every call and never emits a share or a release; failing
  emits :class:`~mpdp.messages.common_pb2.JobAbort` notices to the participants (``ProtocolError.notices``).
* The transcript holds the messages the machine took, in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from mpdp.dca import states
from mpdp.dca.errors import InsufficientNoise
from mpdp.messages import common_pb2
from mpdp.protocol import LocalProtocolError, Output, Peer, Problem, ProtocolError, RemoteProtocolError, Send, admit_sender, fails_job

PARTICIPANTS = frozenset({"node", "curator"})


@dataclass(frozen=True)
class Reply:
    """The response to the RPC that delivered the message (e.g. a ShareReceipt to a submitter)."""

    message: Any


class DcaMachine:
    """Base of the DCA client, compute-node and aggregator machines."""

    ROLE: ClassVar[str]

    def __init__(self, job_id: str, me: Peer, *, record: bool = True) -> None:
        self.job_id = job_id
        self.me = me
        self.state = states.STATES[self.ROLE][0]
        self.error: ProtocolError | None = None
        # Everything this role received, in order (None when recording is off, e.g. for benchmarks).
        self.transcript: list[tuple[Peer, Any]] | None = [] if record else None

    @property
    def terminal(self) -> bool:
        return self.state in states.TERMINAL[self.ROLE]

    @property
    def failed(self) -> bool:
        return self.state == states.FAILED

    # -- hooks -------------------------------------------------------------------------------
    def _sender_kind(self, sender: Peer, message: Any) -> str | None:
        """Which table sender kind ``sender`` is for this job (None: an outsider)."""
        raise NotImplementedError

    def _abort_notices(self, e: ProtocolError) -> list[Output]:
        return []

    def _joint_event(self) -> str | None:
        """A joint condition reached (e.g. every received set is in): its event name, else None."""
        return None

    # -- entry points ------------------------------------------------------------------------------
    def receive(self, sender: Peer, message: Any) -> list[Output]:
        """Take one message from ``sender``; return what it causes. Raises a ProtocolError if refused."""
        kind = self._sender_kind(sender, message)
        admit_sender(self.job_id, kind, sender, message)
        if self.failed:
            raise self._failed_error()
        try:
            row = states.lookup(self.ROLE, self.state, type(message).__name__)
            if kind not in row.senders:
                raise RemoteProtocolError(Problem.WRONG_ROLE, f"{type(message).__name__} must come from a {' or '.join(row.senders)}, not {sender}")
            if isinstance(message, common_pb2.JobAbort):
                self._took(sender, message)
                return self._aborted(sender, message)
            out = getattr(self, f"_on_{type(message).__name__}")(sender, message)
            self._took(sender, message)
            self.state = row.next_state
            return out + self._run_joint_events()
        except ProtocolError as e:
            if fails_job(kind, PARTICIPANTS, e) and not self.terminal:
                self._fail(e)
            raise

    def _took(self, sender: Peer, message: Any) -> None:
        if self.transcript is not None:
            self.transcript.append((sender, message))

    def fail(self, problem: int, detail: str) -> list[Output]:
        """Fail the job from outside (deadline, unreachable peer); returns the abort notices."""
        if self.terminal:
            return []
        states.lookup(self.ROLE, self.state, "fail")
        e = LocalProtocolError(problem, detail)
        self._fail(e)
        return e.notices

    def _failed_error(self) -> RemoteProtocolError:
        """Anything that reaches a failed job is refused with the failure's own problem (e.g. INSUFFICIENT_NOISE),
        so whoever hits the failure first — a peer's message or its abort notice — reports the same cause."""
        problem = self.error.problem if self.error is not None else Problem.JOB_FAILED
        return RemoteProtocolError(problem, f"job {self.job_id} has failed: {self.error.detail if self.error else ''}")

    def _local(self, event: str, *args: Any) -> list[Output]:
        """Run a local event (the caller's action) through the table."""
        if self.failed:
            raise self._failed_error()
        try:
            row = states.lookup(self.ROLE, self.state, event)
        except RemoteProtocolError as e:  # our own caller broke the order: refuse, change nothing
            raise LocalProtocolError(e.problem, e.detail) from None
        try:
            out = getattr(self, f"_on_{event}")(*args)
            self.state = row.next_state
            return out + self._run_joint_events()
        except ProtocolError as e:
            if not self.failed:
                self._fail(e)
            raise

    # -- internals ------------------------------------------------------------------------------
    def _run_joint_events(self) -> list[Output]:
        """Fire every joint event now reached. A refusal here (e.g. insufficient noise) is not the fault of the
        message that completed the condition: the machine fails, ``error`` holds the named exception and the
        abort notices are returned as outputs instead of raised."""
        out: list[Output] = []
        while not self.terminal:
            event = self._joint_event()
            if event is None:
                break
            row = states.lookup(self.ROLE, self.state, event)
            try:
                produced = getattr(self, f"_on_{event}")()
            except ProtocolError as e:
                self._fail(e)
                return out + e.notices
            out += produced
            self.state = row.next_state
        return out

    def _fail(self, e: ProtocolError) -> None:
        self.state = states.FAILED
        self.error = e
        e.notices = self._abort_notices(e)
        self._release_memory()

    def _aborted(self, sender: Peer, abort: common_pb2.JobAbort) -> list[Output]:
        self.state = states.FAILED
        detail = f"aborted by {sender}: {abort.detail}"
        # a refusal for lack of noise keeps its name wherever it is reported (GetRelease raises InsufficientNoise)
        self.error = InsufficientNoise(detail) if abort.problem == Problem.INSUFFICIENT_NOISE else RemoteProtocolError(abort.problem or Problem.JOB_FAILED, detail)
        self._release_memory()
        return []

    def _release_memory(self) -> None:
        """Drop buffered shares and sums (a failed job keeps nothing it could later release)."""

    def _abort(self, e: ProtocolError, to: list[Peer]) -> list[Output]:
        msg = common_pb2.JobAbort(job_id=self.job_id, problem=e.problem, detail=e.detail, reported_by=self.me.name)
        return [Send(p, msg) for p in to]
