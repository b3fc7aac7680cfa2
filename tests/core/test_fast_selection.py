"""`make test-fast` runs the tests marked ``fast`` (tests/fast.py): never one of the folders whose tests start
processes, never one marked slow, integration or process; and a fast test that starts a process or opens a
socket fails (the guard tests/conftest.py puts around each one, in `make test` too). CI runs everything."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

import pytest

from tests import fast
from tests.conftest import REPO


def test_the_process_folders_are_never_fast():
    files = [p for d in sorted(fast.PROCESS_DIRS) for p in (fast.TESTS / d).rglob("test_*.py")]
    assert len(files) >= 40, len(files)  # integration, adversarial, deploy, browser, docs all hold tests
    assert not [p for p in files if fast.is_fast(p, set())]


def test_a_marked_test_is_never_fast_and_an_unmarked_unit_test_is():
    here = fast.TESTS / "core" / "test_math.py"
    assert fast.is_fast(here, set()) and fast.is_fast(here, {"parametrize"})
    for marker in fast.NOT_FAST:
        assert not fast.is_fast(here, {marker}), marker
    assert not fast.is_fast(REPO / "benchmarks" / "cli_startup.py", set())  # outside tests/


_POPEN = subprocess.Popen.__init__  # as imported, outside any test's guard


def test_this_test_runs_under_the_guard(request):
    assert request.node.get_closest_marker("fast") is not None
    assert subprocess.Popen.__init__ is not _POPEN  # the guard's, for the duration of this test


@pytest.mark.parametrize("what", ["subprocess", "fork", "multiprocessing", "connect", "bind", "grpc"])
def test_the_guard_refuses_processes_and_sockets_and_remembers(what):
    violations: list[str] = []
    with fast.in_process_only("tests/x.py::t", violations):
        with pytest.raises(fast.StartedAProcess):
            if what == "subprocess":
                subprocess.Popen([sys.executable, "-c", "pass"])
            elif what == "fork":
                os.fork()
            elif what == "multiprocessing":
                import multiprocessing

                multiprocessing.get_context("spawn").Process(target=print).start()
            elif what == "grpc":
                import grpc

                grpc.server(None)
            else:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.connect(("127.0.0.1", 9)) if what == "connect" else s.bind(("127.0.0.1", 0))
    assert len(violations) == 1 and "tests/x.py::t" in violations[0] and "@pytest.mark.process" in violations[0]
    a, b = socket.socketpair()  # local pipes (asyncio's self-pipe) stay allowed, inside the guard or not
    a.close(), b.close()


def test_make_test_fast_selects_the_fast_marker_and_ci_runs_everything():
    make = (REPO / "Makefile").read_text()
    recipe = re.search(r"^test-fast:.*\n((?:\t.*\n)+)", make, re.M)
    assert recipe and "-m fast" in recipe.group(1), "make test-fast runs `pytest -m fast`"
    test = re.search(r"^test:.*\n((?:\t.*\n)+)", make, re.M)
    assert test and "pytest" in test.group(1) and " -m " not in test.group(1).split("pytest", 1)[1], "make test runs every test"
    ci = [ln for ln in (REPO / ".ci" / "run").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert ci[-1] == "make test"


def test_the_readme_states_what_make_test_fast_runs_and_how_long_it_took():
    """README names the exact command `make test-fast` runs (a reader without make can run it) and a measured time."""
    recipe = re.search(r"^test-fast:.*\n\t(.*)\n", (REPO / "Makefile").read_text(), re.M)
    assert recipe
    command = recipe.group(1).replace("$(BIN)", ".venv/bin")
    readme = " ".join((REPO / "README.md").read_text().split())  # joined across line breaks
    at = readme.find(f"`{command}`")
    assert at >= 0, f"README does not state `{command}`"
    assert re.search(r"took \d+ minutes \([\d,]+ tests, \d+ s wall", readme[at:at + 300]), "README does not state the measured time"
