"""mpdp.schema: encoding by public bounds and vocabularies, the canonical hash, the missing/unknown policies,
the private report, and the draft's warning."""

from __future__ import annotations

import gzip
import math

import numpy as np
import pytest

from mpdp.data.loaders import DatasetError
from mpdp.schema import DRAFT_WARNING, Schema, SchemaError, draft
from tests.conftest import REPO

SCHEMA = """\
mpdp_schema: 1
version: 3
columns: [age, colour, smoker, amount, outcome]
features:
  - {name: age, type: numeric, bounds: [0, 100]}
  - {name: colour, type: categorical, vocabulary: [red, green, blue]}
  - {name: smoker, type: binary, positive: yes, negative: no}
  - {name: amount, type: numeric, bounds: [0, 999], transform: log1p}
label: {column: outcome, positive: [sick, sick.], negative: [well, well.]}
row_norm: 10.0
"""


def schema(tmp_path, text: str = SCHEMA, **changes) -> Schema:
    s = Schema.load(_write(tmp_path / "schema.yaml", text))
    return s.model_copy(update=changes) if changes else s


def _write(path, text: str):
    path.write_text(text)
    return path


def test_encode_one_hot_scaling_binary_and_labels(tmp_path):
    s = schema(tmp_path)
    assert s.dimension == 6 and s.encoded_names() == ["age", "colour=red", "colour=green", "colour=blue", "smoker", "amount"]
    enc = s.encode_rows([[" 50", " green", " yes", "0", " sick"], ["100", "red", "no", "999", "well."]])
    np.testing.assert_allclose(enc.X, [[0.5, 0, 1, 0, 1, 0.0], [1.0, 1, 0, 0, 0, 1.0]])
    np.testing.assert_array_equal(enc.y, [1.0, -1.0])
    assert enc.report.used == 2 and enc.report.dropped == {} and enc.report.positive == 1


def test_symmetric_scale_and_row_norm_clip(tmp_path):
    s = schema(tmp_path, scale="symmetric", row_norm=1.0)
    enc = s.encode_rows([["0", "blue", "no", "0", "well"], ["50", "red", "yes", "0", "sick"]])
    assert enc.X.shape == (2, 6)
    np.testing.assert_allclose(np.linalg.norm(enc.X, axis=1), [1.0, 1.0])  # ‖(-1, 0, 0, 1, 0, -1)‖ = √3 > 1: clipped
    assert enc.report.clipped_rows == 2
    np.testing.assert_allclose(enc.X[0], np.array([-1, 0, 0, 1, 0, -1]) / math.sqrt(3))


def test_values_outside_the_public_bounds_are_clipped_and_counted(tmp_path):
    s = schema(tmp_path)
    enc = s.encode_rows([["-5", "red", "no", "5000", "well"], ["130", "red", "no", "1", "well"], ["20", "red", "no", "1", "well"]])
    assert enc.X[:, 0].tolist() == [0.0, 1.0, 0.2] and enc.X[0, 5] == 1.0
    assert enc.report.clipped == {"age": 2, "amount": 1}


def test_hash_is_canonical(tmp_path):
    a = schema(tmp_path)
    reordered = "# a comment\nrow_norm: 10.0\n" + SCHEMA.replace("row_norm: 10.0\n", "").replace("mpdp_schema: 1\n", "mpdp_schema: 1   # format\n")
    b = Schema.load(_write(tmp_path / "b.yaml", reordered))
    assert a.sha256() == b.sha256() and len(a.sha256()) == 64 and int(a.sha256(), 16) >= 0
    assert a.sha256() == Schema.model_validate_json(a.canonical()).sha256()  # a round trip through the canonical form
    for other in (SCHEMA.replace("version: 3", "version: 4"), SCHEMA.replace("[0, 100]", "[0, 110]"), SCHEMA.replace("red, green", "green, red")):
        assert Schema.load(_write(tmp_path / "c.yaml", other)).sha256() != a.sha256()


def test_unknown_category_refused_dropped_or_imputed_per_policy(tmp_path):
    rows = [["30", "purple", "no", "1", "well"], ["40", "red", "yes", "1", "sick"]]
    with pytest.raises(DatasetError, match="colour: 1 values outside the schema"):
        schema(tmp_path).encode_rows(rows)
    dropped = schema(tmp_path, unknown="drop").encode_rows(rows)
    assert dropped.report.used == 1 and dropped.report.dropped == {"unknown": 1} and dropped.report.examples == {"colour": ["purple"]}
    imputed = schema(tmp_path, unknown="impute").encode_rows(rows)
    assert imputed.report.used == 2 and imputed.X[0, 1:4].tolist() == [0, 0, 0] and imputed.report.imputed == {"colour": 1}
    with pytest.raises(DatasetError, match="age: 1 values outside"):
        schema(tmp_path).encode_rows([["old", "red", "no", "1", "well"]])  # not a number
    with pytest.raises(DatasetError, match="label outcome"):
        schema(tmp_path).encode_rows([["30", "red", "no", "1", "dead"]])


def test_missing_values_dropped_or_imputed(tmp_path):
    rows = [["?", "red", "no", "1", "well"], ["40", "", "yes", "1", "sick"], ["20", "red", "no", "1", "sick"]]
    d = schema(tmp_path).encode_rows(rows)
    assert d.report.used == 1 and d.report.dropped == {"missing": 2}
    i = schema(tmp_path, missing="impute").encode_rows(rows)
    assert i.report.used == 3 and i.X[0, 0] == 0.5 and i.X[1, 1:4].tolist() == [0, 0, 0]
    assert i.report.imputed == {"age": 1, "colour": 1}


def test_header_files_junk_lines_and_gzip(tmp_path):
    no_columns = SCHEMA.replace("columns: [age, colour, smoker, amount, outcome]\n", "")
    s = Schema.load(_write(tmp_path / "s.yaml", no_columns))
    p = tmp_path / "data.csv.gz"
    with gzip.open(p, "wt") as fh:
        fh.write("outcome,amount,smoker,colour,age,extra\nsick,1,yes,blue,30,x\n|1x3 junk\nwell,2,no,red,60,y\n\n")
    enc = s.encode_file(p)
    assert enc.report.rows == 3 and enc.report.used == 2 and enc.report.dropped == {"malformed": 1}
    assert enc.X[:, 0].tolist() == [0.3, 0.6] and enc.y.tolist() == [1.0, -1.0]
    with pytest.raises(DatasetError, match="no column 'colour'"):
        s.encode_rows([["age", "smoker", "amount", "outcome"], ["1", "yes", "1", "sick"]])


def test_libsvm_file_is_read_with_the_schemas_d(tmp_path):
    text = """\
mpdp_schema: 1
features:
  - {name: f1, type: binary, positive: "1", negative: "0"}
  - {name: f2, type: binary, positive: "1", negative: "0"}
  - {name: f3, type: numeric, bounds: [0, 4]}
label: {column: y, positive: "+1", negative: "-1"}
"""
    s = Schema.load(_write(tmp_path / "s.yaml", text))
    p = _write(tmp_path / "part.svm", "+1 1:1\n-1 2:1\n")  # f3 never occurs: d still 3
    enc = s.encode_file(p)
    assert enc.X.tolist() == [[1, 0, 0], [0, 1, 0]] and enc.y.tolist() == [1, -1]


@pytest.mark.parametrize("bad, match", [
    ("bounds: [0, 100]", "bounds: [100, 0]"),
    ("vocabulary: [red, green, blue]", "vocabulary: [red, red]"),
    ("row_norm: 10.0", "row_norm: 0"),
    ("mpdp_schema: 1", "mpdp_schema: 2"),
    ("columns: [age, colour, smoker, amount, outcome]", "columns: [age, colour]"),
    ("label: {column: outcome,", "label: {column: age,"),
])
def test_invalid_schemas_are_refused(tmp_path, bad, match):
    with pytest.raises(SchemaError):
        Schema.load(_write(tmp_path / "s.yaml", SCHEMA.replace(bad, match)))


def test_draft_proposes_a_schema_and_warns_that_its_bounds_are_private(tmp_path):
    p = _write(tmp_path / "d.csv", "age,colour,smoker,amount,outcome\n30,red,yes,10,sick\n70,blue,no,20.5,well\n45,green,no,0,well\n30,red,no,1,well\n")
    d = draft(p)
    assert "NOT public" in d.warning and d.warning == DRAFT_WARNING
    f = {x.name: x for x in d.schema.features}
    assert f["age"].bounds == (30, 70) and f["colour"].vocabulary == ["red", "blue", "green"] and f["smoker"].type == "binary"
    assert d.schema.label.column == "outcome" and d.schema.label.positive == ["sick"] and d.schema.columns is None
    assert d.schema.encode_file(p).report.used == 4  # the draft encodes the file it came from


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_adult_example_schema_encodes_adult_test(tmp_path):
    from tests.conftest import shared_file

    s = Schema.load(REPO / "examples" / "adult" / "schema.yaml")
    enc = s.encode_file(shared_file("adult", "adult.test.gz"))
    assert enc.report.dropped == {"malformed": 1}  # the junk first line
    assert enc.report.used == 16281 and enc.report.positive == 3846
    assert np.all(np.linalg.norm(enc.X, axis=1) <= 1.0 + 1e-12)


def test_cli_check_prints_the_local_report_and_draft_warns_on_stderr(tmp_path):
    import json

    from click.testing import CliRunner

    from mpdp_services.cli.schema import schema as group

    s = _write(tmp_path / "s.yaml", SCHEMA)
    good = _write(tmp_path / "good.csv", "30,red,no,1,well\n130,blue,yes,2,sick\n")
    out = CliRunner().invoke(group, ["check", str(s), str(good), "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["ok"] and doc["used"] == 2 and doc["clipped"] == {"age": 1} and doc["schema_sha256"] == Schema.load(s).sha256()
    bad = _write(tmp_path / "bad.csv", "30,purple,no,1,well\n")
    out = CliRunner().invoke(group, ["check", str(s), str(bad), "--json"])
    assert out.exit_code == 1 and "colour" in json.loads(out.output)["error"]["message"]
    data = _write(tmp_path / "d.csv", "age,colour,outcome\n30,red,sick\n70,blue,well\n45,green,well\n")
    out = CliRunner().invoke(group, ["draft", str(data), "-o", str(tmp_path / "draft.yaml")])
    assert out.exit_code == 0 and "NOT public" in out.stderr
    assert Schema.load(tmp_path / "draft.yaml").label.column == "outcome"


OTHER = """\
mpdp_schema: 1
version: 1
columns: [height, label]
features:
  - {name: height, type: numeric, bounds: [0, 3]}
label: {column: label, positive: [tall], negative: [short]}
"""


def _two_datasets(tmp_path):
    a = _write(tmp_path / "a.csv", "age,colour,smoker,amount,outcome\n40,red,yes,10,sick\n50,blue,no,3,well\n")
    b = _write(tmp_path / "b.csv", "height,label\n1.9,tall\n1.5,short\n")
    return a, b, _write(tmp_path / "a.yaml", SCHEMA), _write(tmp_path / "b.yaml", OTHER)


def test_federation_up_gives_each_dataset_its_schema_and_refuses_a_mix_before_starting(tmp_path):
    """`--schema NAME=PATH` per dataset; one schema for two different datasets is a usage error at once, naming the
    party, the dataset and what does not fit, before any process starts (nothing is written to the workdir)."""
    from click.testing import CliRunner

    from mpdp_services.cli.jobs import _apply_schemas, federation

    a, b, sa, sb = _two_datasets(tmp_path)
    ds = {"party-1": {"a": {"path": str(a)}, "b": {"path": str(b)}}, "party-2": {"a": {"path": str(a)}}}
    _apply_schemas(ds, (f"a={sa}", f"b={sb}"))
    assert ds["party-1"]["a"]["schema"] == str(sa.resolve()) and ds["party-1"]["b"]["schema"] == str(sb.resolve()) and ds["party-2"]["a"]["schema"] == str(sa.resolve())
    work = tmp_path / "fed"
    args = ["up", "--workdir", str(work), "--parties", "2", "--test-mode", "--key-bits", "512", f"--dataset=a=party-1:{a}", f"--dataset=b=party-1:{b}"]
    mixed = CliRunner().invoke(federation, [*args, "--schema", str(sa)])
    assert mixed.exit_code == 2 and not work.exists(), mixed.output
    assert "party-1: dataset 'b' (b.csv) does not fit its schema a.yaml" in mixed.output and "--schema NAME=PATH" in mixed.output
    assert "Traceback" not in mixed.output
    for bad, says in ([f"c={sa}"], "no --dataset is called 'c'"), ([f"a={sa}", f"a={sb}"], "has two schemas"), ([f"b={sa}"], "does not fit its schema a.yaml"):
        out = CliRunner().invoke(federation, [*args, *[x for s in bad for x in ("--schema", s)]])
        assert out.exit_code == 2 and says in out.output and not work.exists(), out.output


def test_a_party_with_a_dataset_that_does_not_fit_its_schema_stops_at_startup(tmp_path):
    """The party config's per-dataset schemas are checked before the party listens (`mpdp serve party`)."""
    import asyncio

    from mpdp_services.common.config import DatasetConfig
    from mpdp_services.party import server
    from mpdp_services.party.datasets import schema_problems

    a, b, sa, sb = _two_datasets(tmp_path)
    good = {"a": DatasetConfig(path=a, schema=sa), "b": DatasetConfig(path=b, schema=sb), "raw": DatasetConfig(path=b)}
    assert schema_problems(good) == []
    bad = {"a": DatasetConfig(path=a, schema=sa), "b": DatasetConfig(path=b, schema=sa)}
    [problem] = schema_problems(bad)
    assert problem.startswith("dataset 'b' (b.csv) does not fit its schema a.yaml: ") and "no row is left after encoding" in problem

    class Cfg:  # only what serve() reads before it would listen
        name, datasets = "party-1", bad

    with pytest.raises(SystemExit) as stop:
        asyncio.run(server.serve(Cfg()))  # type: ignore[arg-type]
    assert stop.value.code == 2


def test_federation_up_again_in_the_same_folder_takes_the_new_datasets_and_schemas(tmp_path):
    """A second `federation up` in a folder a previous run left keeps the certificates but writes this run's configs
    (before, the old party.yaml files were reused and new --dataset/--schema options silently ignored)."""
    import yaml

    from mpdp_services.launcher.federation import LocalFederation

    a, b, sa, sb = _two_datasets(tmp_path)
    first = LocalFederation(tmp_path / "fed", ["party-1"], {"party-1": {"a": {"path": str(a), "schema": str(sa)}}})
    first.provision()
    cert = (tmp_path / "fed" / "party-1" / "site.crt").read_bytes()
    again = LocalFederation(tmp_path / "fed", ["party-1"], {"party-1": {"b": {"path": str(b), "schema": str(sb)}}}, budget_epsilon=7.0)
    again.write_configs()
    cfg = yaml.safe_load((tmp_path / "fed" / "party-1" / "party.yaml").read_text())
    assert cfg["datasets"] == {"b": {"path": str(b), "schema": str(sb)}} and cfg["budget_epsilon"] == 7.0
    assert (tmp_path / "fed" / "party-1" / "site.crt").read_bytes() == cert
    from click.testing import CliRunner

    from mpdp_services.cli.jobs import federation

    other = CliRunner().invoke(federation, ["up", "--workdir", str(tmp_path / "fed"), "--parties", "2", "--test-mode", "--key-bits", "512"])
    assert other.exit_code == 2 and "holds another federation (no certificate for party-2)" in other.output, other.output
