"""A party's job lifecycle across real processes: a job orphaned by a curator crash fails at the party's deadline
(its ledger entry kept, marked failed) and the party serves the restarted curator; finished jobs leave memory.

The curator is made to wait forever for a third party ("party-mock", a server that acknowledges and never
accepts), so the real parties wait for StartProtocol with nothing of their own to send: only their deadline
can end the job once the curator is killed with SIGKILL.
"""

from __future__ import annotations

import json
import re
import time

import numpy as np
import pytest
import yaml
from sklearn.datasets import load_wine

from mpdp.messages import pathak2010_pb2 as pb, pathak2010_pb2_grpc as pb_grpc
from mpdp_services.operator.pathak2010 import make_spec
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.operator.pathak2010 import OperatorClient
from mpdp_services.common import pki
from mpdp_services.launcher.federation import LocalFederation
from mpdp_services.operator.local import submit_local

from tests.linked import LinkedServer

from .conftest import MockParty, curator_channel, site_tls, synthetic_parts

pytestmark = pytest.mark.integration
PARTIES = ["party-1", "party-2"]
DEADLINE = 6.0  # the parties' job_deadline_seconds: jobs whose spec sets none fail after this
MAX_RETAINED = 4
HELD = re.compile(r"(\S+) jobs in memory: (\d+) running, (\d+) held")


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    root = tmp_path_factory.mktemp("lifecycle")
    X, y = load_wine(return_X_y=True)
    X = (X - X.mean(axis=0)) / X.std(axis=0) / 4.0
    ds = {}
    for j, (p, (Xs, ys)) in enumerate(zip(PARTIES, synthetic_parts([60, 45]))):
        data = root / "data"
        data.mkdir(parents=True, exist_ok=True)
        np.savetxt(data / f"{p}.csv", np.column_stack([Xs, ys]), delimiter=",", fmt="%.17g")
        np.savetxt(data / f"{p}-wine.csv", np.column_stack([X[j::2], y[j::2]]), delimiter=",", fmt="%.17g")
        ds[p] = {"synthetic": {"path": str(data / f"{p}.csv"), "format": "csv"}, "wine": {"path": str(data / f"{p}-wine.csv"), "format": "csv"}}
    fed = LocalFederation(root / "fed", PARTIES, ds, test_mode=True, paillier_bits=768, dgk_bits=768, budget_epsilon=1e6,
                          members=[*PARTIES, "party-mock"])  # party-mock: a provisioned member played by a test server
    fed.provision()
    for p in PARTIES:
        cfg = fed.workdir / p / "party.yaml"
        data = yaml.safe_load(cfg.read_text())
        data.update(job_deadline_seconds=DEADLINE, max_retained_jobs=MAX_RETAINED)
        cfg.write_text(yaml.safe_dump(data, sort_keys=False))
    fed.start()
    yield fed
    fed.stop()


@pytest.fixture(scope="module")
def silent_party(fed):
    """'party-mock', registered with the curator: it acknowledges every message and never accepts a job."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    ca_dir = fed.workdir / "ca"
    ca_key = serialization.load_pem_private_key((ca_dir / "ca.key").read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate((ca_dir / "ca.crt").read_bytes())
    key, cert = pki.issue(ca_key, ca_cert, "party", "party-mock", ["127.0.0.1"])
    pki.write_site(fed.workdir / "party-mock", key, cert, ca_cert)
    tls = site_tls(fed, "party-mock")
    with curator_channel(fed, tls) as ch:
        pb_grpc.CuratorStub(ch).RegisterParty(pb.PartyRegistration(), timeout=30)
    servicer = MockParty()
    linked = LinkedServer(f"127.0.0.1:{fed.procs['curator'].port}", "party-mock", tls, fed.federation, lambda server: pb_grpc.add_PartyServicer_to_server(servicer, server))
    linked.wait_up()
    yield
    linked.stop()


def ledger_entry(fed, party: str, job_id: str) -> dict | None:
    path = fed.workdir / party / "state" / "ledger.json"
    entries = json.loads(path.read_text())["entries"] if path.exists() else []
    return next((e for e in entries if e["job_id"] == job_id), None)


def wait_for(condition, timeout: float, what: str):
    """Poll ``condition`` (a file the services write) until it holds; the bound is the assertion."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} did not happen within {timeout:g} s")


def test_a_job_orphaned_by_a_curator_crash_fails_at_the_party_deadline(fed, silent_party):
    ep = Endpoints.load(fed.workdir)
    with OperatorClient(ep) as client:
        job = client.submit(make_spec("synthetic", PARTIES + ["party-mock"], 0.9, 0.05, "corrected"))  # no spec deadline
    # both real parties accepted (nothing spent yet: a party spends at ProtocolStart, which needs party-mock's
    # acceptance too); kill the curator once it has taken both, so the parties really have nothing left to send
    curator_log = fed.workdir / "curator" / "service.log"
    wait_for(lambda: all(f"received JobAcceptance from party:{p}" in curator_log.read_text() for p in PARTIES), 60, "the curator taking both acceptances")
    fed.kill("curator")
    killed = time.monotonic()
    wait_for(lambda: all("did not end by its deadline" in (fed.workdir / p / "service.log").read_text() for p in PARTIES), DEADLINE + 30, "failing the orphaned job")
    assert time.monotonic() - killed >= DEADLINE - 1.0  # nothing else ended it: the parties had nothing to send
    assert not any(ledger_entry(fed, p, job) for p in PARTIES)  # it never reached its spend step: nobody paid

    fed.restart("curator")  # new keys; the registrations survive
    ep = Endpoints.load(fed.workdir)
    with OperatorClient(ep) as client:
        spec = make_spec("synthetic", PARTIES, 0.9, 0.05, "corrected", 120.0)
        spec.simulation_seed = b"after-restart"
        again = client.submit(spec)
        status = client.wait(again, timeout=180)
    assert status.state == "PUBLISHED", status.detail
    assert all(ledger_entry(fed, p, again)["status"] == "released" for p in PARTIES)


def test_finished_jobs_leave_memory(fed):
    ep = Endpoints.load(fed.workdir)
    jobs = [submit_local(ep, "wine", PARTIES, 1000.0, 1e-3, "corrected", 1e-3, 1.0, seed=f"lc-{i}".encode())["job_id"] for i in range(100)]
    for p in PARTIES:
        assert all(ledger_entry(fed, p, j)["status"] == "released" for j in jobs)
        counts = [(int(m[2]), int(m[3])) for m in HELD.finditer((fed.workdir / p / "service.log").read_text()) if m[1] == "local-release/lmgc"]
        assert len(counts) >= len(jobs)
        assert all(running == 0 and held <= MAX_RETAINED for running, held in counts[-len(jobs):]), counts
