"""How the project's processes start: children that die with their parent, and a service's descriptor limit.

``spawn`` is the one way the project starts a process that outlives a single call (the services of a local
federation, a benchmark's federation, a test's helper process). On Linux every child is armed with
``prctl(PR_SET_PDEATHSIG, SIGKILL)`` between fork and exec, so the kernel kills it when its parent dies for
any reason, SIGKILL included: killing ``mpdp federation up`` or a benchmark leaves no service behind.

The kernel ties the death signal to the *thread* that forked, not the process: a child spawned from a worker
thread would be killed when that thread ends. ``spawn`` therefore refuses to run anywhere but the main thread.

``raise_fd_limit`` lifts the soft RLIMIT_NOFILE to the hard limit; each service calls it once at start-up so
that connections, not an arbitrary default of 1,024 descriptors, bound what it can hold.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

_PR_SET_PDEATHSIG = 1
_SIGKILL = int(signal.SIGKILL)


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


_prctl = _load_prctl()  # resolved once here: the child between fork and exec only calls it


def _die_with(parent: int) -> Callable[[], None]:
    """The child's first act after fork: ask for SIGKILL when the parent dies, then check it has not already."""

    def arm() -> None:
        if _prctl is None:
            return
        if _prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0) != 0:
            os._exit(127)  # a child we could not tie to its parent must not start
        if os.getppid() != parent:  # the parent died between fork and prctl: nobody will signal us
            os.kill(os.getpid(), _SIGKILL)

    return arm


def spawn(args: Sequence[str | os.PathLike[str]], **popen: Any) -> subprocess.Popen:
    """``subprocess.Popen(args, **popen)`` whose child is killed by the kernel when this process dies.

    Call it from the main thread (see the module docstring). ``preexec_fn`` is this module's to set.
    """
    if "preexec_fn" in popen:
        raise TypeError("spawn sets preexec_fn itself")
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("spawn from the main thread: the kernel kills the child when the thread that forked it ends")
    return subprocess.Popen(list(args), preexec_fn=_die_with(os.getpid()), **popen)


def raise_fd_limit() -> int:
    """Raise this process's soft limit on open descriptors to its hard limit; returns the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return hard
    if hard == resource.RLIM_INFINITY and soft != resource.RLIM_INFINITY:
        # an unlimited hard limit cannot be the soft one (the kernel caps descriptors at fs.nr_open)
        cap = _nr_open()
        if cap > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (cap, hard))
            return cap
    return soft


def _nr_open() -> int:
    try:
        with open("/proc/sys/fs/nr_open") as fh:
            return int(fh.read())
    except (OSError, ValueError):
        return 1 << 20
