"""A stopped curator reads the same from every command: ``the curator is not reachable at ADDRESS (...)``, code
``unreachable``, and one hint (services/cli/errors.py, UNREACHABLE_HINT) — whether the command lists jobs, submits
one (attached or --detach), follows one, predicts or exports.

The endpoints file names a real certificate of a throwaway CA and a loopback port nothing listens on (each command's
gRPC channel is refused at once), so these tests open client sockets: marked ``process``, not in `make test-fast`."""

from __future__ import annotations

import json
import socket

import pytest

from mpdp_services.cli import main as cli_main
from mpdp_services.cli.errors import UNREACHABLE_HINT

pytestmark = pytest.mark.process

JOB = "job-000000000000"
TRAIN = ["--dataset", "bc", "--parties", "party-1,party-2,party-3", "--epsilon", "1", "--lam", "0.1"]
COMMANDS = {
    "jobs ls": ["jobs", "ls"],
    "jobs show": ["jobs", "show", JOB],
    "jobs watch": ["jobs", "watch", JOB],
    "jobs logs": ["jobs", "logs", JOB],
    "jobs cancel": ["jobs", "cancel", JOB],
    "train logreg": ["train", "logreg", *TRAIN],
    "train logreg --detach": ["train", "logreg", *TRAIN, "--detach"],
    "train lmgc": ["train", "lmgc", *TRAIN],
    "train lmgc --detach": ["train", "lmgc", *TRAIN, "--detach"],
    "train dp-gd --detach": ["train", "dp-gd", *TRAIN, "--dimension", "30", "--total-records", "356", "--records-per-party", "119", "--detach"],
    "predict": ["predict", "--job", JOB, "--data", "rows.csv"],
    "model export": ["model", "export", JOB, "--format", "json"],
    "dca create": ["dca", "create", "-d", "10", "-n", "100", "-t", "1", "--epsilon", "1", "--delta", "1e-5", "--sensitivity", "1", "--nodes", "node-1,node-2"],
    "dca watch": ["dca", "watch", "--job", JOB],
    "dca release": ["dca", "release", "--job", JOB],
}


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed: connecting to it is refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def stopped_federation(tmp_path, monkeypatch):
    from mpdp_services.common import pki

    ca_key, ca_cert = pki.make_ca("local")
    key, cert = pki.issue(ca_key, ca_cert, "operator", "operator", ["127.0.0.1"])
    pki.write_site(tmp_path / "operator", key, cert, ca_cert)
    address = f"127.0.0.1:{_closed_port()}"
    (tmp_path / "endpoints.json").write_text(json.dumps({
        "federation": "local", "curator": {"address": address, "name": "curator"}, "parties": {}, "compute_nodes": {"node-1": "127.0.0.1:9", "node-2": "127.0.0.1:9"},
        "operator_tls": {k: str(tmp_path / "operator" / f) for k, f in {"cert": "site.crt", "key": "site.key", "ca": "ca.crt"}.items()}}))
    (tmp_path / "rows.csv").write_text("label,x\n1,0.5\n")
    for var in ("MPDP_ENDPOINTS", "MPDP_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "endpoints.json", address


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_stopped_curator_reads_the_same_from_every_command(capsys, stopped_federation, name, as_json):
    endpoints, address = stopped_federation
    argv = [*COMMANDS[name], "--endpoints", str(endpoints), *(["--json"] if as_json else [])]
    with pytest.raises(SystemExit) as exc:
        cli_main.main(argv)
    out, err = capsys.readouterr()
    assert exc.value.code == 1, (argv, out, err)
    assert "Traceback" not in out + err
    if as_json:
        doc = json.loads(out)
        assert doc["error"]["code"] == "unreachable", doc
        assert doc["error"]["message"].startswith(f"the curator is not reachable at {address}"), doc
        assert doc["error"]["hint"] == UNREACHABLE_HINT, doc
    else:
        assert f"Error: the curator is not reachable at {address}" in err, err
        assert f"Hint: {UNREACHABLE_HINT}" in err, err


def test_health_of_a_stopped_federation_names_every_role_down(capsys, stopped_federation):
    """`mpdp health` without --address asks every role endpoints.json lists; a stopped federation's file (left behind)
    is unhealthy, each role with its reason, and --wait does not turn it healthy."""
    endpoints, address = stopped_federation
    with pytest.raises(SystemExit) as exc:
        cli_main.main(["health", "--endpoints", str(endpoints.parent), "--timeout", "2", "--wait", "0.5", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert exc.value.code == 1 and doc["healthy"] is False and doc["error"]["code"] == "unhealthy"
    assert set(doc["roles"]) == {"curator", "node-1", "node-2"} and not any(r["healthy"] for r in doc["roles"].values())
    assert doc["roles"]["curator"]["address"] == address and "UNAVAILABLE" in doc["roles"]["curator"]["status"]


def test_health_waits_for_an_endpoints_file_and_says_where_it_looked(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        cli_main.main(["health", "--endpoints", str(tmp_path / "runs" / "federation"), "--wait", "0.3"])
    err = capsys.readouterr().err
    assert exc.value.code == 1 and "endpoints.json not found" in err and "mpdp federation up" in err
