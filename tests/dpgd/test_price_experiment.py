"""`mpdp experiment price-of-distrust` end to end on one run (no diffprivlib: it needs the package index)."""

from __future__ import annotations

import pytest
import json
from pathlib import Path

from click.testing import CliRunner

from mpdp_services.cli.experiment_price import command

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_one_run_reports_every_method_and_dpgd_beats_pathak(tmp_path):
    assert (DATA / "a9a" / "a9a.gz").exists(), f"{DATA / 'a9a'} is missing: the tests need ../shared/data beside the repository"
    res = CliRunner().invoke(command, ["--data", str(DATA), "--epsilons", "0.2,1", "--runs", "1", "--no-diffprivlib", "--work", str(tmp_path), "--plot", str(tmp_path / "p.png"), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    a9a, digits = out["results"]
    assert set(a9a["errors"]) == {"dpgd", "dpgd_r4", "functional", "objective", "pathak_corrected", "pathak_paper", "central_output"}
    assert set(digits["errors"]) == {"dpgd", "dpgd_r4", "functional", "objective"}
    for lab in ("0.2", "1"):
        assert a9a["errors"]["dpgd"][lab]["error_rate_mean"] < a9a["errors"]["pathak_corrected"][lab]["error_rate_mean"]
        assert a9a["guarantees"][lab]["epsilon"] <= float(lab)
    assert a9a["errors"]["dpgd"]["1"]["error_rate_mean"] < a9a["nonprivate"] + 0.01
    assert (tmp_path / "p.png").stat().st_size > 0
    assert out["diffprivlib"].startswith("disabled")
