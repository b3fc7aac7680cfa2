"""`mpdp ledger show` loads only what reading a ledger needs: no NumPy, SciPy, dp_accounting, gRPC, numba or
OpenTelemetry (each `python -c` here is a fresh interpreter, so sys.modules tells what the command imported).

It reports the composition the party wrote with its entries (the ledger file's ``composed`` record) when that is the
composition of those entries at the configured budget; otherwise it runs the accountants itself, and then its
numbers are still those of the entries (a stale or edited record is never shown)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mpdp.dca.params import DcaParams
from mpdp.ledger import Ledger, composition

pytestmark = pytest.mark.process
HEAVY = ("numpy", "scipy", "dp_accounting", "grpc", "numba", "opentelemetry", "cryptography")
RUN = """
import json, sys
from mpdp_services.cli.main import main
code = 0
try:
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code, "heavy": sorted(m for m in %r if m in sys.modules)}), file=sys.stderr)
""" % (HEAVY,)


def _show(*argv: str) -> tuple[int, list[str], str]:
    r = subprocess.run([sys.executable, "-c", RUN, *argv], capture_output=True, text=True, timeout=120)
    last = json.loads(r.stderr.strip().splitlines()[-1])
    return int(last["code"] or 0), last["heavy"], r.stdout


def _site(root, budget_epsilon: float = 20.0):
    site = root / "party-1"
    site.mkdir(parents=True)
    (site / "party.yaml").write_text("name: party-1\ntls: {cert: site.crt, key: site.key, ca: ca.crt}\ncurator: {address: 'x:1', name: curator}\n"
                                     f"ledger: state/ledger.json\nbudget_epsilon: {budget_epsilon}\nbudget_delta: 1.0e-5\n")
    led = Ledger(site / "state" / "ledger.json", 20.0, 1e-5)
    for i in range(6):
        led.spend(DcaParams(job_id=f"dca-{i}", dimension=3, clients=5, max_missing=1, epsilon=1.0, delta=1e-7, sensitivity=1.0, nodes=("a", "b")).ledger_entry())
    led.spend({"protocol": "local-release/lmgc", "job_id": "lm-1", "epsilon": 0.5, "delta": 0.0})
    return site, led


def test_no_arguments_is_a_usage_error_before_anything_heavy():
    code, heavy, _ = _show("ledger", "show")
    assert code == 2 and heavy == []


def test_show_over_a_ledger_imports_nothing_heavy_and_reports_its_entries_composition(tmp_path):
    site, led = _site(tmp_path)
    want = composition(json.loads(led.path.read_text())["entries"], 1e-5, 20.0)
    for extra in ((), ("--json",)):
        code, heavy, out = _show("ledger", "show", "--site", str(site), *extra)
        assert code == 0 and heavy == [], (extra, heavy)
    rep = json.loads(out)["parties"][0]
    assert rep["accountant"]["epsilon"] == want.epsilon and rep["accountant"]["method"] == want.method == "pld"
    assert len(rep["entries"]) == 7 and rep["basic"]["epsilon"] == 6.5
    code, heavy, _ = _show("ledger", "show", "--ledger", str(led.path), "--budget-epsilon", "20", "--budget-delta", "1e-5")
    assert code == 0 and heavy == []


@pytest.mark.parametrize("change", ["budget", "entry"])
def test_a_record_that_is_not_the_entries_composition_is_not_shown(tmp_path, change):
    site, led = _site(tmp_path)
    data = json.loads(led.path.read_text())
    if change == "budget":  # the configuration's budget moved since the file was written: another cap
        (site / "party.yaml").write_text((site / "party.yaml").read_text().replace("budget_epsilon: 20.0", "budget_epsilon: 7.0"))
        cap = 7.0
    else:  # an entry edited by hand: the record's digest is no longer the entries'
        data["entries"][0]["epsilon"] = 3.0
        led.path.write_text(json.dumps(data))
        cap = 20.0
    code, heavy, out = _show("ledger", "show", "--site", str(site), "--json")
    assert code == 0 and "dp_accounting" in heavy  # the accountant ran
    rep = json.loads(out)["parties"][0]
    want = composition(data["entries"], 1e-5, cap)
    assert rep["accountant"]["epsilon"] == want.epsilon
    assert change == "budget" or rep["basic"]["epsilon"] == 8.5
