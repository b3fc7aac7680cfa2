"""How every `mpdp` command fails: one message saying what went wrong, one hint saying what to do.

A command raises :class:`CliError` (or click's own usage errors, or lets a gRPC error or a missing endpoints
file escape); :func:`report` turns any of them into

- with ``--json``: exactly one JSON object ``{"error": {"code", "message", "hint"}}`` on stdout;
- otherwise: ``Error: message`` and ``Hint: hint`` on stderr (usage errors with click's usage line);

and a non-zero exit status (2 for bad arguments, 130 for Ctrl-C, 1 otherwise). No traceback is printed for
any of them; an unexpected exception (a bug) prints its traceback on stderr and, with ``--json``, still one
error object (code ``internal``) on stdout.

Codes are short and stable (scripts may branch on them): ``usage``, ``endpoints``, ``unreachable``,
``invalid``, ``job_failed``, ``budget_exceeded``, ``unhealthy``, ``failed``, ``interrupted``, ``internal``, and for a service's refusal the gRPC
status in lower case (``permission_denied``, ``not_found``, ``invalid_argument``, ``resource_exhausted``, ...).
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any, NoReturn

import click

USAGE_HINT = "`mpdp COMMAND --help` lists a command's options"
UNREACHABLE_HINT = ("start it (`mpdp federation up`, or `mpdp serve` at its site), or point --endpoints / --profile at the federation "
                    "you meant; `mpdp health` checks every role of the federation, `mpdp health --address HOST:PORT --tls-dir DIR` one service")


class CliError(click.ClickException):
    """A failure the user can act on: ``message`` says what happened, ``hint`` what to do about it."""

    def __init__(self, message: str, *, code: str = "failed", hint: str = "", exit_code: int = 1) -> None:
        super().__init__(message)
        self.code = code
        self.hint = hint
        self.status = exit_code  # the process's exit status
        setattr(self, "exit_code", exit_code)  # the same when click's own handler exits (ClickException declares a class variable)

    def show(self, file: Any = None) -> None:
        click.echo(f"Error: {self.format_message()}", err=True)
        if self.hint:
            click.echo(f"Hint: {self.hint}", err=True)


_STATUS_HINTS = {
    "PERMISSION_DENIED": "use the operator's certificate: the endpoints.json written by `mpdp federation up` or `mpdp provision`",
    "NOT_FOUND": "`mpdp jobs ls` lists the jobs this curator knows",
    "INVALID_ARGUMENT": "change the value the message names (docs/protocols/limits.md lists every range)",
    "RESOURCE_EXHAUSTED": "a party's privacy budget or the curator's job admission is full: `mpdp ledger show --site DIR` shows what is left",
    "FAILED_PRECONDITION": "the job is not in a state that allows this yet: `mpdp jobs show JOB` shows where it is",
    "ALREADY_EXISTS": "that was done already; `mpdp jobs show JOB` shows the job",
    "ABORTED": "the job failed or was cancelled; `mpdp jobs logs JOB` shows why",
    "UNAUTHENTICATED": "check the TLS files the endpoints file names (certificate, key and CA of this federation)",
}


def from_rpc(e: Any, service: str = "the curator", address: str | None = None, doing: str = "") -> CliError:
    """A gRPC error as a :class:`CliError`: an unreachable service says so (with its address), a refusal says who
    refused what and the status, each with a hint."""
    code = e.code() if hasattr(e, "code") else None
    name = getattr(code, "name", "UNKNOWN")
    details = e.details() if hasattr(e, "details") else str(e)
    where = f" at {address}" if address else ""
    if name == "UNAVAILABLE" and not _is_refusal(details):
        return CliError(f"{service} is not reachable{where} ({details})", code="unreachable", hint=UNREACHABLE_HINT)
    if name == "DEADLINE_EXCEEDED":
        return CliError(f"{service}{where} did not answer in time{' while ' + doing if doing else ''}", code="unreachable",
                        hint="it may be overloaded or stopped: `mpdp health` checks it; retry, or raise the command's deadline")
    what = f" {doing}" if doing else ""
    return CliError(f"{service} refused{what}: {name}: {details}", code=name.lower(), hint=_STATUS_HINTS.get(name, ""))


def _is_refusal(details: str) -> bool:
    """UNAVAILABLE is also a service's own answer (Problem NOT_READY or PEER_UNREACHABLE: details start with the
    Problem's name); otherwise it is gRPC's failure to connect."""
    return details.startswith(("NOT_READY", "PEER_UNREACHABLE"))


def wants_json(args: list[str]) -> bool:
    """``--json`` among the options (before a ``--``)."""
    for a in args:
        if a == "--":
            return False
        if a == "--json":
            return True
    return False


def as_cli_error(e: BaseException) -> CliError | None:
    """The user error ``e`` stands for, or None when it is a bug."""
    if isinstance(e, CliError):
        return e
    if isinstance(e, click.UsageError):
        hint = f"`{e.ctx.command_path} --help` lists its options" if e.ctx is not None else USAGE_HINT
        return CliError(e.format_message(), code="usage", hint=hint, exit_code=2)
    if isinstance(e, click.ClickException):
        return CliError(e.format_message(), exit_code=e.exit_code or 1)
    if isinstance(e, (KeyboardInterrupt, click.Abort)):
        return CliError("interrupted", code="interrupted", hint="run the command again; jobs already submitted go on at the curator (`mpdp jobs ls`)",
                        exit_code=130)
    grpc = sys.modules.get("grpc")
    if grpc is not None and isinstance(e, grpc.RpcError):
        return from_rpc(e, "a service of the federation")
    if type(e).__name__ == "EndpointsError":
        return CliError(str(e), code="endpoints", hint="`mpdp profile ls` lists the federations you saved; MPDP_ENDPOINTS names one")
    if isinstance(e, FileNotFoundError):
        return CliError(str(e), code="not_found", hint="check the path")
    return None


def report(e: BaseException, as_json: bool) -> NoReturn:
    """Print ``e`` as the one error of this command and exit non-zero (see the module docstring)."""
    err = as_cli_error(e)
    if err is None:  # a bug: the traceback is for us, the object for the script
        traceback.print_exception(e, file=sys.stderr)
        err = CliError(f"unexpected {type(e).__name__}: {e}", code="internal",
                       hint="this is a bug in mpdp: please report it with the traceback printed on stderr")
    if as_json:
        click.echo(json.dumps({"error": {"code": err.code, "message": err.format_message(), "hint": err.hint}}))
    elif isinstance(e, click.UsageError):
        e.show()
    else:
        err.show()
    sys.stdout.flush()
    raise SystemExit(err.status)
