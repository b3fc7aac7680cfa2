"""A federation in production mode: 2048-bit Paillier and DGK keys, no test switches."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from mpdp.pathak2010 import tester
from mpdp_services.operator.pathak2010 import make_spec
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.operator.pathak2010 import OperatorClient
from mpdp_services.launcher.federation import LocalFederation

from .conftest import PARTIES, synthetic_parts, write_parts

pytestmark = pytest.mark.integration


def test_2048_bit_job_publishes_and_seeds_are_refused(tmp_path):
    parts = synthetic_parts([80, 70, 90], seed=11)
    fed = LocalFederation(tmp_path / "fed", PARTIES, write_parts(tmp_path, PARTIES, parts), test_mode=False, paillier_bits=2048, dgk_bits=2048)
    with fed, OperatorClient(Endpoints.load(fed.workdir)) as client:
        job = client.submit(make_spec("synthetic", PARTIES, 1.0, 0.1, "corrected", 120))
        status = client.wait(job, timeout=180)
        assert status.state == "PUBLISHED", status.detail
        model = client.model(job)
        assert not model.seeded and model.guarantee.epsilon == 1.0
        w = tester.rebuild(model)
        X = np.vstack([p[0] for p in parts])
        y = np.concatenate([p[1] for p in parts])
        assert np.mean(tester.classify(w, X) == y) > 0.6
        seeded = make_spec("synthetic", PARTIES, 1.0, 0.1, "corrected")
        seeded.simulation_seed = b"not-in-production"
        with pytest.raises(grpc.RpcError) as e:
            client.submit(seeded)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "test mode" in e.value.details()
