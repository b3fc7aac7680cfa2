"""`mpdp federation up --dataset`: the LIBSVM parts of one dataset are read with one d (the largest index in any
part), since a LIBSVM file lists only its non-zero features; CSV files and datasets with a schema are left alone."""

from __future__ import annotations

from mpdp_services.cli.jobs import _libsvm_dimensions


def test_libsvm_parts_get_the_largest_index_and_other_files_are_untouched(tmp_path):
    a, b, c = tmp_path / "a.libsvm", tmp_path / "b.libsvm", tmp_path / "c.csv"
    a.write_text("-1 1:0.5 3:1\n+1 2:1\n")
    b.write_text("1 4:1 # a comment\n\n-1 1:1\n")
    c.write_text("0.1,0.2,1\n")
    ds = {"party-1": {"adult": {"path": str(a)}, "table": {"path": str(c)}}, "party-2": {"adult": {"path": str(b)}},
          "party-3": {"adult": {"path": str(a), "schema": "s.yaml"}}}
    _libsvm_dimensions(ds)
    assert ds["party-1"]["adult"] == {"path": str(a), "format": "libsvm", "n_features": 4}
    assert ds["party-2"]["adult"]["n_features"] == 4
    assert ds["party-1"]["table"] == {"path": str(c)} and "n_features" not in ds["party-3"]["adult"]
