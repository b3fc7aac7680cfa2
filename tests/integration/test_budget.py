"""Concurrent jobs never overspend a party's privacy budget, for every protocol that spends.

One federation (curator, 3 parties with budget ε = 10, 2 compute nodes) over mutual TLS on loopback. For
each protocol, jobs whose total ε exceeds what the parties have left are launched at once. Invariants:

* every refused job is refused because a party answered RESOURCE_EXHAUSTED / BUDGET_EXCEEDED;
* no party's ledger ever charges more than its budget (the composed ε at the budget δ, mpdp.accounting, ≤ 10),
  and the ledger file is 0600;
* a release was published for exactly the jobs every party marked released (Pathak, LMGC), or spent on
  (HCB16 votes, DCA submissions): nothing is published without its charge, nothing charged twice;
* paper mode is charged its true ε (√d·ε/(2K)), not the nominal one.
"""

from __future__ import annotations

import asyncio
import json
import stat
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest

from mpdp.dca.params import DcaParams
from mpdp.ledger import DEFAULT_BUDGET_DELTA, composition
from mpdp.dp.pathak_paper import paper_mode_true_epsilon
from mpdp.messages import common_pb2, dca_pb2, hamm2016_pb2
from mpdp_services.operator.pathak2010 import make_spec
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.operator.pathak2010 import OperatorClient
from mpdp_services.dca_client.client import DcaOperator, submit_cohort
from mpdp_services.operator.ensemble import train_ensemble
from mpdp_services.launcher.federation import LocalFederation
from mpdp_services.operator.local import submit_local

pytestmark = pytest.mark.integration
PARTIES = ["party-1", "party-2", "party-3"]
NODES = ["node-1", "node-2"]
BUDGET = 10.0
JOBS = 4  # concurrent jobs per protocol; each asks for 2/5 of what is left, so at most 2 fit
REFUSED = "RESOURCE_EXHAUSTED: BUDGET_EXCEEDED"


def _rows(g: np.random.Generator, n: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    X = g.normal(size=(n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    y = np.where(X[:, 0] - 0.5 * X[:, 1] + 0.2 * g.normal(size=n) > 0, 1.0, -1.0)
    return X, y


def _write(path: Path, X: np.ndarray, y: np.ndarray) -> dict:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savetxt(path, np.column_stack([X, y]), delimiter=",", fmt="%.17g")
    return {"path": str(path), "format": "csv"}


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    root = tmp_path_factory.mktemp("budget")
    g = np.random.default_rng(12)
    ds: dict[str, dict[str, dict]] = {}
    for p, n in zip(PARTIES, (60, 50, 55)):
        ds[p] = {"narrow": _write(root / "data" / p / "narrow.csv", *_rows(g, n, 4)),
                 "wide": _write(root / "data" / p / "wide.csv", *_rows(g, n, 30))}
    X_aux, _ = _rows(g, 30, 4)
    aux = {"aux": _write(root / "data" / "aux.csv", X_aux, np.zeros(len(X_aux)))}
    f = LocalFederation(root / "fed", PARTIES, ds, test_mode=True, paillier_bits=768, dgk_bits=768, budget_epsilon=BUDGET,
                        compute_nodes=NODES, auxiliary=aux)
    f.start()
    yield f
    f.stop()


def ledger(fed: LocalFederation, party: str) -> list[dict]:
    path = fed.workdir / party / "state" / "ledger.json"
    return json.loads(path.read_text())["entries"] if path.exists() else []


def spent(fed: LocalFederation, party: str, extra: list[dict] = ()) -> float:
    """The party's composed ε at its budget δ (what its refusal rule compares with the budget ε)."""
    return composition([*ledger(fed, party), *extra], DEFAULT_BUDGET_DELTA).epsilon


def left(fed: LocalFederation, parties: list[str]) -> float:
    return min(BUDGET - spent(fed, p) for p in parties)


def assert_within_budget(fed: LocalFederation) -> None:
    for p in PARTIES:
        path = fed.workdir / p / "state" / "ledger.json"
        s = spent(fed, p)
        assert s <= BUDGET + 1e-9, (p, s)
        assert not path.exists() or stat.S_IMODE(path.stat().st_mode) == 0o600


def at_once(fn, args: list) -> list:
    """Run fn(*a) for every a in parallel threads released together; exceptions are returned, not raised."""
    start = threading.Barrier(len(args))

    def run(a):
        start.wait()
        try:
            return fn(*a)
        except Exception as e:  # noqa: BLE001 - the test inspects each outcome
            return e

    with ThreadPoolExecutor(len(args)) as pool:
        return list(pool.map(run, args))


def entries_for(fed: LocalFederation, party: str, protocol: str, jobs: set[str]) -> list[dict]:
    return [e for e in ledger(fed, party) if e["protocol"] == protocol and e["job_id"] in jobs]


# -- Pathak 2010 ------------------------------------------------------------------------------------


def test_paper_mode_is_charged_its_true_epsilon(fed):
    """Budget 10, K = 2, nominal ε = 8, d = 30: the true ε √30·8/4 ≈ 10.95 does not fit, so nothing runs."""
    two = PARTIES[:2]
    room = left(fed, two)
    nominal = 0.8 * room  # 8 on fresh ledgers
    true = paper_mode_true_epsilon(nominal, 30, 2)
    assert nominal <= room < true
    with OperatorClient(Endpoints.load(fed.workdir)) as client:
        job = client.submit(make_spec("wide", two, nominal, 0.05, "paper", 60.0))
        status = client.wait(job, timeout=120)
        assert status.state == "FAILED" and status.problem == common_pb2.BUDGET_EXCEEDED, status
        assert f"needs ε={true:.6g}" in status.detail, status.detail
        assert job not in client.models()
    for p in two:
        assert not [e for e in ledger(fed, p) if e["job_id"] == job]
    assert_within_budget(fed)


def test_concurrent_pathak_jobs_never_overspend(fed):
    eps = left(fed, PARTIES) / 2.5
    ep = Endpoints.load(fed.workdir)

    def one(i: int) -> tuple[str, common_pb2.Problem]:
        with OperatorClient(ep) as client:
            spec = make_spec("narrow", PARTIES, eps, 0.05, "corrected", 120.0)
            spec.simulation_seed = f"budget-{i}".encode()
            job = client.submit(spec)
            return job, client.wait(job, timeout=300)

    results = at_once(one, [(i,) for i in range(JOBS)])
    assert not [r for r in results if isinstance(r, Exception)], results
    published = {job for job, st in results if st.state == "PUBLISHED"}
    refused = [st for _, st in results if st.state != "PUBLISHED"]
    assert len(published) <= 2 and len(refused) >= JOBS - 2
    for st in refused:
        assert st.state == "FAILED" and st.problem == common_pb2.BUDGET_EXCEEDED, st
    with OperatorClient(ep) as client:
        assert published == {job for job, _ in results} & set(client.models())
    jobs = {job for job, _ in results}
    for p in PARTIES:
        mine = entries_for(fed, p, "pathak2010", jobs)
        assert {e["job_id"] for e in mine if e["status"] == "released"} == published, (p, mine)
        # a job refused elsewhere may reach this party's ledger as "failed" or "voided" (nothing left it after its
        # spend) only after the operator saw it fail (the abort travels on its own); until then it reads "spent"
        assert all(e["status"] in ("released", "failed", "voided") or (e["status"] == "spent" and e["job_id"] not in published) for e in mine), (p, mine)
        assert all(e["epsilon"] == eps for e in mine)
    assert_within_budget(fed)


# -- LMGC local releases ---------------------------------------------------------------------------


def test_concurrent_local_releases_never_overspend(fed):
    eps = left(fed, PARTIES) / 2.5
    ep = Endpoints.load(fed.workdir)
    results = at_once(lambda i: submit_local(ep, "narrow", PARTIES, eps, 1e-3, "corrected", 1e-3, 1.0, seed=f"lmgc-{i}".encode()), [(i,) for i in range(JOBS)])
    published = {r["job_id"] for r in results if isinstance(r, dict)}
    refused = [r for r in results if not isinstance(r, dict)]
    assert len(published) <= 2 and len(refused) >= JOBS - 2
    for e in refused:
        assert isinstance(e, grpc.RpcError) and REFUSED in e.details(), e
    for p in PARTIES:
        mine = [e for e in ledger(fed, p) if e["protocol"] == "local-release/lmgc"]
        assert published <= {e["job_id"] for e in mine if e["status"] == "released"}, (p, mine)
        assert all(e["status"] in ("released", "failed") for e in mine)
    assert_within_budget(fed)


# -- HCB16 ensemble votes ----------------------------------------------------------------------------


def test_concurrent_ensemble_votes_never_overspend(fed):
    eps = left(fed, PARTIES) / 2.5
    ep = Endpoints.load(fed.workdir)

    def one(i: int):
        spec = hamm2016_pb2.EnsembleJobSpec(dataset="narrow", auxiliary="aux", method="soft", lam=1e-2, epsilon=eps, classes=["-1", "1"],
                                            parties=PARTIES, compute_nodes=NODES, local_lam=1e-2, simulation_seed=f"hamm-{i}".encode())
        return train_ensemble(ep, spec, timeout=300)

    results = at_once(one, [(i,) for i in range(JOBS)])
    released = [r for r in results if isinstance(r, hamm2016_pb2.EnsembleRelease)]
    refused = [r for r in results if not isinstance(r, hamm2016_pb2.EnsembleRelease)]
    assert len(released) <= 2 and len(refused) >= JOBS - 2
    for e in refused:
        assert isinstance(e, grpc.RpcError) and REFUSED in e.details(), e
    for p in PARTIES:
        voted = {e["job_id"] for e in ledger(fed, p) if e["protocol"] == "hamm2016"}
        assert {r.job_id for r in released} <= voted, p  # a release only over votes that were charged
    assert_within_budget(fed)


# -- DCA: `mpdp dca submit --site` from a party's site, sharing the party service's ledger -------------


def two_fit(fed: LocalFederation, party: str) -> float:
    """A DCA job's ε such that two more such jobs compose within the party's budget and three do not (bisection)."""

    def entries(eps: float, k: int) -> list[dict]:
        p = DcaParams(job_id="probe", dimension=2, clients=2, max_missing=0, epsilon=eps, delta=1e-6, sensitivity=2.0, nodes=tuple(NODES))
        return [{**p.ledger_entry(), "job_id": f"probe-{i}"} for i in range(k)]

    lo, hi = 1e-6, 2 * BUDGET
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if spent(fed, party, entries(mid, 2)) <= BUDGET else (lo, mid)
    eps = lo * 0.999  # two fit with room to spare ...
    assert spent(fed, party, entries(eps, 2)) <= BUDGET < spent(fed, party, entries(eps, 3))  # ... three do not
    return eps


def test_concurrent_dca_submissions_from_a_party_site_never_overspend(fed):
    site = fed.workdir / "party-3"
    eps = two_fit(fed, "party-3")
    ep = Endpoints.load(fed.workdir)
    with DcaOperator(ep) as op:
        spec = dca_pb2.DcaJobSpec(dimension=2, clients=2, max_missing=0, epsilon=eps, delta=1e-6, sensitivity=2.0, mode=common_pb2.CORRECTED,
                                  clip_bounds=[1.0], compute_nodes=NODES, deadline_seconds=30.0, validate=dca_pb2.VALIDATE_NONE)
        jobs = [op.create(spec) for _ in range(JOBS)]
        charge = DcaParams.from_spec(jobs[0], op.job(jobs[0]).spec).ledger_entry()["epsilon"]  # the sum's guarantee
    for j in jobs:  # the other client of each job: a simulated one, without a ledger of its own
        asyncio.run(submit_cohort(ep, ep.tls, j, ["other-client"], np.array([[0.1, 0.2]])))

    def submit(job: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mpdp_services.cli.main", "dca", "submit", "--endpoints", str(fed.workdir), "--site", str(site),
                               "--job", job, "--values", "0.5,-0.25", "--json"], capture_output=True, text=True, timeout=300)

    runs = at_once(submit, [(j,) for j in jobs])  # four client processes and the party service, one ledger file
    ok = {j for j, r in zip(jobs, runs) if r.returncode == 0}
    refused = [r for r in runs if r.returncode != 0]
    assert len(ok) == 2 and len(refused) == JOBS - 2, [r.stderr for r in runs]  # one ledger: exactly 2 fit
    for r in refused:  # --json: the refusal is the one error object on stdout
        error = json.loads(r.stdout)["error"]
        assert error["code"] == "budget_exceeded" and REFUSED in error["message"] and "client party-3" in error["message"], r.stdout
    mine = entries_for(fed, "party-3", "dca", set(jobs))
    assert {e["job_id"] for e in mine} == ok and all(e["status"] == "spent" for e in mine)
    assert all(e["epsilon"] == charge for e in mine)
    with DcaOperator(ep) as op:
        states = {j: op.wait(j, timeout=120).state for j in jobs}
    assert {j for j, s in states.items() if s == "RELEASED"} == ok, states  # released exactly the charged submissions
    assert_within_budget(fed)
