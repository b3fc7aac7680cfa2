"""Which tests `make test-fast` runs, and the guard that keeps that selection honest.

A test is ``fast`` (selected by ``pytest -m fast``) when it lives outside the folders of tests that start processes
over sockets (:data:`PROCESS_DIRS`) and carries none of the markers :data:`NOT_FAST`. Every fast test runs under
:func:`in_process_only`, in `make test-fast` and in the whole suite alike: starting a process (subprocess, fork,
multiprocessing), binding or connecting a network socket, or starting a gRPC server fails it, naming the marker
to add. So a test that starts a process without saying so fails the first time it runs, wherever it runs.
"""

from __future__ import annotations

import os
import socket
import subprocess
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator
from unittest import mock

TESTS = Path(__file__).resolve().parent
PROCESS_DIRS = frozenset({"integration", "adversarial", "deploy", "browser", "docs"})  # real processes over TLS, compose, Chromium, the docs as run
NOT_FAST = ("slow", "integration", "process")



def is_fast(path: Path, marker_names: set[str]) -> bool:
    """Whether the test in ``path`` with these markers belongs to `make test-fast`."""
    try:
        top = path.resolve().relative_to(TESTS).parts[0]
    except ValueError:
        return False
    return top not in PROCESS_DIRS and not (marker_names & set(NOT_FAST))


class StartedAProcess(AssertionError):
    """A fast test started a process or opened a socket."""


@contextmanager
def in_process_only(test: str, violations: list[str]) -> Iterator[None]:
    """Within: processes, network sockets and gRPC servers raise :class:`StartedAProcess` (and are noted in
    ``violations``, so a test that catches the exception still fails afterwards)."""

    def refuse(what: str) -> Callable[..., Any]:
        def refused(*_args: Any, **_kwargs: Any) -> Any:
            msg = (f"{test} is selected by `make test-fast` (marker fast) but {what}: mark it "
                   "@pytest.mark.process (or move it to tests/integration), or keep it in-process")
            violations.append(msg)
            raise StartedAProcess(msg)
        return refused

    def network(method: str) -> Callable[..., Any]:
        real = getattr(socket.socket, method)

        def checked(self: socket.socket, *args: Any, **kwargs: Any) -> Any:
            if self.family in (socket.AF_INET, socket.AF_INET6):
                return refuse(f"opened a network socket ({method} {args[0] if args else ''})")()
            return real(self, *args, **kwargs)
        return checked

    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(subprocess.Popen, "__init__", refuse("started a process (subprocess)")))
        stack.enter_context(mock.patch.object(os, "fork", refuse("forked")))
        for name in ("posix_spawn", "posix_spawnp"):
            if hasattr(os, name):
                stack.enter_context(mock.patch.object(os, name, refuse(f"started a process ({name})")))
        import multiprocessing.process

        stack.enter_context(mock.patch.object(multiprocessing.process.BaseProcess, "start", refuse("started a process (multiprocessing)")))
        for method in ("connect", "connect_ex", "bind"):
            stack.enter_context(mock.patch.object(socket.socket, method, network(method)))
        try:
            import grpc
            import grpc.aio
        except ImportError:  # the core install has grpc; a venv without it cannot start a server either
            pass
        else:
            stack.enter_context(mock.patch.object(grpc, "server", refuse("started a gRPC server")))
            stack.enter_context(mock.patch.object(grpc.aio, "server", refuse("started a gRPC server")))
        yield
