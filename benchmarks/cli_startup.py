"""How long `mpdp --help` and a subcommand's --help take (wall time, median of N runs, fresh processes).

    python benchmarks/cli_startup.py [--runs 9] [--json FILE]

Prints a table and writes JSON. The commands run through this interpreter's `mpdp` entry point, so the timing
includes interpreter start-up (measured alone as `python -c pass` for reference).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
CASES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "mpdp --help": [str(BIN / "mpdp"), "--help"],
    "mpdp experiment --help": [str(BIN / "mpdp"), "experiment", "--help"],
    "mpdp train --help": [str(BIN / "mpdp"), "train", "--help"],
    "mpdp ledger show --help": [str(BIN / "mpdp"), "ledger", "show", "--help"],
}


def measure(cmd: list[str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = {}
    for name, cmd in CASES.items():
        times = measure(cmd, args.runs)
        rows[name] = {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times), "runs": args.runs}
    print(f"{'command':28} {'median s':>9} {'min s':>7} {'max s':>7}")
    for name, r in rows.items():
        print(f"{name:28} {r['median_s']:9.3f} {r['min_s']:7.3f} {r['max_s']:7.3f}")
    if args.json:
        args.json.write_text(json.dumps({"load_average": os.getloadavg(), "results": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
