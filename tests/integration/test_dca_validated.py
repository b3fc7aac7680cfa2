"""`mpdp dca create --validate …` + `loadgen` + `release` over a real local federation (3 compute nodes, the curator,
mutual TLS), through the CLI as an operator runs it.

Invariants: a validated job's release says so (`validate`, `clients_rejected` = 0 for honest clients, a guarantee
stating the proof) and is within its noise of the clients' true sum; the CLI refuses `--validate` without the
discrete Gaussian noise before contacting anyone, and the curator refuses a validated job whose proof sums could wrap
modulo p, before any share exists.
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
    f = LocalFederation(tmp_path_factory.mktemp("dca-validated") / "fed", [], {}, test_mode=True, paillier_bits=768, dgk_bits=768, compute_nodes=NODES)
    f.start()
    yield f
    f.stop()


def mpdp(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mpdp_services.cli.main", *args], check=False, capture_output=True, text=True, timeout=300)


def create(fed, *extra: str, d: int = 5, n: int = 12, clip: float = 1.0) -> subprocess.CompletedProcess:
    return mpdp("dca", "create", "--endpoints", str(fed.workdir), "-d", str(d), "-n", str(n), "-t", "2", "--epsilon", "1", "--delta", "1e-6",
                "--sensitivity", str(2 * math.sqrt(d)), "--clip", str(clip), "--nodes", ",".join(NODES), "--deadline", "120", "--json", *extra)


def test_cli_validated_job_releases_with_its_proof_stated(fed):
    n, d, seed = 12, 5, 4
    out = create(fed, n=n, d=d)  # the defaults: --validate range, --noise discrete-gaussian, f = 16
    assert out.returncode == 0, out.stderr
    job = json.loads(out.stdout)["job_id"]
    load = mpdp("dca", "loadgen", "--endpoints", str(fed.workdir), "--job", job, "-n", str(n), "--seed", str(seed), "--json")
    assert load.returncode == 0, load.stderr
    assert json.loads(load.stdout)["rejected"] == 0
    watch = mpdp("dca", "watch", "--endpoints", str(fed.workdir), "--job", job, "--json")
    assert watch.returncode == 0 and json.loads(watch.stdout)["state"] == "RELEASED", watch.stderr
    rel = mpdp("dca", "release", "--endpoints", str(fed.workdir), "--job", job)
    assert rel.returncode == 0, rel.stderr
    r = json.loads(rel.stdout)
    assert (r["validate"], r["clients_rejected"], r["clients_included"], r["fractional_bits"]) == ("range", 0, n, 16)
    assert "proven valid" in r["guarantee"]["statement"] and 0 < r["guarantee"]["delta"] <= 1e-6
    Z = np.random.default_rng(seed).uniform(-1.0, 1.0, size=(n, d))  # loadgen's public simulation data
    num, den = (int(v) for v in r["sigma2_units"].split("/"))  # each compute node's σ² (the clients add no noise)
    assert r["sigma_client"] == 0 and r["noise_variance"] == pytest.approx(len(NODES) * num / den / 4.0**16)
    sd = math.sqrt(r["noise_variance"])
    assert np.all(np.abs(np.asarray(r["values"]) - Z.sum(axis=0)) < 6 * sd + n * 2.0**-16)


def test_cli_refuses_validate_without_discrete_noise(fed):
    for extra in (("--noise", "gaussian"), ("--validate", "one-hot", "--noise", "gaussian")):  # the default --validate range too
        out = create(fed, *extra)  # --json: the failure is one JSON error object on stdout
        message = json.loads(out.stdout)["error"]["message"]
        assert out.returncode != 0 and "--noise discrete-gaussian" in message and "--validate none" in message


def test_cli_unvalidated_job_says_its_contributions_are_not_proven(fed):
    out = create(fed, "--validate", "none", n=4, d=2)
    assert out.returncode == 0, out.stderr
    job = json.loads(out.stdout)["job_id"]
    load = mpdp("dca", "loadgen", "--endpoints", str(fed.workdir), "--job", job, "-n", "4", "--json")
    assert load.returncode == 0, load.stderr
    assert json.loads(mpdp("dca", "watch", "--endpoints", str(fed.workdir), "--job", job, "--json").stdout)["state"] == "RELEASED"
    r = json.loads(mpdp("dca", "release", "--endpoints", str(fed.workdir), "--job", job).stdout)
    assert (r["validate"], r["noise"], r["fractional_bits"]) == ("none", "gaussian", 32)
    assert "not proven valid" in r["guarantee"]["statement"]


def test_curator_refuses_a_validated_job_whose_sums_could_wrap(fed):
    out = create(fed, "--noise", "discrete-gaussian", "--validate", "l2", "--frac-bits", "40", clip=4.0)
    assert out.returncode != 0
    error = json.loads(out.stdout)["error"]
    assert error["code"] == "invalid_argument" and "validation" in error["message"], error


def _site(fed, name: str):
    """A client site folder (site.crt, site.key, ca.crt) from the federation's CA, as `mpdp provision` writes one."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    from mpdp_services.common import pki

    folder = fed.workdir / "clients" / name
    ca = fed.workdir / "ca"
    ca_key = serialization.load_pem_private_key((ca / "ca.key").read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate((ca / "ca.crt").read_bytes())
    key, cert = pki.issue(ca_key, ca_cert, "party", name, ["127.0.0.1"])
    pki.write_site(folder, key, cert, ca_cert)
    return folder


def test_cli_submit_proves_each_vector_of_a_validated_job(fed):
    """`mpdp dca submit` into a validated job: each client's vector goes out with its proof (ClientMachine), its ledger
    is charged first, and the job releases with nobody rejected, within its noise of the clients' sum."""
    n, d = 3, 4
    out = create(fed, "--noise", "discrete-gaussian", "--validate", "l2", "-t", "1", n=n, d=d)
    assert out.returncode == 0, out.stdout + out.stderr
    job = json.loads(out.stdout)["job_id"]
    Z = np.array([[0.5, -0.25, 0.0, 0.1], [-0.3, 0.3, 0.3, -0.3], [0.2, 0.2, -0.6, 0.0]])
    for i, z in enumerate(Z):
        site = _site(fed, f"submitter-{i}")
        sub = mpdp("dca", "submit", "--endpoints", str(fed.workdir), "--site", str(site), "--job", job, "--values", ",".join(map(str, z)),
                   "--ledger", str(site / "ledger.json"), "--budget-epsilon", "10", "--json")
        assert sub.returncode == 0, sub.stdout + sub.stderr
        assert json.loads(sub.stdout)["accepted"] == len(NODES)
        assert json.loads((site / "ledger.json").read_text())["entries"][0]["job_id"] == job
    watch = mpdp("dca", "watch", "--endpoints", str(fed.workdir), "--job", job, "--json")
    assert watch.returncode == 0 and json.loads(watch.stdout)["state"] == "RELEASED", watch.stdout
    r = json.loads(mpdp("dca", "release", "--endpoints", str(fed.workdir), "--job", job).stdout)
    assert (r["validate"], r["clients_rejected"], r["clients_included"]) == ("l2", 0, n)
    num, den = (int(v) for v in r["sigma2_units"].split("/"))  # each compute node's σ²
    assert r["noise_variance"] == pytest.approx(len(NODES) * num / den / 4.0 ** r["fractional_bits"])
    sd = math.sqrt(r["noise_variance"])
    assert np.all(np.abs(np.asarray(r["values"]) - Z.sum(axis=0)) < 6 * sd * math.sqrt(d) + n * 2.0 ** -r["fractional_bits"])
