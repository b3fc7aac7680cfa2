"""Secrets are born 0600 and durable writes leave no half-written or wider-moded file behind.

A federation is provisioned under umask 0 (so no mode comes from the umask: the code must ask for it), started,
and its work folder walked: every private key, and every file whose name says it is a secret, is 0600; the CA
folder is 0700; nothing is group- or world-writable. The same holds for ``mpdp provision`` (CA, site keys and
the CSR flow), and for :func:`mpdp_services.common.durable.write_atomic` and the message store directly.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from mpdp.messages import common_pb2
from mpdp_services.provisioning import provision as pv
from mpdp_services.common.durable import PRIVATE, PUBLIC, write_atomic
from mpdp_services.common.store import MessageStore
from mpdp_services.launcher.federation import LocalFederation


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def is_secret(p: Path) -> bool:
    name = p.name.lower()
    return p.suffix == ".key" or ("key" in name and name.endswith(".pem")) or "secret" in name or "ledger" in name


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def check_tree(root: Path) -> list[Path]:
    """Assert the mode rules over every file under ``root``; returns the secrets found."""
    secrets = []
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            continue
        assert not mode(p) & 0o022, f"{p.relative_to(root)} is writable by others: {mode(p):o}"
        if p.is_file() and is_secret(p):
            assert mode(p) == 0o600, f"{p.relative_to(root)} is {mode(p):o}, not 600"
            secrets.append(p)
        assert not p.name.endswith(".tmp"), f"a temporary file was left behind: {p.relative_to(root)}"
    return secrets


def test_fresh_federation_keys_are_private(tmp_path):
    fed = LocalFederation(tmp_path / "fed", ["party-1", "party-2"], test_mode=True, paillier_bits=1024, dgk_bits=1024, compute_nodes=["node-1"])
    with umask(0):
        fed.provision()
    with fed:  # the running services write their own state into the same folder
        secrets = check_tree(fed.workdir)
    names = {str(p.relative_to(fed.workdir)) for p in secrets}
    assert names >= {"ca/ca.key", "curator/site.key", "party-1/site.key", "party-2/site.key", "node-1/site.key", "operator/site.key"}
    assert mode(fed.workdir / "ca") == 0o700


def test_provisioned_keys_are_private(tmp_path):
    spec = {
        "federation": "modes",
        "curator": {"name": "curator", "address": "curator.example.org:7000"},
        "compute_nodes": [{"name": "compute-1", "address": "cn1.example.org:7200"}],
        "parties": [{"name": "party-a", "address": "a.example.org:7101"}, {"name": "party-b", "address": "b.example.org:7101"}],
    }
    (tmp_path / "federation.yaml").write_text(yaml.safe_dump(spec))
    with umask(0):
        res = pv.provision(pv.load_spec(tmp_path / "federation.yaml"), tmp_path / "sites")
        key_p, csr_p = pv.make_csr_files("party", "party-c", tmp_path / "home", "modes")
        pv.sign_csr_file(res.ca.folder, csr_p, [], tmp_path / "home")
    assert mode(res.ca.folder) == 0o700
    ca_secrets = check_tree(res.ca.folder)
    assert [p.name for p in ca_secrets] == ["ca.key"]
    site_secrets = check_tree(tmp_path / "sites")
    assert sorted(p.parent.name for p in site_secrets) == ["compute-1", "curator", "operator", "party-a", "party-b"]
    assert check_tree(tmp_path / "home") == [key_p]
    assert mode(csr_p) == 0o644 and mode(tmp_path / "home" / "site.crt") == 0o644


@pytest.mark.parametrize("wanted", [PRIVATE, PUBLIC])
def test_write_atomic_sets_the_mode_whatever_was_there(tmp_path, wanted):
    target = tmp_path / "state.json"
    target.write_text("old")
    target.chmod(0o666)
    with umask(0):
        write_atomic(target, "new", wanted)
    assert target.read_text() == "new" and mode(target) == wanted
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_write_atomic_failure_keeps_the_old_file(tmp_path):
    target = tmp_path / "ledger.json"
    write_atomic(target, b"old")
    with pytest.raises(TypeError):  # the write fails after the temporary file exists
        write_atomic(target, 12345)  # type: ignore[arg-type]
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["ledger.json"]
    with pytest.raises(ValueError):
        write_atomic(target, b"x", 0o4755)


def test_message_store_files_are_private_and_whole(tmp_path):
    store = MessageStore(tmp_path / "store", common_pb2.Ack)
    with umask(0):
        store.put("job-1", common_pb2.Ack())
    assert mode(tmp_path / "store" / "job-1.binpb") == 0o600
    assert store.get("job-1") == common_pb2.Ack() and store.list() == ["job-1"]
    for bad in ("", ".hidden", "a/b", "a\0b", "x" * 300):
        with pytest.raises(ValueError):
            store.put(bad, common_pb2.Ack())
        assert store.get(bad) is None
