"""Every third-party module that mpdp/ and services/ import is declared in pyproject.toml (core or an extra),
and no core dependency is pinned to one exact version (mpdp must install beside other tools)."""

from __future__ import annotations

import pytest
import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OURS = {"mpdp", "mpdp_services", "tests", "tools"}


def _imports() -> set[str]:
    found: set[str] = set()
    for root in ("mpdp", "services"):
        for f in (REPO / root).rglob("*.py"):
            for node in ast.walk(ast.parse(f.read_text(), str(f))):
                if isinstance(node, ast.Import):
                    found |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    found.add(node.module.split(".")[0])
    return {m for m in found if m not in OURS and m not in sys.stdlib_module_names and m != "__future__"}


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[ ;]", req, maxsplit=1)[0].lower().replace("_", "-")


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_every_import_is_declared():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {_name(r) for r in project["dependencies"]} | {_name(r) for reqs in project["optional-dependencies"].values() for r in reqs}
    dists = packages_distributions()
    missing = {}
    for module in sorted(_imports()):
        names = {d.lower().replace("_", "-") for d in dists.get(module, [])}
        assert names, f"{module} is imported but no installed distribution provides it"
        if not names & declared:
            missing[module] = sorted(names)
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def test_no_exact_pins():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"]) + [r for reqs in project["optional-dependencies"].values() for r in reqs]
    assert not [r for r in reqs if "==" in r], "use version ranges, not exact pins"
