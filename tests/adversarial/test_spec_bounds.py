"""Job specs at and past the bounds of their fields.

Models an operator (or a stolen operator certificate) submitting specs that are nonsense or built to exhaust
the sites: κ = 10⁶ (the reported case: a party's precompute at 100 % CPU with growing memory until restarted),
huge dimensions and client counts, non-positive or non-finite ε, δ, λ, sensitivities and deadlines, unknown
enum values, oversized lists; and a curator-signed announcement carrying curator keys of absurd size.
Expected: INVALID_ARGUMENT (INVALID_JOB) from the one place that checks the spec, before any site does work;
every site keeps serving and a legitimate job still completes afterwards; no ledger moves.
"""

from __future__ import annotations

import math

import grpc
import pytest

from mpdp.messages import (
    common_pb2,
    hamm2016_pb2,
    learner_pb2,
    local_release_pb2,
    operations_pb2 as ops,
    pathak2010_pb2 as pk,
    pathak2010_pb2_grpc as pk_grpc,
)

from .conftest import (
    NODES,
    PARTIES,
    assert_all_serving,
    assert_ledgers_within_budget,
    assert_serving,
    assert_status,
    channel,
    job_host,
    dca_job,
    dca_spec,
    host_submit,
    learner_spec,
    ledger,
    operator_curator,
    pathak_job,
    pathak_spec,
    refused,
    site_tls,
)

U32 = 2**32 - 1
NAN, INF = math.nan, math.inf

PATHAK = {
    "epsilon=0": {"epsilon": 0.0},
    "epsilon<0": {"epsilon": -1.0},
    "epsilon=nan": {"epsilon": NAN},
    "epsilon=inf": {"epsilon": INF},
    "lambda=0": {"lambda": 0.0},
    "lambda=nan": {"lambda": NAN},
    "kappa=39": {"kappa": 39},
    "fractional_bits=7": {"fractional_bits": 7},
    "fractional_bits=49": {"fractional_bits": 49},
    "fractional_bits=u32max": {"fractional_bits": U32},
    "size_bits=49": {"size_bits": 49},
    "size_bits=u32max": {"size_bits": U32},
    "deadline<0": {"deadline_seconds": -1.0},
    "deadline=nan": {"deadline_seconds": NAN},
    "deadline=inf": {"deadline_seconds": INF},
    "deadline=1e12": {"deadline_seconds": 1e12},
    "mode=7": {"mode": 7},
    "parties=[]": {"parties": []},
    "parties=1000": {"parties": [f"party-{i}" for i in range(1000)]},
    "parties=unregistered": {"parties": ["party-1", "party-2", "party-77"]},
    "dataset=''": {"dataset": ""},
    "dataset=path": {"dataset": "../../../etc/passwd"},
}


@pytest.mark.parametrize("case", list(PATHAK))
def test_pathak_spec_out_of_bounds_is_invalid_argument(fed, case):
    fields = dict(PATHAK[case])
    spec = pathak_spec(seed=b"bounds")
    for k, v in fields.items():
        if isinstance(v, list):
            spec.ClearField(k)
            getattr(spec, k).extend(v)
        else:
            setattr(spec, k, v)
    with operator_curator(fed) as ch:
        e = refused(lambda: job_host(ch).SubmitJob(ops.JobSubmission(pathak2010=spec), timeout=30))
    assert_status(e, grpc.StatusCode.INVALID_ARGUMENT, *(s for v in fields.values() if isinstance(v, str) for s in [v]))


DCA = {
    "dimension=0": {"dimension": 0},
    "dimension=1e9": {"dimension": 1_000_000_000},
    "dimension=u32max": {"dimension": U32},
    "clients=0": {"clients": 0},
    "clients=1e9": {"clients": 1_000_000_000},
    "clients=u32max": {"clients": U32},
    "max_missing>=clients": {"clients": 3, "max_missing": 3},
    "max_missing=u32max": {"max_missing": U32},
    "epsilon=0": {"epsilon": 0.0},
    "epsilon<0": {"epsilon": -1.0},
    "epsilon=nan": {"epsilon": NAN},
    "epsilon=inf": {"epsilon": INF},
    "delta=0": {"delta": 0.0},
    "delta=1": {"delta": 1.0},
    "delta=nan": {"delta": NAN},
    "sensitivity=0": {"sensitivity": 0.0},
    "sensitivity=inf": {"sensitivity": INF},
    "fractional_bits=u32max": {"fractional_bits": U32},
    "clip_bounds=[nan]": {"clip_bounds": [NAN]},
    "clip_bounds=[-1]": {"clip_bounds": [-1.0]},
    "clip_bounds=wrong-length": {"clip_bounds": [1.0, 1.0]},
    "clip_bounds=1e6-long": {"clip_bounds": [1.0] * 1_000_000},
    "compute_nodes=1": {"compute_nodes": ["node-1"]},
    "compute_nodes=1000": {"compute_nodes": [f"node-{i}" for i in range(1000)]},
    "compute_nodes=unregistered": {"compute_nodes": ["node-1", "node-77"]},
    "deadline<0": {"deadline_seconds": -1.0},
    "deadline=nan": {"deadline_seconds": NAN},
    "deadline=inf": {"deadline_seconds": INF},
    "deadline=1e12": {"deadline_seconds": 1e12},
    "mode=7": {"mode": 7},
    "roster=wrong-length": {"roster": ["party-1", "party-2"]},
    # (an empty clip_bounds means c_j = 1 and a roster of 10⁵ ids for N = 10⁵ is in range: docs/protocols/limits.md)
}


@pytest.mark.parametrize("case", list(DCA))
def test_dca_spec_out_of_bounds_is_invalid_argument(fed, case):
    spec = dca_spec(n=3, d=3)
    for k, v in DCA[case].items():
        if isinstance(v, list):
            spec.ClearField(k)
            getattr(spec, k).extend(v)
        else:
            setattr(spec, k, v)
    with operator_curator(fed) as ch:
        e = refused(lambda: job_host(ch).SubmitJob(ops.JobSubmission(dca=spec), timeout=60))
    assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)


LOCAL = {
    "epsilon=0": {"epsilon": 0.0},
    "epsilon<0": {"epsilon": -1.0},
    "epsilon=nan": {"epsilon": NAN},
    "epsilon=inf": {"epsilon": INF},
    "model=unknown": {"model": "no-such-model"},
    "parties=[]": {"parties": []},
    "parties=unregistered": {"parties": ["party-1", "party-77"]},
    "ridge=nan": {"ridge": NAN},
    "ridge<0": {"ridge": -1.0},
    # (data_norm = 0 is proto3's "unset": the documented default r = 1 applies)
    "data_norm=inf": {"data_norm": INF},
    "huber_h<0": {"huber_h": -1.0},
    "lambda=nan": {"lambda": NAN},
    "mode=7": {"mode": 7},
}


@pytest.mark.parametrize("case", list(LOCAL))
def test_local_release_spec_out_of_bounds_is_invalid_argument(fed, case):
    before = {p: len(ledger(fed, p)["entries"]) for p in PARTIES}
    spec = local_release_pb2.LocalModelJobSpec(dataset="synthetic", model="lmgc", mode=common_pb2.CORRECTED, epsilon=1.0, parties=PARTIES, ridge=1e-3, data_norm=1.0, simulation_seed=b"b")
    setattr(spec, "lambda", 1e-3)
    for k, v in LOCAL[case].items():
        if isinstance(v, list):
            spec.ClearField(k)
            getattr(spec, k).extend(v)
        else:
            setattr(spec, k, v)
    e = refused(lambda: host_submit(fed, timeout=30, lmgc=spec))
    assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
    assert {p: len(ledger(fed, p)["entries"]) for p in PARTIES} == before


ENSEMBLE = {
    "epsilon=0": {"epsilon": 0.0},
    "epsilon=nan": {"epsilon": NAN},
    "epsilon=inf": {"epsilon": INF},
    "lam<0": {"lam": -1.0},
    "lam=nan": {"lam": NAN},
    "classes=1": {"classes": ["1"]},
    "classes=100k": {"classes": [str(i) for i in range(100_000)]},
    "method=unknown": {"method": "majority-ish"},
    "compute_nodes=1": {"compute_nodes": ["node-1"]},
    "parties=[]": {"parties": []},
    "deadline<0": {"deadline_seconds": -1.0},
    "deadline=nan": {"deadline_seconds": NAN},
    "deadline=1e12": {"deadline_seconds": 1e12},
    "max_missing=u32max": {"max_missing": U32},
}


@pytest.mark.parametrize("case", list(ENSEMBLE))
def test_ensemble_spec_out_of_bounds_is_invalid_argument(fed, case):
    before = {p: len(ledger(fed, p)["entries"]) for p in PARTIES}
    spec = hamm2016_pb2.EnsembleJobSpec(dataset="synthetic", auxiliary="aux", method="soft", lam=0.1, epsilon=1.0, classes=["-1", "1"], parties=PARTIES,
                                        compute_nodes=NODES, deadline_seconds=30.0, simulation_seed=b"b")
    for k, v in ENSEMBLE[case].items():
        if isinstance(v, list):
            spec.ClearField(k)
            getattr(spec, k).extend(v)
        else:
            setattr(spec, k, v)
    e = refused(lambda: host_submit(fed, timeout=30, hamm2016=spec))
    assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
    assert {p: len(ledger(fed, p)["entries"]) for p in PARTIES} == before


def _regression(bounds: list[float]) -> learner_pb2.RegressionJobSpec:
    return learner_pb2.RegressionJobSpec(bounds=bounds, epsilon=1.0, delta=1e-4, total_records=141, mode=common_pb2.CORRECTED, grid_repeats_x=2, grid_repeats_y=2)


# a learner job's contribution rounds: what an operator's round could name (statistic, clip box, row bound, parties)
LEARNER = {
    "learner=unset": lambda s: s.ClearField("dpgd"),
    "bounds=nan": lambda s: s.regression.CopyFrom(_regression([NAN] * 5)),
    "bounds=1-value": lambda s: s.regression.CopyFrom(_regression([1.0])),
    "dimension=0": lambda s: setattr(s.dpgd, "dimension", 0),
    "records_per_party=0": lambda s: setattr(s, "records_per_party", 0),
    "parties=[]": lambda s: s.ClearField("parties"),
    "parties=unregistered": lambda s: (s.ClearField("parties"), s.parties.extend(["party-1", "party-77"])),
}


@pytest.mark.parametrize("case", list(LEARNER))
def test_learner_round_out_of_bounds_is_invalid_argument(fed, case):
    """A learner job's rounds are the only contribution rounds: their statistic, clip box, row bound and parties
    come from its spec, checked whole at SubmitJob before any DCA job exists or any party is asked."""
    before = {p: len(ledger(fed, p)["entries"]) for p in PARTIES}
    spec = learner_spec()
    LEARNER[case](spec)
    e = refused(lambda: host_submit(fed, timeout=30, learner=spec))
    assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
    assert {p: len(ledger(fed, p)["entries"]) for p in PARTIES} == before


@pytest.mark.parametrize("bits", [16, 8 * 1024 * 8], ids=["16-bit", "64k-bit"])
def test_announcement_with_absurd_curator_keys_is_refused(fed, bits):
    """Signed by the real curator's certificate (its key is in the workdir): the party refuses key sizes outside
    its documented range instead of adopting them, and keeps serving with the real keys."""
    n = ((1 << bits) - 1).to_bytes(bits // 8, "big")
    keys = pk.CuratorKeys(paillier_n=n, dgk_n=n, dgk_g=b"\x02", dgk_h=b"\x03", dgk_u=7, dgk_r_bits=bits)
    ann = pk.JobAnnouncement(job_id=f"pk-keys{bits}", spec=pathak_spec(seed=b"keys"), party_addresses={p: "127.0.0.1:1" for p in PARTIES}, curator_keys=keys)
    with channel(fed, "party-1", site_tls(fed, "curator")) as ch:
        e = refused(lambda: pk_grpc.PartyStub(ch).AnnounceJob(ann, timeout=20))
    assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
    assert_serving(fed, "party-1")


@pytest.mark.parametrize("kappa", [1_000_000, U32], ids=["1e6", "u32max"])
def test_huge_kappa_is_refused_and_every_party_stays_healthy(fed, kappa):
    """The reported case, end to end (last in this module: today it leaves parties busy): after a κ = 10⁶ (or
    2³²−1) submission every party answers its health check at once and a legitimate Pathak job and DCA job
    complete."""
    with operator_curator(fed) as ch:
        e = refused(lambda: job_host(ch).SubmitJob(ops.JobSubmission(pathak2010=pathak_spec(seed=b"kappa", kappa=kappa, deadline=20.0)), timeout=30))
    assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
    for p in PARTIES:
        assert_serving(fed, p, timeout=5.0)
    pathak_job(fed, seed=b"after-kappa")
    dca_job(fed)
    assert_all_serving(fed)
    assert_ledgers_within_budget(fed)
