"""The one engine of every sans-IO role machine: peers, outputs, errors, the transition table and its rows.

A machine takes one message from one peer and returns the outputs it causes (:class:`Send` to a peer,
:class:`Spend` of the party's charge, :class:`Publish` of a release, :class:`Record` for the party's privacy ledger,
:class:`Reply` to the call that carried the message). It never touches a socket. Every transition is a :class:`Row` of the role's
``TABLE`` (one file per protocol owns its transitions, as data); :func:`render_table` writes a
table into the protocol's docs page (``tools/render_tables.py``), so docs cannot drift from code.

A row is one of three kinds:

* a **message taken at once**: in ``state``, a message from a sender of one of ``senders`` runs the
  handler ``_on_<MessageName>(sender, message)`` and the role moves to ``next``;
* a **message kept** (``until`` set): it may arrive in any state from ``state`` through ``until`` (e.g. a
  party's SizeShare before Charlie's ProtocolStart reached it) and waits in the inbox until the step of
  ``until`` consumes it; a second one from the same sender is a REPLAY (a message that recurs once per round,
  taken with ``_take_again``, carries its round, and a second copy of one round is the REPLAY);
* a **local or joint event** (sender ``self``): the caller's action (``submit``, ``close``) or a condition
  the machine detects itself (every input of a step is in, every node has reported), run by
  ``_on_<event>()``. A joint event's refusal is not the fault of the message that completed the
  condition: the machine fails and returns the abort notices as outputs.

States are named for what the role awaits or must do next. ``*`` in a row's state means every state that
is not terminal. A FAILED machine refuses everything with its failure's own Problem and never emits a
share or a release.

Failure policy (one for every protocol, :func:`admit_sender` and :func:`fails_job`):

* Only a job's participants can fail it. A message from anyone else (a sender who is not a
  participant of this job) or for another job is refused with its Problem (WRONG_ROLE,
  UNKNOWN_JOB) and never touches the job: state, inbox, seen-set and transcript stay as they were.
* Some protocols take messages from senders that are not participants (DCA's clients and routers):
  a refusal of such a message rejects that one message and leaves the job as it was.
* Any other refusal of a participant's message (wrong step, replay, bad shape, a kind of message
  it may not send) fails the job closed, with abort notices to the other participants.
* A local refusal (our own check, e.g. insufficient noise) fails the job.

Spend rule (one for every role that holds data, ``SPENDS = True``): every :class:`Send` and :class:`Reply` of such a
role, except the message kinds it names ``PUBLIC`` (an acceptance, an abort notice: nothing derived from its records), may only follow
the role's :class:`Spend`, in the same output list or an earlier one. A handler that breaks the order fails the job
(INTERNAL) and nothing of that list leaves. Whoever carries out the
outputs spends a :class:`Spend` durably before it carries out anything after it, and stops if the spend is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable

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
class Spend:
    """The party's charge for what follows: every entry spent in its privacy ledger in one durable step before any
    later output is carried out (a refused spend stops them all). The entries are built by the protocol's core."""

    entries: tuple[dict, ...]


@dataclass(frozen=True)
class Publish:
    """A release leaves the protocol (Charlie's model registry)."""

    release: Any


@dataclass(frozen=True)
class Record:
    """An entry for the party's privacy ledger."""

    entry: dict


@dataclass(frozen=True)
class Reply:
    """The response to the RPC that delivered the message (e.g. a ShareReceipt to a submitter)."""

    message: Any


Output = Send | Spend | Publish | Record | Reply


class ProtocolError(Exception):
    """Base: a Problem kind (maps to one gRPC status) and a message that says what happened."""

    def __init__(self, problem: Problem.ValueType, detail: str) -> None:
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


def admit_sender(job_id: str, kinds: frozenset[str], sender: Peer, message: Any) -> None:
    """The refusals that never touch a job: ``sender`` is no kind of sender this job takes (``kinds`` empty: an
    outsider), or ``message`` names another job. Raise before the machine looks at anything else."""
    if not kinds:
        raise RemoteProtocolError(Problem.WRONG_ROLE, f"{sender} takes no part in job {job_id}")
    if getattr(message, "job_id", job_id) != job_id:
        raise RemoteProtocolError(Problem.UNKNOWN_JOB, f"{type(message).__name__} names another job than {job_id}")


def fails_job(kinds: frozenset[str], participants: frozenset[str], e: ProtocolError) -> bool:
    """Whether refusing a message from a sender of ``kinds`` fails the job: a local refusal always does, a
    participant's refused message does, anyone else's never (it is refused and the job is untouched)."""
    return isinstance(e, LocalProtocolError) or not participants.isdisjoint(kinds)


FAILED = "FAILED"
ANY = "*"
SELF = "self"


@dataclass(frozen=True)
class Row:
    """One transition of a role (see the module docstring for the three kinds of row)."""

    state: str  # the state it applies in, the first state of a kept message's window, or ANY
    event: str  # a message name (CamelCase) or a local/joint event (lower case)
    senders: tuple[str, ...]  # sender kinds; ("self",) for local and joint events
    next: tuple[str, ...]  # the states the role may move to; () for a kept message (no move)
    until: str | None = None  # kept messages: the last state of the window, whose step consumes it

    @property
    def kept(self) -> bool:
        return self.until is not None


def row(state: str, event: str, senders: str, then: str) -> Row:
    """A row from its written form: ``row("AWAIT_SHARES", "ClientShare", "client|router", "AWAIT_SHARES")``;
    ``then`` lists the next states ("A|B": the handler chooses)."""
    return Row(state, event, tuple(senders.split("|")), tuple(then.split("|")))


def kept(event: str, senders: str, first: str, until: str) -> Row:
    """A message that may arrive from state ``first`` on and is consumed by the step of state ``until``."""
    return Row(first, event, tuple(senders.split("|")), (), until)


class Machine:
    """The engine every role machine runs on. A subclass sets ROLE, STATES (protocol order, FAILED last),
    TERMINAL (with FAILED), TABLE, PARTICIPANTS (the sender kinds that can fail the job) and implements
    ``_kinds`` and the handlers; ``_joint_event`` and ``_abort_notices`` when it has them."""

    ROLE: ClassVar[str]
    STATES: ClassVar[tuple[str, ...]]
    TERMINAL: ClassVar[tuple[str, ...]]
    TABLE: ClassVar[tuple[Row, ...]]
    PARTICIPANTS: ClassVar[frozenset[str]]
    RELAY_ABORTS: ClassVar[bool] = True  # on a participant's JobAbort, tell the other participants (False: they were told)
    SPENDS: ClassVar[bool] = False  # holds data: its Sends must follow its Spend (the spend rule)
    PUBLIC: ClassVar[frozenset[str]] = frozenset({"JobAbort"})  # message kinds a spending role may send before its Spend

    _ROWS: ClassVar[dict[str, tuple[Row, ...]]] = {}
    _ORDER: ClassVar[dict[str, int]] = {}

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if "TABLE" in cls.__dict__:  # index the table once per role (lookups run on every message)
            cls._ROWS = {e: tuple(r for r in cls.TABLE if r.event == e) for e in dict.fromkeys(r.event for r in cls.TABLE)}
            cls._ORDER = {s: i for i, s in enumerate(cls.STATES)}

    def __init__(self, job_id: str, me: Peer, *, record: bool = True) -> None:
        self.job_id = job_id
        self.me = me
        self.state = self.STATES[0]
        self.error: ProtocolError | None = None
        self.spent = False  # this role has output its Spend (the spend rule)
        self._inbox: dict[tuple[type, str], Any] = {}
        self._seen: set[tuple[type, str]] = set()
        # Everything this role took, in order (None when recording is off, e.g. served DCA nodes).
        self.transcript: list[tuple[Peer, Any]] | None = [] if record else None

    # -- the table ---------------------------------------------------------------------------
    @classmethod
    def rows(cls, event: str) -> tuple[Row, ...]:
        return cls._ROWS.get(event, ())

    @classmethod
    def _applies(cls, r: Row, state: str) -> bool:
        if state in cls.TERMINAL:
            return r.state == state and not r.kept
        if r.state == ANY:
            return True
        if r.until is not None:  # r.kept
            return cls._ORDER[r.state] <= cls._ORDER[state] <= cls._ORDER[r.until]
        return r.state == state

    @classmethod
    def lookup(cls, state: str, event: str) -> Row:
        """The row for ``event`` in ``state``, or WRONG_ROLE (the role never takes it) / STEP_OUT_OF_ORDER."""
        rows = cls.rows(event)
        if not rows:
            raise RemoteProtocolError(Problem.WRONG_ROLE, f"a {cls.ROLE} does not take {event}")
        for r in rows:
            if cls._applies(r, state):
                return r
        raise RemoteProtocolError(Problem.STEP_OUT_OF_ORDER, f"a {cls.ROLE} in {state} does not take {event}")

    @property
    def terminal(self) -> bool:
        return self.state in self.TERMINAL

    @property
    def failed(self) -> bool:
        return self.state == FAILED

    # -- hooks ---------------------------------------------------------------------------------
    def _kinds(self, sender: Peer) -> frozenset[str]:
        """Every sender kind ``sender`` is in this job (e.g. {"party", "leader"}); empty for an outsider."""
        raise NotImplementedError

    def _check_shape(self, message: Any) -> None:
        """Shape checks of a kept message that need no state (list lengths fixed by the job); raise MALFORMED."""

    def _required(self, state: str) -> list[tuple[type, str]] | None:
        """The kept messages (type, sender name) the step of ``state`` consumes; None: no such step."""
        return None

    def _joint_event(self) -> str | None:
        """A joint condition reached: its event name, else None. By default ``ready`` once every kept message
        the current state's step needs is in (its handler is ``_step_<state>``)."""
        need = self._required(self.state)
        if need is not None and all(self._has(t, s) for t, s in need):
            return "ready"
        return None

    def _on_ready(self) -> list[Output]:
        return getattr(self, f"_step_{self.state.lower()}")()

    def _abort_notices(self, e: ProtocolError) -> list[Output]:
        return []

    def _release_memory(self) -> None:
        """Drop buffered inputs (a failed job keeps nothing it could later release)."""

    # -- entry points ----------------------------------------------------------------------------
    def receive(self, sender: Peer, message: Any) -> list[Output]:
        """Take one message from ``sender``; return what it causes. Raises a ProtocolError if refused.

        An outsider's message, or another job's, is refused and changes nothing; so is a refused message from a
        sender who is not a participant (a DCA client). Any other refusal fails the job (the failure policy)."""
        kinds = self._kinds(sender)
        admit_sender(self.job_id, kinds, sender, message)
        if self.failed:
            raise self._failed_error()
        event = type(message).__name__
        try:
            r = self._admit(sender, kinds, event, message)
            if r.kept:
                key = (type(message), sender.name)
                self._seen.add(key)
                self._inbox[key] = message
                self._took(sender, message)
                out: list[Output] = []
            else:
                out = self._spend_first(getattr(self, f"_on_{event}")(sender, message))
                self._took(sender, message)
                if self.failed:  # a JobAbort
                    return out
                self._move(r)
        except ProtocolError as e:
            if fails_job(kinds, self.PARTICIPANTS, e) and not self.terminal:
                self._fail(e)
            raise
        return out + self._run_joint_events()

    def fail(self, problem: int, detail: str) -> list[Output]:
        """Fail the job from outside (deadline, unreachable peer); returns the abort notices."""
        if self.terminal:
            return []
        e = LocalProtocolError(Problem.ValueType(problem), detail)
        self._fail(e)
        return e.notices

    def _local(self, event: str, *args: Any) -> list[Output]:
        """Run a local event (the caller's action) through the table. Out of order: refused, nothing changes."""
        if self.failed:
            raise self._failed_error()
        try:
            r = self.lookup(self.state, event)
        except RemoteProtocolError as e:  # our own caller broke the order
            raise LocalProtocolError(e.problem, e.detail) from None
        try:
            out = self._spend_first(getattr(self, f"_on_{event}")(*args))
            self._move(r)
        except ProtocolError as e:
            if not self.terminal:
                self._fail(e)
            raise
        return out + self._run_joint_events()

    # -- internals -------------------------------------------------------------------------------
    def _admit(self, sender: Peer, kinds: frozenset[str], event: str, message: Any) -> Row:
        rows = self.rows(event)
        if not rows:
            raise RemoteProtocolError(Problem.WRONG_ROLE, f"a {self.ROLE} does not take {event}")
        if not any(k in r.senders for r in rows for k in kinds):
            allowed = sorted({k for r in rows for k in r.senders})
            raise RemoteProtocolError(Problem.WRONG_ROLE, f"{event} must come from a {' or '.join(allowed)}, not {sender}")
        if any(r.kept for r in rows):
            self._check_shape(message)
            if (type(message), sender.name) in self._seen:
                raise RemoteProtocolError(Problem.REPLAY, f"{event} from {sender} was already received")
        r = next((r for r in rows if self._applies(r, self.state)), None)
        if r is None:
            raise RemoteProtocolError(Problem.STEP_OUT_OF_ORDER, f"a {self.ROLE} in {self.state} does not take {event} now")
        if kinds.isdisjoint(r.senders):
            raise RemoteProtocolError(Problem.WRONG_ROLE, f"{event} must come from a {' or '.join(r.senders)}, not {sender}")
        return r

    def _move(self, r: Row) -> None:
        """Enter the row's next state; a row with several leaves the choice to its handler (checked here)."""
        if len(r.next) == 1:
            self.state = r.next[0]
        elif r.next:
            assert self.state in r.next, (self.ROLE, r, self.state)

    def _took(self, sender: Peer, message: Any) -> None:
        if self.transcript is not None:
            self.transcript.append((sender, message))

    def _run_joint_events(self) -> list[Output]:
        """Fire every joint event now reached. A refusal here fails the machine; the abort notices are
        returned as outputs (the message that completed the condition is not at fault)."""
        out: list[Output] = []
        while not self.terminal:
            event = self._joint_event()
            if event is None:
                break
            r = self.lookup(self.state, event)
            try:
                produced = self._spend_first(getattr(self, f"_on_{event}")())
                self._move(r)
            except ProtocolError as e:
                self._fail(e)
                return out + e.notices
            out += produced
        return out

    def _spend_first(self, out: list[Output]) -> list[Output]:
        """The spend rule: in a spending role, no Send or Reply but a PUBLIC kind before the role's Spend (else INTERNAL)."""
        if not self.SPENDS:
            return out
        spent = self.spent
        for o in out:
            if isinstance(o, Spend):
                spent = True
            elif isinstance(o, (Send, Reply)) and not spent and type(o.message).__name__ not in self.PUBLIC:
                raise LocalProtocolError(Problem.INTERNAL, f"a {self.ROLE} would send data of job {self.job_id} before its spend")
        self.spent = spent
        return out

    def _failed_error(self) -> RemoteProtocolError:
        """Anything that reaches a failed job is refused with the failure's own problem (e.g. INSUFFICIENT_NOISE),
        so whoever hits the failure first — a peer's message or its abort notice — reports the same cause."""
        problem = self.error.problem if self.error is not None else Problem.JOB_FAILED
        return RemoteProtocolError(problem, f"job {self.job_id} has failed: {self.error.detail if self.error else ''}")

    def _fail(self, e: ProtocolError) -> None:
        self.state = FAILED
        self.error = e
        self._inbox.clear()
        e.notices = self._abort_notices(e)
        self._release_memory()

    def _abort_error(self, sender: Peer, abort: common_pb2.JobAbort) -> ProtocolError:
        return RemoteProtocolError(abort.problem or Problem.JOB_FAILED, f"aborted by {sender}: {abort.detail}")

    def _on_JobAbort(self, sender: Peer, abort: common_pb2.JobAbort) -> list[Output]:
        """A participant gave up: fail, and (RELAY_ABORTS) tell every other participant."""
        e = self._abort_error(sender, abort)
        self._fail(e)
        if not self.RELAY_ABORTS:
            return []
        return [n for n in e.notices if not (isinstance(n, Send) and n.to == sender)]

    def _abort(self, e: ProtocolError, to: Iterable[Peer]) -> list[Output]:
        """JobAbort notices naming this role as the reporter."""
        msg = common_pb2.JobAbort(job_id=self.job_id, problem=e.problem, detail=e.detail, reported_by=self.me.name)
        return [Send(p, msg) for p in to]

    # -- kept messages (inbox) -----------------------------------------------------------------
    def _deliver_self(self, message: Any) -> None:
        """A message a role sends to itself (e.g. π1(j) = j) goes straight to its inbox."""
        key = (type(message), self.me.name)
        self._seen.add(key)
        self._inbox[key] = message

    def _take(self, message_type: type, sender_name: str) -> Any:
        return self._inbox.pop((message_type, sender_name))

    def _take_again(self, message_type: type, sender_name: str) -> Any:
        """Take a kept message that recurs once per round (a Pathak tournament round): the sender's next copy is
        admitted instead of refused as a REPLAY. The message carries its round and ``_check_shape`` refuses any
        other than the one awaited (a repeated round is a REPLAY)."""
        self._seen.discard((message_type, sender_name))
        return self._take(message_type, sender_name)

    def _has(self, message_type: type, sender_name: str) -> bool:
        return (message_type, sender_name) in self._inbox


def check_table(machine: type[Machine]) -> None:
    """Every row names states of the role, kept windows run forward, every non-terminal state has a way out."""
    st = machine.STATES
    assert FAILED in st and FAILED in machine.TERMINAL, machine
    for r in machine.TABLE:
        assert r.state == ANY or r.state in st, (machine.ROLE, r)
        assert all(n in st for n in r.next), (machine.ROLE, r)
        assert r.until is None or st.index(r.state) <= st.index(r.until), (machine.ROLE, r)
        assert (r.senders == (SELF,)) == r.event.islower(), (machine.ROLE, r)
    for s in st:
        if s not in machine.TERMINAL:
            assert any(r.next and (r.state in (s, ANY)) for r in machine.TABLE), (machine.ROLE, s)


def render_table(machine: type[Machine]) -> str:
    """The role's transition table as Markdown (docs/protocols/<protocol>.md, written by tools/render_tables.py)."""
    terminal = [s for s in machine.TERMINAL]
    lines = [
        f"States: {' → '.join(s for s in machine.STATES if s not in machine.TERMINAL)}; terminal: {', '.join(terminal)}.",
        f"Participants (whose refused messages fail the job): {', '.join(sorted(machine.PARTICIPANTS)) or 'none'}.",
        "",
        "| in state | takes | from | then |",
        "|---|---|---|---|",
    ]
    for r in machine.TABLE:
        state = "any non-terminal" if r.state == ANY else r.state
        if r.kept:
            state = r.state if r.state == r.until else f"{r.state} … {r.until}"
            then = f"kept for the step of {r.until}"
        else:
            then = " or ".join(r.next)
        event = r.event if r.event.islower() else f"`{r.event}`"
        lines.append(f"| {state} | {event} | {', '.join(r.senders)} | {then} |")
    return "\n".join(lines) + "\n"


def failure_problem(refusals: Iterable[str]) -> "Problem.ValueType":
    """The Problem of a job that failed because some of its parties refused or could not be reached, from their
    refusals' texts (each names its Problem, as the one error table writes it: ``BUDGET_EXCEEDED: …``):
    BUDGET_EXCEEDED when a party's budget could not pay for the job, JOB_FAILED otherwise. The operator learns why a job of theirs failed; the parties' own
    ledgers, not this code, decide what was charged."""
    return Problem.BUDGET_EXCEEDED if any("BUDGET_EXCEEDED:" in t for t in refusals) else Problem.JOB_FAILED


def require(condition: bool, problem: Problem.ValueType, detail: str) -> None:
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
