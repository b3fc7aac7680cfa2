"""How long `mpdp` commands take to start: every command's --help, real invocations of the commands that need no
federation, and the commands that talk to one service against a live federation (wall time, median of N fresh
processes, TLS on).

    python benchmarks/cli_startup.py [--runs 5] [--json benchmarks/results/cli_startup.json] [--no-live]

Prints a table and writes JSON. Commands run through this interpreter's `mpdp` entry point, so each time includes
interpreter start-up (measured alone as `python -c pass`). The offline part builds, in a temporary folder, a party
site whose ledger holds 50 entries of every accounting kind (Gaussian, pure ε, discrete Gaussian, (ε, δ), none;
written by the ledger itself, so the file stores its composition), the same ledger without that stored record
(an old file: `ledger show` then runs the accountant), the demo data's CSV and a schema, a provisioned federation
(deploy/federation.yaml) and a site's CSR, and a profiles file; each command's every run leaves the same state.
Commands that start services or run experiments (federation up, demo, serve, experiment, provision demo-data)
are not start-up and are not timed here. The live part starts a local federation (curator and two
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


def measure(cmd: list[str], runs: int, env: dict[str, str] | None = None, status: int = 0) -> list[float]:
    """Wall times of ``runs`` fresh processes; each must exit with ``status``."""
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300, env=env)
        out.append(time.perf_counter() - t0)
        if r.returncode != status:
            raise SystemExit(f"{' '.join(cmd[1:])} exited {r.returncode}, not {status}: {r.stderr.decode()[-500:]}")
    return out


ENTRY_KINDS = ("dca", "pathak2010", "query", "local-release/lmgc", "dpgd", "secure-sum")


def ledger_site(root: Path, entries: int = 50) -> Path:
    """A party site (party.yaml, budget ε = 200, δ = 1e-5) whose ledger holds ``entries`` entries of every kind."""
    from mpdp import accounting as acc
    from mpdp.ledger import Ledger

    site = root / "sites" / "party-1"
    site.mkdir(parents=True)
    (site / "party.yaml").write_text("name: party-1\ntls: {cert: site.crt, key: site.key, ca: ca.crt}\ncurator: {address: 'x:1', name: curator}\n"
                                     "ledger: state/ledger.json\nbudget_epsilon: 200.0\nbudget_delta: 1.0e-5\n")
    led = Ledger(site / "state" / "ledger.json", 200.0, 1e-5)
    records = {
        "dca": (1.0, 1e-7, acc.gaussian(3.0)),
        "pathak2010": (0.5, 0.0, acc.pure_epsilon("laplace")),
        "query": (0.3, 1e-8, acc.discrete_gaussian(0.01, tv=1e-12)),
        "local-release/lmgc": (0.4, 1e-8, acc.eps_delta()),
        "dpgd": (1.0, 1e-7, acc.gaussian([5.0, 6.0, 7.0])),
        "secure-sum": (0.0, 0.0, acc.no_release()),
    }
    for i in range(entries):
        protocol = ENTRY_KINDS[i % len(ENTRY_KINDS)]
        eps, delta, record = records[protocol]
        led.spend({"protocol": protocol, "job_id": f"{protocol}-{i}", "epsilon": eps, "delta": delta, "accounting": record})
        if i % 4 == 0:
            led.mark(protocol, f"{protocol}-{i}", "released")
    return site


def offline_cases(root: Path) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Real invocations of the commands that need no federation, and their fixtures under ``root``."""
    repo = Path(__file__).resolve().parents[1]
    site = ledger_site(root)
    old = json.loads((site / "state" / "ledger.json").read_text())
    del old["composed"]  # a ledger written before the file stored its composition
    (root / "old-ledger.json").write_text(json.dumps(old))
    rows = ["a,b,label"] + [f"{i % 7 / 7:.3f},{i % 5},{i % 2}" for i in range(300)]
    (root / "data.csv").write_text("\n".join(rows) + "\n")
    env = {**os.environ, "HOME": str(root / "home"), "XDG_CONFIG_HOME": str(root / "home" / ".config")}
    env.pop("MPDP_PROFILE", None)
    env.pop("MPDP_ENDPOINTS", None)
    prep = [[MPDP, "schema", "draft", str(root / "data.csv"), "--output", str(root / "schema.yaml")],
            [MPDP, "provision", "sites", str(repo / "deploy" / "federation.yaml"), "--out", str(root / "prov")],
            [MPDP, "provision", "csr", "--role", "party", "--site", "party-9", "--out", str(root / "csr")]]
    for cmd in prep:
        subprocess.run(cmd, check=True, capture_output=True, env=env, timeout=300)
    subprocess.run([MPDP, "profile", "add", "demo", str(root / "prov" / "operator")], check=True, capture_output=True, env=env, timeout=300)
    node = root / "prov" / "compute-1"
    cases = {
        "mpdp --version": [MPDP, "--version"],
        "mpdp ledger show --site (50 entries)": [MPDP, "ledger", "show", "--site", str(site.parent)],
        "mpdp ledger show --site --json": [MPDP, "ledger", "show", "--site", str(site.parent), "--json"],
        "mpdp ledger show --ledger (stored composition)": [MPDP, "ledger", "show", "--ledger", str(site / "state" / "ledger.json"),
                                                           "--budget-epsilon", "200", "--budget-delta", "1e-5"],
        "mpdp ledger show --ledger (old file: accountant)": [MPDP, "ledger", "show", "--ledger", str(root / "old-ledger.json"),
                                                             "--budget-epsilon", "200", "--budget-delta", "1e-5"],
        "mpdp schema draft": [MPDP, "schema", "draft", str(root / "data.csv"), "--output", str(root / "schema2.yaml")],
        "mpdp schema check": [MPDP, "schema", "check", str(root / "schema.yaml"), str(root / "data.csv")],
        "mpdp schema check --json": [MPDP, "schema", "check", str(root / "schema.yaml"), str(root / "data.csv"), "--json"],
        "mpdp provision sites --force": [MPDP, "provision", "sites", str(repo / "deploy" / "federation.yaml"), "--out", str(root / "prov"), "--force"],
        "mpdp provision check": [MPDP, "provision", "check", str(node)],
        "mpdp provision show": [MPDP, "provision", "show", str(node / "site.crt")],
        "mpdp provision csr --force": [MPDP, "provision", "csr", "--role", "party", "--site", "party-9", "--out", str(root / "csr"), "--force"],
        "mpdp provision sign": [MPDP, "provision", "sign", "--ca", str(root / "prov-ca"), "--csr", str(root / "csr" / "site.csr"), "--hosts", "localhost",
                                "--out", str(root / "csr")],
        "mpdp profile add": [MPDP, "profile", "add", "demo", str(root / "prov" / "operator")],
        "mpdp profile ls": [MPDP, "profile", "ls"],
        "mpdp profile ls --json": [MPDP, "profile", "ls", "--json"],
        "mpdp profile default": [MPDP, "profile", "default", "demo"],
        "mpdp ledger show (usage error, exit 2)": [MPDP, "ledger", "show"],
        "mpdp regress (usage error, exit 2)": [MPDP, "regress", "--no-such-option"],
    }
    return cases, env


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
    ap.add_argument("--no-live", action="store_true", help="no federation: only the --help and offline timings")
    ap.add_argument("--only-offline", action="store_true", help="only the offline timings (no --help rows, no federation)")
    args = ap.parse_args()
    results: dict[str, dict[str, dict[str, float | int]]] = {"help": {}, "offline": {}, "live": {}}
    for name, cmd in ({} if args.only_offline else help_cases()).items():
        results["help"][name] = row(measure(cmd, args.runs), args.runs)
    with tempfile.TemporaryDirectory(prefix="mpdp-cli-offline-") as tmp:
        cases, env = offline_cases(Path(tmp))
        for name, cmd in cases.items():
            results["offline"][name] = row(measure(cmd, args.runs, env, 2 if "usage error" in name else 0), args.runs)
    if not (args.no_live or args.only_offline):
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
    print(f"{'command':50} {'median s':>9} {'min s':>7} {'max s':>7}  < {TARGET_S} s")
    for part in ("help", "offline", "live"):
        for name, r in results[part].items():
            ok = "yes" if r["median_s"] < TARGET_S else "NO"
            print(f"{name:50} {r['median_s']:9.3f} {r['min_s']:7.3f} {r['max_s']:7.3f}  {ok}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"load_average": os.getloadavg(), "cpus": os.cpu_count(), "python": sys.version.split()[0], **results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
