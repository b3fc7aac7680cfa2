"""Fixed-point encoding into Z_2^64 and the headroom check (our encoding for Algorithm 1)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mpdp.dca import sharing
from mpdp.dca.errors import InvalidJob
from mpdp.dca.params import NOISE_TAIL
from mpdp.math.fixedpoint import EncodingOverflow, decode_u64, encode_u64

from tests.dca.helpers import make_params


@pytest.mark.parametrize("f", [16, 24, 32])
def test_round_trip_negatives_and_zero(f):
    v = np.array([-3.75, -1.0, -2.0**-f, 0.0, 2.0**-f, 0.5, 1234.5678, -1234.5678])
    u = encode_u64(v, f, bound=2000.0)
    assert u.dtype == np.uint64
    assert u[0] > np.uint64(2**63)  # negatives wrap to the top half of Z_2^64
    back = decode_u64(u, f)
    assert np.max(np.abs(back - v)) <= 2.0 ** (-f - 1)
    assert back[2] == -(2.0**-f) and back[4] == 2.0**-f


def test_round_trip_near_the_bound():
    f = 32
    bound = math.ldexp(1.0, 62 - f)  # the client's encode bound: 2^30 with f = 32
    v = np.array([bound, -bound, bound - 2.0**-f, -(bound - 2.0**-f)])
    back = decode_u64(encode_u64(v, f, bound), f)
    assert np.array_equal(back, v)


def test_overflow_raises():
    with pytest.raises(EncodingOverflow):
        encode_u64(np.array([1.0, -2.5]), 32, bound=2.0)  # |v| above the bound
    with pytest.raises(EncodingOverflow):
        encode_u64(np.array([1.0]), 32, bound=2.0**31)  # bound·2^f = 2^63 does not fit
    with pytest.raises(EncodingOverflow):
        encode_u64(np.array([np.nan]), 32, bound=1.0)


def test_sum_near_headroom_limit_is_exact_and_one_more_wraps():
    """N values of magnitude v with N·v·2^f just below 2^63 sum exactly mod 2^64; just above, the sum wraps."""
    f, n = 32, 2000
    k = (2**63 - 1) // n  # < 2^53, so v = k/2^f is exact in float64 and N·v·2^f < 2^63
    v = k / 2**f
    enc = encode_u64(np.full(n, -v), f, bound=2.0 ** (62 - f))
    total = sharing.ring_sum(enc)
    assert int(total.view(np.int64)) == -n * k
    assert decode_u64(total, f) == pytest.approx(-n * v, rel=1e-15)
    # one more client pushes |Σ| past 2^63: the ring sum wraps and decodes to a large positive number
    enc2 = np.concatenate([enc, encode_u64(np.array([-v]), f, bound=2.0 ** (62 - f))])
    assert int(sharing.ring_sum(enc2).view(np.int64)) != -(n + 1) * k
    assert decode_u64(sharing.ring_sum(enc2), f) > 0


def test_headroom_check_before_any_share():
    """N·(max c + 8σ_client)·2^f < 2^63 is checked when the job is built."""
    p = make_params(clients=100, max_missing=0, clip_bounds=(1.0,), frac_bits=32)
    assert p.clients * (1.0 + NOISE_TAIL * p.sigma_client) * 2**32 < 2**63
    # a clip bound whose N-fold sum cannot fit with f = 32 ...
    c = 2**63 / 2**32 / 100
    with pytest.raises(InvalidJob, match="headroom"):
        make_params(clients=100, max_missing=0, clip_bounds=(c,), frac_bits=32)
    # ... fits once f is lowered
    make_params(clients=100, max_missing=0, clip_bounds=(c,), frac_bits=24)


def test_pack_unpack_round_trip_and_length_checks():
    rng = np.random.default_rng(0)  # non-secret test data only
    a = rng.integers(0, 2**63, size=(3, 5), dtype=np.uint64) * np.uint64(2)
    data = sharing.pack_u64(a)
    assert len(data) == 8 * 15
    assert data[:8] == int(a[0, 0]).to_bytes(8, "little")
    assert np.array_equal(sharing.unpack_u64(data, 5, 3), a)
    assert np.array_equal(sharing.unpack_u64(sharing.pack_u64(a[1]), 5), a[1])
    with pytest.raises(sharing.MalformedVector):
        sharing.unpack_u64(data[:-1], 5, 3)
    with pytest.raises(sharing.MalformedVector):
        sharing.unpack_u64(data, 4)
    with pytest.raises(sharing.MalformedVector):
        sharing.split_seeds(b"\x00" * 63, 2)
