"""How the project's processes start: children that die with their parent, and a service's descriptor limit.

``spawn`` is the one way the project starts a process that outlives a single call (the services of a local
federation, a benchmark's federation, a test's helper process). On Linux every child is armed with
``prctl(PR_SET_PDEATHSIG, SIGKILL)`` before it runs its program, so the kernel kills it when its parent dies for
any reason, SIGKILL included: killing ``mpdp federation up`` or a benchmark leaves no service behind.

The arming is done by a small Python trampoline that the child runs first (prctl, check that the parent is still
the spawner, report "armed" on a pipe, then exec the program), not by a ``preexec_fn``: a ``preexec_fn`` makes
CPython fork() instead of vfork(), which runs gRPC's fork handlers in the child; with a gRPC channel active in the
parent, gRPC (≥ 1.81) then restarts its poller in the child, whose epoll descriptor ``close_fds`` has just
closed, and the child aborts before exec (grpc/grpc#43055; ≈ 3 % of spawns here). ``spawn`` returns once the
child is armed (about 20 ms). The child also gets ``MPDP_PARENT_PID`` (:func:`exit_if_orphaned`).

The kernel ties the death signal to the *thread* that forked, not the process: a child spawned from a worker
thread would be killed when that thread ends. ``spawn`` therefore refuses to run anywhere but the main thread.

``raise_fd_limit`` lifts the soft RLIMIT_NOFILE to the hard limit; each service calls it once at start-up so
that connections, not an arbitrary default of 1,024 descriptors, bound what it can hold.
"""

from __future__ import annotations

import os
import resource
import select
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any

PARENT_ENV = "MPDP_PARENT_PID"
_LINUX = sys.platform.startswith("linux")

# Runs in the child (python -I -S): arm the death signal (prctl(PR_SET_PDEATHSIG = 1, SIGKILL = 9)), check the parent is still the spawner, report "armed"
# on the inherited pipe, then become the program. argv: parent pid, pipe fd, program, arguments.
_TRAMPOLINE = """\
import ctypes, os, sys
if ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0) != 0 or os.getppid() != int(sys.argv[1]):
    os._exit(127)
os.write(int(sys.argv[2]), b"1")
os.close(int(sys.argv[2]))
os.execvp(sys.argv[3], sys.argv[3:])
"""
ARM_TIMEOUT = 60.0


def spawn(args: Sequence[str | os.PathLike[str]], **popen: Any) -> subprocess.Popen:
    """``subprocess.Popen(args, **popen)`` whose child is killed by the kernel when this process dies.

    Returns once the child is armed. Call it from the main thread (see the module docstring). ``preexec_fn`` and
    ``pass_fds`` are this module's to set.
    """
    if "preexec_fn" in popen or "pass_fds" in popen:
        raise TypeError("spawn sets preexec_fn and pass_fds itself")
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("spawn from the main thread: the kernel kills the child when the thread that forked it ends")
    env = dict(popen.pop("env", None) or os.environ)
    env[PARENT_ENV] = str(os.getpid())
    argv = [os.fspath(a) for a in args]
    if not _LINUX:  # no death signal to arm
        return subprocess.Popen(argv, env=env, **popen)
    r, w = os.pipe()
    try:
        child = subprocess.Popen([sys.executable, "-I", "-S", "-c", _TRAMPOLINE, str(os.getpid()), str(w), *argv], env=env, pass_fds=(w,), **popen)
    finally:
        os.close(w)
    try:  # vfork + exec (no preexec_fn): no fork handlers run in the child (module docstring)
        ready, _, _ = select.select([r], [], [], ARM_TIMEOUT)
        armed = bool(ready) and os.read(r, 1) == b"1"
    finally:
        os.close(r)
    if not armed and child.poll() is None:  # neither armed nor gone: never leave an unarmed child running
        child.kill()
        child.wait()
    return child


def exit_if_orphaned() -> None:
    """For a process started by :func:`spawn`: exit now if the parent that spawned it is gone (it died before the
    death signal was armed, so nobody would stop this process)."""
    expected = os.environ.pop(PARENT_ENV, None)  # not inherited by this process's own children
    if expected and expected.isdigit() and os.getppid() != int(expected):
        os._exit(1)


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
