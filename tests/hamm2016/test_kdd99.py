"""KDD-99 loader shared by the experiments (mpdp/data/kdd99.py): shapes, d = 123, unit ball, labels, vocabulary,
and that the scaling statistics come from the public auxiliary rows only."""

from __future__ import annotations

import gzip
from dataclasses import replace

import numpy as np
import pytest

from mpdp.data import kdd99 as K
from mpdp.data.loaders import DatasetError

from tests.conftest import SHARED_DATA, shared_file


pytestmark = pytest.mark.slow  # reads KDD-99 (minutes): not in `make test-fast`


def require_kdd() -> None:
    """The KDD-99 files must sit in ../shared/data/kddcup99: a missing file FAILS the test (never skips)."""
    for name in (K.TRAIN_FILE, K.TEST_FILE, K.TYPES_FILE):
        shared_file("kddcup99", name)


@pytest.fixture(scope="module")
def binary() -> K.KddTask:
    require_kdd()
    return K.load_kdd_task(SHARED_DATA, "binary")


def test_files_shapes_and_dimension(binary: K.KddTask) -> None:
    assert len(binary.train) == 494_021 and len(binary.test) == 311_029
    assert binary.train.numeric.shape == (494_021, 38) and binary.train.symbolic.shape == (494_021, 3)
    assert K.N_FEATURES == 123 == len(K.feature_names()) == 38 + len(K.PROTOCOLS) + len(K.SERVICES) + len(K.FLAGS)
    assert (len(K.PROTOCOLS), len(K.SERVICES), len(K.FLAGS)) == (3, 71, 11)
    assert len(set(K.SERVICES)) == 71
    st = K.Standardizer.fit(binary.train, np.arange(1000))
    assert st.transform(binary.test, slice(0, 10)).shape == (10, 123)


def test_binary_label_balance(binary: K.KddTask) -> None:
    # published counts (../shared/data/README.md): normal. 97,278 of 494,021 and 60,593 of 311,029
    assert np.bincount(binary.y_train).tolist() == [97_278, 396_743]
    assert np.bincount(binary.y_test).tolist() == [60_593, 250_436]
    assert binary.class_names == ("normal", "attack") and binary.classes == 2


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_every_row_lies_in_the_unit_ball(binary: K.KddTask) -> None:
    gen = np.random.default_rng(0)  # public simulation data: which rows are auxiliary
    aux = gen.choice(len(binary.train), 5000, replace=False)
    st = K.Standardizer.fit(binary.train, aux)
    for raw in (binary.train, binary.test):
        for lo in range(0, len(raw), 200_000):
            X = st.transform(raw, slice(lo, lo + 200_000))
            norms = np.linalg.norm(X, axis=1)
            assert norms.max() <= 1.0 + 1e-12
            assert np.all(np.isfinite(X))
    # with row scale 1 nearly every row is scaled onto the sphere (long rows: good signal-to-noise under DP)
    assert np.median(np.linalg.norm(st.transform(binary.test, slice(0, 20_000)), axis=1)) > 0.999


def test_vocabulary_is_fixed_and_unseen_values_give_zero_blocks(binary: K.KddTask, tmp_path) -> None:
    # every symbolic value of both files is in the vocabulary
    assert (binary.train.symbolic >= 0).all() and (binary.test.symbolic >= 0).all()
    icmp = K.SERVICES.index("icmp")  # the service that occurs in corrected.gz only
    assert int((binary.test.symbolic[:, 1] == icmp).sum()) == 2 and int((binary.train.symbolic[:, 1] == icmp).sum()) == 0
    for s in K.SERVICES_NOT_IN_FILES:  # full-file-only services: padding columns, zero here
        j = K.SERVICES.index(s)
        assert not np.any(binary.train.symbolic[:, 1] == j) and not np.any(binary.test.symbolic[:, 1] == j)
    # a file with values outside the vocabulary: all-zero one-hot block, other blocks intact
    line = "0,tcp,{svc},{flag},181,5450,0,0,0,0,0,1,0,0,0,0,0,0,0,0,0,0,8,8,0.00,0.00,0.00,0.00,1.00,0.00,0.00,9,9,1.00,0.00,0.11,0.00,0.00,0.00,0.00,0.00,{lab}."
    p = tmp_path / "tiny.gz"
    with gzip.open(p, "wt") as fh:
        fh.write(line.format(svc="http", flag="SF", lab="normal") + "\n")
        fh.write(line.format(svc="gopher2000", flag="XYZ", lab="smurf") + "\n")
    raw = K.parse_kdd_file(p)
    assert raw.symbolic.tolist() == [[0, K.SERVICES.index("http"), K.FLAGS.index("SF")], [0, -1, -1]]
    oh = K.one_hot(raw.symbolic)
    assert oh.shape == (2, 85)
    assert oh[0].sum() == 3 and oh[1].sum() == 1 and oh[1, 0] == 1.0  # only protocol=tcp is set
    assert K.binary_labels(raw).tolist() == [0, 1] and raw.labels().tolist() == ["normal", "smurf"]
    assert raw.numeric[0, 1] == 181.0 and raw.numeric[0, 2] == 5450.0


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_scaling_statistics_come_from_the_auxiliary_rows_only(binary: K.KddTask) -> None:
    raw = binary.train
    gen = np.random.default_rng(1)  # public simulation data: the auxiliary rows
    aux = np.sort(gen.choice(len(raw), 3000, replace=False))
    st = K.Standardizer.fit(raw, aux)
    L = np.log1p(raw.numeric[aux])
    np.testing.assert_allclose(st.mean, L.mean(axis=0))
    sd = L.std(axis=0)
    np.testing.assert_allclose(st.scale[sd > 0], sd[sd > 0])
    assert st.n_reference == 3000
    assert np.all(st.scale[sd == 0] == 1.0)  # constant columns (e.g. num_outbound_cmds) are not divided by 0
    # changing every non-auxiliary (private) row leaves the statistics unchanged
    other = np.ones(len(raw), bool)
    other[aux] = False
    numeric = raw.numeric.copy()
    numeric[other] = numeric[other] * 1000.0 + 7.0
    st2 = K.Standardizer.fit(replace(raw, numeric=numeric), aux)
    np.testing.assert_array_equal(st.mean, st2.mean)
    np.testing.assert_array_equal(st.scale, st2.scale)
    # ... while changing one auxiliary row changes them
    numeric[aux[0]] += 1e6
    assert not np.array_equal(K.Standardizer.fit(replace(raw, numeric=numeric), aux).mean, st.mean)


def test_multiclass_categories_and_dropped_test_attacks() -> None:
    require_kdd()
    task = K.load_kdd_task(SHARED_DATA, "multiclass")
    assert task.class_names == K.CATEGORIES == ("normal", "dos", "probe", "r2l", "u2r")
    assert np.bincount(task.y_train).tolist() == [97_278, 391_458, 4_107, 1_126, 52]
    # test attacks that training_attack_types.txt does not know are dropped (documented), the rest kept
    dropped = sum(task.dropped_test_labels.values())
    assert dropped == 18_729 and len(task.test_rows) == 311_029 - dropped == len(task.y_test)
    assert {"mailbomb", "snmpgetattack", "apache2"} <= set(task.dropped_test_labels)
    assert np.bincount(task.y_test, minlength=5).tolist() == [60_593, 223_298, 2_377, 5_993, 39]
    kept_labels = set(task.test.labels()[task.test_rows])
    assert not kept_labels & set(task.dropped_test_labels)


def test_missing_files_raise_dataset_error_mentioning_data(tmp_path) -> None:
    with pytest.raises(DatasetError, match="--data"):
        K.load_kdd_task(tmp_path, "binary")
    (tmp_path / "kddcup99").mkdir()
    with pytest.raises(DatasetError, match="--data"):
        K.load_kdd_task(tmp_path, "multiclass")
    with pytest.raises(ValueError, match="task"):
        K.load_kdd_task(tmp_path, "ternary")
