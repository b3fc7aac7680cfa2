"""A throwaway PostgreSQL server on loopback, for the test suite and the examples (never a party's real database).

``initdb`` makes a fresh cluster in a temporary folder (superuser ``mpdp``, SCRAM password auth), and ``postgres``
runs as a child of this process (:func:`mpdp_services.common.processes.spawn`: the kernel kills it when this process
dies) on a free loopback port. As root the server runs as the ``postgres`` user (PostgreSQL refuses root). The server
binaries come from the host (Debian's ``postgresql`` package; deploy/postgres-setup.sh installs it and prints where).
"""

from __future__ import annotations

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

from mpdp.extras import require
from mpdp_services.common.processes import spawn


class PostgresError(RuntimeError):
    """The server could not be made or started; the message carries the tail of its log."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalPostgres:
    """One server; :attr:`dsn` connects as its superuser ``mpdp`` over TCP with a random password."""

    def __init__(self, bindir: str | os.PathLike[str]) -> None:
        self.bin = Path(bindir)
        self.root = Path(tempfile.mkdtemp(prefix="mpdp-pg-"))
        self.password = secrets.token_hex(16)
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None
        self.user = "postgres" if os.geteuid() == 0 else None
        self.dsn = f"host=127.0.0.1 port={self.port} user=mpdp password={self.password} dbname=postgres connect_timeout=10"

    def _log_tail(self) -> str:
        f = self.root / "server.log"
        return f.read_text(errors="replace")[-2000:] if f.exists() else ""

    def start(self, timeout: float = 60.0) -> "LocalPostgres":
        os.chmod(self.root, 0o755)
        owner = pwd.getpwnam(self.user) if self.user is not None else None
        if owner is not None:
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
        pwfile = self.root / "pw"
        pwfile.write_text(self.password + "\n")
        if owner is not None:
            os.chown(pwfile, owner.pw_uid, -1)
        data = self.root / "data"
        done = subprocess.run([str(self.bin / "initdb"), "-D", str(data), "-U", "mpdp", f"--pwfile={pwfile}", "--auth-host=scram-sha-256",
                               "--auth-local=scram-sha-256", "--no-sync", "-E", "UTF8", "--locale=C"],
                              user=self.user, capture_output=True, text=True, timeout=300, cwd=self.root)
        pwfile.unlink()
        if done.returncode != 0:
            raise PostgresError(f"initdb failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
        server = [str(self.bin / "postgres"), "-D", str(data), "-p", str(self.port), "-c", "listen_addresses=127.0.0.1",
                  "-c", f"unix_socket_directories={self.root}", "-c", "fsync=off", "-c", "shared_buffers=16MB", "-c", "max_connections=50"]
        if owner is not None:  # setpriv drops to the postgres user and re-arms the death signal the change of user clears
            server = ["setpriv", f"--reuid={owner.pw_uid}", f"--regid={owner.pw_gid}", "--clear-groups", "--pdeathsig=SIGKILL", "--", *server]
        with open(self.root / "server.log", "wb") as log:
            self.proc = spawn(server, stdout=log, stderr=subprocess.STDOUT, cwd=self.root)
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        require("psycopg", "a local PostgreSQL server's client")
        import psycopg

        deadline = time.monotonic() + timeout
        while True:  # readiness: the server accepts a login
            if self.proc is not None and self.proc.poll() is not None:
                raise PostgresError(f"postgres exited ({self.proc.returncode}): {self._log_tail()}")
            try:
                psycopg.connect(self.dsn).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise PostgresError(f"postgres did not accept connections within {timeout:.0f} s: {self._log_tail()}") from None
                time.sleep(0.1)

    def execute(self, *statements: str, rows: list[tuple] | None = None, insert: str | None = None) -> None:
        """Run SQL as the superuser (then ``insert`` once per row of ``rows``, if given)."""
        require("psycopg", "a local PostgreSQL server's client")
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for s in statements:
                conn.execute(s)
            if insert is not None and rows:
                with conn.cursor() as cur:
                    cur.executemany(insert, rows)

    def stop(self) -> None:
        """Fast shutdown (SIGINT), then the folder is removed."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "LocalPostgres":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
