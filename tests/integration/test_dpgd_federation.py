"""`mpdp train dp-gd` over sockets: 3 parties as DCA clients, 3 compute nodes, mutual TLS.

* the socket job's releases and model equal the in-memory drive of the same role (and so ``learner.fit``'s
  computation) with the same seed and DCA job ids, bit for bit;
* each party's ledger holds exactly one ``dpgd`` entry, the plan's composed (ε, δ), and no DCA entry of its own
  (the per-round ``dpgd-round`` markers charge nothing);
* a round beyond R, a DCA job whose σ_std is not the plan's, and a second request for a round, each sent to every
  party as the curator sends a round (from the curator's own certificate), are refused by each party, and charge
  nothing;
* the CLI trains, stores the model and ``mpdp predict --job dp-…`` classifies with it.
"""

from __future__ import annotations

import json

import grpc
import numpy as np
import pytest
from click.testing import CliRunner

from mpdp.dpgd.model import Task, party_rows
from mpdp.dpgd.plan import DpgdPlan, round_job_id
from mpdp.dpgd.role import run_inmemory
from mpdp.dpgd.wire import STATISTIC, round_request
from mpdp.messages import contribution_pb2 as cpb, contribution_pb2_grpc as cpb_grpc
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.common.rpc import TlsFiles
from mpdp_services.dca_client.client import DcaOperator
from mpdp_services.launcher.federation import LocalFederation
from tests.linked import PartyChannel, assert_parties_listen_on_no_grpc_port
from mpdp_services.operator.dpgd import run_dpgd

pytestmark = pytest.mark.integration
PARTIES = ["party-1", "party-2", "party-3"]
NODES = ["node-1", "node-2", "node-3"]
D, SIZES, BOUND = 3, (40, 50, 60), 60


def _data(tmp_path):
    g = np.random.default_rng(3)
    w = np.array([1.5, -1.0, 0.5])
    raw, ds = {}, {}
    for p, n in zip(PARTIES, SIZES):
        X = g.normal(size=(n, D))
        y = (X @ w + 0.5 * g.normal(size=n) > 0).astype(float)
        raw[p] = (X, y)
        f = tmp_path / "data" / f"{p}.csv"
        f.parent.mkdir(parents=True, exist_ok=True)
        np.savetxt(f, np.column_stack([X, y]), delimiter=",", fmt="%.17g")
        ds[p] = {"logit": {"path": str(f), "format": "csv"}}
    return raw, ds


def _ledger(fed, p) -> list[dict]:
    return json.loads((fed.workdir / p / "state" / "ledger.json").read_text())["entries"]


def _ask(fed: LocalFederation, dca_job: str, msg: cpb.DpgdRound) -> None:
    """One round's request to every party, from the curator's own certificate (as the learner host sends it); each
    party's refusal is raised (grpc.RpcError), the first one ends the round."""
    site = fed.workdir / "curator"
    tls = TlsFiles(site / "site.crt", site / "site.key", site / "ca.crt")
    req = cpb.StatisticRequest(dca_job_id=dca_job, dataset="logit", statistic=STATISTIC, records_per_client=BOUND, dpgd=msg, parties=PARTIES)
    for p in PARTIES:  # a party listens nowhere: the curator's call goes down the party's link (tests/linked.py)
        with PartyChannel(f"127.0.0.1:{fed.procs['curator'].port}", p, tls, fed.federation, fed.procs[p].local_socket) as ch:
            cpb_grpc.ContributionPartyStub(ch).Contribute(req, timeout=120)


def test_dpgd_job_over_sockets(tmp_path):
    raw, ds = _data(tmp_path)
    seed, job = b"dpgd-socket", "dp-0123456789ab"
    plan = DpgdPlan(Task("binary"), D, 1.0, 1e-6, lam=1e-2, rounds=2, total_records=sum(SIZES))
    fed = LocalFederation(tmp_path / "fed", PARTIES, ds, test_mode=True, paillier_bits=768, dgk_bits=768, compute_nodes=NODES, budget_epsilon=10.0)
    with fed:
        ep = Endpoints.load(fed.workdir)
        run = run_dpgd(ep, "logit", PARTIES, NODES, plan, BOUND, job_id=job, seed=seed)  # the curator hosts the job
        assert len(run.dca_jobs) == plan.rounds + 1 and run.model.shape == (D, 1)
        assert_parties_listen_on_no_grpc_port(fed)  # asked for their contributions over their links
        g = plan.guarantee
        for p in PARTIES:
            entries = _ledger(fed, p)
            dpgd = [e for e in entries if e["protocol"] == "dpgd"]
            assert len(dpgd) == 1 and dpgd[0]["job_id"] == job
            assert (dpgd[0]["epsilon"], dpgd[0]["delta"]) == (g.epsilon, g.delta)
            assert not [e for e in entries if e["protocol"] == "dca"]  # no per-round DCA charge
            markers = [e for e in entries if e["protocol"] == "dpgd-round"]
            assert sorted(e["job_id"] for e in markers) == [round_job_id(job, r) for r in range(plan.rounds + 1)]
            assert all((e["epsilon"], e["delta"]) == (0.0, 0.0) for e in markers)
            assert [e["dca_job_id"] for e in sorted(markers, key=lambda e: e["round"])] == run.dca_jobs
        before = {p: _ledger(fed, p) for p in PARTIES}

        with DcaOperator(ep) as op:
            def dca_job(r: int, purpose: str, epsilon_scale: float = 1.0, plan_: DpgdPlan = plan) -> str:
                params = plan_.dca_params(r, "pending", 3, NODES, records_per_client=BOUND, simulation_seed=seed, roster=PARTIES, purpose=purpose)
                spec = params.to_spec()
                spec.epsilon *= epsilon_scale
                return op.create(spec)

            # a round beyond R (the plan has R + 1 rounds): refused as invalid, nothing charged
            extra = round_request(plan, job, plan.rounds, run.iterates[-1])
            extra.round = plan.rounds + 1
            with pytest.raises(grpc.RpcError) as e:
                _ask(fed, dca_job(plan.rounds, round_job_id(job, plan.rounds + 1)), extra)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "beyond" in e.value.details()
            # a fresh job whose round-0 DCA job has another σ_std than the plan's: refused as invalid, nothing charged
            other = "dp-aaaaaaaaaaaa"
            with pytest.raises(grpc.RpcError) as e:
                _ask(fed, dca_job(0, round_job_id(other, 0), epsilon_scale=2.0), round_request(plan, other, 0, np.zeros((D, 1))))
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "σ_std" in e.value.details()
            # a DCA job labelled as another job's round: refused as invalid
            with pytest.raises(grpc.RpcError) as e:
                _ask(fed, dca_job(0, round_job_id(job, 0)), round_request(plan, other, 0, np.zeros((D, 1))))
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            # round 1 of the finished job once more, through a second DCA job: every party refuses it (REPLAY)
            with pytest.raises(grpc.RpcError) as e:
                _ask(fed, dca_job(1, round_job_id(job, 1)), round_request(plan, job, 1, run.iterates[0]))
            assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS, e.value.details()
        for p in PARTIES:
            assert _ledger(fed, p) == before[p]

        # the CLI: train (unseeded), store, predict
        from mpdp_services.cli.jobs import predict
        from mpdp_services.cli.train import train

        args = ["dp-gd", "--endpoints", str(fed.workdir), "--dataset", "logit", "--parties", ",".join(PARTIES), "--epsilon", "1", "--lam", "0.01",
                "--dimension", str(D), "--total-records", str(sum(SIZES)), "--records-per-party", str(BOUND), "--rounds", "1", "--json"]
        res = CliRunner().invoke(train, args, catch_exceptions=False)
        assert res.exit_code == 0, res.output
        out = json.loads(res.output.strip().splitlines()[-1])
        assert out["job_id"].startswith("dp-") and out["guarantee"]["epsilon"] <= 1.0 and "compute nodes do not all collude" in out["trust_model"]
        res = CliRunner().invoke(predict, ["--endpoints", str(fed.workdir), "--job", out["job_id"], "--data", str(tmp_path / "data" / "party-1.csv"), "--json"],
                                 catch_exceptions=False)
        assert res.exit_code == 0, res.output
        pred = json.loads(res.output.strip().splitlines()[-1])
        assert pred["rows"] == SIZES[0] and 0.0 <= pred["accuracy"] <= 1.0
        assert list(pred)[:4] == ["job_id", "protocol", "rows", "predicted"] and sum(pred["predicted"].values()) == pred["rows"], pred

    # the same role in memory, with the socket run's DCA job ids and seed: the same releases and model, bit for bit
    parts = {p: party_rows(plan.task, X, y) for p, (X, y) in raw.items()}
    mem = run_inmemory(plan, parts, NODES, BOUND, job_id=job, dca_job_ids=run.dca_jobs, seed=seed)
    assert mem.releases == run.releases
    assert np.array_equal(mem.model, run.model) and all(np.array_equal(a, b) for a, b in zip(mem.iterates, run.iterates))
