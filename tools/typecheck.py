"""Run mypy on mpdp/ and services/ under their import names (`make lint`, tests/core/test_lint.py).

services/ installs as ``mpdp_services`` (setup.py's package_dir); mypy cannot follow setuptools' editable-install
finder, so this runs it in a scratch folder where ``mpdp`` and ``mpdp_services`` are symlinks to the two trees.
Paths in its report therefore read ``mpdp_services/...`` for ``services/...``. Configuration: pyproject.toml.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="mpdp-typecheck-") as tmp:
        os.symlink(ROOT / "mpdp", Path(tmp) / "mpdp")
        os.symlink(ROOT / "services", Path(tmp) / "mpdp_services")
        cache = ROOT / ".mypy_cache"
        cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(cache), *sys.argv[1:]]
        return subprocess.run(cmd, cwd=tmp).returncode


if __name__ == "__main__":
    raise SystemExit(main())
