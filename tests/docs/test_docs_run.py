"""The docs run as written: every command of README's "Using it", every code block of docs/api.md and the examples,
in a user's layout, and the numbers docs/schema.md promises come out of the command it names.

The layout is a fresh checkout's: the repository's tracked files copied to a temporary folder, its ``.venv`` (the one
`make setup` made) beside them, ``../shared/data`` beside the checkout, and a PATH and environment with no venv, no
PYTHONPATH and no MPDP_* variable, so a command that only works from the developer's shell fails here. README's
blocks run as one bash script (``set -euo pipefail``: any failing command fails the test); docs/api.md's blocks run
in order, the Python ones in one interpreter (later blocks use earlier names) and the shell ones in bash.
A missing dataset fails, never skips."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO, shared_file

pytestmark = [pytest.mark.slow, pytest.mark.integration]

FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.M | re.S)

# Runs docs/api.md's blocks in order: Python in one namespace, shell in bash (each in its own session, so whatever
# it leaves running in the background is stopped at the end).
DRIVER = textwrap.dedent('''
    import json, os, signal, subprocess, sys
    blocks = json.load(open(sys.argv[1]))
    ns = {"__name__": "__main__"}
    sessions = []
    try:
        for i, (lang, code) in enumerate(blocks):
            print(f"--- block {i + 1}/{len(blocks)} ({lang})", flush=True)
            if lang == "sh":
                p = subprocess.Popen(["bash", "-euo", "pipefail", "-c", code], start_new_session=True)
                sessions.append(p.pid)
                if p.wait() != 0:
                    sys.exit(f"block {i + 1} ({lang}) exited {p.returncode}:\\n{code}")
            else:
                exec(compile(code, f"<docs block {i + 1}>", "exec"), ns)
            sys.stdout.flush()
    finally:
        for pgid in sessions:
            try:
                os.killpg(pgid, signal.SIGTERM)
            except ProcessLookupError:
                pass
''')


def blocks(text: str, langs: tuple[str, ...] = ("sh", "python")) -> list[tuple[str, str]]:
    return [(lang, body) for lang, body in FENCE.findall(text) if lang in langs]


def section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]


def test_the_harness_finds_every_block():
    readme = blocks(section((REPO / "README.md").read_text(), "Using it"))
    assert len(readme) >= 5 and {lang for lang, _ in readme} == {"sh"}
    api = blocks((REPO / "docs" / "api.md").read_text())
    assert {lang for lang, _ in api} == {"sh", "python"} and len(api) >= 8
    assert not blocks((REPO / "docs" / "api.md").read_text(), ("bash", "shell", "py", "python3", "console")), "use ```sh or ```python"


@pytest.fixture()
def user(tmp_path):
    """A fresh checkout's layout: tracked files, the venv beside them, ../shared/data; and a user's environment."""
    shared_file("adult", "adult.data.gz"), shared_file("adult", "adult.test.gz"), shared_file("kddcup99")  # fail, never skip
    repo = tmp_path / "mpdp"
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = REPO / rel
        if src.is_file():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / rel)
    venv = REPO / ".venv"
    assert (venv / "bin" / "mpdp").exists(), "run `make setup` first"
    (repo / ".venv").symlink_to(venv)
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "data").symlink_to((REPO.parent / "shared" / "data").resolve())
    drop = {str(venv / "bin"), str(Path(sys.executable).parent)}
    env = {k: v for k, v in os.environ.items() if not k.startswith("MPDP_") and k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p not in drop)
    env["COLUMNS"] = "200"
    return repo, env


def _run(cmd: list[str], repo: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
    """Run in its own session with the output in a file (a federation left in the background keeps a pipe open);
    afterwards stop whatever it left running."""
    log = repo / f"run-{len(list(repo.glob('run-*.log')))}.log"
    with open(log, "w") as out:
        p = subprocess.Popen(cmd, cwd=repo, env=env, stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{' '.join(cmd)} did not finish within {timeout:.0f} s:\n{log.read_text()[-6000:]}") from None
        finally:
            try:
                os.killpg(p.pid, signal.SIGTERM)  # anything a block left in the background
            except ProcessLookupError:
                pass
            p.wait()
    return subprocess.CompletedProcess(cmd, p.returncode, log.read_text(), "")


def test_readme_using_it_runs_as_written_twice_in_the_same_folder(user):
    """A user runs "Using it" again where they ran it before: what the first pass left behind (runs/, a stopped
    federation's folder) must not break nor fool the second (it waits on `mpdp health`, not on a file)."""
    repo, env = user
    script = "\n".join(body for _, body in blocks(section((repo / "README.md").read_text(), "Using it")))
    (repo / "using-it.sh").write_text(script)
    for attempt in ("first", "second"):
        p = _run(["bash", "-euo", "pipefail", "using-it.sh"], repo, env, timeout=1200)  # a deadline per pass, not a performance bound
        assert p.returncode == 0, (attempt, p.stdout[-8000:])
        adult = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{") and '"schema_sha256"' in line]
        assert len(adult) == 1 and adult[0]["test_rows"] == 16281 and adult[0]["accuracy"] > 0.78, (attempt, p.stdout[-3000:])
        assert (repo / "runs" / "dpgd.npz").stat().st_size > 0, attempt
        assert not (repo / "runs" / "federation" / "endpoints.json").exists(), f"{attempt} pass: a stopped federation left its endpoints file"


def test_api_md_runs_as_written(user):
    repo, env = user
    (repo / "driver.py").write_text(DRIVER)
    (repo / "blocks.json").write_text(json.dumps(blocks((repo / "docs" / "api.md").read_text())))
    p = _run([str(repo / ".venv" / "bin" / "python"), "driver.py", "blocks.json"], repo, env, timeout=600)
    assert p.returncode == 0, p.stdout[-8000:]
    assert "(1, 1e-06)-DP" in p.stdout


def test_the_adult_accuracy_docs_schema_md_promises_is_what_its_command_prints(user):
    """docs/schema.md quotes the mean and the 5th and 1st percentiles of `examples/adult/accuracy.py --runs 1000`."""
    repo, env = user
    text = " ".join((repo / "docs" / "schema.md").read_text().split())
    assert "python examples/adult/accuracy.py --runs 1000" in text
    m = re.search(r"mean accuracy (0\.\d+), 95 % of runs at least (0\.\d+) and 99 % at least (0\.\d+)", text)
    assert m, "the sentence quoting the numbers changed: update this test with it"
    mean, p05, p01 = map(float, m.groups())
    p = _run(["bash", "-c", "python examples/adult/accuracy.py --runs 1000"], repo, dict(env, PATH=f"{repo / '.venv' / 'bin'}{os.pathsep}{env['PATH']}"), timeout=300)
    assert p.returncode == 0, p.stdout[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])["accuracy"]
    # 1,000 draws: the mean's standard error is ≈ 0.0002 and the 5 % quantile's ≈ 0.0008 (the accuracy's sd ≈ 0.006)
    assert abs(got["mean"] - mean) <= 0.0015 and abs(got["p05"] - p05) <= 0.003 and abs(got["p01"] - p01) <= 0.005, (got, m.groups())


def test_a_readme_command_that_drifted_fails_the_harness(user):
    """The same script runner, README's first lines and one command whose option no longer exists: a failure."""
    repo, env = user
    first = blocks(section((repo / "README.md").read_text(), "Using it"))[0][1].splitlines()[:2]
    (repo / "drift.sh").write_text("\n".join([*first, "mpdp schema check --no-such-option runs/bc-schema.yaml", "echo unreachable"]))
    p = _run(["bash", "-euo", "pipefail", "drift.sh"], repo, env, timeout=120)
    assert p.returncode != 0 and "unreachable" not in p.stdout, p.stdout[-2000:]
