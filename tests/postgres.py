"""A real PostgreSQL server for the tests: Debian's binaries (deploy/postgres-setup.sh installs them when missing), a
fresh cluster made by initdb in a temporary folder, the server a child process of the test run on a loopback port
with password (SCRAM) authentication. As root, the server runs as the ``postgres`` user (PostgreSQL refuses root).
The server gets SIGINT (fast shutdown) when the test process dies, and is stopped by :meth:`Postgres.stop`.
Nothing here skips: a server that cannot start fails the test loudly."""

from __future__ import annotations

import ctypes
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGINT)


def _bin() -> Path:
    setup = subprocess.run(["bash", str(REPO / "deploy" / "postgres-setup.sh")], capture_output=True, text=True, timeout=900)
    if setup.returncode != 0:
        pytest.fail(f"deploy/postgres-setup.sh could not provide PostgreSQL (exit {setup.returncode}): {setup.stderr.strip()[-2000:]}")
    return Path(setup.stdout.strip().splitlines()[-1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    """One server; :attr:`dsn` connects as its superuser ``mpdp`` (password auth over TCP)."""

    def __init__(self) -> None:
        self.bin = _bin()
        self.root = Path(tempfile.mkdtemp(prefix="mpdp-pg-"))
        self.password = secrets.token_hex(16)
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None
        self.user = "postgres" if os.geteuid() == 0 else None
        self.dsn = f"host=127.0.0.1 port={self.port} user=mpdp password={self.password} dbname=postgres connect_timeout=10"

    def _run(self, args: list[str]) -> None:
        done = subprocess.run(args, user=self.user, capture_output=True, text=True, timeout=300, cwd=self.root)
        if done.returncode != 0:
            pytest.fail(f"{Path(args[0]).name} failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")

    def start(self) -> "Postgres":
        os.chmod(self.root, 0o755)
        if self.user is not None:
            pw = pwd.getpwnam(self.user)
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        pwfile = self.root / "pw"
        pwfile.write_text(self.password + "\n")
        if self.user is not None:
            os.chown(pwfile, pwd.getpwnam(self.user).pw_uid, -1)
        data = self.root / "data"
        self._run([str(self.bin / "initdb"), "-D", str(data), "-U", "mpdp", f"--pwfile={pwfile}", "--auth-host=scram-sha-256", "--auth-local=scram-sha-256",
                   "--no-sync", "-E", "UTF8", "--locale=C"])
        pwfile.unlink()
        log = open(self.root / "server.log", "wb")
        self.proc = subprocess.Popen([str(self.bin / "postgres"), "-D", str(data), "-p", str(self.port), "-c", "listen_addresses=127.0.0.1",
                                      "-c", f"unix_socket_directories={self.root}", "-c", "fsync=off", "-c", "shared_buffers=16MB", "-c", "max_connections=50"],
                                     user=self.user, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent, cwd=self.root)
        self._ready()
        return self

    def _ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + 60
        while True:  # readiness: the server accepts a login (the test cannot proceed before)
            if self.proc is not None and self.proc.poll() is not None:
                pytest.fail(f"postgres exited ({self.proc.returncode}): {(self.root / 'server.log').read_text()[-2000:]}")
            try:
                psycopg.connect(self.dsn).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    pytest.fail(f"postgres did not accept connections within 60 s: {(self.root / 'server.log').read_text()[-2000:]}")
                time.sleep(0.1)

    def execute(self, *statements: str, rows: list[tuple] | None = None, insert: str | None = None) -> None:
        """Run SQL as the superuser (and ``insert`` with ``rows``, if given)."""
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for s in statements:
                conn.execute(s)  # type: ignore[arg-type]
            if insert is not None and rows:
                with conn.cursor() as cur:
                    cur.executemany(insert, rows)  # type: ignore[arg-type]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)
