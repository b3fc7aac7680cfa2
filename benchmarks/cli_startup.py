"""How long `mpdp` commands take to start: every command's --help, and the commands that talk to one service
against a live federation (wall time, median of N fresh processes, TLS on).

    python benchmarks/cli_startup.py [--runs 5] [--json benchmarks/results/cli_startup.json] [--no-live]

Prints a table and writes JSON. Commands run through this interpreter's `mpdp` entry point, so each time includes
interpreter start-up (measured alone as `python -c pass`). The live part starts a local federation (curator and two
DCA compute nodes, test mode, mutual TLS), releases one small DCA job, then times `dca create`, `dca release`,
`jobs ls`, `jobs show` and `health` against it. Nothing here is asserted: the target (< 0.5 s for --help and for
a command that talks to one service) is read off the table in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

BIN = Path(sys.executable).parent
MPDP = str(BIN / "mpdp")
TARGET_S = 0.5


def help_cases() -> dict[str, list[str]]:
    """`mpdp --help`, each group's and each command's --help (the tree walked in this process)."""
    from mpdp_services.cli.main import cli

    cases = {"python -c pass": [sys.executable, "-c", "pass"]}

    def walk(cmd: click.Command, path: list[str]) -> None:
        cases[" ".join(["mpdp", *path, "--help"])] = [MPDP, *path, "--help"]
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                if sub is not None:
                    walk(sub, [*path, name])

    walk(cli, [])
    return cases


def measure(cmd: list[str], runs: int, env: dict[str, str] | None = None) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300, env=env)
        out.append(time.perf_counter() - t0)
    return out


def live_cases(workdir: Path) -> tuple[dict[str, list[str]], dict[str, str]]:
    """A released DCA job on a fresh local federation, and the one-service commands to time against it."""
    import asyncio

    import numpy as np

    from mpdp_services.common.endpoints import Endpoints
    from mpdp_services.dca_client.client import submit_cohort

    ep = Endpoints.load(workdir)
    create = [MPDP, "dca", "create", "-d", "4", "-n", "3", "--epsilon", "1", "--delta", "1e-5", "--sensitivity", "1", "--nodes", "node-1,node-2", "--json"]
    job = json.loads(subprocess.run(create, check=True, capture_output=True, text=True, env=_env(workdir)).stdout)["job_id"]
    asyncio.run(submit_cohort(ep, ep.tls, job, [f"c{i}" for i in range(3)], np.full((3, 4), 0.5)))
    subprocess.run([MPDP, "dca", "watch", "--job", job, "--json"], check=True, capture_output=True, env=_env(workdir))
    cases = {
        "mpdp dca create": create,
        "mpdp dca release": [MPDP, "dca", "release", "--job", job],
        "mpdp jobs ls --json": [MPDP, "jobs", "ls", "--json"],
        "mpdp jobs show": [MPDP, "jobs", "show", job],
        "mpdp health": [MPDP, "health", "--address", ep.curator_address, "--tls-dir", str(workdir / "operator")],
    }
    return cases, _env(workdir)


def _env(workdir: Path) -> dict[str, str]:
    return {**os.environ, "MPDP_ENDPOINTS": str(workdir)}


def row(times: list[float], runs: int) -> dict[str, float | int]:
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times), "runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "cli_startup.json")
    ap.add_argument("--no-live", action="store_true", help="only the --help timings (no federation)")
    args = ap.parse_args()
    results: dict[str, dict[str, dict[str, float | int]]] = {"help": {}, "live": {}}
    for name, cmd in help_cases().items():
        results["help"][name] = row(measure(cmd, args.runs), args.runs)
    if not args.no_live:
        from mpdp_services.launcher.federation import LocalFederation

        with tempfile.TemporaryDirectory(prefix="mpdp-cli-startup-") as tmp:
            fed = LocalFederation(Path(tmp) / "fed", [], {}, test_mode=True, paillier_bits=1024, dgk_bits=1024, compute_nodes=["node-1", "node-2"])
            fed.start()
            try:
                cases, env = live_cases(fed.workdir)
                for name, cmd in cases.items():
                    results["live"][name] = row(measure(cmd, args.runs, env), args.runs)
            finally:
                fed.stop()
    print(f"{'command':44} {'median s':>9} {'min s':>7} {'max s':>7}  < {TARGET_S} s")
    for part in ("help", "live"):
        for name, r in results[part].items():
            ok = "yes" if r["median_s"] < TARGET_S else "NO"
            print(f"{name:44} {r['median_s']:9.3f} {r['min_s']:7.3f} {r['max_s']:7.3f}  {ok}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"load_average": os.getloadavg(), "cpus": os.cpu_count(), "python": sys.version.split()[0], **results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
