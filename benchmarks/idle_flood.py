"""Idle-connection flood: does a legitimate job still complete while N idle TCP connections sit on the curator?

    python benchmarks/idle_flood.py [--connections 20000] [--deadline 180] [--reconnect] [--json FILE]

Starts a fresh :class:`~mpdp_services.launcher.federation.LocalFederation` (curator and 3 parties, test mode, 1024-bit keys,
small synthetic data), then, all on loopback:

1. baseline: a legitimate client (a fresh ``mpdp`` process, so a fresh TCP connection and TLS handshake) asks
   the curator's health service, then runs a small Pathak job (``mpdp train``), each under ``--deadline``;
2. flood: holder processes (started with :func:`mpdp_services.common.processes.spawn`, so they die with this one)
   open ``--connections`` TCP connections to the curator's port and send nothing (no TLS handshake), each
   holder bounded by its descriptor limit (``--reconnect``: a connection the curator closes is reopened at once);
3. under flood: the same health check and job again, while every connection is held.

Printed: one row per phase (connections held, curator descriptors, health and job outcome and seconds); the
JSON holds the same plus the limits. Loopback only: the target is always 127.0.0.1.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import platform
import selectors
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mpdp_services.common.processes import raise_fd_limit, spawn  # noqa: E402
from mpdp_services.launcher.federation import LocalFederation  # noqa: E402

PARTIES = ["party-1", "party-2", "party-3"]
HEADROOM = 128  # descriptors a holder keeps for itself (interpreter, pipes)
LOOPBACK = "127.0.0.1"


# -- holding connections -------------------------------------------------------------------------------
@dataclass
class Held:
    requested: int
    established: int = 0
    pending: int = 0  # still connecting at the deadline (the server's backlog is full)
    failed: int = 0  # refused, reset, or no descriptor left
    seconds: float = 0.0


def open_idle(port: int, n: int, timeout: float) -> tuple[list[socket.socket], Held]:
    """Open up to ``n`` TCP connections to 127.0.0.1:``port`` and send nothing; wait up to ``timeout`` for them."""
    held = Held(n)
    t0 = time.monotonic()
    socks: list[socket.socket] = []
    sel = selectors.DefaultSelector()
    connecting = 0
    for _ in range(n):
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        except OSError:  # EMFILE/ENFILE: this process is out of descriptors
            held.failed += 1
            continue
        s.setblocking(False)
        err = s.connect_ex((LOOPBACK, port))
        socks.append(s)
        if err == 0:
            held.established += 1
        elif err in (errno.EINPROGRESS, errno.EAGAIN):
            sel.register(s, selectors.EVENT_WRITE)
            connecting += 1
        else:
            held.failed += 1
    deadline = time.monotonic() + timeout
    while connecting and (left := deadline - time.monotonic()) > 0:
        for key, _ in sel.select(left):
            sel.unregister(key.fileobj)
            connecting -= 1
            if key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:  # type: ignore[union-attr]
                held.established += 1
            else:
                held.failed += 1
    held.pending = connecting
    sel.close()
    held.seconds = time.monotonic() - t0
    return socks, held


def hold_main(port: int, n: int, timeout: float, reconnect: bool) -> None:
    """A holder process: open the connections, report them on stdout, keep them until stdin closes.

    With ``reconnect``, a connection the server closes (say, at its handshake timeout) is opened again at once,
    as a persistent attacker would; ``DONE`` then reports how many were reopened.
    """
    raise_fd_limit()
    socks, held = open_idle(port, n, timeout)
    print("HELD " + json.dumps(asdict(held)), flush=True)
    reopened = 0
    sel = selectors.DefaultSelector()
    sel.register(sys.stdin, selectors.EVENT_READ, None)
    if reconnect:
        for s in socks:
            sel.register(s, selectors.EVENT_READ, "open")
    running = True
    while running:  # until the parent closes our stdin (or dies: then the kernel kills us)
        for key, _ in sel.select():
            if key.data is None:
                running = False
                break
            s = key.fileobj
            sel.unregister(s)
            if key.data == "open":  # readable while idle: the server closed it (EOF or reset)
                s.close()  # type: ignore[union-attr]
                socks.remove(s)  # type: ignore[arg-type]
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setblocking(False)
                s.connect_ex((LOOPBACK, port))
                socks.append(s)
                sel.register(s, selectors.EVENT_WRITE, "connecting")
                reopened += 1
            else:  # the reconnect finished (or failed: then it is readable at once and reopened again)
                sel.register(s, selectors.EVENT_READ, "open")
    print("DONE " + json.dumps({"reopened": reopened}), flush=True)
    for s in socks:
        s.close()


class Flood:
    """Holder processes together keeping ``n`` idle connections to a loopback port."""

    def __init__(self, port: int, n: int, connect_timeout: float = 60.0, reconnect: bool = False) -> None:
        per = max(1, raise_fd_limit() - HEADROOM)
        self.procs: list[subprocess.Popen] = []
        left = n
        while left > 0:
            k = min(per, left)
            self.procs.append(spawn([sys.executable, __file__, "--hold", str(k), "--port", str(port), "--connect-timeout", str(connect_timeout), *(["--reconnect"] if reconnect else [])],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE))
            left -= k
        self.held = Held(n)
        for p in self.procs:
            line = p.stdout.readline().decode()  # type: ignore[union-attr]
            if not line.startswith("HELD "):
                raise RuntimeError(f"a holder process failed (exit {p.wait()})")
            h = Held(**json.loads(line[5:]))
            self.held.established += h.established
            self.held.pending += h.pending
            self.held.failed += h.failed
            self.held.seconds = max(self.held.seconds, h.seconds)

    def close(self) -> int:
        """Release every connection; returns how many the holders had to reopen (``reconnect``)."""
        for p in self.procs:
            p.stdin.close()  # type: ignore[union-attr]
        reopened = 0
        for p in self.procs:
            line = p.stdout.readline().decode()  # type: ignore[union-attr]
            if line.startswith("DONE "):
                reopened += json.loads(line[5:])["reopened"]
            p.wait(60)
            p.stdout.close()  # type: ignore[union-attr]
        return reopened


# -- the legitimate client -----------------------------------------------------------------------------
@dataclass
class Outcome:
    ok: bool
    seconds: float
    detail: str


def run_client(args: list[str], deadline: float) -> Outcome:
    """One fresh ``mpdp`` process (fresh TCP connection and TLS handshake) with a deadline."""
    t0 = time.monotonic()
    p = spawn([sys.executable, "-m", "mpdp_services.cli.main", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
              cwd=Path(__file__).resolve().parents[1])
    try:
        out, err = p.communicate(timeout=deadline)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        return Outcome(False, time.monotonic() - t0, f"no answer within the {deadline:g} s deadline")
    lines = (err or out).decode(errors="replace").strip().splitlines()
    return Outcome(p.returncode == 0, time.monotonic() - t0, "ok" if p.returncode == 0 else (lines[-1][:200] if lines else f"exit {p.returncode}"))


def health(fed: LocalFederation, deadline: float) -> Outcome:
    return run_client(["health", "--address", f"{LOOPBACK}:{fed.procs['curator'].port}", "--tls-dir", str(fed.workdir / "operator"),
                       "--server-name", "curator", "--timeout", str(deadline)], deadline + 10)


def job(fed: LocalFederation, deadline: float) -> Outcome:
    return run_client(["train", "--endpoints", str(fed.workdir), "--dataset", "bench", "--parties", ",".join(PARTIES),
                       "--epsilon", "1", "--lam", "0.01", "--json"], deadline)


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def fd_limit(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    return -1


def start_federation(root: Path) -> LocalFederation:
    g = np.random.default_rng(0)
    ds = {}
    for i, name in enumerate(PARTIES):
        X = g.normal(size=(60 + 7 * i, 4))
        y = np.where(X @ np.array([1.0, -0.5, 0.2, 0.0]) > 0, 1.0, -1.0)
        p = root / "data" / f"{name}.csv"
        p.parent.mkdir(parents=True, exist_ok=True)
        np.savetxt(p, np.column_stack([X, y]), delimiter=",", fmt="%.17g")
        ds[name] = {"bench": {"path": str(p), "format": "csv"}}
    fed = LocalFederation(root / "fed", PARTIES, ds, test_mode=True, paillier_bits=1024, dgk_bits=1024, budget_epsilon=1e9)
    fed.start()
    return fed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connections", type=int, default=20000, help="idle TCP connections to hold on the curator")
    ap.add_argument("--deadline", type=float, default=180.0, help="seconds the legitimate health check and job may take")
    ap.add_argument("--connect-timeout", type=float, default=60.0, help="seconds to wait for the flood's connections to be established")
    ap.add_argument("--reconnect", action="store_true", help="reopen at once every connection the curator closes (a persistent attacker)")
    ap.add_argument("--json", dest="json_out", help="write the results to this JSON file")
    ap.add_argument("--hold", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.hold is not None:
        hold_main(args.port, args.hold, args.connect_timeout, args.reconnect)
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="mpdp-flood-") as tmp:
        fed = start_federation(Path(tmp))
        try:
            cur = fed.procs["curator"].popen.pid
            fed.wait_precomputed()
            rows.append({"phase": "baseline", "held": asdict(Held(0)), "curator_fds": descriptors(cur),
                         "health": asdict(health(fed, args.deadline)), "job": asdict(job(fed, args.deadline))})
            print(f"flood: opening {args.connections} idle connections to the curator", file=sys.stderr, flush=True)
            flood = Flood(fed.procs["curator"].port, args.connections, args.connect_timeout, args.reconnect)
            row: dict = {"phase": "under flood", "held": asdict(flood.held)}
            try:
                row["curator_fds"] = descriptors(cur)
                row["health"] = asdict(health(fed, args.deadline))
                row["job"] = asdict(job(fed, args.deadline))
                row["curator_fds_after"] = descriptors(cur)  # fewer: the curator dropped idle connections meanwhile
                rows.append(row)
            finally:
                row["reopened"] = flood.close()
            alive = all(p.popen.poll() is None for p in fed.procs.values())
            limit = fd_limit(cur)
        finally:
            fed.stop()
    print(f"{'phase':<12} {'held':>7} {'pending':>7} {'failed':>7} {'cur.fds':>7} {'health':>8} {'s':>6} {'job':>8} {'s':>7}  detail")
    for r in rows:
        h, hc, jb = r["held"], r["health"], r["job"]
        detail = "; ".join(d for d in (hc["detail"], jb["detail"]) if d != "ok") or "ok"
        print(f"{r['phase']:<12} {h['established']:>7} {h['pending']:>7} {h['failed']:>7} {r['curator_fds']:>7} {'ok' if hc['ok'] else 'FAILED':>8} {hc['seconds']:>6.1f}"
              f" {'ok' if jb['ok'] else 'FAILED':>8} {jb['seconds']:>7.1f}  {detail}")
    print(f"curator descriptor limit {limit}; its descriptors when the job ended under flood {rows[-1]['curator_fds_after']};"
          f" connections the curator closed and the flood reopened {rows[-1]['reopened'] if args.reconnect else '(no --reconnect)'}; services alive after the flood: {alive}")
    if args.json_out:
        out = {"benchmark": "idle_flood", "connections_requested": args.connections, "deadline_seconds": args.deadline, "curator_fd_limit": limit,
               "services_alive_after": alive, "machine": {"cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}, "rows": rows}
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
