"""Dave, the tester: rebuild ŵ_s from the published shares and classify (PRR10 Sec. 3.3, "Testing Phase")."""

from __future__ import annotations

import numpy as np

from mpdp.learn import logreg
from mpdp.math import sharing
from mpdp.math.fixedpoint import FixedPoint
from mpdp.messages import pathak2010_pb2 as pb


class ModelError(ValueError):
    """A published model is malformed (wrong share count or length)."""


def rebuild(model: pb.PublishedModel) -> np.ndarray:
    """ŵ_s = dec(Σ_t z_t mod q) / K."""
    if len(model.shares) != model.parties + 1:
        raise ModelError(f"model {model.job_id} has {len(model.shares)} shares, expected K+1 = {model.parties + 1}")
    q = 1 << model.ring_bits
    try:
        vecs = [sharing.unpack_ring(s, model.ring_bits, model.dimension) for s in model.shares]
    except ValueError as e:
        raise ModelError(f"model {model.job_id}: {e}") from e
    total = sharing.combine(vecs, q)
    return FixedPoint(model.fractional_bits, q).decode(total) / model.parties


def classify(weights: np.ndarray, X: np.ndarray) -> np.ndarray:
    """Labels ±1 from t = 1/(1 + exp(−ŵ_sᵀx)), rows clipped to the unit ball as in training."""
    return logreg.predict(weights, logreg.clip_rows(X))
