"""Commands that only build a job and follow it load no numerical stack they do not use: `mpdp regress` builds and
checks its spec (the regression plan, the DCA round's parameters) without numba, the field arithmetic, SciPy,
scikit-learn or pandas (each check is a fresh interpreter, so sys.modules tells what the command imported). The
packages behind it (mpdp.dca, mpdp.regression) resolve their names on first use; the names still resolve."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.process
HEAVY = ("numba", "scipy", "sklearn", "pandas", "dp_accounting", "mpdp.math.field", "mpdp.dca.validation", "mpdp.dca.aggregator", "mpdp.dpgd")
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


def test_regress_builds_its_spec_without_the_numerical_stack(tmp_path):
    argv = ["regress", "--endpoints", str(tmp_path / "nowhere"), "--dataset", "bc", "--parties", "party-1,party-2,party-3", "--nodes", "node-1,node-2",
            "-d", "30", "--bounds", "4", "--epsilon", "1", "--total-records", "356", "--records-per-party", "119", "--json"]
    r = subprocess.run([sys.executable, "-c", RUN, *argv], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    last = json.loads(r.stderr.strip().splitlines()[-1])
    # the spec was built and checked; then the missing endpoints file stopped it (one JSON error, exit 1)
    assert last["code"] == 1 and json.loads(r.stdout)["error"]["code"] == "endpoints", (r.stdout, r.stderr[-2000:])
    assert last["heavy"] == [], last["heavy"]
    # an invalid plan is still refused here, before anything is sent
    bad = [*argv[:argv.index("--epsilon")], "--epsilon", "-1", *argv[argv.index("--epsilon") + 2:]]
    r = subprocess.run([sys.executable, "-c", RUN, *bad], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert json.loads(r.stderr.strip().splitlines()[-1])["code"] == 1 and "not a valid regression job" in json.loads(r.stdout)["error"]["message"]


def test_the_lazy_packages_still_resolve_every_name():
    code = ("import json, sys\nimport mpdp.dca as dca, mpdp.regression as reg\n"
            "light = sorted(m for m in ('numba', 'mpdp.math.field', 'scipy') if m in sys.modules)\n"
            "names = {n: type(getattr(dca, n)).__name__ for n in dca.__all__}\n"
            "names.update({n: type(getattr(reg, n)).__name__ for n in reg.__all__})\n"
            "print(json.dumps({'light': light, 'names': names, 'field': 'mpdp.math.field' in sys.modules}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout)
    assert got["light"] == []  # importing the packages loads none of their heavy modules
    assert got["names"]["posterior"] == "function" and got["names"]["DcaParams"] == "type" and got["names"]["fit_ddp"] == "function"
    assert got["field"]  # resolving the roles' names did load them
    assert set(got["names"]) >= {"AggregatorMachine", "ClientCohort", "InvalidJob", "RegressionPlan", "choose_multipliers", "thresholds"}


def test_an_unknown_name_is_an_attribute_error():
    import mpdp.dca
    import mpdp.regression

    for mod in (mpdp.dca, mpdp.regression):
        with pytest.raises(AttributeError):
            getattr(mod, "no_such_name")
