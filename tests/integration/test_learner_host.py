"""The curator's learner host (services/curator/learner.py) over sockets: 3 parties, 3 compute nodes, mutual TLS.

* a dp-gd job is submitted and its id comes back at once; the operator's process takes no part in the rounds: it
  only watches (stage "round r of R") and reads the release from the curator's store (0600 on disk);
* the job is in the curator's catalog (`mpdp jobs`) as protocol ``dpgd``, with its state;
* `mpdp jobs cancel` stops a running job: it ends FAILED with CANCELLED, and its running round's DCA job is over
  at once (within a second), not at its deadline;
* a round the parties refuse fails the job naming the round, and its DCA job ends at once too;
* every spec field is checked before anything runs (INVALID_JOB), and a job id is never admitted twice (REPLAY).
"""

from __future__ import annotations

import re
import stat
import time

import grpc
import numpy as np
import pytest

from mpdp.dpgd.model import Task
from mpdp.dpgd.plan import DpgdPlan
from mpdp.dpgd.role import DpgdRun
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.launcher.federation import LocalFederation
from mpdp_services.operator.dpgd import dpgd_spec
from mpdp_services.operator.jobs import cancel_job, follow, get_job, list_jobs
from mpdp_services.operator.learner import fetch_model, submit, wait

pytestmark = pytest.mark.integration
PARTIES = ["party-1", "party-2", "party-3"]
NODES = ["node-1", "node-2", "node-3"]
D, SIZES, BOUND = 3, (40, 50, 60), 60


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    root = tmp_path_factory.mktemp("learner")
    g = np.random.default_rng(5)
    ds = {}
    for p, n in zip(PARTIES, SIZES):
        X = g.normal(size=(n, D))
        y = (X @ np.array([1.0, -1.0, 0.5]) > 0).astype(float)
        f = root / "data" / f"{p}.csv"
        f.parent.mkdir(parents=True, exist_ok=True)
        np.savetxt(f, np.column_stack([X, y]), delimiter=",", fmt="%.17g")
        ds[p] = {"logit": {"path": str(f), "format": "csv"}}
    f = LocalFederation(root / "fed", PARTIES, ds, test_mode=True, paillier_bits=768, dgk_bits=768, compute_nodes=NODES, budget_epsilon=1000.0)
    f.start()
    yield f
    f.stop()


def _plan(rounds: int = 2) -> DpgdPlan:
    return DpgdPlan(Task("binary"), D, 1.0, 1e-6, lam=1e-2, rounds=rounds, total_records=sum(SIZES))


def _spec(rounds: int = 2, **kw):
    return dpgd_spec(kw.pop("dataset", "logit"), PARTIES, NODES, _plan(rounds), BOUND, **kw)


def _dca_jobs_of(ep: Endpoints) -> dict[str, dict]:
    return {j["job_id"]: j for j in list_jobs(ep, "dca", limit=1000)}


def test_submit_returns_at_once_and_the_curator_runs_the_rounds(fed):
    ep = Endpoints.load(fed.workdir)
    t0 = time.monotonic()
    job = submit(ep, _spec(rounds=2))
    assert time.monotonic() - t0 < 5.0 and job.startswith("dp-")
    # the submitting connection is gone; another one watches the job the curator runs
    stages = [st["stage"] for st in follow(ep, job, timeout=300)]
    model = fetch_model(ep, job)
    assert stages[0] == "round 1 of 3" and stages[-1] == "done", stages
    assert {s for s in stages if s.startswith("round")} <= {"round 1 of 3", "round 2 of 3", "round 3 of 3"}
    run = DpgdRun.of(model)
    assert run.job_id == job and len(run.dca_jobs) == 3 and run.model.shape == (D, 1) and len(run.iterates) == 3
    # the store: durable, 0600
    path = fed.workdir / "curator" / "state" / "learners" / f"{job}.model.binpb"
    assert path.exists() and stat.S_IMODE(path.stat().st_mode) == 0o600
    # the catalog: `mpdp jobs` sees the job as dpgd, DONE, released
    summary = get_job(ep, job)
    assert summary["protocol"] == "dpgd" and summary["state"] == "DONE" and summary["released"], summary
    assert job in {j["job_id"] for j in list_jobs(ep, "dpgd")}


def test_cancel_aborts_the_running_round_at_once(fed):
    ep = Endpoints.load(fed.workdir)
    job = submit(ep, _spec(rounds=40))
    dca_job = ""
    for st in follow(ep, job, timeout=120):  # until round 2 runs and its DCA job is live
        assert not st["terminal"], st
        live = [j["job_id"] for j in list_jobs(ep, "dca", live_only=True)]
        if st["stage"] != "round 1 of 41" and st["stage"].startswith("round ") and live:
            dca_job = live[0]
            break
    cancelled = cancel_job(ep, job)
    t0 = time.monotonic()
    assert cancelled["state"] == "FAILED" and cancelled["problem"] == "CANCELLED", cancelled
    final = wait(ep, job, timeout=30)
    assert final["terminal"] and final["problem"] == "CANCELLED"
    while True:  # every DCA job of the learner is over within a second
        dca = _dca_jobs_of(ep)
        if all(dca[j]["terminal"] for j in dca if j == dca_job):
            break
        assert time.monotonic() - t0 < 1.0, dca[dca_job]
        time.sleep(0.05)
    assert dca[dca_job]["state"] in ("FAILED", "RELEASED")
    assert not [j for j in list_jobs(ep, "dca", live_only=True) if j["job_id"] == dca_job]
    with pytest.raises(grpc.RpcError) as e:
        fetch_model(ep, job)
    assert e.value.code() == grpc.StatusCode.ABORTED


def test_a_refused_round_fails_the_job_and_aborts_its_dca_job(fed):
    ep = Endpoints.load(fed.workdir)
    job = submit(ep, _spec(dataset="nosuch"))  # no party has it: every party refuses round 1
    final = wait(ep, job, timeout=120)
    assert final["state"] == "FAILED" and final["problem"] == "JOB_FAILED" and "round 1 of 3" in final["detail"], final
    dca_job = re.search(r"\((dca-[0-9a-f]+)\)", final["detail"]).group(1)
    t0 = time.monotonic()
    while not get_job(ep, dca_job)["terminal"]:  # aborted with the job, not left to its 600 s deadline
        assert time.monotonic() - t0 < 1.0, get_job(ep, dca_job)
        time.sleep(0.05)
    assert get_job(ep, dca_job)["state"] == "FAILED" and get_job(ep, job)["state"] == "FAILED"


@pytest.mark.parametrize("change, words", [
    (lambda s: setattr(s.dpgd, "dimension", 0), "dpgd.dimension"),
    (lambda s: setattr(s.dpgd, "epsilon", float("inf")), "dpgd.epsilon"),
    (lambda s: setattr(s.dpgd, "rounds", 101), "dpgd.rounds"),
    (lambda s: setattr(s.dpgd, "task", "ranking"), "dpgd.task"),
    (lambda s: setattr(s, "records_per_party", 0), "records_per_party"),
    (lambda s: s.parties.append("party-1"), "parties"),
    (lambda s: s.parties.append("party-99"), "not registered"),
    (lambda s: s.compute_nodes.append("node-99"), "not registered"),
    (lambda s: setattr(s, "max_missing", 2), "N − T − 1 ≥ 1"),
    (lambda s: setattr(s, "deadline_seconds", 1e9), "deadline_seconds"),
    (lambda s: setattr(s, "job_id", "pk-000000000000"), "starts with dp-"),
    (lambda s: s.ClearField("dpgd"), "learner"),
])
def test_every_field_is_checked_before_anything_runs(fed, change, words):
    ep = Endpoints.load(fed.workdir)
    spec = _spec()
    change(spec)
    before = len(list_jobs(ep, "dca", limit=1000))
    with pytest.raises(grpc.RpcError) as e:
        submit(ep, spec)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and words in e.value.details(), e.value.details()
    assert len(list_jobs(ep, "dca", limit=1000)) == before  # nothing ran


def test_a_job_id_is_admitted_once(fed):
    ep = Endpoints.load(fed.workdir)
    job = submit(ep, _spec(rounds=0, job_id="dp-aaaabbbbcccc"))
    with pytest.raises(grpc.RpcError) as e:
        submit(ep, _spec(rounds=0, job_id=job))
    assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert wait(ep, job, timeout=120)["state"] == "DONE"
    with pytest.raises(grpc.RpcError) as e:
        submit(ep, _spec(rounds=0, job_id=job))
    assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS


def test_cli_detach_watch_export_predict(fed, tmp_path):
    """`mpdp train dp-gd --detach` and `mpdp regress --detach` return the job id at once; `mpdp jobs watch`
    follows the job to its end with its stage; `mpdp model export` writes the release as JSON or npz; `mpdp predict`
    reads the dp-gd model from the curator's store."""
    import json

    from click.testing import CliRunner

    from mpdp_services.cli.jobs import predict
    from mpdp_services.cli.model import model as model_cmd
    from mpdp_services.cli.operate import jobs as jobs_cmd
    from mpdp_services.cli.regress import regress
    from mpdp_services.cli.train import train

    ep = ["--endpoints", str(fed.workdir)]
    run = CliRunner()
    res = run.invoke(train, ["dp-gd", *ep, "--dataset", "logit", "--parties", ",".join(PARTIES), "--epsilon", "1", "--lam", "0.01",
                             "--dimension", str(D), "--total-records", str(sum(SIZES)), "--records-per-party", str(BOUND), "--rounds", "2", "--detach", "--json"],
                     catch_exceptions=False)
    assert res.exit_code == 0, res.output
    job = json.loads(res.output.strip().splitlines()[-1])["job_id"]
    assert job.startswith("dp-")
    res = run.invoke(jobs_cmd, ["watch", job, *ep, "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    seen = [json.loads(line) for line in res.output.strip().splitlines()]
    assert seen[-1]["state"] == "DONE" and seen[-1]["terminal"] and all(s["stage"].startswith("round ") for s in seen[:-1]), seen

    res = run.invoke(model_cmd, ["export", job, *ep, "--format", "json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output.strip().splitlines()[0])
    assert doc["job_id"] == job and np.asarray(doc["weights"]).shape == (D, 1) and len(doc["iterates"]) == 3 and "guarantee" in doc
    res = run.invoke(model_cmd, ["export", job, *ep, "--format", "npz", "--out", str(tmp_path / "m.npz")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    with np.load(tmp_path / "m.npz") as z:
        assert np.array_equal(z["weights"], np.asarray(doc["weights"])) and json.loads(str(z["meta"]))["trust_model"] == doc["trust_model"]

    res = run.invoke(predict, [*ep, "--job", job, "--data", str(fed.workdir.parent / "data" / "party-1.csv"), "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert json.loads(res.output.strip().splitlines()[-1])["rows"] == SIZES[0]

    res = run.invoke(regress, [*ep, "--dataset", "logit", "--parties", ",".join(PARTIES), "--nodes", ",".join(NODES), "--bounds", "2,2,2,1", "-d", str(D),
                               "--epsilon", "5", "--total-records", str(sum(SIZES)), "--records-per-party", str(BOUND), "--grid-repeats", "2,2",
                               "--detach", "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    rg = json.loads(res.output.strip().splitlines()[-1])["job_id"]
    assert rg.startswith("rg-")
    res = run.invoke(jobs_cmd, ["watch", rg, *ep, "--json"], catch_exceptions=False)
    assert res.exit_code == 0 and json.loads(res.output.strip().splitlines()[-1])["state"] == "DONE", res.output
    assert get_job(Endpoints.load(fed.workdir), rg)["protocol"] == "regression"
    res = run.invoke(model_cmd, ["export", rg, *ep], catch_exceptions=False)
    doc = json.loads(res.output.strip().splitlines()[0])
    assert len(doc["posterior_mean"]) == D and np.asarray(doc["posterior_precision"]).shape == (D, D) and doc["std_release"]["job"] != doc["main_release"]["job"]
    data = fed.workdir.parent / "data" / "party-1.csv"  # predict works on a regression job too: ŷ = x·μ from its posterior
    res = run.invoke(predict, [*ep, "--job", rg, "--data", str(data), "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    pred = json.loads(res.output.strip().splitlines()[-1])
    rows = np.loadtxt(data, delimiter=",")
    assert pred["rows"] == SIZES[0] and np.isclose(pred["mae"], np.mean(np.abs(rows[:, -1] - rows[:, :-1] @ np.asarray(doc["posterior_mean"]))))
    # without --detach, regress follows the job and prints the posterior; --validate none opts out of the proofs
    # (the default above ran validated rounds), with Gaussian noise, and the guarantee says so
    res = run.invoke(regress, [*ep, "--dataset", "logit", "--parties", ",".join(PARTIES), "--nodes", ",".join(NODES), "--bounds", "2,2,2,1", "-d", str(D),
                               "--epsilon", "5", "--total-records", str(sum(SIZES)), "--records-per-party", str(BOUND), "--grid-repeats", "2,2",
                               "--validate", "none", "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.strip().splitlines()[-1])
    assert out["job_id"].startswith("rg-") and len(out["posterior_mean"]) == D and out["noise"] == "gaussian"
    assert "not proven valid" in out["guarantee"]
