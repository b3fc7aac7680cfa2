"""The docker compose federation, for real: engine started by hand, image built offline, one container per site.

The stage: install docker.io/debootstrap/compose when missing (deploy/host-setup.sh), start dockerd
(deploy/engine.sh; FAILS, never skips, if it cannot), build the image with no network
(deploy/build-image.sh), provision the sites and demo data (deploy/prepare.sh), `docker compose up --wait`
(healthy = gRPC health over mutual TLS), then:

- a Pathak job across the containers publishes a model that `mpdp predict` (Dave) uses on held-out rows;
- a DCA job over the three compute nodes (the operator's load generator plays the clients) is released;
- an HCB16 ensemble job: the parties vote on the curator's public auxiliary rows, the nodes sum the votes;
- a party container stopped while a job waits on it fails the job cleanly, naming that party, nothing
  published; after a restart the resubmitted job publishes;
- `docker compose down && docker compose up` keeps the curator's published models and DCA releases and
  every party's ledger;
- the containers run the image's Python (Debian 13's 3.13; the suite itself runs on the host's, e.g. 3.11), and
  the suite's core unit tests (math, DP, accounting, ledger, schema, Pathak and DCA cores) pass on it, run in a
  throwaway container of the same image with no network;
- everything is torn down (containers, network, volumes; the engine if this test started it).

Its own compose project (mpdp-ci), image tag and site folder, so a developer's `docker compose up` is untouched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mpdp_services.common.processes import spawn

from .conftest import PY, REPO, need_root, run

pytestmark = [pytest.mark.deploy, pytest.mark.slow]

PROJECT = "mpdp-ci"
IMAGE = "mpdp:ci"
PARTIES = ["party-1", "party-2", "party-3"]
NODES = ["compute-1", "compute-2", "compute-3"]
DCA_N, DCA_D = 60, 5
TIMINGS: dict[str, float] = {}
IMAGE_PYTHON = "3.13"  # deploy/build-image.sh: Debian 13 trixie's python3
# The suite's core unit tests that need nothing but the package and pytest: run again on the image's Python.
CORE_TESTS = ["tests/core/test_math.py", "tests/core/test_dp.py", "tests/core/test_accountant.py", "tests/core/test_ledger.py",
              "tests/core/test_limits.py", "tests/core/test_schema.py", "tests/core/test_logreg.py", "tests/core/test_pathak_protocol.py",
              "tests/core/test_jobs.py", "tests/core/test_failure_policy.py", "tests/dca/test_dca_encoding.py", "tests/dca/test_dca_sharing.py",
              "tests/dca/test_discrete_gaussian.py"]

# Runs inside the operator container: submit a job, print every status change as one JSON line.
WATCH_JOB = """
import json, sys
from mpdp_services.operator.pathak2010 import make_spec
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.operator.pathak2010 import OperatorClient
with OperatorClient(Endpoints.load("/site")) as c:
    job = c.submit(make_spec("breast_cancer", sys.argv[1].split(","), 1.0, 0.1, "corrected", 300))
    for st in c.watch(job, timeout=300):
        print(json.dumps({"job_id": job, "state": st.state, "terminal": st.terminal, "detail": st.detail}), flush=True)
        if st.terminal:
            break
"""


# Runs inside the curator container (python is there; nothing is published to the host): ask Prometheus,
# polling its own state until the condition holds or the deadline passes; prints one JSON object.
PROMETHEUS = """
import json, sys, time, urllib.parse, urllib.request
def get(path):
    with urllib.request.urlopen("http://prometheus:9090" + path, timeout=5) as r:
        return json.load(r)["data"]
deadline, need = time.monotonic() + 90, int(sys.argv[1])
while True:
    targets = get("/api/v1/targets")["activeTargets"]
    up = {t["labels"]["instance"]: t["health"] for t in targets}
    q = 'sum(mpdp_jobs_total{role="curator",protocol="pathak2010",state="PUBLISHED"})'
    res = get("/api/v1/query?query=" + urllib.parse.quote(q))["result"]
    jobs = float(res[0]["value"][1]) if res else 0.0
    if (all(h == "up" for h in up.values()) and len(up) == 7 and jobs >= need) or time.monotonic() > deadline:
        print(json.dumps({"targets": up, "jobs": jobs}))
        break
    time.sleep(1)  # polling an external service's state, with a deadline
"""


class Compose:
    def __init__(self, workdir: Path) -> None:
        self.env = dict(os.environ, MPDP_COMPOSE_DIR=str(workdir), MPDP_IMAGE=IMAGE, COMPOSE_PROJECT_NAME=PROJECT, PY=PY)
        self.base = ["docker", "compose", "-p", PROJECT, "-f", str(REPO / "docker-compose.yml")]

    def __call__(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        return run([*self.base, *args], timeout=timeout, check=check, env=self.env, cwd=REPO)

    def operator(self, *cmd: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        return self("run", "--rm", "-T", "--no-deps", "operator", *cmd, timeout=timeout, check=check)

    def train(self) -> dict:
        p = self.operator("mpdp", "train", "logreg", "--endpoints", "/site", "--dataset", "breast_cancer", "--parties", ",".join(PARTIES), "--epsilon", "1", "--lam", "0.1", "--json")
        return json.loads(p.stdout.strip().splitlines()[-1])

    def ledger(self, party: str) -> dict:
        return json.loads(self("exec", "-T", party, "cat", "/state/ledger.json").stdout)

    def logs(self) -> str:
        return self("logs", "--no-color", "--tail", "40", check=False).stdout[-6000:]


def _timed(name: str, fn, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    TIMINGS[name] = round(time.perf_counter() - t0, 1)
    return out


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    need_root("the compose stage")
    state = tmp_path_factory.mktemp("engine")
    env = dict(os.environ, MPDP_ENGINE_DIR=str(state), PY=PY)
    _timed("host setup", run, [str(REPO / "deploy" / "host-setup.sh")], env=env, timeout=600)
    p = run([str(REPO / "deploy" / "engine.sh"), "start"], env=env, check=False, timeout=120)
    if p.returncode != 0:
        pytest.fail(f"the Docker engine could not start, so the compose stage cannot run:\n{p.stderr}", pytrace=False)
    yield
    run([str(REPO / "deploy" / "engine.sh"), "stop"], env=env, check=False, timeout=120)  # only the dockerd it started, by PID


@pytest.fixture(scope="module")
def compose(engine, tmp_path_factory):
    work = tmp_path_factory.mktemp("compose")
    c = Compose(work)
    c("down", "-v", "--remove-orphans", check=False)  # a previous run killed half-way
    _timed("prepare (image build + provisioning)", run, [str(REPO / "deploy" / "prepare.sh")], env=c.env, timeout=900)
    try:
        _timed("compose up --wait", c, "up", "-d", "--wait", "--wait-timeout", "240", timeout=300)
    except AssertionError as e:
        raise AssertionError(f"{e}\n--- service logs\n{c.logs()}") from None
    yield c
    c("down", "-v", "--remove-orphans", "--timeout", "20", check=False)
    run(["docker", "image", "rm", IMAGE], check=False)
    run(["docker", "image", "prune", "-f"], check=False)
    print(f"\ncompose stage timings (s): {json.dumps(TIMINGS)}", file=sys.__stderr__)


def test_compose_file_passes_the_real_compose_config(compose):
    compose("--profile", "operator", "config", "--quiet")
    cfg = json.loads(compose("--profile", "operator", "config", "--format", "json").stdout)
    services = cfg["services"]
    assert {"curator", *PARTIES, *NODES, "operator", "prometheus"} <= set(services)
    for name, svc in services.items():
        assert svc.get("init") is True and svc.get("pull_policy") == "never", name
        assert not svc.get("ports"), f"{name} publishes ports"
        assert list(svc["networks"]) == ["federation"], name
        if name in PARTIES:  # a party listens on no gRPC port: its readiness is its plain-HTTP probe, on loopback
            assert "/readyz" in " ".join(svc["healthcheck"]["test"]) and svc["environment"]["MPDP_PROBE_LISTEN"].startswith("127.0.0.1:"), name
            assert "MPDP_LISTEN" not in svc["environment"], name
        elif name not in ("operator", "prometheus"):
            assert "mpdp_services.cli.health" in svc["healthcheck"]["test"], name
            assert svc["environment"]["MPDP_HTTP_LISTEN"] == "0.0.0.0:9100" and svc["environment"]["MPDP_HTTP_TOKEN_FILE"]
    assert "promtool" in services["prometheus"]["healthcheck"]["test"]
    assert cfg["networks"]["federation"]["internal"] is True
    assert {v["source"] for v in services["curator"]["volumes"] if v["type"] == "volume"} == {"curator-state"}
    for p in PARTIES:
        vols = {v["target"]: v for v in services[p]["volumes"]}
        assert vols["/state"]["type"] == "volume" and vols["/state"]["source"] == f"{p}-state"
        assert vols["/data"]["read_only"] and vols["/site"]["read_only"]
        assert vols["/data"]["source"].endswith(f"data/{p}")
    # the CA key is never mounted anywhere
    mounted = [Path(v["source"]) for s in services.values() for v in s.get("volumes", []) if v["type"] == "bind"]
    assert not any((m / "ca.key").exists() for m in mounted)


def test_containers_run_the_image_python_and_the_core_tests_pass_on_it(compose, tmp_path):
    """The federation's containers run Python 3.13 (the suite runs on the host's); the core unit tests pass on it too:
    pytest's wheels for the image's Python are fetched on the host, the tests run from this checkout mounted read-only
    in a throwaway container of the image (root inside it only to install pytest into that container), with no network."""
    version = compose("exec", "-T", "curator", "python", "-c", "import sys; print('%d.%d' % sys.version_info[:2])").stdout.strip()
    assert version == IMAGE_PYTHON, version
    wheels = tmp_path / "wheels"
    run([PY, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--only-binary", ":all:", "--python-version", IMAGE_PYTHON,
         "--dest", str(wheels), "pytest>=8", "pytest-timeout>=2.3"], timeout=300)
    shared = REPO.parent / "shared" / "data"
    assert (shared / "adult").is_dir(), f"{shared} is missing"
    script = ("pip install --quiet --no-index --disable-pip-version-check --find-links /wheels pytest pytest-timeout"
              f" && cd /src && python -m pytest -q -p no:cacheprovider {' '.join(CORE_TESTS)}")
    p = _timed(f"core unit tests on Python {IMAGE_PYTHON}", run,
               ["docker", "run", "--rm", "--network", "none", "--user", "0", "-v", f"{REPO}:/src:ro", "-v", f"{wheels}:/wheels:ro",
                "-v", f"{shared}:/shared/data:ro", "-e", "HOME=/tmp", IMAGE, "sh", "-c", script], timeout=900, check=False)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    summary = p.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "error" not in summary, summary


def test_training_job_across_containers(compose):
    summary = _timed("training job (docker compose run operator)", compose.train)
    assert summary["parties"] == 3 and summary["dimension"] == 30 and not summary["seeded"]
    assert summary["guarantee"]["epsilon"] == 1.0 and set(summary["stage_seconds"]) >= {"setup", "stage1", "stage2", "stage3"}
    p = compose.operator("mpdp", "predict", "--endpoints", "/site", "--job", summary["job_id"], "--data", "/data/breast_cancer_test.csv", "--json")
    pred = json.loads(p.stdout.strip().splitlines()[-1])
    assert pred["rows"] == 142 and pred["accuracy"] > 0.75, pred  # non-private 0.95; ε=1 noise stays above 0.8 in 99.9 % of draws
    for party in PARTIES:
        assert [e["job_id"] for e in compose.ledger(party)["entries"]] == [summary["job_id"]]
    compose.first_job = summary["job_id"]  # type: ignore[attr-defined]


def test_prometheus_scrapes_every_role_and_counts_the_job(compose):
    """The compose Prometheus (Debian's package) has every role as an up target, and the curator's
    job counter rose after the training job (test_training_job_across_containers ran one)."""
    jobs = 1 if getattr(compose, "first_job", None) else 0
    seen = json.loads(compose("exec", "-T", "curator", "python", "-c", PROMETHEUS, str(jobs), timeout=150).stdout)
    assert seen["targets"] == {f"{n}:9100": "up" for n in ["curator", *PARTIES, *NODES]}, seen
    assert seen["jobs"] >= max(jobs, 1), seen
    # the endpoints ask for the federation's token (bound beyond loopback): without it a scrape is refused
    anon = compose("exec", "-T", "curator", "python", "-c",
                   "import urllib.request, urllib.error\ntry:\n    urllib.request.urlopen('http://party-1:9100/metrics', timeout=5); print(200)\n"
                   "except urllib.error.HTTPError as e:\n    print(e.code)")
    assert anon.stdout.strip() == "401"


def test_dca_job_across_compute_nodes(compose):
    script = (
        f"set -e; J=$(mpdp dca create --endpoints /site --dimension {DCA_D} --clients {DCA_N} --max-missing 2 --epsilon 1 --delta 1e-5 "
        f"--sensitivity 4.5 --nodes {','.join(NODES)}); echo $J; mpdp dca loadgen --endpoints /site --job $J --clients {DCA_N} --seed 5 --json; "
        "mpdp dca watch --endpoints /site --job $J --json; mpdp dca release --endpoints /site --job $J"
    )
    p = _timed("DCA job (create, load generator, release)", compose.operator, "sh", "-c", script)
    lines = p.stdout.strip().splitlines()[-4:]
    job_id, (load, status, release) = lines[0].strip(), [json.loads(line) for line in lines[1:]]
    assert load["accepted_shares"] == 3 * DCA_N and load["rejected"] == 0, load
    assert status["state"] == "RELEASED" and release["job_id"] == job_id, (status, release)
    assert release["clients_included"] == DCA_N and len(release["values"]) == DCA_D and not release["seeded"]
    g = release["guarantee"]  # a validated job (the default): the discrete Gaussian's exact (ε, δ), δ just under the asked 10⁻⁵
    assert g["epsilon"] == 1.0 and 0.99e-5 <= g["delta"] <= 1e-5 and release["validate"] == "range" and release["clients_rejected"] == 0, g
    exact = np.random.default_rng(5).uniform(-1, 1, size=(DCA_N, DCA_D)).sum(axis=0)  # loadgen's public simulation data
    assert np.all(np.abs(np.array(release["values"]) - exact) < 6 * np.sqrt(release["noise_variance"])), (release["values"], exact)
    compose.dca_release = release  # type: ignore[attr-defined]


def test_ensemble_job_votes_summed_by_the_compute_nodes(compose):
    """HCB16 across the containers: the parties vote on the curator's public auxiliary rows, the compute nodes
    sum the votes, the curator publishes the DP global classifier; Dave classifies the held-out rows."""
    p = _timed("ensemble job (hamm2016)", compose.operator, "mpdp", "train", "hamm2016", "--endpoints", "/site", "--dataset", "breast_cancer",
               "--auxiliary", "breast_cancer_aux", "--method", "soft", "--classes=-1,1", "--parties", ",".join(PARTIES), "--compute-nodes", ",".join(NODES),
               "--epsilon", "2", "--lam", "0.1", "--json")
    s = json.loads(p.stdout.strip().splitlines()[-1])
    assert s["model"] == "hamm2016" and s["parties_included"] == 3 and not s["seeded"]
    out = json.loads(compose.operator("mpdp", "predict", "--endpoints", "/site", "--job", s["job_id"], "--data", "/data/breast_cancer_test.csv", "--json").stdout.strip().splitlines()[-1])
    assert out["rows"] == 142 and 0.0 <= out["accuracy"] <= 1.0
    for party in PARTIES:
        assert any(e["job_id"] == s["job_id"] and e["protocol"] == "hamm2016" for e in compose.ledger(party)["entries"])


def test_stopped_party_fails_the_job_naming_it_then_restart_and_resubmit(compose):
    # Freeze party-3 first so the job cannot finish before the stop lands; it is announced to every party
    # and waits on party-3 when the container is stopped.
    compose("pause", "party-3")
    watcher = spawn(
        [*compose.base, "run", "--rm", "-T", "--no-deps", "operator", "python", "-c", WATCH_JOB, ",".join(PARTIES)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=compose.env, cwd=REPO,
    )
    try:
        first = json.loads(watcher.stdout.readline() or "{}")  # type: ignore[union-attr]
        assert first.get("terminal") is False, (first, watcher.stderr.read() if watcher.poll() is not None else "")  # type: ignore[union-attr]
        _timed("stop party-3", compose, "stop", "party-3")
        out, err = watcher.communicate(timeout=120)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    final = json.loads(out.strip().splitlines()[-1])
    assert final["job_id"] == first["job_id"] and final["state"] == "FAILED", (final, err)
    assert "party-3" in final["detail"] and "unreachable" in final["detail"], final
    failed = final["job_id"]
    p = compose.operator("mpdp", "predict", "--endpoints", "/site", "--job", failed, "--data", "/data/breast_cancer_test.csv", check=False)
    assert p.returncode != 0 and "JOB_FAILED" in p.stderr and "party-3" in p.stderr, p.stderr
    listed = compose.operator("python", "-c", "from mpdp_services.common.endpoints import Endpoints; from mpdp_services.operator.pathak2010 import OperatorClient; print(' '.join(OperatorClient(Endpoints.load('/site')).models()))").stdout.split()
    assert failed not in listed
    # restart the party and resubmit
    _timed("restart party-3 (up --wait)", compose, "up", "-d", "--wait", "--wait-timeout", "120", "party-3")
    again = compose.train()
    assert again["job_id"] != failed and again["parties"] == 3
    compose.second_job = again["job_id"]  # type: ignore[attr-defined]
    compose.failed_job = failed  # type: ignore[attr-defined]
    for party in PARTIES:
        # a party that spent before the failure keeps the charge (its data may have influenced a message:
        # docs/protocols/job-model.md §3), marked failed, or still "spent" if it was stopped before it could mark it
        kept = [e for e in compose.ledger(party)["entries"] if e["job_id"] == failed]
        assert all(e["status"] in ("failed", "spent") and e["epsilon"] > 0 for e in kept), (party, kept)


def test_down_and_up_keep_models_and_ledgers(compose):
    jobs = [compose.first_job, compose.second_job]  # type: ignore[attr-defined]
    get_models = "import sys; from mpdp_services.common.endpoints import Endpoints; from mpdp_services.operator.pathak2010 import OperatorClient; c = OperatorClient(Endpoints.load('/site')); print(*[c.model(j).SerializeToString(deterministic=True).hex() for j in sys.argv[1:]])"
    before_models = compose.operator("python", "-c", get_models, *jobs).stdout.split()
    before_ledgers = {p: compose.ledger(p) for p in PARTIES}
    _timed("compose down", compose, "down", "--timeout", "20")
    _timed("compose up --wait (again)", compose, "up", "-d", "--wait", "--wait-timeout", "240", timeout=300)
    assert compose.operator("python", "-c", get_models, *jobs).stdout.split() == before_models
    for p in PARTIES:
        after = compose.ledger(p)
        failed_charge = sum(e["epsilon"] for e in after["entries"] if e["job_id"] == compose.failed_job)  # type: ignore[attr-defined]
        assert after["entries"] == before_ledgers[p]["entries"], (p, after)
        assert after["spent_epsilon_basic"] == pytest.approx(4.0 + failed_charge), (p, after)  # 1 + 2 (ensemble) + 1, plus a kept failed charge
        assert after["spent_epsilon"] <= after["spent_epsilon_basic"] + 1e-12, (p, after)  # the accountant: never above basic
    dca = compose.dca_release  # type: ignore[attr-defined]
    again = json.loads(compose.operator("mpdp", "dca", "release", "--endpoints", "/site", "--job", dca["job_id"]).stdout.strip().splitlines()[-1])
    assert again["values"] == dca["values"] and again["clients_included"] == DCA_N
    # the restarted federation (new curator keys) still trains
    assert compose.train()["parties"] == 3
