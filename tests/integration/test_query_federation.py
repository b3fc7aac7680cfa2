"""DP queries on a local federation (what `mpdp federation up --test-mode --key-bits 512 --parties 3 --compute-nodes 3`
starts) over the breast-cancer parts `mpdp provision demo-data` writes: `mpdp query --json` counts every party's rows
with an interval that holds the true total; a GROUP BY over a binned feature gives every bin, each count's interval
holding its true count; every party is charged once per query; `mpdp jobs show` prints the table; Federation.query
returns it as a DataFrame."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tests.integration.conftest import DEMO_PARTIES, demo_federation, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.slow]
PARTIES = DEMO_PARTIES
# the demo parts are standardized features: bounds of ±5 standard deviations are public by that construction
SCHEMA = "mpdp_schema: 1\nversion: 1\nname: bc\ncolumns: [{cols}]\nfeatures:\n{feats}\nlabel: {{column: c31, positive: ['-1'], negative: ['1']}}\n"


def mpdp(capsys, *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, *argv)


@pytest.fixture(scope="module")
def qfed(tmp_path_factory):
    root = tmp_path_factory.mktemp("qfed")
    schema = root / "bc.yaml"
    schema.write_text(SCHEMA.format(cols=", ".join(f"c{i}" for i in range(1, 32)),
                                    feats="\n".join(f"  - {{name: c{i}, type: numeric, bounds: [-5, 5]}}" for i in range(1, 31))))
    fed, rows = demo_federation(root, lambda part: {"bcs": {"path": str(part), "schema": str(schema)}})
    fed.schema_path = schema  # type: ignore[attr-defined]
    fed.rows = rows  # type: ignore[attr-defined]
    yield fed
    fed.stop()


def _charges(fed) -> dict[str, int]:
    out = {}
    for p in PARTIES:
        f = Path(fed.workdir) / p / "state" / "ledger.json"
        out[p] = len(json.loads(f.read_text())["entries"]) if f.exists() else 0
    return out


def _near(row, name: str, truth: float) -> None:
    """The cell's estimate lies in its own interval and within 6 noise sd (plus one unit per party of rounding) of the
    truth: a miss has probability below 10⁻⁸ a cell, so the test does not flake where a 95 % interval would miss now
    and then; the intervals' coverage itself is measured in tests/query."""
    assert row[f"{name}_low"] <= row[name] <= row[f"{name}_high"], row
    assert abs(row[name] - truth) <= 6 * row[f"{name}_noise_sd"] + 3, (name, truth, row)


def test_count_star_holds_the_true_total_and_charges_each_party_once(qfed, capsys):
    before = _charges(qfed)
    code, out, err = mpdp(capsys, "query", "--endpoints", str(qfed.workdir), "--json", "SELECT COUNT(*) AS n FROM bc")
    assert code == 0, err
    doc = json.loads(out)
    (row,) = doc["rows"]
    total = len(qfed.rows)
    assert total == 356  # 119 + 119 + 118 rows in the three demo parts
    assert row["n_noise_sd"] > 0
    _near(row, "n", total)
    assert doc["guarantee"]["epsilon"] == 1.0 and "each party is charged once" in doc["guarantee"]["statement"]
    assert _charges(qfed) == {p: before[p] + 1 for p in PARTIES}


def test_group_by_a_binned_feature_gives_every_bin(qfed, capsys):
    sql = "SELECT COUNT(*) AS n, AVG(c2) AS m, MEDIAN(c3) AS med FROM bcs GROUP BY BIN(c1, 4)"
    code, out, err = mpdp(capsys, "query", "--endpoints", str(qfed.workdir), "--schema", str(qfed.schema_path), "--json", "--epsilon", "2", sql)
    assert code == 0, err
    doc = json.loads(out)
    assert [r["c1_bin"] for r in doc["rows"]] == ["[-5, -2.5)", "[-2.5, 0)", "[0, 2.5)", "[2.5, 5]"]
    c1 = np.clip(qfed.rows[:, 0], -5, 5)
    bins = np.minimum(np.floor((c1 + 5) / 10 * 4), 3).astype(int)
    for b, row in enumerate(doc["rows"]):
        _near(row, "n", int((bins == b).sum()))
        assert -5 <= row["m_low"] <= row["m_high"] <= 5 and -5 <= row["med_low"] <= row["med_high"] <= 5
    assert "sum c2: Δ₂ = 2" in doc["budget_split"] and doc["sensitivity"] == pytest.approx(8 ** 0.5)  # √(2 + 2² + 2): c2 spans [−5, 5] in one group
    code, out, err = mpdp(capsys, "jobs", "show", "--endpoints", str(qfed.workdir), doc["job_id"])
    assert code == 0, err
    assert "c1_bin" in out and "[2.5, 5]" in out and "med" in out
    import urllib.request

    curator = json.loads((qfed.workdir / "endpoints.json").read_text())["http"]["curator"]
    with urllib.request.urlopen(f"{curator.rstrip('/')}/jobs/{doc['job_id']}", timeout=30) as r:  # the dashboard's job page (loopback: no token)
        page = r.read().decode()
    assert 'id="query-table"' in page and all(f'id="query-chart-{i}"' in page for i in range(3))
    drawn = [float(x) for x in re.findall(r'<rect class="bar"[^>]*data-estimate="([^"]+)"', page)]
    released = [row[k] for k in ("n", "m", "med") for row in doc["rows"] if row[k] is not None]
    assert drawn == pytest.approx(released)  # every released estimate drawn, aggregate by aggregate, bin by bin


def test_a_query_outside_the_subset_is_refused_before_anything_is_sent(qfed, capsys):
    before = _charges(qfed)
    code, _, err = mpdp(capsys, "query", "--endpoints", str(qfed.workdir), "--schema", str(qfed.schema_path), "SELECT SUM(salary) FROM bcs")
    assert code != 0 and "not in the federation's schema" in err and "allowed:" in err
    assert _charges(qfed) == before


def test_federation_query_returns_a_dataframe(qfed):
    import mpdp

    with mpdp.Federation.connect(qfed.workdir, schema=qfed.schema_path) as fed:
        df = fed.query("SELECT c31, COUNT(*) AS n, SUM(c1) AS s FROM bcs GROUP BY c31")
    assert list(df["c31"]) == ["-1", "1"]
    assert list(df.columns) == ["c31", "n", "n_low", "n_high", "n_noise_sd", "s", "s_low", "s_high", "s_noise_sd"]
    labels = qfed.rows[:, 30]
    for i, lab in enumerate((-1.0, 1.0)):
        _near(df.iloc[i], "n", int((labels == lab).sum()))
    assert df.attrs["guarantee"]["epsilon"] == 1.0 and df.attrs["job_id"].startswith("qy-")
