"""What every sans-IO role machine shares: peers, outputs, errors and the inbox engine.

A machine takes one message from one peer and returns the outputs it causes
(:class:`Send` to a peer, :class:`Publish` of a release, :class:`Record` for the
party's privacy ledger). It never touches a socket. Messages for a later step may
arrive early (e.g. a party's SizeShare before Charlie's ProtocolStart reached it):
they are admitted if the table says they can already exist, and consumed when the
machine reaches the step that needs them. A FAILED machine never emits a share or a release.

Failure policy (the same for every engine, :func:`admit_sender` and :func:`fails_job`):

* Only a job's participants can fail it. A message from anyone else (a sender who is not a
  participant of this job) or for another job is refused with its Problem (WRONG_ROLE,
  UNKNOWN_JOB) and never touches the job: state, inbox, seen-set and transcript stay as they were.
* Some protocols take messages from senders that are not participants (DCA's clients and routers):
  a refusal of such a message rejects that one message and leaves the job as it was.
* Any other refusal of a participant's message (wrong step, replay, bad shape, a kind of message
  it may not send) fails the job closed, with abort notices to the other participants.
* A local refusal (our own check, e.g. insufficient noise) fails the job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from mpdp.messages import common_pb2

Problem = common_pb2.Problem


@dataclass(frozen=True)
class Peer:
    """A participant as its certificate names it: role ("party", "curator", ...) and site name."""

    role: str
    name: str

    def __str__(self) -> str:
        return f"{self.role}:{self.name}"


CURATOR = Peer("curator", "curator")


@dataclass(frozen=True)
class Send:
    to: Peer
    message: Any


@dataclass(frozen=True)
class Publish:
    """A release leaves the protocol (Charlie's model registry)."""

    release: Any


@dataclass(frozen=True)
class Record:
    """An entry for the party's privacy ledger (decision 9)."""

    entry: dict


Output = Send | Publish | Record


class ProtocolError(Exception):
    """Base: a Problem kind (maps to one gRPC status) and a message that says what happened."""

    def __init__(self, problem: int, detail: str) -> None:
        super().__init__(detail)
        self.problem = problem
        self.detail = detail
        self.notices: list[Output] = []

    @property
    def problem_name(self) -> str:
        return Problem.Name(self.problem)


class RemoteProtocolError(ProtocolError):
    """A peer broke the protocol (bad shape, wrong step, replay ...)."""


class LocalProtocolError(ProtocolError):
    """Our own caller broke the protocol, or a local check refused to go on (e.g. insufficient noise)."""


def admit_sender(job_id: str, kind: str | None, sender: Peer, message: Any) -> None:
    """The refusals that never touch a job: ``sender`` is no kind of sender this job takes (``kind`` None: an
    outsider), or ``message`` names another job. Raise before the machine looks at anything else."""
    if kind is None:
        raise RemoteProtocolError(Problem.WRONG_ROLE, f"{sender} takes no part in job {job_id}")
    if getattr(message, "job_id", job_id) != job_id:
        raise RemoteProtocolError(Problem.UNKNOWN_JOB, f"{type(message).__name__} names another job than {job_id}")


def fails_job(kind: str | None, participants: frozenset[str] | tuple[str, ...], e: ProtocolError) -> bool:
    """Whether refusing a message from a sender of ``kind`` fails the job: a local refusal always does, a
    participant's refused message does, anyone else's never (it is refused and the job is untouched)."""
    return isinstance(e, LocalProtocolError) or kind in participants


@dataclass(frozen=True)
class Expect:
    """One row of a role's transition table: ``message`` from a ``sender`` kind may arrive from
    state ``earliest`` on and is consumed in state ``consumed``."""

    message: type
    sender: str  # "curator" | "party" | "leader" (P1) | "participant" (curator or party)
    earliest: str
    consumed: str


FAILED = "FAILED"


class Machine:
    """Inbox engine shared by role machines. Subclasses define STATES, TABLE, ``_required`` and handlers."""

    STATES: ClassVar[tuple[str, ...]]
    TERMINAL: ClassVar[tuple[str, ...]]
    TABLE: ClassVar[tuple[Expect, ...]]

    def __init__(self, job_id: str, me: Peer, clock: Callable[[], float]) -> None:
        self.job_id = job_id
        self.me = me
        self.state = self.STATES[0]
        self.error: ProtocolError | None = None
        self._clock = clock
        self._inbox: dict[tuple[type, str], Any] = {}
        self._seen: set[tuple[type, str]] = set()
        self.transcript: list[tuple[Peer, Any]] = []  # everything this role received, in order

    # -- table lookups ----------------------------------------------------------
    @classmethod
    def row(cls, message_type: type) -> Expect | None:
        for r in cls.TABLE:
            if r.message is message_type:
                return r
        return None

    def _index(self, state: str) -> int:
        return self.STATES.index(state)

    @property
    def terminal(self) -> bool:
        return self.state in self.TERMINAL or self.state == FAILED

    # -- the one entry point --------------------------------------------------------
    def receive(self, sender: Peer, message: Any) -> list[Output]:
        """Admit one message from ``sender`` and run every step it makes possible.

        A refusal of an outsider's message raises and changes nothing; a refusal of a participant's fails the job."""
        admit_sender(self.job_id, self._sender_kind(sender), sender, message)
        if self.state == FAILED:
            raise RemoteProtocolError(Problem.JOB_FAILED, f"job {self.job_id} has failed: {self.error.detail if self.error else ''}")
        if isinstance(message, common_pb2.JobAbort):
            self.transcript.append((sender, message))
            return self._on_abort(sender, message)
        try:
            self._admit(sender, message)
            self.transcript.append((sender, message))
            return self._advance()
        except ProtocolError as e:
            if not self.terminal:
                self._fail(e)
            raise

    def fail(self, problem: int, detail: str) -> list[Output]:
        """Fail the job from outside (deadline, unreachable peer); returns the abort notices."""
        if self.terminal:
            return []
        e = LocalProtocolError(problem, detail)
        self._fail(e)
        return e.notices

    def _admit(self, sender: Peer, message: Any) -> None:
        row = self.row(type(message))
        name = type(message).__name__
        if row is None:
            raise RemoteProtocolError(Problem.WRONG_ROLE, f"{self.me.role} does not accept {name}")
        if not self._sender_ok(row.sender, sender):
            raise RemoteProtocolError(Problem.WRONG_ROLE, f"{name} must come from {row.sender}, not {sender}")
        self._check_shape(message)
        key = (type(message), sender.name)
        if key in self._seen:
            raise RemoteProtocolError(Problem.REPLAY, f"{name} from {sender} was already received")
        if self.terminal or self._index(self.state) > self._index(row.consumed):
            raise RemoteProtocolError(Problem.STEP_OUT_OF_ORDER, f"{name} arrived after step {row.consumed}; {self.me.role} is in {self.state}")
        if self._index(self.state) < self._index(row.earliest):
            raise RemoteProtocolError(Problem.STEP_OUT_OF_ORDER, f"{name} cannot arrive before {row.earliest}; {self.me.role} is in {self.state}")
        self._seen.add(key)
        self._inbox[key] = message

    def _sender_kind(self, sender: Peer) -> str | None:
        """The participant kind of ``sender`` in this job ("curator", "party"), None for an outsider."""
        raise NotImplementedError

    def _sender_ok(self, kind: str, sender: Peer) -> bool:
        """Whether ``sender`` (a participant) is of the table's sender ``kind`` for a message."""
        raise NotImplementedError

    def _check_shape(self, message: Any) -> None:
        """Shape checks that need no state (list lengths fixed by the job); raise MALFORMED."""

    def _deliver_self(self, message: Any) -> None:
        """A message a role sends to itself (e.g. π1(j) = j) goes straight to its inbox."""
        key = (type(message), self.me.name)
        self._seen.add(key)
        self._inbox[key] = message

    def _take(self, message_type: type, sender_name: str) -> Any:
        return self._inbox.pop((message_type, sender_name))

    def _has(self, message_type: type, sender_name: str) -> bool:
        return (message_type, sender_name) in self._inbox

    def _advance(self) -> list[Output]:
        out: list[Output] = []
        while not self.terminal:
            needed = self._required(self.state)
            if not all(self._has(t, s) for t, s in needed):
                break
            handler = getattr(self, f"_on_{self.state.lower()}")
            out.extend(handler())
        return out

    def _required(self, state: str) -> list[tuple[type, str]]:
        raise NotImplementedError

    def _fail(self, e: ProtocolError) -> None:
        self.state = FAILED
        self.error = e
        self._inbox.clear()
        e.notices = self._abort_notices(e)

    def _abort_notices(self, e: ProtocolError) -> list[Output]:
        raise NotImplementedError

    def _on_abort(self, sender: Peer, abort: common_pb2.JobAbort) -> list[Output]:
        if self.terminal:
            return []
        e = RemoteProtocolError(abort.problem or Problem.JOB_FAILED, f"aborted by {sender}: {abort.detail}")
        self._fail(e)
        return e.notices


def require(condition: bool, problem: int, detail: str) -> None:
    """Raise a RemoteProtocolError unless ``condition`` holds (peer-supplied input checks)."""
    if not condition:
        raise RemoteProtocolError(problem, detail)


@dataclass
class StageClock:
    """Wall time per stage, as a role sees it."""

    clock: Callable[[], float]
    seconds: dict[str, float] = field(default_factory=dict)
    _current: str | None = None
    _since: float = 0.0

    def enter(self, stage: str) -> None:
        now = self.clock()
        if self._current is not None:
            self.seconds[self._current] = self.seconds.get(self._current, 0.0) + now - self._since
        self._current, self._since = stage, now

    def stop(self) -> None:
        self.enter("_stopped")
        self.seconds.pop("_stopped", None)
        self._current = None
