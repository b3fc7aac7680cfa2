"""`mpdp ledger show`: each entry, ε spent under the accountant and under basic composition, what is left."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from mpdp.dca.params import DcaParams
from mpdp.ledger import Ledger, composition
from mpdp_services.cli.ledger import ledger as ledger_cli


def _fill(path, budget=(10.0, 1e-5)) -> Ledger:
    led = Ledger(path, *budget)
    for i in range(12):  # twelve DCA Gaussian jobs of (1, 1e-7): basic composition says 12 > 10
        led.spend(DcaParams(job_id=f"dca-{i}", dimension=3, clients=5, max_missing=1, epsilon=1.0, delta=1e-7, sensitivity=1.0, nodes=("a", "b")).ledger_entry())
    led.spend({"protocol": "local-release/lmgc", "job_id": "lm-1", "epsilon": 0.5, "delta": 0.0})  # an old entry: (ε, δ) only
    led.mark("dca", "dca-0", "released")
    return led


def test_show_json_reports_both_compositions(tmp_path):
    led = _fill(tmp_path / "ledger.json")
    out = CliRunner().invoke(ledger_cli, ["show", "--ledger", str(led.path), "--budget-epsilon", "10", "--budget-delta", "1e-5", "--json"])
    assert out.exit_code == 0, out.output
    [rep] = json.loads(out.output)["parties"]
    assert rep["party"] == "ledger.json" and rep["budget"] == {"epsilon": 10.0, "delta": 1e-5}
    assert [(e["protocol"], e["job_id"], e["status"], e["kind"]) for e in rep["entries"][:2]] == [("dca", "dca-0", "released", "gaussian"), ("dca", "dca-1", "spent", "gaussian")]
    assert rep["entries"][-1]["kind"] == "eps-delta" and rep["entries"][-1]["epsilon"] == 0.5
    assert rep["entries"][0]["accounted_as"].startswith("Gaussian σ/Δ=") and rep["entries"][0]["delta"] == 1e-7
    acc, basic = rep["accountant"], rep["basic"]
    expected = composition(led.entries, 1e-5)
    assert acc["epsilon"] == pytest.approx(expected.epsilon) and acc["method"] == "pld" and acc["delta"] == 1e-5
    assert acc["epsilon"] < 10.0 < basic["epsilon"] == 12.5 and basic["delta"] == pytest.approx(1.2e-6)
    assert acc["left_epsilon"] == pytest.approx(10.0 - acc["epsilon"]) and basic["left_epsilon"] == pytest.approx(-2.5)


def test_show_reads_every_site_of_a_folder_and_prints_a_table(tmp_path):
    for name, eps in (("party-1", 3.5), ("party-2", 20.0)):
        site = tmp_path / "fed" / name
        site.mkdir(parents=True)
        (site / "party.yaml").write_text(
            f"name: {name}\ntls: {{cert: site.crt, key: site.key, ca: ca.crt}}\ncurator: {{address: 'x:1', name: curator}}\n"
            f"ledger: state/ledger.json\nbudget_epsilon: {eps}\nbudget_delta: 1.0e-5\n"
        )
    _fill(tmp_path / "fed" / "party-2" / "state" / "ledger.json", (20.0, 1e-5))  # party-1 has not spent yet
    out = CliRunner().invoke(ledger_cli, ["show", "--site", str(tmp_path / "fed"), "--json"])
    assert out.exit_code == 0, out.output
    one, two = json.loads(out.output)["parties"]
    assert (one["party"], one["entries"], one["accountant"]["epsilon"], one["accountant"]["left_epsilon"]) == ("party-1", [], 0.0, 3.5)
    assert two["party"] == "party-2" and len(two["entries"]) == 13 and two["budget"]["epsilon"] == 20.0
    assert not (tmp_path / "fed" / "party-1" / "state").exists()  # showing creates nothing
    table = CliRunner().invoke(ledger_cli, ["show", "--site", str(tmp_path / "fed" / "party-2")], terminal_width=200)
    assert table.exit_code == 0, table.output
    assert "dca-11" in table.output and "spent, accountant (pld)" in table.output and "basic composition: ε = 12.5" in table.output


def test_show_refuses_what_it_cannot_read(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"entries": [{"protocol": "t", "job_id": "x", "epsilon": 1.0, "delta": 0.0, "accounting": {"kind": "gaussian", "noise_multiplier": -1}}]}))
    runner = CliRunner()
    out = runner.invoke(ledger_cli, ["show", "--ledger", str(bad), "--budget-epsilon", "10"])
    assert out.exit_code != 0 and "cannot be used" in out.output
    assert runner.invoke(ledger_cli, ["show", "--ledger", str(bad)]).exit_code != 0  # no budget
    assert "no party.yaml" in runner.invoke(ledger_cli, ["show", "--site", str(tmp_path)]).output
