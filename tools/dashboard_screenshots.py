"""Refresh the dashboard screenshots in docs/images/ from a real run of the browser test.

Runs tests/browser/test_dashboard.py (a local federation, one `mpdp train`, a DCA job, headless Chromium) with
MPDP_SCREENSHOTS pointing at docs/images/, so the images are exactly what the test saw:
dashboard-jobs.png (the job list), dashboard-job.png (a job's timeline and stage times), dashboard-dca.png (a
DCA job's node agreement) and party-ledger.png (a party's ledger page).

Usage: python tools/dashboard_screenshots.py   (needs chromium and chromium-driver: deploy/browser-setup.sh)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    out = REPO / "docs" / "images"
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, MPDP_SCREENSHOTS=str(out))
    rc = subprocess.call([sys.executable, "-m", "pytest", "-q", "tests/browser/test_dashboard.py"], cwd=REPO, env=env)
    if rc == 0:
        print(f"screenshots in {out}: " + ", ".join(sorted(p.name for p in out.glob("*.png"))))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
