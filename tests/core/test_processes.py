"""spawn() beside a live gRPC channel (grpc/grpc#43055): no child may abort between fork and exec.

With a ``preexec_fn`` CPython forks, gRPC's fork handlers run in the child, and gRPC ≥ 1.81 restarts its epoll
poller there after ``close_fds`` closed its descriptor: the child aborts before exec, a few percent of the time.
spawn() arms the parent-death signal in a trampoline the child runs instead (vfork + exec, no handlers)."""

from __future__ import annotations

import pytest
import os
import signal
import subprocess
import sys

import grpc

from mpdp_services.common import processes


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_spawned_children_survive_an_active_grpc_channel():
    channel = grpc.insecure_channel("127.0.0.1:9")  # a channel trying to connect keeps gRPC's poller busy
    grpc.channel_ready_future(channel)
    try:
        codes = [processes.spawn(["true"], stderr=subprocess.DEVNULL).wait() for _ in range(200)]
    finally:
        channel.close()
    assert codes == [0] * 200  # before: ≈ 3 % died of SIGABRT (-6)


@pytest.mark.process  # starts a process or opens a socket: not in `make test-fast`
def test_the_child_is_armed_and_told_its_parent():
    code = "import ctypes, os; v = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(v), 0, 0, 0); print(v.value, os.environ['MPDP_PARENT_PID'])"
    out = processes.spawn([sys.executable, "-c", code], stdout=subprocess.PIPE).communicate(timeout=60)[0].decode().split()
    assert out == [str(int(signal.SIGKILL)), str(os.getpid())]  # PR_GET_PDEATHSIG: SIGKILL


@pytest.mark.process  # starts a process or opens a socket: not in `make test-fast`
def test_an_orphan_exits_at_once():
    code = "from mpdp_services.common.processes import exit_if_orphaned; exit_if_orphaned(); print('ran')"
    env = dict(os.environ, MPDP_PARENT_PID="1")  # not our parent: as if the spawner had died before arming
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60)
    assert p.returncode == 1 and p.stdout == b""
    env["MPDP_PARENT_PID"] = str(os.getpid())
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == b"ran"
