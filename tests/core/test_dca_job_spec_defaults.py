"""The user-facing DCA job defaults (the Python API's job_spec and `mpdp dca create`): every DP sum is validated
unless the caller opts out, and an opt-out is stated in the guarantee."""

import pytest

from mpdp.dca.params import DcaParams
from mpdp_services.dca_client.client import job_spec

COMMON = dict(dimension=3, clients=6, max_missing=1, epsilon=1.0, delta=1e-6, sensitivity=2.0, nodes=["node-1", "node-2"])


def test_a_job_is_validated_by_default_with_discrete_noise_and_f_16():
    p = DcaParams.from_spec("j", job_spec(**COMMON))
    assert (p.validate, p.noise, p.frac_bits) == ("range", "discrete-gaussian", 16)
    assert p.validation is not None and "proven valid" in p.guarantee.statement and "not proven" not in p.guarantee.statement


def test_validate_none_keeps_the_unvalidated_job_and_says_so():
    p = DcaParams.from_spec("j", job_spec(**COMMON, validate="none"))
    assert (p.validate, p.noise, p.frac_bits, p.validation) == ("none", "gaussian", 32, None)
    assert "not proven valid" in p.guarantee.statement


@pytest.mark.parametrize("validate", ["range", "l2", "one-hot"])
def test_floating_point_noise_cannot_be_validated(validate):
    with pytest.raises(ValueError, match="validate none"):
        job_spec(**COMMON, validate=validate, noise="gaussian")
