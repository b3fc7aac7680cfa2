"""`mpdp dca submit` / `loadgen` print one JSON object with --json and `key: value` lines otherwise (never a repr)."""

from __future__ import annotations

import pytest
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


@pytest.mark.process  # starts a process or opens a socket: not in `make test-fast`
def test_endpoints_come_from_the_environment_and_a_missing_file_is_one_clear_line(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "MPDP_ENDPOINTS": str(tmp_path / "nowhere")}
    r = subprocess.run([sys.executable, "-m", "mpdp_services.cli.main", "dca", "watch", "--job", "dca-000000000000"],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert str(tmp_path / "nowhere") in r.stderr and "MPDP_ENDPOINTS" in r.stderr
    (tmp_path / "bad.json").write_text("{}")
    env["MPDP_ENDPOINTS"] = str(tmp_path / "bad.json")
    r = subprocess.run([sys.executable, "-m", "mpdp_services.cli.main", "dca", "watch", "--job", "dca-000000000000"],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 1 and "is not an endpoints file" in r.stderr and "Traceback" not in r.stderr
