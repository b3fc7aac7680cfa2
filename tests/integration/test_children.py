"""Every service a launcher starts dies with it, even when the launcher is killed with SIGKILL (PR_SET_PDEATHSIG).

The launchers are real: ``mpdp federation up`` and ``benchmarks/dca_table1.py``, each started as a subprocess.
Once their services serve, the launcher is killed with SIGKILL; every process it had started must end within a
bounded deadline. Exits are watched through pidfds (``pidfd_open``): no sleeps, and a process that ends but is
never reaped by its new parent still counts as ended.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path


from mpdp_services.common.processes import spawn

REPO = Path(__file__).resolve().parents[2]
ENDED_WITHIN = 30.0  # seconds for the kernel to deliver SIGKILL to every orphan

assert sys.platform.startswith("linux"), "PR_SET_PDEATHSIG (and these tests) need Linux"


def descendants(root: int) -> set[int]:
    """Every live process under ``root`` (scanning /proc for parent links)."""
    parent: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            parent[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    out: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, pp in parent.items() if pp in frontier} - out
        out |= frontier
    return out


def wait_until_ended(pidfds: dict[int, int], deadline: float) -> set[int]:
    """Wait on the pidfds until all have ended or the deadline passes; returns the pids still running."""
    poller = select.poll()
    for fd in pidfds.values():
        poller.register(fd, select.POLLIN)
    running = dict(pidfds)
    while running and (left := deadline - time.monotonic()) > 0:
        for fd, _ in poller.poll(left * 1000):
            poller.unregister(fd)
            running = {pid: f for pid, f in running.items() if f != fd}
    return set(running)


def wait_for_file(path_glob: str, root: Path, launcher: subprocess.Popen, timeout: float) -> Path:
    """The first file matching ``path_glob`` under ``root``; fails if the launcher exits first."""
    deadline = time.monotonic() + timeout
    pidfd = os.pidfd_open(launcher.pid)
    try:
        while time.monotonic() < deadline:
            found = sorted(root.glob(path_glob))
            if found:
                return found[0]
            # wake when the launcher ends, or after a short poll interval (the file has no event to wait on)
            if select.select([pidfd], [], [], 0.2)[0]:
                raise AssertionError(f"launcher exited with {launcher.wait()} before writing {path_glob}: {launcher.stderr.read().decode()[-3000:]}")  # type: ignore[union-attr]
    finally:
        os.close(pidfd)
    raise AssertionError(f"no {path_glob} under {root} within {timeout:g} s")


def kill_launcher_and_check(launcher: subprocess.Popen, services: set[int]) -> None:
    """SIGKILL the launcher (frozen first, so it cannot stop its services itself) and wait for every service."""
    assert services, "the launcher started no process"
    pidfds = {pid: os.pidfd_open(pid) for pid in services}
    try:
        launcher.send_signal(signal.SIGSTOP)
        assert launcher.poll() is None, "the launcher ended on its own; nothing to test"
        still = {pid for pid in services if not select.select([pidfds[pid]], [], [], 0)[0]}
        assert still == services, f"services ended before the launcher was killed: {sorted(services - still)}"
        launcher.send_signal(signal.SIGKILL)
        assert launcher.wait(30) == -signal.SIGKILL
        left = wait_until_ended(pidfds, time.monotonic() + ENDED_WITHIN)
        assert not left, f"still running {ENDED_WITHIN:g} s after their launcher was killed: {sorted(left)}"
    finally:
        for fd in pidfds.values():  # do not leak processes if an assertion above failed (pidfds: no pid reuse)
            try:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.close(fd)


def test_federation_up_services_die_with_it(tmp_path):
    workdir = tmp_path / "fed"
    launcher = spawn(
        [sys.executable, "-m", "mpdp_services.cli.main", "federation", "up", "--workdir", str(workdir), "--parties", "2", "--compute-nodes", "1", "--test-mode", "--key-bits", "1024",
         "--json"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    try:
        up = json.loads(launcher.stdout.readline())  # type: ignore[union-attr]  # --json: one object once everything is up
        endpoints = json.loads((workdir / "endpoints.json").read_text())
        assert up["endpoints"] == str(workdir / "endpoints.json") and up["http"] == endpoints["http"]
        assert up["dashboard"] == endpoints["http"]["curator"] + "/" and set(up["ports"]) == {"curator", "party-1", "party-2", "node-1"}
        services = set(endpoints["pids"].values())
        assert len(services) == 4  # curator, 2 parties, 1 compute node
        assert services <= descendants(launcher.pid)
        kill_launcher_and_check(launcher, descendants(launcher.pid))
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


def test_benchmark_services_die_with_it(tmp_path):
    """The report's case: killing benchmarks/dca_table1.py left its curator and compute nodes running."""
    launcher = spawn(
        # a cell long enough (100,000 clients) that the benchmark is still in its job when it is killed
        [sys.executable, str(REPO / "benchmarks" / "dca_table1.py"), "--clients", "100000", "--dims", "10", "--nodes", "2", "--batching", "batched", "--max-seconds", "1e9"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ, TMPDIR=str(tmp_path)),
    )
    try:
        endpoints = json.loads(wait_for_file("mpdp-dca-bench-*/fed-*/endpoints.json", tmp_path, launcher, 240).read_text())
        services = set(endpoints["pids"].values())
        assert len(services) == 3  # curator and 2 compute nodes
        kill_launcher_and_check(launcher, services | descendants(launcher.pid))
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


def test_spawn_refuses_other_threads():
    """The kernel ties the death signal to the forking thread: a worker thread's child would die with the thread."""
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            spawn([sys.executable, "-c", "pass"])
        except RuntimeError as e:
            errors.append(e)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert len(errors) == 1 and "main thread" in str(errors[0])


def test_child_of_a_killed_parent_dies(tmp_path):
    """Direct: a spawned child's child (armed by spawn) ends when its parent is SIGKILLed mid-life."""
    code = (
        "import sys, time; from mpdp_services.common.processes import spawn; "
        "c = spawn([sys.executable, '-c', 'import time; time.sleep(600)']); print(c.pid, flush=True); time.sleep(600)"
    )
    parent = spawn([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        child = int(parent.stdout.readline())  # type: ignore[union-attr]
        kill_launcher_and_check(parent, {child})
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        parent.stdout.close()  # type: ignore[union-attr]
