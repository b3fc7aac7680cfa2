"""docs/protocols/job-model.md carries the error table the services actually use."""

from __future__ import annotations

import re
from pathlib import Path

from mpdp_services.common import errors

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocols" / "job-model.md"


def _between(text: str, name: str) -> str:
    m = re.search(rf"<!-- {name}:begin[^>]*-->\n(.*?)<!-- {name}:end -->", text, re.S)
    assert m, f"markers for {name} missing in {DOC.name}"
    return m.group(1)


def test_error_table_in_docs_is_the_services_table():
    assert _between(DOC.read_text(), "error-table") == errors.render_table()


def test_every_problem_has_a_status_and_a_meaning():
    for value in errors.P.values():
        if value == errors.P.PROBLEM_UNSPECIFIED:
            continue
        assert value in errors.STATUS and value in errors.MEANING, errors.P.Name(value)
