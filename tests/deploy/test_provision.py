"""`mpdp provision`: folders per site, the CA kept apart, the CSR flow, rotation, and errors that say what to do.

Invariants: no site folder ever holds the CA key; every config provisioning writes loads with the services'
own config classes; every certificate names its role, site and federation; a CSR's key never appears in the
output; each refusal names the file or field and the remedy.
"""

from __future__ import annotations

import datetime as dt
import json
import stat
from concurrent import futures
from pathlib import Path

import grpc
import pytest
import yaml
from click.testing import CliRunner
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from mpdp_services.provisioning import provision as pv
from mpdp_services.cli.health import probe
from mpdp_services.cli.main import cli
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.common import config as cfgmod
from mpdp_services.common import pki


SPEC = {
    "federation": "test-fed",
    "validity_days": 30,
    "curator": {"name": "curator", "address": "charlie.example.org:7000", "hosts": ["10.1.2.3"]},
    "compute_nodes": [{"name": "compute-1", "address": "cn1.example.org:7200"}],
    "parties": [
        {"name": "hospital-a", "address": "a.example.org:7101", "datasets": {"adult": {"path": "/data/adult.csv", "format": "csv"}}},
        {"name": "hospital-b", "address": "b.example.org:7101", "budget_epsilon": 3.0},
        {"name": "hospital-c", "address": "c.example.org:7101"},
    ],
    "defaults": {"dataset": "adult", "epsilon": 0.5, "lam": 0.01},
}


def write_spec(tmp_path: Path, spec: dict | None = None, name: str = "federation.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(spec or SPEC))
    return p


def cert_of(folder: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate((folder / "site.crt").read_bytes())


def test_one_folder_per_site_and_the_ca_stays_apart(tmp_path):
    res = pv.provision(pv.load_spec(write_spec(tmp_path)), tmp_path / "sites")
    out, ca_dir = tmp_path / "sites", tmp_path / "sites-ca"
    assert res.ca.folder == ca_dir and (ca_dir / "ca.key").exists()
    assert stat.S_IMODE((ca_dir / "ca.key").stat().st_mode) == 0o600
    assert not list(out.rglob("ca.key")), "the CA key must never be in a distributed folder"
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["compute-1", "curator", "hospital-a", "hospital-b", "hospital-c", "operator"]
    ca = x509.load_pem_x509_certificate((ca_dir / "ca.crt").read_bytes())
    for s in res.sites:
        files = {p.name for p in s.folder.iterdir()}
        assert {"site.crt", "site.key", "ca.crt", "README.md"} <= files
        assert stat.S_IMODE((s.folder / "site.key").stat().st_mode) == 0o600
        assert (s.folder / "ca.crt").read_bytes() == (ca_dir / "ca.crt").read_bytes()
        ident = pki.identity_from_pem((s.folder / "site.crt").read_bytes())
        assert (ident.role, ident.name, ident.federation) == (s.role, s.name, "test-fed")
        cert = cert_of(s.folder)
        cert.verify_directly_issued_by(ca)
        assert dt.timedelta(days=29) < cert.not_valid_after_utc - dt.datetime.now(dt.timezone.utc) <= dt.timedelta(days=30)
        assert pv.verify_site(s.folder) == []
    san = cert_of(out / "curator").extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"curator", "charlie.example.org"} <= set(san.get_values_for_type(x509.DNSName))
    assert "10.1.2.3" in {str(a) for a in san.get_values_for_type(x509.IPAddress)}
    summary = json.loads((out / "federation.json").read_text())
    assert "PRIVATE" not in (out / "federation.json").read_text() and summary["ca_fingerprint_sha256"] == pv.fingerprint(ca)


def test_configs_load_with_the_services_config_classes(tmp_path):
    pv.provision(pv.load_spec(write_spec(tmp_path)), tmp_path / "sites")
    out = tmp_path / "sites"
    cur = cfgmod.load(cfgmod.CuratorConfig, out / "curator" / "curator.yaml")
    assert cur.federation == "test-fed" and cur.listen == "0.0.0.0:7000" and cur.paillier_bits == 2048 and cur.dgk_bits == 2048
    assert cur.parties == {} and cur.members == ["hospital-a", "hospital-b", "hospital-c"]  # parties have no address: they link
    assert cur.compute_nodes == {"compute-1": "cn1.example.org:7200"}
    assert cur.tls.key == out / "curator" / "site.key" and not cur.test_mode
    a = cfgmod.load(cfgmod.PartyConfig, out / "hospital-a" / "party.yaml")
    assert a.advertise is None  # a party listens nowhere; it dials the curator
    assert (a.curator.address, a.curator.name) == ("charlie.example.org:7000", "curator")
    assert a.datasets["adult"].path == Path("/data/adult.csv") and a.datasets["adult"].format == "csv"
    assert a.budget_epsilon == 10.0 and a.ledger == out / "hospital-a" / "state" / "ledger.json"
    assert a.members == ["hospital-a", "hospital-b", "hospital-c"]  # the federation as provisioned: jobs name only these
    assert cfgmod.load(cfgmod.PartyConfig, out / "hospital-b" / "party.yaml").budget_epsilon == 3.0
    node = cfgmod.load(cfgmod.ComputeNodeConfig, out / "compute-1" / "compute_node.yaml")
    assert (node.listen, node.advertise, node.curator.name, node.federation) == ("0.0.0.0:7200", "cn1.example.org:7200", "curator", "test-fed")
    ep = Endpoints.load(out / "operator")  # relative TLS paths resolve against endpoints.json's folder
    assert ep.curator_address == "charlie.example.org:7000" and ep.tls.cert == out / "operator" / "site.crt"
    doc = json.loads((out / "operator" / "endpoints.json").read_text())  # the DCA protocols' job specs name the compute nodes
    assert doc["compute_nodes"] == {"compute-1": "cn1.example.org:7200"} and sorted(doc["parties"]) == ["hospital-a", "hospital-b", "hospital-c"]
    readme = (out / "operator" / "README.md").read_text()
    assert "--parties hospital-a,hospital-b,hospital-c --epsilon 0.5 --lam 0.01" in readme
    readme_a = (out / "hospital-a" / "README.md").read_text()
    assert "Listens on no port" in readme_a and "charlie.example.org:7000" in readme_a and "7101" not in readme_a and "ledger" in readme_a


def test_rotation_reuses_the_ca_and_needs_force(tmp_path):
    spec = pv.load_spec(write_spec(tmp_path))
    first = pv.provision(spec, tmp_path / "sites")
    old = pv.fingerprint(cert_of(tmp_path / "sites" / "hospital-a"))
    with pytest.raises(pv.ProvisionError, match="--force"):
        pv.provision(spec, tmp_path / "sites")
    second = pv.provision(spec, tmp_path / "sites", force=True)
    assert not second.ca.created and pv.fingerprint(second.ca.cert) == pv.fingerprint(first.ca.cert)
    assert pv.fingerprint(cert_of(tmp_path / "sites" / "hospital-a")) != old
    other = pv.load_spec(write_spec(tmp_path, {**SPEC, "federation": "other-fed"}, "other.yaml"))
    with pytest.raises(pv.ProvisionError, match="belongs to federation 'test-fed'"):
        pv.provision(other, tmp_path / "other", ca_folder=tmp_path / "sites-ca")


def test_ca_folder_inside_the_output_is_refused(tmp_path):
    with pytest.raises(pv.ProvisionError, match="inside the output folder"):
        pv.provision(pv.load_spec(write_spec(tmp_path)), tmp_path / "sites", ca_folder=tmp_path / "sites" / "ca")


def test_csr_flow_keeps_the_key_at_the_site(tmp_path):
    home = tmp_path / "hospital-c-home"
    key_p, csr_p = pv.make_csr_files("party", "hospital-c", home, "test-fed")
    assert stat.S_IMODE(key_p.stat().st_mode) == 0o600
    spec = json.loads(json.dumps(SPEC))
    spec["parties"][2]["csr"] = str(csr_p)
    res = pv.provision(pv.load_spec(write_spec(tmp_path, spec)), tmp_path / "sites")
    folder = tmp_path / "sites" / "hospital-c"
    assert not (folder / "site.key").exists() and next(s for s in res.sites if s.name == "hospital-c").key_here is False
    cert = cert_of(folder)
    assert cert.public_key().public_numbers() == x509.load_pem_x509_csr(csr_p.read_bytes()).public_key().public_numbers()
    (folder / "site.key").write_bytes(key_p.read_bytes())  # the site puts its own key beside the signed certificate
    assert pv.verify_site(folder) == []
    # the standalone sign command: the operator signs with the CA folder
    crt, cert2 = pv.sign_csr_file(tmp_path / "sites-ca", csr_p, ["c.example.org", "192.0.2.7"], home, days=10)
    assert pv.verify_site(home) == []
    san = cert2.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "c.example.org" in san.get_values_for_type(x509.DNSName) and "192.0.2.7" in {str(a) for a in san.get_values_for_type(x509.IPAddress)}
    with pytest.raises(pv.ProvisionError, match="asks for role 'party', not 'curator'"):
        pv.sign_csr_file(tmp_path / "sites-ca", csr_p, [], tmp_path / "x", role="curator")
    # a CSR for another site or role than the description says is refused, naming both
    spec["parties"][1]["csr"] = str(csr_p)
    with pytest.raises(pv.ProvisionError, match="asks for role 'party' as site 'hospital-c'.*hospital-b"):
        pv.provision(pv.load_spec(write_spec(tmp_path, spec, "bad.yaml")), tmp_path / "sites2")


def test_verify_site_names_each_problem(tmp_path):
    pv.provision(pv.load_spec(write_spec(tmp_path)), tmp_path / "sites")
    a, b = tmp_path / "sites" / "hospital-a", tmp_path / "sites" / "hospital-b"
    (a / "site.key").write_bytes((b / "site.key").read_bytes())
    assert any("does not belong to site.crt" in p for p in pv.verify_site(a))
    other_key, other_ca = pki.make_ca("elsewhere")
    (b / "ca.crt").write_bytes(pki.pem_cert(other_ca))
    assert any("was not signed by ca.crt" in p for p in pv.verify_site(b))
    # an expired certificate (built by hand: the provisioning code never issues one)
    ca = pv.open_ca(tmp_path / "sites-ca")
    key = pki.new_key()
    now = dt.datetime.now(dt.timezone.utc)
    old = (
        x509.CertificateBuilder()
        .subject_name(pki._name("hospital-c", "party", "test-fed"))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=10))
        .not_valid_after(now - dt.timedelta(days=1))
        .sign(ca.key, hashes.SHA256())
    )
    c = tmp_path / "expired"
    pki.write_site(c, key, old, ca.cert)
    assert any("expired on" in p for p in pv.verify_site(c))
    assert pv.describe(c / "site.crt")["expired"] is True


@pytest.mark.parametrize(
    "patch, message",
    [
        ({"federation": "bad/name"}, "federation name"),
        ({"curator": {"name": "Curator_1", "address": "c:7000"}}, "curator.name.*DNS label"),
        ({"curator": {"name": "curator", "address": "no-port"}}, "curator.address.*host:port"),
        ({"parties": [{"name": "curator", "address": "x:1"}]}, "unique.*curator"),
        ({"defaults": {"paillier_bits": 1024}}, "at least 2048 unless test_mode"),
        ({"parties": [{"name": "p", "address": "p:1", "datasets": {"d": {"path": "/x", "format": "xls"}}}]}, "parties.0.datasets.d.format"),
        ({"surprise": 1}, "surprise.*Extra inputs"),
    ],
)
def test_description_errors_name_the_field(tmp_path, patch, message):
    with pytest.raises(pv.ProvisionError, match=message):
        pv.load_spec(write_spec(tmp_path, {**SPEC, **patch}))


def test_cli_shorthand_help_and_errors(tmp_path):
    runner = CliRunner()
    spec = write_spec(tmp_path)
    r = runner.invoke(cli, ["provision", str(spec), "--out", str(tmp_path / "sites"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["federation"] == "test-fed"
    r = runner.invoke(cli, ["provision", "sites", str(spec), "--out", str(tmp_path / "sites")])
    assert r.exit_code == 1 and "--force" in r.output
    r = runner.invoke(cli, ["provision", str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "x")])
    assert r.exit_code == 1 and "not found" in r.output and "docs/deploy.md" in r.output
    for sub in ([], ["sites"], ["csr"], ["sign"], ["show"], ["check"], ["demo-data"]):
        r = runner.invoke(cli, ["provision", *sub, "--help"])
        assert r.exit_code == 0 and "Usage:" in r.output, (sub, r.output)
    assert runner.invoke(cli, ["health", "--help"]).exit_code == 0
    home = tmp_path / "home"
    r = runner.invoke(cli, ["provision", "csr", "--role", "party", "--site", "hospital-d", "--out", str(home)])
    assert r.exit_code == 0 and (home / "site.csr").exists()
    r = runner.invoke(cli, ["provision", "sign", "--ca", str(tmp_path / "sites-ca"), "--csr", str(home / "site.csr"), "--hosts", "d.example.org,192.0.2.9", "--out", str(home)])
    assert r.exit_code == 0 and "signed party 'hospital-d' of 'test-fed'" in r.output, r.output
    r = runner.invoke(cli, ["provision", "check", str(home)])
    assert r.exit_code == 0 and "ok" in r.output
    r = runner.invoke(cli, ["provision", "show", "--json", str(home / "site.crt")])
    assert json.loads(r.output)["san"] == ["hospital-d", "localhost", "d.example.org", "192.0.2.9", "127.0.0.1"]
    r = runner.invoke(cli, ["provision", "sign", "--ca", str(tmp_path / "nope"), "--csr", str(home / "site.csr"), "--out", str(home)])
    assert r.exit_code == 1 and "is not a CA folder" in r.output and "mpdp provision" in r.output
    r = runner.invoke(cli, ["provision", "csr", "--role", "party", "--site", "hospital-d", "--out", str(home)])
    assert r.exit_code == 1 and "--force" in r.output


def test_demo_data_split(tmp_path):
    paths = pv.write_demo_data(tmp_path, ["p1", "p2", "p3"])
    import numpy as np

    rows = {k: np.loadtxt(v, delimiter=",") for k, v in paths.items()}
    assert sum(len(r) for r in rows.values()) == 569 and len(rows["operator"]) == 142 and len(rows["curator"]) == 71
    labelled = {k: r for k, r in rows.items() if k != "curator"}
    assert all(r.shape[1] == 31 and set(np.unique(r[:, -1])) == {-1.0, 1.0} for r in labelled.values())
    assert rows["curator"].shape[1] == 31 and not rows["curator"][:, -1].any()  # the auxiliary rows carry no labels


def test_health_probe_over_mutual_tls(tmp_path):
    """`mpdp health` checks a server with the site's own certificate; a foreign CA or wrong name fails."""
    pv.provision(pv.load_spec(write_spec(tmp_path)), tmp_path / "sites")
    cur = tmp_path / "sites" / "curator"
    tls = cfgmod.load(cfgmod.CuratorConfig, cur / "curator.yaml").tls.files()
    server = grpc.server(futures.ThreadPoolExecutor(2))
    hs = health.HealthServicer()
    hs.set("mpdp.messages.Curator", health_pb2.HealthCheckResponse.SERVING)
    hs.set("mpdp.messages.Party", health_pb2.HealthCheckResponse.NOT_SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(hs, server)
    port = server.add_secure_port("127.0.0.1:0", tls.server_credentials())
    server.start()
    try:
        addr = f"127.0.0.1:{port}"
        assert probe(addr, cur, None, "mpdp.messages.Curator", 5)[0]
        assert probe(addr, tmp_path / "sites" / "hospital-a", "curator", "", 5)[0]
        ok, what = probe(addr, cur, None, "mpdp.messages.Party", 5)
        assert not ok and "NOT_SERVING" in what
        ok, what = probe(addr, tmp_path / "sites" / "hospital-a", None, "", 5)  # default: the name the server's certificate bears
        assert ok and "(curator)" in what
        ok, what = probe(addr, tmp_path / "sites" / "hospital-a", "hospital-a", "", 5)  # hospital-a is not the server's name
        assert not ok and "UNAVAILABLE" in what
        foreign = tmp_path / "foreign"
        k, c = pki.make_ca("elsewhere")
        key, cert = pki.issue(k, c, "operator", "intruder")
        pki.write_site(foreign, key, cert, c)
        ok, what = probe(addr, foreign, "curator", "", 5)
        assert not ok and "handshake" in what.lower()
        ok, what = probe(addr, foreign, None, "", 5)  # learning the name needs a certificate signed by the same CA
        assert not ok and "this federation's CA" in what
        r = CliRunner().invoke(cli, ["health", "--address", addr, "--tls-dir", str(cur), "--service", "mpdp.messages.Party"])
        assert r.exit_code == 1 and "unhealthy" in r.output
    finally:
        server.stop(0)


def test_an_admin_operator_folder_gets_role_admin_and_every_leaf_both_key_usages(tmp_path):
    spec = pv.load_spec(write_spec(tmp_path, {**SPEC, "operators": [{"name": "operator"}, {"name": "ops-lead", "admin": True}]}))
    res = pv.provision(spec, tmp_path / "sites")
    roles = {s.name: s.role for s in res.sites}
    assert roles["operator"] == "operator" and roles["ops-lead"] == "admin"
    for s in res.sites:
        pem = (s.folder / "site.crt").read_bytes()
        ident = pki.identity_from_pem(pem)
        assert ident.role == s.role and ident.client_auth and ident.federation == "test-fed"
        assert pki.check_server_certificate(pem) == "test-fed"
    assert (tmp_path / "sites" / "ops-lead" / "endpoints.json").exists()
