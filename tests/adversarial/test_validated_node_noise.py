"""One accepted client moves a validated release by at most its data bound, over real processes and mutual TLS.

In a validated job the clients add no noise and prove their data only; the compute nodes add the noise
(docs/protocols/dca.md, "Validated mode"). Every client here is a raw stub with its own PARTY certificate: three
honest clients and three attackers in one seeded range job (|z_j| ≤ 1, f = 16, N = 6, T = 2):

- "edge" puts its whole allowance into coordinate 0: ỹ_0 = c·2^f, the data bound. It is valid and accepted;
- "beyond" claims ỹ_0 = 2·c·2^f, twice the bound (its first bit decomposition holds it, the second wraps), and
  "huge" puts 1000·c·2^f into the first element of its input (no longer a bit); both prove their input honestly,
  both proofs fail at every node: rejected and counted, never named.

The job is seeded (test mode), so each node's noise is recomputable from the spec: the release is exactly
Σ_accepted ỹ_i + Σ_k η_k, so the attackers together moved it by exactly edge's ỹ — at most the data bound — and the
statement says the nodes added the noise.
"""

from __future__ import annotations

import numpy as np

from mpdp.dca import discrete
from mpdp.dca.compute_node import noise_rng
from mpdp.dca.params import DcaParams
from mpdp.math import field as F
from mpdp.messages import dca_pb2

from tests.adversarial.conftest import assert_all_serving, create_dca, dca_spec, mint
from tests.adversarial.test_validated_dca import _announcement, _bits, _release, _send, _shares_of

D, N, T, F_BITS = 3, 6, 2, 16


def test_a_client_past_its_data_bound_is_rejected_and_the_release_moves_by_at_most_that_bound(fed):
    job = create_dca(fed, dca_spec(n=N, d=D, deadline=20.0, max_missing=T, noise=dca_pb2.DISCRETE_GAUSSIAN, validate=dca_pb2.VALIDATE_RANGE,
                                   fractional_bits=F_BITS, sensitivity=2.0, simulation_seed=b"node-noise-bound"))
    params = DcaParams.from_spec(job, _announcement(fed, mint(fed, "party", "nn-look"), job).spec)
    plan = params.validation
    assert plan is not None and params.node_noise and len(plan.circuit.predicates) == 1  # data only: no noise part to inflate
    bound = plan.data_bound
    assert bound == 2**F_BITS

    honest = np.random.default_rng(21).integers(-bound // 2, bound // 2, (3, D))
    for k, y in enumerate(honest):
        assert [r.accepted for r in _send(fed, f"nn-honest-{k}", job, _shares_of(params, job, f"nn-honest-{k}", validation_input(params, y)))] == [1, 1, 1]
    edge = np.array([bound, 0, 0])
    assert [r.accepted for r in _send(fed, "nn-edge", job, _shares_of(params, job, "nn-edge", validation_input(params, edge)))] == [1, 1, 1]

    rng_pred = plan.circuit.predicates[0]
    beyond = validation_input(params, np.zeros(D, dtype=np.int64))
    x = 2 * bound + rng_pred.offset  # ỹ_0 = 2·c·2^f: x fits its b bits, x + gap does not (it wraps)
    beyond[: rng_pred.bits] = _bits(x, rng_pred.bits)
    at = D * rng_pred.bits
    beyond[at : at + rng_pred.bits] = _bits((x + rng_pred.gap) % (1 << rng_pred.bits), rng_pred.bits)
    assert [r.accepted for r in _send(fed, "nn-beyond", job, _shares_of(params, job, "nn-beyond", beyond))] == [1, 1, 1]  # well formed: taken
    huge = validation_input(params, np.zeros(D, dtype=np.int64)).astype(np.uint64)
    huge[0] = F.scalar(1000 * bound + int(huge[0]))
    assert [r.accepted for r in _send(fed, "nn-huge", job, _shares_of(params, job, "nn-huge", huge))] == [1, 1, 1]

    r = _release(fed, job)
    assert (r.clients_included, r.clients_rejected) == (4, 2) and "nn-beyond" not in str(r) and "nn-huge" not in str(r)
    noise = sum(discrete.node_noise(D, params.discrete.sigma2, noise_rng(params, name)) for name in params.nodes)
    released = np.frombuffer(r.encoded_sum, dtype="<i8")
    assert np.array_equal(released, honest.sum(axis=0) + edge + noise)
    shift = released - honest.sum(axis=0) - noise  # what the attackers moved the release by, in units
    assert np.all(np.abs(shift) <= bound), shift
    assert "the clients add no noise" in r.guarantee.statement and r.sigma_client == 0 and r.sigma_node > 0
    assert_all_serving(fed)


def validation_input(params: DcaParams, y: np.ndarray) -> np.ndarray:
    from mpdp.dca import validation

    assert params.validation is not None
    return validation.encode_input(params.validation, np.asarray(y, dtype=np.int64))
