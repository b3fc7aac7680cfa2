"""The Dask cluster a party starts for a dataset (``dask: local``) as a local attacker finds it.

A Dask scheduler runs whatever a connected client submits, in worker processes that can read what the party can.
Expected: the scheduler listens on loopback behind mutual TLS (mpdp/data/dask_security.py): a plain TCP client, a
TLS client without a certificate and one with a certificate of another CA cannot connect; the party's own sums still
run; the workers' working directory is the cluster's private folder, not the party's (where its site.key is); the
cluster's key files are 0600; all of it is gone once the cluster is closed.
"""

from __future__ import annotations

import os
import ssl
import socket
import stat
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("distributed")

from distributed import Client  # noqa: E402

from mpdp.data import dask_security, engine  # noqa: E402
from mpdp.regression.statistics import statistics_contribution  # noqa: E402

SCHEMA = """\
mpdp_schema: 1
features:
  - {name: a, type: numeric, bounds: [-3, 3]}
label: {column: t, positive: ["1"], negative: ["0"]}
"""


@pytest.fixture
def party_cluster(tmp_path, monkeypatch):
    """A dataset run on a local cluster, started from a folder that holds a site.key (as a party's folder does)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "site.key").write_text("the party's key\n")
    monkeypatch.chdir(site)
    rng = np.random.default_rng(2)
    pq.write_table(pa.table({"a": rng.normal(size=200), "t": rng.integers(0, 2, size=200)}), tmp_path / "d.parquet")
    (tmp_path / "s.yaml").write_text(SCHEMA)
    ds = SimpleNamespace(path=tmp_path / "d.parquet", format="parquet", n_features=None, label_column=-1, schema_file=tmp_path / "s.yaml",
                         batch_rows=64, dask="local", dask_workers=1)
    total = statistics_contribution(ds, "t", "std", [1.0, 1.0], 10**6)  # starts the cluster and uses it
    client = engine._clients[("local", 1)]
    yield site, client, total
    engine.close_clients()


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def test_the_partys_scheduler_takes_no_client_without_its_certificate(party_cluster, tmp_path):
    site, client, total = party_cluster
    assert np.all(np.isfinite(total))
    address = client.scheduler.address
    assert address.startswith("tls://127.0.0.1:"), address
    port = _port(address)
    with pytest.raises((OSError, TimeoutError)):  # a plain TCP Dask client: refused
        Client(f"tcp://127.0.0.1:{port}", timeout="5s")
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # an attacker who does not check the server either
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:  # TLS without a client certificate
        try:
            with ctx.wrap_socket(raw) as tls:
                tls.sendall(b"\x00" * 64)
                closed = tls.recv(1) == b""  # TLS 1.3: the server's alert arrives after the client's handshake
        except (ssl.SSLError, ConnectionError, OSError):
            closed = True
    assert closed, "the scheduler kept a TLS connection that has no client certificate"
    (tmp_path / "other" / "tls").mkdir(parents=True)
    other = dask_security.local_security(tmp_path / "other")  # a certificate of another CA
    with pytest.raises((OSError, TimeoutError)):
        Client(address, timeout="5s", security=other)


def test_the_workers_do_not_work_in_the_partys_folder(party_cluster):
    site, client, _ = party_cluster
    folder = next(f for f in engine._folders)
    cwds = list(client.run(os.getcwd).values())
    assert cwds and all(Path(c).resolve() != site.resolve() and Path(c).resolve().is_relative_to(folder.resolve()) for c in cwds), cwds
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for key in (folder / "tls").glob("*.key"):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key
    engine.close_clients()
    assert not folder.exists()


def test_an_external_scheduler_must_be_tls_with_the_partys_certificate(tmp_path):
    from mpdp_services.common.config import DatasetConfig

    schema = tmp_path / "s.yaml"
    schema.write_text(SCHEMA)
    tls = {"cert": tmp_path / "c.crt", "key": tmp_path / "c.key", "ca": tmp_path / "ca.crt"}
    for bad in ({"dask": "tcp://10.0.0.5:8786", "dask_tls": tls}, {"dask": "tls://10.0.0.5:8786"}, {"dask": "10.0.0.5:8786"}):
        with pytest.raises(ValueError, match="tls://"):
            DatasetConfig(path=tmp_path / "d.parquet", format="parquet", schema=schema, **bad)
    ok = DatasetConfig(path=tmp_path / "d.parquet", format="parquet", schema=schema, dask="tls://10.0.0.5:8786", dask_tls=tls)
    assert ok.dask_tls is not None and ok.dask_tls.ca == tmp_path / "ca.crt"
