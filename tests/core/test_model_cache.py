"""The party's local-model cache: the same inputs hit, any change to the data, λ or a learner parameter misses,
and a hit gives the very ŵ_j that training gives (so the protocol's messages, and its guarantee, are unchanged)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest

from mpdp.learn.model_cache import LocalModel, ModelCache, cache_key, file_digest
from mpdp.pathak2010.params import PathakParams
from mpdp.pathak2010.party import train_local
from mpdp_services.common.config import DatasetConfig
from mpdp_services.operator.pathak2010 import make_spec
from mpdp_services.party.pathak2010 import local_model_key


def _data(path: Path, seed: int = 0, n: int = 60, d: int = 4) -> Path:
    g = np.random.default_rng(seed)  # public simulation data
    X = g.random((n, d))
    y = np.where(X[:, 0] > 0.5, 1.0, 0.0)
    np.savetxt(path, np.column_stack([X, y]), delimiter=",", fmt="%.17g")
    return path


def _params(lam: float = 0.01, mode: str = "corrected") -> PathakParams:
    return PathakParams.from_spec("j", make_spec("bench", ["p1", "p2"], 1.0, lam, mode))


def test_same_inputs_hit_and_changes_miss(tmp_path: Path) -> None:
    ds = DatasetConfig(path=_data(tmp_path / "a.csv"), format="csv")
    base = local_model_key(ds, _params())
    assert local_model_key(ds, _params()) == base  # same file, λ, parameters: the same key
    assert local_model_key(ds, _params(lam=0.02)) != base  # λ
    assert local_model_key(ds, _params(mode="paper")) != base  # the paper's λ‖w‖² convention changes ŵ
    assert local_model_key(DatasetConfig(path=ds.path, format="csv", label_column=0), _params()) != base  # how the file is read
    _data(ds.path, seed=1)  # the file's content
    assert local_model_key(ds, _params()) != base
    assert cache_key(a=1e-3) == cache_key(a=0.001) and cache_key(a=0.001) != cache_key(a=0.0010000000000000002)


def test_cache_hits_misses_and_bound(tmp_path: Path) -> None:
    cache = ModelCache(capacity=2)
    m = LocalModel(np.arange(3.0), 10)
    assert cache.get("k1") is None and cache.misses == 1
    cache.put("k1", m)
    got = cache.get("k1")
    assert got is not None and got.n == 10 and np.array_equal(got.w, m.w) and cache.hits == 1
    with pytest.raises(ValueError):
        got.w[0] = 5.0  # read-only: a job cannot alter the cached ŵ
    cache.put("k2", m)
    cache.get("k1")  # k1 is now the most recent
    cache.put("k3", m)
    assert len(cache) == 2 and cache.get("k2") is None and cache.get("k1") is not None


def test_durable_copy_is_private_and_survives(tmp_path: Path) -> None:
    key = cache_key(x="durable")
    w = np.array([0.1, -2.5e-7, 3.0])
    ModelCache(directory=tmp_path / "models").put(key, LocalModel(w, 42))
    files = list((tmp_path / "models").iterdir())
    assert [f.name for f in files] == [f"{key}.json"]
    assert stat.S_IMODE(os.stat(files[0]).st_mode) == 0o600
    got = ModelCache(directory=tmp_path / "models").get(key)  # a fresh process reads it back exactly
    assert got is not None and got.n == 42 and np.array_equal(got.w, w)
    files[0].write_text("{not json")
    assert ModelCache(directory=tmp_path / "models").get(key) is None  # a damaged copy is a miss, never an error


def test_cached_model_equals_training(tmp_path: Path) -> None:
    """A hit hands the machine exactly what training returns: ŵ_j is a deterministic function of data and λ."""
    from mpdp.data.loaders import load, to_pm1

    path = _data(tmp_path / "b.csv", seed=3)
    X, y = load(path, "csv")
    a, b = train_local(X, to_pm1(y), _params()), train_local(X, to_pm1(y), _params())
    assert a.n == b.n == 60 and np.array_equal(a.w, b.w)
    assert not np.array_equal(a.w, train_local(X, to_pm1(y), _params(lam=0.05)).w)
    assert len(file_digest(path)) == 64


def test_existing_directory_is_made_private(tmp_path: Path) -> None:
    """A cache directory that already exists (made by a deploy script under umask 022) is narrowed to 0700."""
    d = tmp_path / "models"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    ModelCache(2, d)
    assert stat.S_IMODE(d.stat().st_mode) == 0o700


@pytest.mark.parametrize("body", [
    '{"key": "K", "n": 5, "w": []}',  # no coefficients: d = 0
    '{"key": "K", "n": 5.9, "w": ["0x1.0p+0"]}',  # n not an integer
    '{"key": "K", "n": true, "w": ["0x1.0p+0"]}',
    '{"key": "K", "n": 5, "w": [["0x1.0p+0"]]}',
    '["K", 5]',
])
def test_damaged_durable_copy_is_a_miss(tmp_path: Path, body: str) -> None:
    key = cache_key(case="damaged")
    cache = ModelCache(2, tmp_path)
    (tmp_path / f"{key}.json").write_text(body.replace('"K"', f'"{key}"'))
    assert cache.get(key) is None and cache.misses == 1
