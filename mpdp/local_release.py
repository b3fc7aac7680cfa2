"""Local DP releases (one per party) and their average, network-free (LMGC in the federation).

A party spends the release's ε in its privacy ledger (:func:`ledger_entry`, before training), trains a DP
model on its own records (:func:`party_release`) and releases the DP parameters; nothing about its records or size leaves it except through that
ε-DP release. The curator publishes all releases and, as **post-processing**, their parameter average
(:func:`average_releases`): each record lies in exactly one party's data, so by parallel composition the
set and the average are max_j ε_j-DP. Averaging is refused, with the reason, when the releases are not
comparable (different classes or dimensions) or when any release is not proven private (paper mode).

Two sans-IO roles on the one engine (:mod:`mpdp.protocol`): the curator's :class:`LocalReleaseCurator`
(ASK_RELEASES → AWAIT_RELEASES → PUBLISHED, or FAILED; ``services/curator/local.py`` only moves its messages) and the
party's :class:`LocalReleaseParty` (AWAIT_REQUEST → TRAINING → RELEASED, or FAILED; ``services/party/local.py``):
its Spend of :func:`ledger_entry` comes before the training, and its release (the answer to the curator's call) only
after it (the engine's spend rule).
"""

from __future__ import annotations

import numpy as np

from typing import Any

from mpdp import accounting, limits
from mpdp.lmgc.estimator import LargeMarginGaussianClassifier, clip_rows
from mpdp.lmgc.params import augment, quadratic_scores
from mpdp.math.drbg import Drbg
from mpdp.messages import common_pb2, local_release_pb2 as pb
from mpdp.protocol import CURATOR, FAILED, LocalProtocolError, failure_problem, Machine, Output, Peer, Problem, Publish, RemoteProtocolError, Reply, Send, Spend, row

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
    mode = MODE_NAMES[spec.mode]
    record = accounting.pure_epsilon("LMGC objective perturbation") if mode == "corrected" else accounting.eps_delta()
    return {"job_id": request.job_id, "protocol": PROTOCOL, "epsilon": float(spec.epsilon), "delta": 0.0,
            "mode": mode, "dataset": spec.dataset, "accounting": record}


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
        guarantee=common_pb2.Guarantee(mechanism="average of per-party DP LMGC releases (post-processing)", epsilon=eps, delta=0.0, sensitivity=sens,
        norm=releases[0].guarantee.norm, statement=statement),
    )
    return avg, statement


def check_release(spec: pb.LocalModelJobSpec, job_id: str, party: str, release: pb.LocalModelRelease) -> None:
    """A party's release as the curator may publish it: for this job and party, the spec's mode, C·D² parameters,
    and a guarantee no weaker than the ε the party spent for it (δ = 0). Raises ReleaseError (fixed texts)."""
    if release.job_id != job_id or release.party != party:
        raise ReleaseError(f"party {party} answered for another job or party")
    if release.mode != MODE_NAMES.get(spec.mode):
        raise ReleaseError(f"party {party} released in another mode than the job's")
    theta_of(release)  # C ≥ 2 classes, D ≥ 1, |θ| = C·D²
    if len(set(release.classes)) != len(release.classes):
        raise ReleaseError(f"release from {party} names a class twice")
    g = release.guarantee
    if not release.HasField("guarantee") or not (0.0 < g.epsilon <= spec.epsilon) or g.delta != 0.0:
        raise ReleaseError(f"release from {party} does not carry a guarantee within the job's ε = {spec.epsilon:g} (δ = 0)")


ASK_RELEASES, AWAIT_RELEASES, PUBLISHED = "ASK_RELEASES", "AWAIT_RELEASES", "PUBLISHED"


class LocalReleaseCurator(Machine):
    """Charlie in one local-release job, sans-IO: ASK_RELEASES → AWAIT_RELEASES → PUBLISHED, or FAILED.

    :meth:`ask` gives one LocalModelRequest per party; each party's answer is its release (:meth:`release`) or
    a failure (:meth:`release_failed`). Once every party has answered, the job publishes the set and their
    average (:class:`~mpdp.protocol.Publish` of a LocalModelSet) if no party failed, else fails naming every
    failed party in the job's order. Answers are the returns of Charlie's own calls, so they are local events
    (sender ``self``).

    Failure policy (the engine's): an answer from a party that is not in the job is refused WRONG_ROLE and
    changes nothing; an answer before :meth:`ask` or after the end is refused and changes nothing. A party's
    second answer (REPLAY) or a release that cannot be published (another job or party, another mode, wrong
    shape, a guarantee above the spec's ε) fails the job closed at once: nothing is published.
    """

    ROLE = "local_release_curator"
    STATES = (ASK_RELEASES, AWAIT_RELEASES, PUBLISHED, FAILED)
    TERMINAL = (PUBLISHED, FAILED)
    TABLE = (
        row(ASK_RELEASES, "ask", "self", AWAIT_RELEASES),
        row(AWAIT_RELEASES, "release", "self", f"{AWAIT_RELEASES}|{PUBLISHED}|{FAILED}"),  # a party's release came back
        row(AWAIT_RELEASES, "release_failed", "self", f"{AWAIT_RELEASES}|{FAILED}"),  # a party's call failed
    )
    PARTICIPANTS = frozenset()

    def __init__(self, job_id: str, spec: pb.LocalModelJobSpec) -> None:
        validate_spec(spec)
        super().__init__(job_id, CURATOR, record=False)
        self.spec = spec
        self.releases: dict[str, pb.LocalModelRelease] = {}
        self.failures: dict[str, str] = {}

    def ask(self) -> list[Any]:
        return self._local("ask")

    def release(self, party: str, release: pb.LocalModelRelease) -> list[Any]:
        self._member(party)
        return self._local("release", party, release)

    def release_failed(self, party: str, detail: str) -> list[Any]:
        self._member(party)
        return self._local("release_failed", party, detail)

    # -- engine hooks --------------------------------------------------------------------------------
    def _kinds(self, sender: Peer) -> frozenset[str]:
        return frozenset()  # Charlie's local-release role takes no message

    # -- handlers --------------------------------------------------------------------------------------
    def _on_ask(self) -> list[Any]:
        req = pb.LocalModelRequest(job_id=self.job_id, spec=self.spec)
        return [Send(Peer("party", p), req) for p in self.spec.parties]

    def _on_release(self, party: str, release: pb.LocalModelRelease) -> list[Any]:
        self._first_answer(party)
        try:
            check_release(self.spec, self.job_id, party, release)
        except ReleaseError as e:
            raise RemoteProtocolError(Problem.MALFORMED, f"job {self.job_id} published nothing: {e}") from None
        self.releases[party] = release
        return self._answered()

    def _on_release_failed(self, party: str, detail: str) -> list[Any]:
        self._first_answer(party)
        self.failures[party] = detail
        return self._answered()

    def _member(self, party: str) -> None:
        """An outsider's answer is refused and never touches the job."""
        if party not in self.spec.parties:
            raise RemoteProtocolError(Problem.WRONG_ROLE, f"{party} is not a party of job {self.job_id}")

    def _first_answer(self, party: str) -> None:
        if party in self.releases or party in self.failures:
            raise RemoteProtocolError(Problem.REPLAY, f"job {self.job_id} published nothing: party {party} answered twice")

    def _answered(self) -> list[Any]:
        if len(self.releases) + len(self.failures) < len(self.spec.parties):
            return []
        if self.failures:
            failed = "; ".join(f"party {p}: {self.failures[p]}" for p in self.spec.parties if p in self.failures)
            e = LocalProtocolError(failure_problem(self.failures.values()), f"job {self.job_id} published nothing: {failed}")
            self._fail(e)
            return e.notices
        releases = [self.releases[p] for p in self.spec.parties]
        avg, statement = average_releases(self.job_id, releases)
        self.state = PUBLISHED
        return [Publish(pb.LocalModelSet(job_id=self.job_id, releases=releases, aggregate=avg, aggregate_statement=statement, seeded=bool(self.spec.simulation_seed)))]


def predict(release: pb.LocalModelRelease, X: np.ndarray, data_norm: float = 1.0) -> np.ndarray:
    """Rule (3) with the released parameters: the class with the smallest x̃ᵀΦ_cx̃ (labels as released, text)."""
    theta = theta_of(release)
    scores = quadratic_scores(theta, augment(clip_rows(np.asarray(X, dtype=np.float64), data_norm)))
    return np.asarray(release.classes)[np.argmin(scores, axis=1)]


def _jsonable(d: dict) -> dict:
    out: dict = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out[k] = _jsonable(v)
        elif isinstance(v, (np.floating, np.integer)):
            out[k] = v.item()
        else:
            out[k] = v
    return out


AWAIT_REQUEST, TRAINING, RELEASED = "AWAIT_REQUEST", "TRAINING", "RELEASED"


class LocalReleaseParty(Machine):
    """A party in one local-release job, sans-IO: AWAIT_REQUEST → TRAINING → RELEASED, or FAILED.

    :meth:`requested` takes the curator's LocalModelRequest and outputs the release's Spend (:func:`ledger_entry`),
    to be spent before the party trains; :meth:`trained` takes the DP release :func:`party_release` made and outputs
    it as the answer to the curator's call (:class:`~mpdp.protocol.Reply`), checked against the spec first (the
    guarantee it states is within the ε spent; this party, this job). :meth:`fail` (the engine's) ends it on a failed
    training or the deadline; the charge stays.
    """

    ROLE = "local_release_party"
    STATES = (AWAIT_REQUEST, TRAINING, RELEASED, FAILED)
    TERMINAL = (RELEASED, FAILED)
    TABLE = (
        row(AWAIT_REQUEST, "requested", "self", TRAINING),
        row(TRAINING, "trained", "self", RELEASED),
    )
    PARTICIPANTS = frozenset()
    SPENDS = True

    def __init__(self, name: str, request: pb.LocalModelRequest) -> None:
        super().__init__(request.job_id, Peer("party", name), record=False)
        self.request = request

    def requested(self) -> list[Output]:
        return self._local("requested")

    def trained(self, release: pb.LocalModelRelease) -> list[Output]:
        return self._local("trained", release)

    def _kinds(self, sender: Peer) -> frozenset[str]:
        return frozenset()  # the party's own steps only

    def _on_requested(self) -> list[Output]:
        try:
            return [Spend((ledger_entry(self.request),))]
        except ReleaseError as e:
            raise LocalProtocolError(Problem.INVALID_JOB, str(e)) from None

    def _on_trained(self, release: pb.LocalModelRelease) -> list[Output]:
        try:
            check_release(self.request.spec, self.job_id, self.me.name, release)
        except ReleaseError as e:
            raise LocalProtocolError(Problem.INTERNAL, f"the party's own release is not publishable: {e}") from None
        return [Reply(release)]
