"""A planted entry in a party's durable model cache (someone with write access to the cache folder, or a damaged
disk) must not reach the protocol.

Invariants: a cached ŵ_j with an n no data file could hold (10¹²) or a norm no minimiser of the job's objective has
(5·10⁶, the bound is min(1/c, √(2·log 2/c))) is a miss: the party retrains, logs why, the job publishes and the
cache holds the retrained model again; a model the party really trained is always plausible.
"""

from __future__ import annotations

import json
import math
import signal
import time

import numpy as np
import pytest
import yaml

from mpdp.learn import logreg
from mpdp.learn.model_cache import LocalModel
from mpdp.pathak2010.params import PathakParams
from mpdp.pathak2010.party import implausible_local_model, train_local

from .conftest import assert_ledgers_within_budget, pathak_job, pathak_spec, synthetic_rows


def _params(lam: float = 0.05) -> PathakParams:
    spec = pathak_spec()
    setattr(spec, "lambda", lam)
    return PathakParams.from_spec("pk-cache", spec)


@pytest.mark.parametrize("lam", [1e-4, 1e-3, 0.05, 1.0])
def test_trained_models_are_plausible_and_planted_ones_are_not(lam):
    params = _params(lam)
    X, y = synthetic_rows(200, 3)
    model = train_local(X * 3, y, params)  # rows clipped to the unit ball by train_local
    c = logreg.reg_coefficient(params.calibration.lam, params.calibration.convention)
    assert np.linalg.norm(model.w) <= min(1 / c, math.sqrt(2 * math.log(2) / c))
    assert implausible_local_model(model, params, data_bytes=200 * 40) is None
    assert "n = " in implausible_local_model(LocalModel(model.w, 10**12), params, data_bytes=10**15)  # above MAX_LOCAL_ROWS
    assert "byte data file" in implausible_local_model(LocalModel(model.w, 10**6), params, data_bytes=8000)
    w = np.full(model.d, 5e6 / math.sqrt(model.d))
    assert "‖w‖" in implausible_local_model(LocalModel(w, 200), params, data_bytes=8000)
    assert implausible_local_model(LocalModel(np.array([np.nan] * model.d), 200), params, 8000) is not None


def _restart(fed, site: str) -> None:
    """Same ports as before; a port another process took meanwhile (shared host) is retried a few times."""
    for attempt in range(5):
        try:
            return fed.restart(site)
        except RuntimeError:
            if attempt == 4:
                raise
            time.sleep(1.0)


def test_a_planted_cache_entry_is_retrained_and_the_job_publishes(fed):
    party = "party-1"
    cache = fed.workdir / party / "model-cache"
    cfgp = fed.workdir / party / "party.yaml"
    cfg = yaml.safe_load(cfgp.read_text())
    cfg["model_cache_dir"] = str(cache)
    fed.kill(party, signal.SIGTERM)
    cfgp.write_text(yaml.safe_dump(cfg))
    _restart(fed, party)
    pathak_job(fed, seed=b"cache-1")  # trains and writes the durable copy
    files = list(cache.glob("*.json"))
    assert len(files) == 1, files
    honest = json.loads(files[0].read_text())
    w = np.array([float.fromhex(x) for x in honest["w"]])
    planted = {**honest, "n": 10**12, "w": [float(x).hex() for x in w / np.linalg.norm(w) * 5e6]}
    fed.kill(party, signal.SIGTERM)  # the memory copy goes; the next job reads the file
    files[0].write_text(json.dumps(planted))
    before = fed.procs[party].log.stat().st_size
    _restart(fed, party)
    pathak_job(fed, seed=b"cache-2")
    time.sleep(0.2)
    log = fed.procs[party].log.read_bytes()[before:].decode(errors="replace")
    assert "implausible" in log and "retraining" in log, log[-2000:]
    again = json.loads(files[0].read_text())
    assert again["n"] == honest["n"] and again["w"] == honest["w"]  # the retrained ŵ_j replaced the planted one
    assert_ledgers_within_budget(fed)
