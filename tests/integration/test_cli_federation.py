"""The command line against a live federation (curator and two compute nodes, separate processes, mutual TLS).

- `mpdp dca loadgen` sizes its batches in bytes: at d = 9,000 a batch of 1,000 clients is 72 MB per node, over
  the 64 MiB gRPC message limit, yet 1,001 clients are all accepted and released;
- a curator that is not running is reported as not reachable at its address (one JSON error with --json), in the
  same words and with the same hint by every command that needs it (jobs, train --detach, query, evaluate, predict);
- `mpdp health` needs no --server-name: it checks the name on the certificate the service presents;
- `mpdp jobs ls` into a pipe lists whole job ids, one tab-separated line per job.
"""

from __future__ import annotations

import json
import socket

import pytest

from mpdp_services.cli.main import main
from mpdp_services.common.rpc import MAX_MESSAGE
from mpdp_services.launcher.federation import LocalFederation

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    f = LocalFederation(tmp_path_factory.mktemp("cli") / "fed", [], {}, test_mode=True, paillier_bits=768, dgk_bits=768, compute_nodes=["node-1", "node-2"])
    f.start()
    yield f
    f.stop()


def mpdp(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def test_loadgen_batches_by_bytes_where_a_thousand_clients_exceed_the_message_limit(fed, capsys):
    d, n = 9000, 1001
    assert 1000 * 8 * d > MAX_MESSAGE  # the old fixed batch of 1,000 clients could not be sent
    ep = str(fed.workdir)
    code, out, _ = mpdp(capsys, "dca", "create", "--endpoints", ep, "-d", str(d), "-n", str(n), "--epsilon", "1", "--delta", "1e-5",
                        "--sensitivity", "1", "--nodes", "node-1,node-2", "--validate", "none", "--json")  # d above a validated job's limit
    assert code == 0
    job = json.loads(out)["job_id"]
    code, out, err = mpdp(capsys, "dca", "loadgen", "--endpoints", ep, "--job", job, "-n", str(n), "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["accepted_shares"] == 2 * n and rep["rejected"] == 0
    assert rep["batch_size"] * 8 * d <= MAX_MESSAGE
    code, out, _ = mpdp(capsys, "dca", "watch", "--endpoints", ep, "--job", job, "--json")
    assert code == 0 and json.loads(out)["state"] == "RELEASED" and json.loads(out)["clients_included"] == n
    code, out, _ = mpdp(capsys, "jobs", "ls", "--endpoints", ep)  # stdout is a pipe here: whole ids, tab-separated
    rows = [ln.split("\t") for ln in out.splitlines()]
    assert code == 0 and rows[0][0] == "job" and job in [r[0] for r in rows[1:]]


def test_a_stopped_curator_is_not_reachable_at_its_address(fed, capsys, tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    doc = json.loads((fed.workdir / "endpoints.json").read_text())
    doc["curator"]["address"] = f"127.0.0.1:{port}"
    (tmp_path / "endpoints.json").write_text(json.dumps(doc))
    code, out, err = mpdp(capsys, "jobs", "ls", "--endpoints", str(tmp_path), "--json")
    error = json.loads(out)["error"]
    assert code == 1 and error["code"] == "unreachable" and "Traceback" not in err
    assert error["message"].startswith(f"the curator is not reachable at 127.0.0.1:{port}") and "mpdp federation up" in error["hint"]
    code, out, err = mpdp(capsys, "dca", "create", "--endpoints", str(tmp_path), "-d", "2", "-n", "3", "--epsilon", "1", "--delta", "1e-5",
                          "--sensitivity", "1", "--nodes", "node-1,node-2")
    assert code == 1 and out == "" and f"Error: the curator is not reachable at 127.0.0.1:{port}" in err and "Hint:" in err
    # the same failure, the same words and hint, from every command an operator starts with
    rows = tmp_path / "rows.csv"
    rows.write_text("0.1,0.2,1\n0.3,-0.1,-1\n")
    parties = "party-1,party-2,party-3"
    commands = {
        "jobs ls": ["jobs", "ls"],
        "train logreg": ["train", "logreg", "--dataset", "bc", "--parties", parties, "--epsilon", "1", "--lam", "0.1", "--detach"],
        "train regression": ["train", "regression", "--dataset", "bc", "--parties", parties, "--nodes", "node-1,node-2", "-d", "2", "--bounds", "1",
                             "--epsilon", "1", "--total-records", "30", "--records-per-party", "10", "--detach"],
        "query": ["query", "SELECT COUNT(*) AS n FROM bc", "--parties", parties],
        "evaluate": ["evaluate", "pk-000000000001", "--dataset", "bc", "--parties", parties],
        "predict": ["predict", "--job", "pk-000000000001", "--data", str(rows)],
    }
    errors = {}
    for name, argv in commands.items():
        code, out, err = mpdp(capsys, *argv, "--endpoints", str(tmp_path), "--json")
        assert code == 1 and "Traceback" not in err, (name, out, err)
        errors[name] = json.loads(out)["error"]
        code, out, err = mpdp(capsys, *argv, "--endpoints", str(tmp_path))
        lines = err.splitlines()
        assert code == 1 and out == "" and lines[0].startswith(f"Error: the curator is not reachable at 127.0.0.1:{port}"), (name, err)
        assert lines[-1] == "Hint: " + errors[name]["hint"], (name, err)
    assert {e["code"] for e in errors.values()} == {"unreachable"}, errors
    assert all(e["message"].startswith(f"the curator is not reachable at 127.0.0.1:{port}") for e in errors.values()), errors
    assert len({e["hint"] for e in errors.values()}) == 1 and "mpdp federation up" in errors["predict"]["hint"], errors


def test_health_checks_the_name_the_server_presents(fed, capsys):
    address = json.loads((fed.workdir / "endpoints.json").read_text())["curator"]["address"]
    code, out, _ = mpdp(capsys, "health", "--address", address, "--tls-dir", str(fed.workdir / "operator"), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["healthy"] and "(curator)" in doc["status"]
    code, out, _ = mpdp(capsys, "health", "--address", address, "--tls-dir", str(fed.workdir / "operator"), "--server-name", "node-1", "--json")
    assert code == 1 and json.loads(out)["error"]["code"] == "unhealthy"
