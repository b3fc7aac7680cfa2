"""`mpdp federation up --dataset NAME=PARTY:{description}`: a provisioned party's dataset description (Parquet, SQL
through an environment variable, Dask, CSV with a schema) on the command line, checked as the party will read it
before anything starts; every refusal names the party, the dataset and what is wrong, and nothing is written."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from mpdp_services.cli.jobs import _dataset_entry, federation

SCHEMA = """\
mpdp_schema: 1
features:
  - {name: a, type: numeric, bounds: [-3, 3]}
label: {column: t, positive: ["1"], negative: ["0"]}
"""


def test_a_description_becomes_the_party_config_entry_with_resolved_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name, party, entry = _dataset_entry("claims=party-2:{format: sql, query: 'SELECT a, t FROM x WHERE a = 1', dsn_env: CLAIMS_DSN, schema: s.yaml}")
    assert (name, party) == ("claims", "party-2")
    assert entry == {"format": "sql", "query": "SELECT a, t FROM x WHERE a = 1", "dsn_env": "CLAIMS_DSN", "schema": str(tmp_path / "s.yaml")}
    assert _dataset_entry("h=party-1:{format: parquet, path: parts/, schema: s.yaml, dask: local, dask_workers: 3}")[2] == {
        "format": "parquet", "path": str(tmp_path / "parts"), "schema": str(tmp_path / "s.yaml"), "dask": "local", "dask_workers": 3}
    assert _dataset_entry("bc=party-1:data/bc.csv")[2] == {"path": str(tmp_path / "data" / "bc.csv")}  # a plain path, as before


@pytest.mark.parametrize("description, says", [
    ("{format: sql, table: t, dsn: 'host=db password=hunter2', schema: s.yaml}", "name that with dsn_env"),
    ("{formt: csv, path: x.csv}", "unknown field(s) formt"),
    ("{format: [}", "not a YAML mapping"),
    ("{format: sql, dsn_env: X, schema: s.yaml}", "exactly one of table and query"),
    ("{format: parquet, path: parts/}", "needs a schema"),
    ("{format: xlsx, path: a.xlsx}", "format: Input should be 'libsvm'"),
    ("{format: parquet, path: parts/, schema: s.yaml, dask: 'tcp://10.0.0.1:8786'}", "tls://host:port"),
])
def test_a_bad_description_is_a_usage_error_before_anything_starts(tmp_path, monkeypatch, description, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(SCHEMA)
    work = tmp_path / "fed"
    r = CliRunner().invoke(federation, ["up", "--workdir", str(work), "--parties", "2", "--test-mode", "--key-bits", "512", "--dataset", f"d=party-1:{description}"])
    assert r.exit_code == 2 and says in r.output and "party-1's dataset 'd'" in r.output, r.output
    assert "hunter2" not in r.output and "Traceback" not in r.output and not work.exists()


def test_a_dataset_for_a_party_the_federation_does_not_have_is_refused(tmp_path):
    r = CliRunner().invoke(federation, ["up", "--workdir", str(tmp_path / "fed"), "--parties", "2", "--test-mode", "--key-bits", "512",
                                        "--dataset", f"d=party-7:{tmp_path / 'x.csv'}"])
    assert r.exit_code == 2 and "no party 'party-7'" in r.output and not (tmp_path / "fed").exists(), r.output
