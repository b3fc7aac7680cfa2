"""The transition tables in docs/protocols/ are the ones the machines run on (tools/render_tables.py).

Invariants checked here:
* every docs page listed by the tool holds a table for each of its machines, and each is byte-for-byte what
  mpdp.protocol.render_table generates from the code now;
* a stale or missing table is reported (the check compares generated text, so it can fail);
* every table is well formed (check_table) and its rendering has one line per row.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from mpdp.protocol import Machine, check_table, render_table

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
try:
    import render_tables
finally:
    sys.path.pop(0)

MACHINES = [name for names in render_tables.PAGES.values() for name in names]


def test_docs_tables_match_the_code():
    assert render_tables.problems() == []


@pytest.mark.parametrize("name", MACHINES)
def test_each_table_is_well_formed_and_fully_rendered(name):
    machine = render_tables.machine_class(name)
    assert issubclass(machine, Machine)
    check_table(machine)
    text = render_table(machine)
    body = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| in state")]
    assert len(body) == len(machine.TABLE)
    for r in machine.TABLE:
        assert any(r.event in line and all(s in line for s in r.senders) for line in body), r


def test_a_stale_or_missing_table_is_reported(tmp_path):
    docs = tmp_path / "protocols"
    shutil.copytree(REPO / "docs" / "protocols", docs)
    assert render_tables.problems(docs) == []
    page = docs / "dca.md"
    good = page.read_text()
    page.write_text(good.replace("| AWAIT_SHARES | `ShareBatch` | router | AWAIT_SHARES |\n", "", 1))  # a row dropped
    assert render_tables.problems(docs) == ["dca.md: a table is out of date (run `python tools/render_tables.py`)"]
    page.write_text(good.replace("| AWAIT_SHARES | `ShareBatch` | router |", "| AWAIT_SHARES | `ShareBatch` | client |", 1))
    assert render_tables.problems(docs)  # a sender changed
    page.write_text(good.replace("<!-- table: mpdp.dca.aggregator.AggregatorMachine -->", "", 1).replace(
        render_table(render_tables.machine_class("mpdp.dca.aggregator.AggregatorMachine")), "", 1))
    assert "dca.md: no table for mpdp.dca.aggregator.AggregatorMachine" in render_tables.problems(docs)
    page.write_text(good)
    assert render_tables.problems(docs) == []


def test_every_role_machine_in_mpdp_has_its_table_in_the_docs():
    """A role machine anywhere in mpdp/ (a Machine subclass with its own TABLE) appears on a docs page."""
    import importlib
    import pkgutil

    import mpdp

    for info in pkgutil.walk_packages(mpdp.__path__, "mpdp."):
        if not info.name.startswith(("mpdp.messages", "mpdp.experiments")):
            importlib.import_module(info.name)
    found, stack = set(), [Machine]
    while stack:
        for sub in stack.pop().__subclasses__():
            stack.append(sub)
            # (a test's toy machine may claim an mpdp.* module name that does not exist: not part of mpdp)
            if "TABLE" in sub.__dict__ and sub.__module__.startswith("mpdp.") and sub.__module__ in sys.modules:
                found.add(f"{sub.__module__}.{sub.__qualname__}")
    assert found, "no role machine found"
    assert found <= set(MACHINES), f"role machines without a docs table: {sorted(found - set(MACHINES))}"


def test_the_registry_table_is_the_registry(tmp_path):
    """docs/protocols/job-model.md §8 lists the registry's protocols, generated: a row edited by hand, or one the
    registry lacks, is reported."""
    docs = tmp_path / "protocols"
    shutil.copytree(REPO / "docs" / "protocols", docs)
    page = docs / render_tables.REGISTRY_PAGE
    good = page.read_text()
    assert "| query | `qy-` |" in good
    page.write_text(good.replace("| query | `qy-` |", "| query | `qz-` |", 1))
    assert render_tables.problems(docs) == ["job-model.md: the registry table is out of date (run `python tools/render_tables.py`)"]
    page.write_text(good.replace("<!-- registry table -->", "", 1))
    assert render_tables.problems(docs) == ["job-model.md: no registry table"]
