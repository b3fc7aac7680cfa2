"""HCB16 ensembles in the federation: 5 parties with mixed local models vote on the curator's public
auxiliary data, 3 compute nodes sum the votes (secure sum), the curator trains and perturbs.

Shows: the socket run equals the in-memory run bit for bit for the same seed; the curator's transcript holds
no party's votes (only partial sums of the nodes, which are uniformly masked alone); bad requests get precise
statuses and nothing is released.
"""

from __future__ import annotations

import base64
import json

import grpc
import numpy as np
import pytest
from click.testing import CliRunner
from sklearn.datasets import load_breast_cancer, load_wine

from mpdp.data.loaders import load
from mpdp.dca import sharing
from mpdp.hamm2016 import job as core
from mpdp.math.fixedpoint import encode_u64
from mpdp.messages import common_pb2, dca_pb2, hamm2016_pb2 as pb, hamm2016_pb2_grpc as pb_grpc
from mpdp.messages.operations_pb2 import JobSubmission
from mpdp.messages.operations_pb2_grpc import JobOperationsStub
from mpdp.messages import operations_pb2 as ops, operations_pb2_grpc as ops_grpc
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.cli.jobs import predict as predict_cmd
from mpdp_services.common import transcript
from mpdp_services.common.config import DatasetConfig
from mpdp_services.curator.ensemble import _load_auxiliary
from mpdp_services.operator.ensemble import fetch, train_ensemble
from mpdp_services.launcher.federation import LocalFederation
from mpdp.messages import link_pb2
from tests.integration.conftest import curator_channel, site_tls
from tests.linked import assert_parties_listen_on_no_grpc_port, relay_stub, sealed_call

pytestmark = pytest.mark.integration
PARTIES = [f"party-{i}" for i in range(1, 6)]
NODES = ["node-1", "node-2", "node-3"]
LOCAL = {"party-1": "logreg", "party-2": "tree", "party-3": "naive_bayes", "party-4": "logreg", "party-5": "linear_svm"}


def _scaled(X: np.ndarray) -> np.ndarray:
    """Public demo scaling (standardise, then rows onto ‖x‖ ≤ 1)."""
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    return X / np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]


def _write(path, X, y):
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savetxt(path, np.column_stack([X, y]), delimiter=",", fmt="%.17g")
    return {"path": str(path), "format": "csv"}


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    root = tmp_path_factory.mktemp("hamm")
    order = np.random.default_rng(3)  # public simulation data: which rows are auxiliary, test, or whose
    datasets: dict[str, dict[str, dict]] = {p: {} for p in PARTIES}
    aux: dict[str, dict] = {}
    tests = {}
    for name, (X, y), pm in (("bc", load_breast_cancer(return_X_y=True), True), ("wine", load_wine(return_X_y=True), False)):
        X = _scaled(X)
        y = np.where(y == 1, 1.0, -1.0) if pm else y.astype(float)
        idx = order.permutation(len(y))
        n_aux, n_test = len(y) // 4, len(y) // 5
        aux[f"{name}_aux"] = _write(root / "data" / f"{name}_aux.csv", X[idx[:n_aux]], np.zeros(n_aux))  # labels ignored
        tests[name] = _write(root / "data" / f"{name}_test.csv", X[idx[n_aux:n_aux + n_test]], y[idx[n_aux:n_aux + n_test]])["path"]
        for j, p in enumerate(PARTIES):
            rows = idx[n_aux + n_test:][j::len(PARTIES)]
            datasets[p][name] = _write(root / "data" / p / f"{name}.csv", X[rows], y[rows])
            if name == "bc" and p != "party-5":
                datasets[p]["bc4"] = datasets[p]["bc"]  # party-5 lacks it: a voter that fails
    trans = root / "transcripts"
    mp = pytest.MonkeyPatch()
    mp.setenv(transcript.ENV, str(trans))
    f = LocalFederation(root / "fed", PARTIES, datasets, test_mode=True, paillier_bits=768, dgk_bits=768, budget_epsilon=1e6,
                        compute_nodes=NODES, auxiliary=aux, local_classifiers=LOCAL)
    try:
        f.start()
    finally:
        mp.undo()
    f.datasets_, f.aux, f.tests, f.transcripts = datasets, aux, tests, trans  # type: ignore[attr-defined]
    yield f
    f.stop()


def spec(**kw) -> pb.EnsembleJobSpec:
    # M = 5 voters: Δ₂ = 2/(Mλ) = 40 here, so ε must be large for a useful model (the experiment has M in the thousands)
    base = dict(dataset="bc", auxiliary="bc_aux", method="soft", lam=1e-2, epsilon=1000.0, classes=["-1", "1"], parties=PARTIES,
                compute_nodes=NODES, local_lam=1e-2, simulation_seed=b"hamm-fed", unvalidated=True)  # the unproven sums' formats
    base.update(kw)
    return pb.EnsembleJobSpec(**base)


def _party_data(fed, dataset: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return {p: load(fed.datasets_[p][dataset]["path"], "csv") for p in PARTIES}


def test_socket_release_equals_in_memory_and_curator_never_sees_votes(fed):
    ep = Endpoints.load(fed.workdir)
    s = spec()
    rel = train_ensemble(ep, s)
    assert_parties_listen_on_no_grpc_port(fed)  # the votes were asked over the parties' links
    assert rel.job_id.startswith("hm-") and rel.parties_included == 5 and rel.seeded
    assert rel.sensitivity == pytest.approx(2.0 / (5 * 1e-2))  # Thm 3: 2/(Mλ)
    assert rel.guarantee.epsilon == 1000.0 and "epsilon-DP" in rel.guarantee.statement and "whole party" in rel.guarantee.statement
    assert set(rel.stage_seconds) == {"votes", "vote_sum"}  # the fit's time depends on the counts: not published

    # the same job in memory: same parties' records and local models, same auxiliary data, same seed
    X_aux = _load_auxiliary(DatasetConfig(**fed.aux["bc_aux"]))
    data = _party_data(fed, "bc")
    mem = core.run_inmemory(rel.job_id, rel.dca_job_id, s, data, X_aux, local_models=LOCAL)
    assert np.array_equal(np.asarray(mem.release.weights), np.asarray(rel.weights))  # bit for bit
    assert list(mem.release.classes) == list(rel.classes) and mem.release.sensitivity == rel.sensitivity

    # what the curator process received, message by message
    seen = transcript.read(fed.transcripts / "curator.jsonl")
    types = {r["type"] for r in seen}
    assert not types & {"mpdp.messages.ClientShare", "mpdp.messages.ShareBatch", "mpdp.messages.ReceivedClients"}
    partials = [r["message"] for r in seen if r["type"] == "mpdp.messages.PartialSum" and r["message"].job_id == rel.dca_job_id]
    assert len(partials) == 3  # one q_k per node, and nothing else about the votes
    receipts = [r["message"] for r in seen if r["type"] == "mpdp.messages.VoteReceipt" and r["message"].job_id == rel.job_id]
    assert sorted(r.party for r in receipts) == PARTIES and all(set(f.name for f, _ in r.ListFields()) <= {"job_id", "party", "accepted_shares", "local_model"} for r in receipts)
    blob = b"".join(base64.b64decode(r["data"]) for r in seen)
    votes = {p: core.VoterRole(p, LOCAL[p]).vote(s, *data[p], X_aux) for p in PARTIES}
    for p, v in votes.items():
        packed = sharing.pack_u64(encode_u64(v, 8, 2.0**54))
        assert packed[:64] not in blob, f"{p}'s encoded votes appear in the curator's transcript"
        assert packed not in blob
    # the partial sums add up to the exact counts, but no single q_k is anyone's votes or the total
    total = sharing.ring_sum(np.stack([sharing.unpack_u64(q.partial_sum, len(X_aux)) for q in partials]))
    assert np.array_equal(total, encode_u64(sum(votes.values()), 8, 2.0**54))
    for q in partials:
        assert q.partial_sum != sharing.pack_u64(total)

    # the parties' ledgers, and the vote sum is not available to anyone
    for p in PARTIES:
        entries = json.loads((fed.workdir / p / "state" / "ledger.json").read_text())["entries"]
        e = [x for x in entries if x["job_id"] == rel.job_id]
        assert len(e) == 1 and e[0]["protocol"] == "hamm2016" and e[0]["epsilon"] == 1000.0 and e[0]["dca_job_id"] == rel.dca_job_id
    with curator_channel(fed, site_tls(fed, "operator")) as ch:
        with pytest.raises(grpc.RpcError) as err:
            ops_grpc.JobOperationsStub(ch).GetRelease(common_pb2.JobRef(job_id=rel.dca_job_id), timeout=30)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED and "secure sum" in err.value.details()
    with curator_channel(fed, site_tls(fed, "operator")) as ch:  # its outcome (not its values) is on record
        st = list(ops_grpc.JobOperationsStub(ch).WatchJob(common_pb2.JobRef(job_id=rel.dca_job_id), timeout=30))[-1]
    consumed = json.loads((fed.workdir / "curator" / "state" / "dca" / f"{rel.dca_job_id}.consumed.json").read_text())
    assert st.state == "RELEASED" and st.terminal and consumed["clients_included"] == 5 and "values" not in consumed, (st, consumed)
    assert fetch(ep, rel.job_id) == rel  # published, persisted

    # Dave: `mpdp predict` on held-out rows
    out = CliRunner().invoke(predict_cmd, ["--endpoints", str(fed.workdir), "--job", rel.job_id, "--data", fed.tests["bc"], "--format", "csv", "--json"])
    assert out.exit_code == 0, out.output
    acc = json.loads(out.output)["accuracy"]
    assert acc > 0.85, acc


def test_multiclass_majority_vote_job(fed):
    ep = Endpoints.load(fed.workdir)
    s = spec(dataset="wine", auxiliary="wine_aux", method="vote", classes=["0", "1", "2"], lam=0.05, local_lam=0.05, epsilon=1e4, simulation_seed=b"wine")
    rel = train_ensemble(ep, s)
    W = core.weights_of(rel)
    assert W.shape == (3, 13) and rel.sensitivity == pytest.approx(np.sqrt(2) / 0.05)
    X_aux = _load_auxiliary(DatasetConfig(**fed.aux["wine_aux"]))
    mem = core.run_inmemory(rel.job_id, rel.dca_job_id, s, _party_data(fed, "wine"), X_aux, local_models=LOCAL)
    assert np.array_equal(np.asarray(mem.release.weights), np.asarray(rel.weights))


@pytest.mark.parametrize(
    "change, code, words",
    [
        ({"epsilon": 0.0}, grpc.StatusCode.INVALID_ARGUMENT, "epsilon"),
        ({"method": "median"}, grpc.StatusCode.INVALID_ARGUMENT, "method"),
        ({"auxiliary": "nope"}, grpc.StatusCode.INVALID_ARGUMENT, "auxiliary dataset 'nope'"),
        ({"parties": PARTIES + ["party-x"]}, grpc.StatusCode.INVALID_ARGUMENT, "party-x"),
        ({"compute_nodes": ["node-1", "node-9"]}, grpc.StatusCode.INVALID_ARGUMENT, "node-9"),
        ({"dataset": "missing"}, grpc.StatusCode.ABORTED, "no dataset 'missing'"),
        ({"classes": ["0", "1"]}, grpc.StatusCode.ABORTED, "a label of the dataset is not one of the job's classes"),
        ({"compute_nodes": ["node-1", "node-1"]}, grpc.StatusCode.INVALID_ARGUMENT, "compute_nodes: names must be distinct"),
        ({"classes": [str(k) for k in range(65)]}, grpc.StatusCode.INVALID_ARGUMENT, "classes: must hold [2, 64] entries"),
    ],
)
def test_bad_jobs_are_refused_and_nothing_is_published(fed, change, code, words):
    ep = Endpoints.load(fed.workdir)
    before = set(p.name for p in (fed.workdir / "curator" / "state" / "ensembles").glob("hm-*.binpb"))
    ledgers = {p: (fed.workdir / p / "state" / "ledger.json").read_text() for p in PARTIES}
    with pytest.raises(grpc.RpcError) as err:  # refused at the submit, or the job's own failure (JobEnded)
        train_ensemble(ep, spec(**change), timeout=120)
    assert err.value.code() == code and words in err.value.details(), err.value.details()
    assert set(p.name for p in (fed.workdir / "curator" / "state" / "ensembles").glob("hm-*.binpb")) == before
    assert {p: (fed.workdir / p / "state" / "ledger.json").read_text() for p in PARTIES} == ledgers  # nobody spent ε
    assert Endpoints.load(fed.workdir)  # the federation still serves: the next test runs a job


def test_roles_are_enforced(fed):
    with curator_channel(fed, site_tls(fed, "operator")) as ch:
        with pytest.raises(grpc.RpcError) as err:  # a secure sum cannot be created (and read) by an operator
            ops_grpc.JobOperationsStub(ch).SubmitJob(ops.JobSubmission(dca=dca_pb2.DcaJobSpec(dimension=3, clients=5, compute_nodes=NODES, secure_sum=True)), timeout=30)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        with pytest.raises(grpc.RpcError) as err:  # only voters fetch the auxiliary data
            list(pb_grpc.EnsembleCuratorStub(ch).GetAuxiliary(common_pb2.JobRef(job_id="hm-000000000000"), timeout=30))
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    # only the curator asks a party to vote: a party has no port, an operator may not relay, and a vote request another
    # party seals and relays is refused at the recipient
    vote = pb.VoteRequest(job_id="hm-1", spec=spec()).SerializeToString()
    party2 = site_tls(fed, "party-2")
    with curator_channel(fed, party2) as ch:
        cert = relay_stub(ch).Certificate(link_pb2.PartyCertificateRequest(name="party-1"), timeout=30).certificate
        call, _, _ = sealed_call(party2, fed.federation, "party-2", "party-1", cert, "/mpdp.messages.EnsembleParty/Vote", vote, "hm-1")
        with pytest.raises(grpc.RpcError) as err:
            relay_stub(ch).Relay(call, timeout=30)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with curator_channel(fed, site_tls(fed, "operator")) as ch:
        with pytest.raises(grpc.RpcError) as err:
            relay_stub(ch).Relay(call, timeout=30)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_cli_train_and_predict(fed):
    """`mpdp train hamm2016` (private: OS noise) and `mpdp predict` as an operator would run them."""
    from mpdp_services.cli.train import train as train_cmd

    args = ["hamm2016", "--endpoints", str(fed.workdir), "--dataset", "bc", "--auxiliary", "bc_aux", "--method", "vote",
            "--classes=-1,1", "--parties", ",".join(PARTIES), "--epsilon", "2000", "--lam", "0.01", "--json"]
    out = CliRunner().invoke(train_cmd, args)
    assert out.exit_code == 0, out.output
    s = json.loads(out.output)
    assert s["model"] == "hamm2016" and s["method"] == "vote" and not s["seeded"] and s["parties_included"] == 5
    assert s["sensitivity"] == pytest.approx(2.0 / 0.01) and "party" in s["guarantee"]["statement"]
    out = CliRunner().invoke(train_cmd, args[:-1] + ["--auxiliary", ""])
    assert out.exit_code != 0 and "auxiliary" in out.output


def test_a_failing_voter_within_T_is_left_out_and_M_shrinks(fed):
    """party-5 has no `bc4` data and refuses to vote; T = 1 allows it: the release is over the 4 voters, with
    Δ₂ = 2/(4λ), and party-5's ledger has no entry (it never sent a share)."""
    rel = train_ensemble(Endpoints.load(fed.workdir), spec(dataset="bc4", max_missing=1, simulation_seed=b"t1"))
    assert rel.parties_included == 4 and rel.sensitivity == pytest.approx(2.0 / (4 * 1e-2))
    spent = {p: [e["job_id"] for e in json.loads((fed.workdir / p / "state" / "ledger.json").read_text())["entries"]] for p in PARTIES}
    assert all(rel.job_id in spent[p] for p in PARTIES[:4]) and rel.job_id not in spent["party-5"]


def test_pate_the_curator_sees_only_noisy_counts(fed):
    """Method pate: the voters add Gaussian noise inside the vote sum; the curator labels the Q
    queried points by the noisy argmax and trains on them; every voter spent the vote sum's (ε, δ) first."""
    ep = Endpoints.load(fed.workdir)
    s = spec(method="pate", epsilon=200.0, delta=1e-6, queries=60, simulation_seed=b"hamm-pate")
    rel = train_ensemble(ep, s)
    assert rel.method == "pate" and rel.auxiliary_rows == 60 and rel.parties_included == 5
    assert rel.guarantee.epsilon == 200.0 and rel.guarantee.delta == 1e-6 and "GNMax" in rel.guarantee.mechanism
    assert rel.sensitivity == pytest.approx(np.sqrt(60))  # √Q·Δ, Δ = 1 (binary)
    assert "noisy vote counts" in rel.trust_model and "post-processing" in rel.guarantee.statement

    # the Q queried points are a public choice (here fixed by the simulation seed): recompute them and the exact counts
    X_aux = _load_auxiliary(DatasetConfig(**fed.aux["bc_aux"]))
    X_q = core.pate_queries(s, X_aux)
    assert X_q.shape == (60, X_aux.shape[1])
    data = _party_data(fed, "bc")
    exact = sum(core.VoterRole(p, LOCAL[p]).vote(s, *data[p], X_q) for p in PARTIES)
    params = core.vote_job(s, rel.dca_job_id, 60)
    with curator_channel(fed, site_tls(fed, "operator")) as ch:  # the noisy sum is a DP release: served like any DCA release
        noisy = ops_grpc.JobOperationsStub(ch).GetRelease(common_pb2.JobRef(job_id=rel.dca_job_id), timeout=30).dca
    values = np.asarray(noisy.values)
    assert not noisy.secure_sum and values.shape == exact.shape
    assert not np.array_equal(values, exact) and not np.all(values == np.round(values))  # never the exact counts
    assert np.all(values != exact)  # not one count is exact
    # what reached the curator process: the nodes' partial sums, whose ring sum is the noisy sum, not the exact counts
    seen = transcript.read(fed.transcripts / "curator.jsonl")
    partials = [r["message"] for r in seen if r["type"] == "mpdp.messages.PartialSum" and r["message"].job_id == rel.dca_job_id]
    total = sharing.ring_sum(np.stack([sharing.unpack_u64(q.partial_sum, 60) for q in partials]))
    assert len(partials) == 3 and sharing.pack_u64(total) == noisy.encoded_sum
    assert not np.array_equal(total, encode_u64(exact, core.PATE_FRAC_BITS, 2.0**46))
    # the same seeded job in memory: the voters' noise is derived as over sockets, so the sum and model match bit for bit
    mem = core.run_inmemory(rel.job_id, rel.dca_job_id, s, data, X_aux, local_models=LOCAL)
    assert np.array_equal(np.asarray(mem.vote_sum.values), values) and np.array_equal(np.asarray(mem.release.weights), np.asarray(rel.weights))
    # M = 5 voters each add N(0, σ_std²/(M − T − 1)): the sum's noise has variance (5/4)·σ_std²; all within 8 s.d.
    sd = np.sqrt(5 / 4) * params.sigma_std
    assert np.all(np.abs(values - exact) < 8 * sd), (values - exact, sd)
    # the labels the model was trained on are the noisy argmax (GNMax); refit from the served noisy sum
    labels = core.pate.noisy_argmax(values, 5)
    w = core.fit_soft(X_q, core.one_hot(labels, 2), s.lam, tol=core.DEFAULT_TOL)
    assert np.allclose(np.asarray(rel.weights), w)

    for p in PARTIES:  # every voter spent the vote sum's (ε, δ), with its Gaussian record for the accountant
        entries = json.loads((fed.workdir / p / "state" / "ledger.json").read_text())["entries"]
        e = [x for x in entries if x["job_id"] == rel.job_id]
        assert len(e) == 1 and e[0]["protocol"] == "hamm2016" and e[0]["method"] == "pate"
        assert e[0]["epsilon"] == 200.0 and e[0]["delta"] == 1e-6 and e[0]["accounting"]["kind"] == "gaussian"
        assert e[0]["accounting"]["noise_multiplier"] == pytest.approx(params.sigma_std / params.sensitivity)
        assert not [x for x in entries if x["job_id"] == rel.dca_job_id]  # charged once, as the ensemble job

    out = CliRunner().invoke(predict_cmd, ["--endpoints", str(fed.workdir), "--job", rel.job_id, "--data", fed.tests["bc"], "--format", "csv", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["accuracy"] > 0.85


def test_vote_sums_are_validated_by_default(fed):
    """Without ``unvalidated`` every voter proves on its shares one vote per auxiliary point (pate: over the discrete
    Gaussian, δ at most the one asked for); honest voters are never rejected, and the release says what was proven."""
    ep = Endpoints.load(fed.workdir)
    for kw in ({}, {"method": "pate", "epsilon": 20.0, "delta": 1e-6, "queries": 40, "simulation_seed": b"hamm-valid"}):
        s = spec(unvalidated=False, **kw)
        rel = train_ensemble(ep, s)
        assert rel.parties_included == 5 and "proves on its secret shares" in rel.trust_model
        params = core.vote_job(s, rel.dca_job_id, rel.auxiliary_rows)
        assert params.validate == "votes" and params.vote_classes == len(s.classes)
        if s.method == "pate":
            assert 0 < rel.guarantee.delta <= 1e-6 and params.noise == "discrete-gaussian"
            with curator_channel(fed, site_tls(fed, "operator")) as ch:
                noisy = ops_grpc.JobOperationsStub(ch).GetRelease(common_pb2.JobRef(job_id=rel.dca_job_id), timeout=30).dca
            assert noisy.validate == dca_pb2.VALIDATE_VOTES and noisy.clients_rejected == 0 and noisy.clients_included == 5
            for p in PARTIES:
                entries = json.loads((fed.workdir / p / "state" / "ledger.json").read_text())["entries"]
                e = [x for x in entries if x["job_id"] == rel.job_id]
                assert len(e) == 1 and e[0]["accounting"]["kind"] == "discrete-gaussian" and e[0]["accounting"]["rho"] == params.rho


def test_pate_fields_belong_to_pate(fed):
    with curator_channel(fed, site_tls(fed, "operator")) as ch:
        for bad, words in (({"method": "pate"}, "delta"), ({"delta": 1e-6}, "belong to method pate"), ({"method": "pate", "delta": 1e-6, "protect_aux": True}, "protect_aux")):
            with pytest.raises(grpc.RpcError) as err:
                JobOperationsStub(ch).SubmitJob(JobSubmission(hamm2016=spec(**bad)), timeout=60)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and words in err.value.details(), err.value.details()


def test_cli_trains_a_pate_ensemble(fed):
    """`mpdp train hamm2016 --method pate` as an operator runs it (OS noise): `--help` offers it, the summary
    states the (ε, δ) guarantee."""
    from mpdp_services.cli.train import train as train_cmd

    help_text = CliRunner().invoke(train_cmd, ["hamm2016", "--help"]).output
    assert "pate" in help_text and "--queries" in help_text
    args = ["hamm2016", "--endpoints", str(fed.workdir), "--dataset", "bc", "--auxiliary", "bc_aux", "--method", "pate", "--queries", "40",
            "--classes=-1,1", "--parties", ",".join(PARTIES), "--epsilon", "30", "--delta", "1e-7", "--lam", "0.01", "--json"]
    out = CliRunner().invoke(train_cmd, args)
    assert out.exit_code == 0, out.output
    s = json.loads(out.output)
    assert s["method"] == "pate" and not s["seeded"] and s["auxiliary_rows"] == 40 and s["parties_included"] == 5
    assert s["guarantee"]["epsilon"] == 30.0 and 0 < s["guarantee"]["delta"] <= 1e-7 and "GNMax" in s["guarantee"]["mechanism"]
