"""`mpdp dca create --noise discrete-gaussian` + `loadgen` + `release` over a real local federation (3 compute nodes,
the curator, mutual TLS), through the CLI as an operator runs it.

Invariants: the release names the discrete Gaussian mechanism and states ρ-zCDP and (ε, δ) with δ no larger than
asked; every client's noise is integer in units of 2^-f, so the released sum times 2^f is an integer vector; the
sum is within a few noise standard deviations of the clients' true sum; a job whose sum could wrap in Z_2^64 is
refused at creation, before any share exists.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from mpdp_services.launcher.federation import LocalFederation

pytestmark = pytest.mark.integration
NODES = ["node-1", "node-2", "node-3"]


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    f = LocalFederation(tmp_path_factory.mktemp("dca-discrete") / "fed", [], {}, test_mode=True, paillier_bits=768, dgk_bits=768, compute_nodes=NODES)
    f.start()
    yield f
    f.stop()


def mpdp(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mpdp_services.cli.main", *args], check=False, capture_output=True, text=True, timeout=300)


def test_cli_discrete_gaussian_job_releases_with_rho_and_epsilon_delta(fed):
    n, d, t, clip, seed = 12, 5, 2, 1.0, 3
    create = mpdp(
        "dca", "create", "--endpoints", str(fed.workdir), "-d", str(d), "-n", str(n), "-t", str(t), "--epsilon", "1.5", "--delta", "1e-6",
        "--sensitivity", str(2 * math.sqrt(d)), "--clip", str(clip), "--nodes", ",".join(NODES), "--noise", "discrete-gaussian", "--validate", "none", "--frac-bits", "24",
        "--deadline", "120", "--json",
    )
    assert create.returncode == 0, create.stderr
    job = json.loads(create.stdout)["job_id"]
    load = mpdp("dca", "loadgen", "--endpoints", str(fed.workdir), "--job", job, "-n", str(n), "--seed", str(seed), "--json")
    assert load.returncode == 0, load.stderr
    assert json.loads(load.stdout)["rejected"] == 0
    watch = mpdp("dca", "watch", "--endpoints", str(fed.workdir), "--job", job, "--json")
    assert watch.returncode == 0, watch.stderr
    assert json.loads(watch.stdout)["state"] == "RELEASED"
    rel = mpdp("dca", "release", "--endpoints", str(fed.workdir), "--job", job)
    assert rel.returncode == 0, rel.stderr
    r = json.loads(rel.stdout)

    g = r["guarantee"]
    assert r["noise"] == "discrete-gaussian" and "discrete Gaussian" in g["mechanism"]
    assert g["epsilon"] == 1.5 and 0 < g["delta"] <= 1e-6
    assert g["rho"] > 0 and f"{g['rho']:.6g}-zCDP" in g["statement"] and "Kairouz" in g["statement"]
    assert r["clients_included"] == n and not r["seeded"]
    num, den = (int(v) for v in r["sigma2_units"].split("/"))
    assert r["fractional_bits"] == 24
    scaled = np.asarray(r["values"]) * 2.0**24
    assert np.array_equal(scaled, np.rint(scaled))  # integer noise on the integer grid: nothing below 2^-f
    # loadgen's public simulation data (services/cli/dca.py): uniform in [−clip, clip]
    Z = np.random.default_rng(seed).uniform(-clip, clip, size=(n, d))
    sd = math.sqrt(n * num / den) / 2.0**24
    assert np.all(np.abs(np.asarray(r["values"]) - Z.sum(axis=0)) < 6 * sd + n * 2.0**-24)


def test_cli_refuses_a_job_whose_sum_could_wrap(fed):
    out = mpdp(
        "dca", "create", "--endpoints", str(fed.workdir), "-d", "4", "-n", "4", "--epsilon", "1", "--delta", "1e-5", "--sensitivity", "1",
        "--clip", "10000", "--nodes", ",".join(NODES), "--noise", "discrete-gaussian", "--validate", "none", "--frac-bits", "48",
    )
    assert out.returncode != 0
    assert "INVALID_JOB" in out.stderr and "headroom" in out.stderr


def test_cli_regress_with_discrete_gaussian_rounds(tmp_path):
    """`mpdp regress --noise discrete-gaussian`: both DCA rounds run the discrete mode at the parties (real DCA clients),
    state ρ and (ε, δ), and each party's ledger charges exactly the rounds' stated (ε, δ)."""
    parties, d = ["party-1", "party-2", "party-3"], 3
    g = np.random.default_rng(1)
    beta = g.normal(size=d)
    ds = {}
    for p, n in zip(parties, (80, 100, 60)):
        X = np.clip(g.normal(size=(n, d)), -2, 2)
        y = X @ beta + 0.3 * g.normal(size=n)
        f = tmp_path / "data" / f"{p}.csv"
        f.parent.mkdir(parents=True, exist_ok=True)
        np.savetxt(f, np.column_stack([X, y]), delimiter=",", fmt="%.17g")
        ds[p] = {"lin": {"path": str(f), "format": "csv"}}
    fed = LocalFederation(tmp_path / "fed", parties, ds, test_mode=True, paillier_bits=768, dgk_bits=768, compute_nodes=NODES, budget_epsilon=100.0)
    with fed:
        out = mpdp(
            "regress", "--endpoints", str(fed.workdir), "--dataset", "lin", "--parties", ",".join(parties), "--nodes", ",".join(NODES),
            "--bounds", ",".join(["2"] * d + ["6"]), "-d", str(d), "--epsilon", "5", "--delta", "1e-4", "--total-records", "240",
            "--records-per-party", "120", "--noise", "discrete-gaussian", "--grid-repeats", "2,2", "--json",
        )
        assert out.returncode == 0, out.stderr
        r = json.loads(out.stdout)
        assert r["noise"] == "discrete-gaussian" and len(r["rounds"]) == 2
        assert all(rd["rho"] > 0 and rd["delta"] <= 1e-4 for rd in r["rounds"])
        assert all("zCDP" in s for s in r["guarantees"])
        assert sum(rd["epsilon"] for rd in r["rounds"]) == pytest.approx(5.0)
        for p in parties:
            entries = {e["job_id"]: e for e in json.loads((fed.workdir / p / "state" / "ledger.json").read_text())["entries"]}
            for rd in r["rounds"]:
                e = entries[rd["job"]]
                assert e["noise"] == "discrete-gaussian" and e["epsilon"] == rd["epsilon"] and e["delta"] == rd["delta"] and e["rho"] == rd["rho"]
