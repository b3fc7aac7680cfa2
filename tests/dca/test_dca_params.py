"""DcaParams: validation names the field and the bound; spec round trip."""

from __future__ import annotations

import math

import pytest

from mpdp.dca.errors import InvalidJob
from mpdp.dca.params import DcaParams
from mpdp.messages import common_pb2, dca_pb2
from mpdp.protocol import LocalProtocolError, Problem

from tests.dca.helpers import NODES, make_params


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"dimension": 0}, "dimension"),
        ({"clients": 4, "max_missing": 3}, "N − T − 1"),
        ({"max_missing": -1}, "max_missing"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": math.inf}, "epsilon"),
        ({"delta": 1.0}, "delta"),
        ({"sensitivity": -1.0}, "sensitivity"),
        ({"mode": "fast"}, "mode"),
        ({"frac_bits": 4}, "fractional_bits"),
        ({"clip_bounds": (1.0, 2.0)}, "clip_bounds"),
        ({"clip_bounds": (0.0,)}, "clip_bounds"),
        ({"nodes": ("solo",)}, "compute_nodes"),
        ({"nodes": ("a", "a")}, "distinct"),
        ({"roster": ("x",) * 20}, "roster"),
        ({"roster": tuple(f"c{i}" for i in range(19))}, "roster"),
        ({"deadline_seconds": 0.0}, "deadline"),
        ({"job_id": ""}, "job_id"),
    ],
)
def test_validation_names_the_field(overrides, field):
    with pytest.raises(InvalidJob, match=field) as e:
        make_params(**overrides)
    assert isinstance(e.value, LocalProtocolError) and e.value.problem == Problem.INVALID_JOB


def test_spec_round_trip():
    p = make_params(dimension=3, clip_bounds=(1.0, 2.0, 0.5), roster=tuple(f"c{i}" for i in range(20)), seed_compressed=True, purpose="std-round")
    spec = p.to_spec()
    assert spec.mode == common_pb2.CORRECTED and list(spec.compute_nodes) == list(NODES)
    back = DcaParams.from_spec("job-1", dca_pb2.DcaJobSpec.FromString(spec.SerializeToString()))
    assert back == p
    assert back.sigma_client == p.sigma_client and back.seeded


def test_spec_defaults():
    spec = dca_pb2.DcaJobSpec(dimension=2, clients=10, max_missing=1, epsilon=1.0, delta=1e-5, sensitivity=1.0, mode=common_pb2.PAPER, compute_nodes=["a", "b"],
                              validate=dca_pb2.VALIDATE_NONE)
    p = DcaParams.from_spec("j", spec)
    assert (p.frac_bits, p.clip_bounds, p.deadline_seconds, p.mode, p.seeded) == (32, (1.0,), 600.0, "paper", False)


def test_a_spec_that_says_nothing_about_validation_is_validated():
    """The wire's zero value of ``validate`` is the range proof (f = 16 then); with the default (floating-point) noise such
    a spec is refused, never run unproven; only VALIDATE_NONE asks for an unproven job."""
    base = dict(dimension=2, clients=10, max_missing=1, epsilon=1.0, delta=1e-5, sensitivity=1.0, mode=common_pb2.CORRECTED, compute_nodes=["a", "b"])
    p = DcaParams.from_spec("j", dca_pb2.DcaJobSpec(**base, noise=dca_pb2.DISCRETE_GAUSSIAN))
    assert (p.validate, p.frac_bits) == ("range", 16) and p.validation is not None and "not proven" not in p.guarantee.statement
    with pytest.raises(InvalidJob, match="validated job"):
        DcaParams.from_spec("j", dca_pb2.DcaJobSpec(**base))
    assert DcaParams.from_spec("j", dca_pb2.DcaJobSpec(**base, validate=dca_pb2.VALIDATE_NONE)).validate == "none"
    with pytest.raises(InvalidJob, match="mode"):
        DcaParams.from_spec("j", dca_pb2.DcaJobSpec(dimension=2, clients=10, epsilon=1.0, delta=1e-5, sensitivity=1.0, compute_nodes=["a", "b"]))


def test_ledger_entry_states_the_guarantee():
    p = make_params(purpose="x")
    e = p.ledger_entry()
    assert e["epsilon"] == p.guarantee.epsilon and e["delta"] == p.guarantee.delta and e["mode"] == "corrected" and e["seeded"]


# ---------------------------------------------------------------- secure sum (no noise; consumed inside the curator)

def test_secure_sum_job_has_no_noise_and_says_it_is_not_private():
    from mpdp.dca.params import DcaParams

    p = DcaParams(job_id="j", dimension=4, clients=5, max_missing=1, epsilon=0.0, delta=0.0, sensitivity=0.0, nodes=("a", "b", "c"), secure_sum=True, purpose="hamm2016/votes")
    assert p.sigma_std == 0.0 and p.sigma_client == 0.0
    assert p.guarantee.epsilon == float("inf") and "NOT differentially private" in p.guarantee.statement
    assert p.ledger_entry()["epsilon"] == 0.0 and p.ledger_entry()["protocol"] == "dca-secure-sum"
    back = DcaParams.from_spec("j", p.to_spec())
    assert back.secure_sum and back == p


@pytest.mark.parametrize("field", ["epsilon", "delta", "sensitivity"])
def test_secure_sum_refuses_noise_parameters(field):
    from mpdp.dca.errors import InvalidJob
    from mpdp.dca.params import DcaParams

    kw = dict(job_id="j", dimension=4, clients=5, max_missing=1, epsilon=0.0, delta=0.0, sensitivity=0.0, nodes=("a", "b"), secure_sum=True)
    kw[field] = 0.5
    with pytest.raises(InvalidJob, match="secure-sum"):
        DcaParams(**kw)


def test_secure_sum_is_exact_through_the_protocol():
    """Integer votes summed by the in-memory DCA run come back exactly, with no noise."""
    import numpy as np

    from mpdp.dca.driver import run_job
    from mpdp.dca.params import DcaParams
    from mpdp.math.drbg import Drbg

    p = DcaParams(job_id="j", dimension=6, clients=7, max_missing=2, epsilon=0.0, delta=0.0, sensitivity=0.0, nodes=("a", "b", "c"), secure_sum=True)
    Z = (np.arange(42).reshape(7, 6) % 2).astype(float)  # public test vectors
    run = run_job(p, Z, Drbg.from_os(), drop=[3])
    assert run.release is not None and run.release.secure_sum
    assert np.array_equal(np.asarray(run.release.values), Z[[0, 1, 2, 4, 5, 6]].sum(axis=0))
    assert run.release.noise_variance == 0.0
