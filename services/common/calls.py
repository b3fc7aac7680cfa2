"""The RPC the current task serves: its method and its caller, as the gate (rpc.RoleInterceptor) saw them.

grpc.aio's servicer context exposes neither the method name nor a place for per-call values, and each RPC runs in
its own task, so the gate puts both in context variables when it admits a call. :mod:`errors` names the method in
refusals and metrics; :func:`admitted` lets a role note who created a job (the curator's job ownership,
:mod:`mpdp_services.curator.ownership`) without threading the caller through every servicer, and :func:`may_see`
asks that ownership whether the caller may learn that a job exists.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator

from mpdp_services.common.pki import Identity

_METHOD: ContextVar[str] = ContextVar("mpdp_rpc_method", default="?")
_CALLER: ContextVar[Identity | None] = ContextVar("mpdp_rpc_caller", default=None)
_ON_ADMIT: list[Callable[[str, Identity], None]] = []
_SUB_JOB: ContextVar[bool] = ContextVar("mpdp_sub_job", default=False)
_MAY_SEE: list[Callable[[Identity, str], bool]] = []


def serving(method: str, ident: Identity | None = None) -> None:
    """Name the RPC the current task serves, and its caller once known (called by the gate)."""
    _METHOD.set(method)
    if ident is not None:
        _CALLER.set(ident)


def method() -> str:
    """The full method name ("/mpdp.messages.JobOperations/SubmitJob"), "?" outside a call the gate wrapped."""
    return _METHOD.get()


def caller() -> Identity | None:
    """The admitted caller of the current RPC, None outside one (a sweep, a start-up recovery)."""
    return _CALLER.get()


def on_admit(hook: Callable[[str, Identity], None]) -> None:
    """Call ``hook(job_id, caller)`` whenever a job table admits a job while serving an RPC (this process only)."""
    _ON_ADMIT.append(hook)


def admitted(job_id: str) -> None:
    """A job table admitted ``job_id``: tell the hooks who asked for it (nothing outside an RPC)."""
    ident = _CALLER.get()
    if ident is not None:
        for hook in _ON_ADMIT:
            hook(job_id, ident)


def on_may_see(check: Callable[[Identity, str], bool]) -> None:
    """Judge with ``check(caller, job_id)`` whether the current RPC's caller may know of a job (this process only)."""
    _MAY_SEE.append(check)


def may_see(job_id: str) -> bool:
    """Whether the current RPC's caller may learn that ``job_id`` exists (True outside an RPC, or with no judge)."""
    ident = _CALLER.get()
    return ident is None or all(check(ident, job_id) for check in _MAY_SEE)


@contextmanager
def sub_job() -> Iterator[None]:
    """Jobs admitted inside this block are a running job's own parts (a learner's round, an ensemble's vote sum):
    they count against the curator's admission bounds but are never refused by them, since the job that needs them
    was admitted already and its parties may have spent."""
    token = _SUB_JOB.set(True)
    try:
        yield
    finally:
        _SUB_JOB.reset(token)


def in_sub_job() -> bool:
    return _SUB_JOB.get()
