"""Local DP releases (one per party) and their average, network-free (issue: LMGC in the federation).

A party spends the release's ε in its privacy ledger (:func:`ledger_entry`, before training), trains a DP
model on its own records (:func:`party_release`) and releases the DP parameters; nothing about its records or size leaves it except through that
ε-DP release. The curator publishes all releases and, as **post-processing**, their parameter average
(:func:`average_releases`): each record lies in exactly one party's data, so by parallel composition the
set and the average are max_j ε_j-DP. Averaging is refused, with the reason, when the releases are not
comparable (different classes or dimensions) or when any release is not proven private (paper mode).
"""

from __future__ import annotations

import numpy as np

from mpdp import limits
from mpdp.lmgc.estimator import LargeMarginGaussianClassifier, clip_rows
from mpdp.lmgc.params import augment, quadratic_scores
from mpdp.math.drbg import Drbg
from mpdp.messages import common_pb2, local_release_pb2 as pb

MODELS = ("lmgc",)
PROTOCOL = "local-release/lmgc"
MODE_NAMES = {common_pb2.CORRECTED: "corrected", common_pb2.PAPER: "paper"}


class ReleaseError(ValueError):
    """A local release cannot be made or aggregated; the message says why."""


def validate_spec(spec: pb.LocalModelJobSpec) -> None:
    """Field ranges, ids and distinct party names come from :mod:`mpdp.limits` (docs/protocols/limits.md)."""
    try:
        limits.check_local_model_job_spec(spec)
    except limits.SpecError as e:
        raise ReleaseError(str(e)) from None


def ledger_entry(request: pb.LocalModelRequest) -> dict:
    """What a party spends for a local release, before it trains: the release's true ε.

    Corrected mode: the calibration splits the spec's ε into ε_b + ε_J and guarantees exactly ε (δ = 0;
    :meth:`mpdp.lmgc.privacy.CorrectedCalibration.guarantee`), so the spec's ε is the true one and is known
    before the data is touched. Paper mode proves no guarantee at all; the nominal ε is charged so that
    the budget still bounds how many such releases a party makes.
    """
    spec = request.spec
    validate_spec(spec)
    return {"job_id": request.job_id, "protocol": PROTOCOL, "epsilon": float(spec.epsilon), "delta": 0.0,
            "mode": MODE_NAMES[spec.mode], "dataset": spec.dataset}


def party_release(name: str, request: pb.LocalModelRequest, X: np.ndarray, y: np.ndarray, rng: Drbg) -> tuple[pb.LocalModelRelease, dict]:
    """Train the DP model on this party's rows; returns the release and the details its ledger entry keeps
    (mechanism and accounting; the charge was spent with :func:`ledger_entry` before training).

    The accounting's n and ridge Δ stay in the ledger entry (they reveal the dataset size); the
    release carries θ, the classes and the guarantee.
    """
    spec = request.spec
    validate_spec(spec)
    est = LargeMarginGaussianClassifier(
        mode=MODE_NAMES[spec.mode],
        epsilon=spec.epsilon,
        lam=getattr(spec, "lambda") or 1e-3,
        ridge=spec.ridge or 1e-3,
        data_norm=spec.data_norm or 1.0,
        huber_h=spec.huber_h or 0.5,
        rng=rng,
    )
    est.fit(X, y)
    theta = np.asarray(est.theta_, dtype=np.float64)
    g = est.guarantee_
    statement = g.statement if g is not None else ""
    release = pb.LocalModelRelease(
        job_id=request.job_id,
        party=name,
        theta=theta.ravel().tolist(),
        classes=[label_text(c) for c in est.classes_],
        dimension=int(theta.shape[1]),
        guarantee=common_pb2.Guarantee(mechanism=g.mechanism, epsilon=g.epsilon, delta=g.delta, sensitivity=g.sensitivity, norm=g.norm, statement=statement) if g else None,
        mode=MODE_NAMES[spec.mode],
    )
    if g is not None and (g.epsilon > spec.epsilon or g.delta > 0.0):
        raise ReleaseError(f"the release's guarantee (ε={g.epsilon:g}, δ={g.delta:g}) exceeds the ε={spec.epsilon:g} spent for it")
    return release, {"mechanism": g.mechanism if g else "", "accounting": _jsonable(est.accounting_ or {})}


def label_text(v) -> str:
    """A class label as released: integral numbers without a decimal point (3.0 → "3")."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    return str(int(f)) if f.is_integer() else repr(f)


def theta_of(release: pb.LocalModelRelease) -> np.ndarray:
    D = release.dimension
    C = len(release.classes)
    t = np.asarray(release.theta, dtype=np.float64)
    if D < 1 or C < 2 or t.size != C * D * D:
        raise ReleaseError(f"release from {release.party} has {t.size} parameters, expected C·D² = {C}·{D}²")
    return t.reshape(C, D, D)


def average_releases(job_id: str, releases: list[pb.LocalModelRelease]) -> tuple[pb.LocalModelRelease | None, str]:
    """The parameter average of DP releases (post-processing) and its guarantee, or None and the reason."""
    if not releases:
        return None, "no releases"
    if any(r.mode != "corrected" for r in releases):
        return None, "averaging refused: paper-mode releases are not proven private, so no guarantee carries over to their average"
    classes = [tuple(r.classes) for r in releases]
    if len(set(classes)) != 1:
        return None, f"averaging refused: parties saw different class sets {sorted(set(classes))}; the blocks Φ_c do not line up"
    if len({r.dimension for r in releases}) != 1:
        return None, "averaging refused: parties have different feature dimensions"
    thetas = [theta_of(r) for r in releases]
    eps = max(r.guarantee.epsilon for r in releases)
    sens = max(r.guarantee.sensitivity for r in releases)
    statement = (
        f"{eps:g}-DP: the average of {len(releases)} ε-DP releases on disjoint data is post-processing (parallel composition); "
        f"each release is corrected-mode objective perturbation with noise sensitivity {sens:.6g} "
        f"({releases[0].guarantee.norm}); no further noise is needed for the average"
    )
    avg = pb.LocalModelRelease(
        job_id=job_id, party="average", theta=np.mean(np.stack(thetas), axis=0).ravel().tolist(), classes=releases[0].classes,
        dimension=releases[0].dimension, mode="corrected",
        guarantee=common_pb2.Guarantee(mechanism="average of per-party DP LMGC releases (post-processing)", epsilon=eps, delta=0.0, sensitivity=sens, norm=releases[0].guarantee.norm, statement=statement),
    )
    return avg, statement


def predict(release: pb.LocalModelRelease, X: np.ndarray, data_norm: float = 1.0) -> np.ndarray:
    """Rule (3) with the released parameters: the class with the smallest x̃ᵀΦ_cx̃ (labels as released, text)."""
    theta = theta_of(release)
    scores = quadratic_scores(theta, augment(clip_rows(np.asarray(X, dtype=np.float64), data_norm)))
    return np.asarray(release.classes)[np.argmin(scores, axis=1)]


def _jsonable(d: dict) -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out[k] = _jsonable(v)
        elif isinstance(v, (np.floating, np.integer)):
            out[k] = v.item()
        else:
            out[k] = v
    return out
