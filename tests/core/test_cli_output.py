"""`mpdp dca submit` / `loadgen` print one JSON object with --json and `key: value` lines otherwise (never a repr)."""

from __future__ import annotations

import json

from mpdp_services.cli.dca import _show


def test_human_and_json_output(capsys):
    out = {"client_id": "party-1", "accepted": 3, "rejected": [], "seconds": 0.123456}
    _show(out, False)
    text = capsys.readouterr().out
    assert text.splitlines() == ["client_id: party-1", "accepted: 3", "rejected: -", "seconds: 0.123"]
    assert "{" not in text
    _show(out, True)
    assert json.loads(capsys.readouterr().out) == out
