"""The smallest-party noise modes over sockets: is every digit of the released integer noisy?

A `corrected` or `paper` Pathak release is an integer vector R = Q + (noise) in the ring, with Q = Σ_j round(ŵ_j·2^f)
fixed by the parties' data. Had the noise entered as K·(an integer), R ≡ Q (mod K) in every run, and anyone who
knows the other parties' rows would read one party's row from R mod K with certainty. Expected: over jobs on the
same data with different noise, R mod K takes different values in every coordinate (the residue carries noise).
The in-process test of the residue's distribution between neighbouring datasets is tests/core/test_pathak_release_residue.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from mpdp.math import sharing
from mpdp.messages import common_pb2

from tests.adversarial.conftest import job_host, PARTIES, operator_curator, pathak_spec, submit_pathak, wait_pathak

JOBS = 12  # all-equal residues mod 3 in one coordinate by chance: 3·3^-12 ≈ 6·10⁻⁶ (seeded: the same every run)


def released_integer(fed, job_id: str) -> tuple[np.ndarray, int]:
    """Σ_t z_t mod q as signed integers, and K."""
    with operator_curator(fed) as ch:
        model = job_host(ch).GetRelease(common_pb2.JobRef(job_id=job_id), timeout=30).pathak2010
    q = 1 << model.ring_bits
    total = sharing.combine([sharing.unpack_ring(s, model.ring_bits, model.dimension) for s in model.shares], q)
    signed = [int(v) - q if int(v) >= q // 2 else int(v) for v in total]
    return np.array(signed, dtype=object), int(model.parties)


@pytest.mark.parametrize("mode", [common_pb2.CORRECTED, common_pb2.PAPER], ids=["corrected", "paper"])
def test_the_released_integer_is_noisy_mod_K(fed, mode):
    jobs = [submit_pathak(fed, pathak_spec(seed=f"residue-{mode}-{i}".encode(), epsilon=0.25, mode=mode)) for i in range(JOBS)]
    residues = []
    for j in jobs:
        assert wait_pathak(fed, j).state == "PUBLISHED"
        R, K = released_integer(fed, j)
        assert K == len(PARTIES)
        residues.append([int(r) % K for r in R])
    by_coordinate = np.array(residues).T
    for c, values in enumerate(by_coordinate):
        assert len(set(values.tolist())) > 1, f"coordinate {c}: R mod K = {values[0]} in all {JOBS} jobs — the residue carries no noise"
