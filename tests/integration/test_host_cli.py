"""The operator's commands on the curator's job host, as separate processes over mutual TLS: `mpdp train --detach`
returns the job id and exits for every model; `mpdp jobs watch` follows any job to its end; `mpdp model export` writes
the model any job released (the same coefficients the protocol's own release gives); `mpdp predict` works on a
regression job's posterior.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from mpdp.hamm2016.job import weights_of
from mpdp.local_release import theta_of
from mpdp.messages import common_pb2, operations_pb2_grpc
from mpdp.pathak2010 import tester
from tests.adversarial.conftest import NODES, PARTIES, operator_curator, start_federation

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    f = start_federation(tmp_path_factory.mktemp("host-cli"))
    yield f
    f.stop()


def mpdp(fed, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mpdp_services.cli.main", *args, "--endpoints", str(fed.workdir)], check=False, capture_output=True,
                          text=True, timeout=600)


MODELS = {
    "logreg": ["--noise", "corrected"],
    "lmgc": [],
    "hamm2016": ["--auxiliary", "aux", "--compute-nodes", ",".join(NODES)],
}


@pytest.mark.parametrize("model", list(MODELS))
def test_train_detaches_then_watch_and_export_give_the_released_model(fed, model):
    out = mpdp(fed, "train", model, "--dataset", "synthetic", "--parties", ",".join(PARTIES), "--epsilon", "2", "--lam", "0.01",
               *MODELS[model], "--detach", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    first = json.loads(out.stdout)
    job = first["job_id"]
    assert not first["terminal"]  # the command returned while the curator runs the job
    watched = mpdp(fed, "jobs", "watch", job, "--json")
    assert watched.returncode == 0, watched.stdout + watched.stderr
    last = json.loads(watched.stdout.strip().splitlines()[-1])
    assert last["terminal"] and last["released"], last
    exported = mpdp(fed, "model", "export", job, "--format", "json")
    assert exported.returncode == 0, exported.stderr
    doc = json.loads(exported.stdout)
    assert doc["job_id"] == job and doc["guarantee"]["epsilon"] > 0
    ref = common_pb2.JobRef(job_id=job)
    with operator_curator(fed) as ch:  # the protocol's own release, fetched and read as its own code does
        if model == "logreg":
            own = tester.rebuild(operations_pb2_grpc.JobOperationsStub(ch).GetRelease(ref, timeout=60).pathak2010)
            assert np.array_equal(np.asarray(doc["coefficients"]), own) and doc["classes"] == ["-1", "1"]
        elif model == "lmgc":
            s = operations_pb2_grpc.JobOperationsStub(ch).GetRelease(ref, timeout=60).lmgc
            assert np.array_equal(np.asarray(doc["releases"]["party-1"]["theta"]), theta_of(s.releases[0]).ravel())
        else:
            r = operations_pb2_grpc.JobOperationsStub(ch).GetRelease(ref, timeout=60).hamm2016
            assert np.array_equal(np.asarray(doc["coefficients"]), weights_of(r)) and doc["classes"] == ["-1", "1"]


def test_export_npz_and_the_refusals_of_a_running_or_unknown_job(fed, tmp_path):
    out = mpdp(fed, "train", "lmgc", "--dataset", "synthetic", "--parties", ",".join(PARTIES), "--epsilon", "1", "--lam", "0.01", "--detach")
    job = out.stdout.strip()
    assert out.returncode == 0 and job.startswith("lm-"), out.stderr
    assert mpdp(fed, "jobs", "watch", job).returncode == 0
    npz = tmp_path / "m.npz"
    assert mpdp(fed, "model", "export", job, "--format", "npz", "--out", str(npz)).returncode == 0
    with np.load(npz) as z:
        assert json.loads(str(z["meta"]))["job_id"] == job and z["theta_party-1"].size > 0
    unknown = mpdp(fed, "model", "export", "lm-ffffffffffff", "--json")
    assert unknown.returncode != 0 and "Traceback" not in unknown.stderr
    assert json.loads(unknown.stdout)["error"]["code"] == "not_found"
