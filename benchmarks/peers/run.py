"""Peers side by side, in one script and one run: Flower SecAgg+ vs mpdp's DCA sum, diffprivlib vs Pathak's mechanism.

    python benchmarks/peers/run.py [--clients 10,100,1000] [--dims 1000,10000] [--repeats 2] [--deploy-clients 5,10]
        [--epsilons 0.1,0.5,1] [--seeds 0,1,2,3,4] [--json FILE] [--quick] [--cache DIR] [--parts sum,lr]
    python benchmarks/peers/run.py --markdown FILE      # the tables of docs/benchmarks.md from a results file

**(a) sum** — for every cell (N, d), ``--repeats`` times, interleaved (Flower, mpdp, Flower, mpdp, …):

* Flower 1.41.0 SecAgg+ (``flower_secagg.py`` in its own virtualenv, never a project dependency): one
  simulation-engine process (Ray, N virtual SuperNodes) running ``--flower-rounds`` SecAgg+ fit rounds; the figure is
  the last (warm) round's wall time, the first round (actor start-up) is reported apart. No TLS: the simulation engine
  has no network. For N in ``--deploy-clients`` (d = ``--deploy-dim``) also the **deployment engine with TLS**: a
  SuperLink and N SuperNodes on loopback (``flower-superlink`` / ``flower-supernode`` with a throwaway CA,
  ``flwr run``), same app, same rounds, ``--deploy-repeats`` runs (default 1: a round takes 45–100 s there).
* mpdp's DCA: one batched job (T = 0, ε = 1, δ = 1e−5, clip ±1, f = 32) of N simulated clients over **mutual TLS**
  to M = 3 compute-node processes and the curator (``benchmarks/dca_table1.py``'s ``LocalFederation`` and
  ``run_job``, one federation kept up for the whole run, one unmeasured warm-up job first); the figure is the
  end-to-end seconds from the first client byte to the release.

The ratio per cell is Flower seconds / mpdp seconds (medians over the repeats): > 1 means mpdp is faster.

**(b) lr** — for every ε, interleaved (diffprivlib, Pathak, …): diffprivlib 0.6.6's central DP
``LogisticRegression`` (``diffprivlib_lr.py`` in its own virtualenv with scikit-learn 1.6.1; C = 1/(λ·n)) against
the Pathak et al. (2010) protocol's mechanism with K = 5 parties (``mpdp.pathak2010.mechanism.draw_aggregate``, the
mechanism fast path proved equal to the protocol's output; "corrected" calibration, as the protocol's jobs use), both
on a9a (rows scaled to unit norm, λ = 1e−3, test on a9a.t), ``--seeds`` seeds each. The ratio is Pathak's mean test
error / diffprivlib's: the price of not trusting a curator. Then (``--no-pathak-protocol`` to skip) one real Pathak job
per ε over sockets — K = 5 party processes and the curator, mutual TLS, 2048-bit Paillier/DGK keys — on the seed-0
split: its wall time and its published model's test error.

Virtualenvs are created with ``python3.11 -m venv`` under ``--cache`` (default ``.venv-peers/`` at the repository
root, gitignored) and the pinned ``requirements-*.txt`` pip-installed when missing or changed. ``--quick``: N ∈ {10},
d ∈ {1000}, 1 repeat, deployment at N = 5, one seed. Prints tables; ``--json`` writes every measurement.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PY311 = "python3.11"
M_NODES = 3
LAMBDA = 1e-3
PARTIES = 5
PATHAK_DELTA = 1e-6  # the protocol's default δ and t for its default gaussian-distributed mode
PATHAK_COLLUDERS = max(1, PARTIES - 2)


# -- virtualenvs -------------------------------------------------------------------------------
def ensure_venv(cache: Path, name: str, log=print) -> Path:  # noqa: ANN001
    """``cache/name`` with ``requirements-<name>.txt`` installed; reinstalls when the requirements file changed."""
    req = HERE / f"requirements-{name}.txt"
    venv = cache / name
    py = venv / "bin" / "python"
    digest = hashlib.sha256(req.read_bytes()).hexdigest()
    marker = venv / ".requirements-sha256"
    if py.exists() and marker.exists() and marker.read_text().strip() == digest:
        return py
    log(f"[venv] creating {venv} from {req.name} (pip install from the package index)")
    if not py.exists():
        subprocess.run([shutil.which(PY311) or sys.executable, "-m", "venv", str(venv)], check=True)
    res = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r", str(req)], capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"pip install -r {req} failed:\n{res.stderr[-3000:]}")
    marker.write_text(digest + "\n")
    return py


def clean_env(venv_py: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv_py.parent}:{env.get('PATH', '')}"
    env["RAY_DEDUP_LOGS"] = "1"
    env["RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO"] = "0"
    return env


def tagged_json(text: str, tag: str) -> dict:
    for line in reversed(text.splitlines()):
        if line.startswith(tag + " "):
            return json.loads(line[len(tag) + 1:])
    raise ValueError(f"no {tag} line in the output")


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


# -- (a) Flower ---------------------------------------------------------------------------------
def flower_simulation(py: Path, n: int, d: int, rounds: int, timeout: float) -> dict:
    cmd = [str(py), str(HERE / "flower_secagg.py"), "--clients", str(n), "--dim", str(d), "--rounds", str(rounds)]
    t = time.perf_counter()
    res = run_group(cmd, timeout, clean_env(py), HERE)
    wall = time.perf_counter() - t
    try:
        out = tagged_json(res.stdout, "FLOWER_RESULT")
    except ValueError:
        raise RuntimeError(f"Flower simulation N={n} d={d} failed (exit {res.returncode}):\n{res.stderr[-2000:]}") from None
    if len(out["rounds"]) != rounds or any(len(s) != 4 for s in out["stages"]):
        raise RuntimeError(f"Flower simulation N={n} d={d}: a SecAgg+ round did not complete: {out}")
    out.update(process_wall_seconds=wall, seconds=out["rounds"][-1], first_round_seconds=out["rounds"][0])
    return out


def run_group(cmd: list[str], timeout: float, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    """Run ``cmd`` in its own session; on a timeout or an interrupt kill its whole process group (Ray's helpers too)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except BaseException:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
        raise
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_tls(folder: Path) -> dict[str, Path]:
    """A throwaway CA and one server certificate for 127.0.0.1/localhost (the SuperLink's), with ``cryptography``."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    import ipaddress

    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "peers-bench-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])).issuer_name(ca_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    files = {"ca": folder / "ca.crt", "cert": folder / "server.pem", "key": folder / "server.key"}
    files["ca"].write_bytes(ca.public_bytes(pem))
    files["cert"].write_bytes(cert.public_bytes(pem))
    files["key"].write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return files


def flower_deployment(py: Path, n: int, d: int, rounds: int, timeout: float, work: Path) -> dict:
    """SuperLink + N SuperNodes (separate processes, TLS on loopback) and ``flwr run`` of the same app."""
    bin_ = py.parent
    work.mkdir(parents=True, exist_ok=True)
    tls = make_tls(work / "tls")
    app = work / "app"
    app.mkdir(exist_ok=True)
    shutil.copy(HERE / "flower_secagg.py", app / "flower_secagg.py")
    port = free_port()
    out_file = work / "server-result.json"
    out_file.unlink(missing_ok=True)
    (app / "pyproject.toml").write_text(f"""[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "peersbench"
version = "1.0.0"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "mpdp"

[tool.flwr.app.components]
serverapp = "flower_secagg:server_app"
clientapp = "flower_secagg:client_app"

[tool.flwr.app.config]
clients = {n}
dim = {d}
rounds = {rounds}
num-shares = 3
threshold = 2
out = "{out_file}"
""")
    env = clean_env(py)
    env["FLWR_HOME"] = str(work / "flwr-home")
    (work / "flwr-home").mkdir(exist_ok=True)
    (work / "flwr-home" / "config.toml").write_text(f"""[superlink]
default = "bench"

[superlink.bench]
address = "127.0.0.1:{port}"
root-certificates = "{tls['ca']}"
""")
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    procs: list[subprocess.Popen] = []

    def start(name: str, cmd: list[str]) -> subprocess.Popen:
        f = open(logs / f"{name}.log", "w")  # noqa: SIM115
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=work, start_new_session=True)
        procs.append(p)
        return p

    t0 = time.perf_counter()
    try:
        start("superlink", [str(bin_ / "flower-superlink"), "--ssl-ca-certfile", str(tls["ca"]), "--ssl-certfile", str(tls["cert"]), "--ssl-keyfile", str(tls["key"]),
                            "--host", "127.0.0.1", "--port", str(port), "--database", str(work / "state.db"), "--disable-runtime-dependency-installation"])
        wait_port(port, 60)
        for i in range(n):
            start(f"supernode-{i}", [str(bin_ / "flower-supernode"), "--root-certificates", str(tls["ca"]), "--superlink", f"127.0.0.1:{port}",
                                     "--host", "127.0.0.1", "--port", str(free_port()), "--node-config", f"partition-id={i} num-partitions={n}"])
        started = time.perf_counter() - t0
        t = time.perf_counter()
        r = subprocess.run([str(bin_ / "flwr"), "run", str(app), "bench", "--stream"], capture_output=True, text=True, env=env, cwd=work, timeout=timeout)
        deadline = time.time() + timeout
        while not out_file.exists() and time.time() < deadline:
            time.sleep(0.5)
        run_wall = time.perf_counter() - t
        if not out_file.exists():
            raise RuntimeError(f"Flower deployment N={n}: no result (flwr run exit {r.returncode}): {r.stdout[-1500:]}{r.stderr[-1500:]}")
        out = json.loads(out_file.read_text())
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
    if len(out["rounds"]) != rounds or any(len(s) != 4 for s in out["stages"]):
        raise RuntimeError(f"Flower deployment N={n} d={d}: a SecAgg+ round did not complete: {out}")
    out.update(engine="deployment (TLS)", startup_seconds=started, flwr_run_wall_seconds=run_wall, seconds=out["rounds"][-1], first_round_seconds=out["rounds"][0])
    return out


def wait_port(port: int, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout:g} s")


# -- (a) mpdp -----------------------------------------------------------------------------------
class Mpdp:
    """One LocalFederation (curator + M = 3 compute nodes, mutual TLS) for the whole run, jobs via dca_table1."""

    def __init__(self, workdir: Path) -> None:
        sys.path.insert(0, str(REPO / "benchmarks"))
        import dca_table1 as dt  # noqa: PLC0415

        self.dt = dt
        self.nodes = [f"node-{i + 1}" for i in range(M_NODES)]
        self.fed = dt.LocalFederation(workdir, [], {}, test_mode=True, paillier_bits=1024, dgk_bits=1024, compute_nodes=self.nodes)
        t = time.perf_counter()
        self.fed.__enter__()
        self.start_seconds = time.perf_counter() - t
        self.job(10, 1)  # warm-up, not measured: the TLS connections between the processes

    def job(self, n: int, d: int, seed: int = 0) -> dict:
        import numpy as np

        Z = np.random.default_rng([seed, n, d]).uniform(-1.0, 1.0, size=(n, d))
        return self.dt.run_job(self.fed, self.nodes, Z, True, 4 << 20, "range", 0, False, 2)

    def close(self) -> None:
        self.fed.__exit__(None, None, None)


# -- (b) Pathak's mechanism ---------------------------------------------------------------------
def pathak_errors(data: Path, eps: float, seeds: list[int], data_cache: dict) -> list[dict]:
    import numpy as np

    from mpdp.dp.pathak_noise import GAUSSIAN, PathakCalibration
    from mpdp.experiments.pathak2010 import load_a9a
    from mpdp.learn import logreg
    from mpdp.math.drbg import Drbg
    from mpdp.pathak2010.mechanism import draw_aggregate, party_rng

    if "a9a" not in data_cache:
        data_cache["a9a"] = load_a9a(data)
    a = data_cache["a9a"]
    rows = []
    for seed in seeds:
        t = time.perf_counter()
        key = ("local", seed)
        if key not in data_cache:  # the K local models of this seed's split do not depend on ε
            idx = np.array_split(np.random.default_rng([seed, 2010]).permutation(len(a.y)), PARTIES)
            conv = PathakCalibration("corrected", 1.0, LAMBDA, PARTIES).convention
            data_cache[key] = (idx, [logreg.fit(a.X[i], a.y[i], LAMBDA, conv) for i in idx])
        idx, local = data_cache[key]
        row = {"epsilon": eps, "seed": seed}
        for mode, cal in (("corrected", PathakCalibration("corrected", eps, LAMBDA, PARTIES)),
                          ("gaussian", PathakCalibration(GAUSSIAN, eps, LAMBDA, PARTIES, delta=PATHAK_DELTA, colluders=PATHAK_COLLUDERS))):
            root = Drbg.from_seed(f"peers/pathak/{mode}/{seed}/{eps:g}")
            agg = draw_aggregate(local, [len(i) for i in idx], cal, [party_rng(root, f"P{k}") for k in range(PARTIES)])
            row["test_error" if mode == "corrected" else "test_error_gaussian"] = float(np.mean(np.where(a.X_test @ agg.weights >= 0, 1.0, -1.0) != a.y_test))
        row["seconds"] = time.perf_counter() - t
        rows.append(row)
    return rows


def pathak_protocol(data_cache: dict, eps_list: list[float], workdir: Path, key_bits: int = 2048, timeout: float = 900.0) -> list[dict]:
    """The real protocol over sockets: K = 5 party processes, the curator, mutual TLS, production-size keys, on the
    seed-0 split of a9a (the same parties as the mechanism's seed 0). One unmeasured warm-up job, then one corrected job
    per ε; wall time from submission to publication and the published model's test error (one noise draw each)."""
    import numpy as np

    from mpdp.pathak2010.tester import rebuild
    from mpdp_services.common.endpoints import Endpoints
    from mpdp_services.launcher.federation import LocalFederation
    from mpdp_services.operator.pathak2010 import OperatorClient, make_spec

    a = data_cache["a9a"]
    idx, _ = data_cache[("local", 0)]
    names = [f"party-{k + 1}" for k in range(PARTIES)]
    ds = {}
    for name, i in zip(names, idx):
        f = workdir / "data" / f"{name}.csv"
        f.parent.mkdir(parents=True, exist_ok=True)
        np.savetxt(f, np.column_stack([a.X[i], a.y[i]]), delimiter=",", fmt="%.17g")
        ds[name] = {"a9a": {"path": str(f), "format": "csv"}}
    fed = LocalFederation(workdir / "fed", names, ds, test_mode=key_bits < 2048, paillier_bits=key_bits, dgk_bits=key_bits, budget_epsilon=1e9)
    rows = []
    t = time.perf_counter()
    with fed, OperatorClient(Endpoints.load(fed.workdir)) as client:
        start = time.perf_counter() - t
        for j, eps in enumerate([1.0, *eps_list]):
            fed.wait_precomputed()
            t0 = time.perf_counter()
            job = client.submit(make_spec("a9a", names, eps, LAMBDA, "corrected"))
            st = client.wait(job, timeout=timeout)
            wall = time.perf_counter() - t0
            if st.state != "PUBLISHED":
                raise RuntimeError(f"Pathak job at ε = {eps:g} ended {st.state}: {st.detail}")
            m = client.model(job)
            if j == 0:
                continue  # warm-up
            w = rebuild(m)
            err = float(np.mean(np.where(a.X_test @ w >= 0, 1.0, -1.0) != a.y_test))
            rows.append({"epsilon": eps, "seconds": wall, "test_error": err, "stage_seconds": dict(m.stage_seconds), "key_bits": key_bits,
                         "federation_start_seconds": start, "load_before": load_average(), "job": job})
    return rows


def nonprivate_error(data_cache: dict) -> float:
    import numpy as np

    from mpdp.learn import logreg

    a = data_cache["a9a"]
    w = logreg.fit(a.X, a.y, LAMBDA, "half")
    return float(np.mean(np.where(a.X_test @ w >= 0, 1.0, -1.0) != a.y_test))


# -- tables -------------------------------------------------------------------------------------
def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def fmt(x: float | None, spec: str = ".3f") -> str:
    return "–" if x is None else format(x, spec)


def fmt_ratio(x: float | None) -> str:
    return "–" if x is None else f"{x:.0f}×" if x >= 100 else f"{x:.1f}×"


def sum_rows(res: dict) -> list[dict]:
    """One row per (engine, N, d): median Flower warm round, median mpdp job, ratio."""
    out = []
    for c in res.get("sum", []):
        fl = [r["seconds"] for r in c["flower"] if "seconds" in r]
        mp = [r["seconds"] for r in c["mpdp"]]
        f, m = median(fl), median(mp)
        out.append({"engine": c["engine"], "N": c["N"], "d": c["d"], "flower_s": f, "flower_first_round_s": median([r["first_round_seconds"] for r in c["flower"] if "seconds" in r]),
                    "mpdp_s": m, "ratio": ratio(f, m), "repeats": len(mp), "flower_error": next((r["error"] for r in c["flower"] if "error" in r), None)})
    return out


def lr_rows(res: dict) -> list[dict]:
    out = []
    for c in res.get("lr", []):
        dp = [r["test_error"] for r in c["diffprivlib"]]
        pk = [r["test_error"] for r in c["pathak"]]
        pg = [r["test_error_gaussian"] for r in c["pathak"] if "test_error_gaussian" in r]
        md, mk, mg = (statistics.fmean(x) if x else None for x in (dp, pk, pg))
        out.append({"epsilon": c["epsilon"], "diffprivlib": md, "pathak": mk, "ratio": ratio(mk, md), "pathak_gaussian": mg, "ratio_gaussian": ratio(mg, md),
                    "seeds": len(pk), "diffprivlib_each": dp, "pathak_each": pk, "pathak_gaussian_each": pg})
    return out


def print_tables(res: dict) -> None:
    print("\n(a) sum of N vectors of dimension d: Flower SecAgg+ warm round vs mpdp DCA (M = 3, mutual TLS), medians")
    print(f"{'engine':<18} {'N':>6} {'d':>6} {'flower s':>9} {'(1st rnd)':>9} {'mpdp s':>8} {'ratio':>7}")
    for r in sum_rows(res):
        note = f"  Flower failed: {r['flower_error'][:80]}" if r["flower_s"] is None and r["flower_error"] else ""
        print(f"{r['engine']:<18} {r['N']:>6} {r['d']:>6} {fmt(r['flower_s'], '9.3f')} {fmt(r['flower_first_round_s'], '9.2f')} {fmt(r['mpdp_s'], '8.3f')} {fmt_ratio(r['ratio']):>7}{note}")
    if res.get("lr"):
        print(f"\n(b) a9a test error, λ = {LAMBDA:g}: diffprivlib central DP vs Pathak's mechanism (K = {PARTIES}), mean over seeds; non-private {fmt(res.get('nonprivate_error'), '.4f')}")
        print(f"pathak: corrected ℓ2-Laplace noise, pure ε-DP like diffprivlib; gauss: the protocol's default mode, δ = {PATHAK_DELTA:g}, t = {PATHAK_COLLUDERS}")
        print(f"{'ε':>5} {'diffprivlib':>11} {'pathak':>8} {'ratio':>7} {'pathak-gauss':>12} {'ratio':>7}")
        for r in lr_rows(res):
            print(f"{r['epsilon']:>5g} {fmt(r['diffprivlib'], '11.4f')} {fmt(r['pathak'], '8.4f')} {fmt(r['ratio'], '6.2f')}× {fmt(r['pathak_gaussian'], '12.4f')} {fmt(r['ratio_gaussian'], '6.2f')}×")


def markdown(res: dict) -> str:
    out = ["| engine | N | d | Flower SecAgg+ s (warm round) | Flower 1st round s | mpdp DCA s (M = 3, mTLS) | ratio Flower / mpdp |", "|---|---|---|---|---|---|---|"]
    for r in sum_rows(res):
        fs = fmt(r["flower_s"], ".3f") if r["flower_s"] is not None else f"failed: {r['flower_error'][:60]}" if r["flower_error"] else "–"
        out.append(f"| {r['engine']} | {r['N']:,} | {r['d']:,} | {fs} | {fmt(r['flower_first_round_s'], '.2f')} | {fmt(r['mpdp_s'], '.3f')} | {fmt_ratio(r['ratio'])} |")
    if res.get("lr"):
        out += ["", "| ε | diffprivlib (central ε-DP, trusted curator) | Pathak, corrected (ε-DP, K = 5) | ratio Pathak / diffprivlib | Pathak, gaussian-distributed (δ = 1e-6, t = 3) | ratio |",
                "|---|---|---|---|---|---|"]
        for r in lr_rows(res):
            g = f"{fmt(r.get('pathak_gaussian'), '.4f')} | {fmt(r.get('ratio_gaussian'), '.2f')}×"
            out.append(f"| {r['epsilon']:g} | {fmt(r['diffprivlib'], '.4f')} | {fmt(r['pathak'], '.4f')} | {fmt(r['ratio'], '.2f')}× | {g} |")
    if res.get("pathak_protocol"):
        out += ["", "| ε | Pathak protocol over sockets: seconds (submission → publication) | its test error (one draw) |", "|---|---|---|"]
        for r in res["pathak_protocol"]:
            out.append(f"| {r['epsilon']:g} | {r['seconds']:.2f} | {r['test_error']:.4f} |")
    return "\n".join(out)


# -- main ---------------------------------------------------------------------------------------
def parse_common(ap: argparse.ArgumentParser, timeout_help: str) -> argparse.Namespace:
    """The options every peers script has (virtualenv cache, timeout, JSON out, Markdown from a results file), then parse."""
    ap.add_argument("--cache", type=Path, default=REPO / ".venv-peers", help="virtualenvs and scratch")
    ap.add_argument("--timeout", type=float, default=900.0, help=timeout_help)
    ap.add_argument("--json", dest="json_out", type=Path)
    ap.add_argument("--markdown", type=Path, metavar="JSON", help="print the Markdown tables of a results file and stop")
    return ap.parse_args()


def parse_list(s: str, typ=int) -> list:  # noqa: ANN001
    return [typ(float(x)) if typ is int else typ(x) for x in s.split(",") if x.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", default="10,100,1000", help="N values of the sum (simulation engine and mpdp)")
    ap.add_argument("--dims", default="1000,10000", help="d values of the sum")
    ap.add_argument("--repeats", type=int, default=2, help="interleaved Flower/mpdp repeats per cell")
    ap.add_argument("--flower-rounds", type=int, default=2, help="SecAgg+ rounds per Flower process (the last one is measured)")
    ap.add_argument("--deploy-clients", default="5,10", help="N values for Flower's deployment engine with TLS ('' to skip)")
    ap.add_argument("--deploy-dim", type=int, default=1000)
    ap.add_argument("--deploy-repeats", type=int, default=1, help="Flower deployment runs per N (each ≈ 2 × 45–100 s)")
    ap.add_argument("--epsilons", default="0.1,0.5,1")
    ap.add_argument("--seeds", default="0,1,2,3,4", help="seeds of (b) per ε (party split and noise)")
    ap.add_argument("--data", type=Path, default=REPO.parents[1] / "shared" / "data" / "a9a" if (REPO.parents[1] / "shared").is_dir() else Path("/work/shared/data/a9a"),
                    help="folder with a9a.gz and a9a.t.gz")
    ap.add_argument("--parts", default="sum,lr", help="sum, lr or both")
    ap.add_argument("--pathak-protocol", action=argparse.BooleanOptionalAction, default=True,
                    help="after (b), also time one real Pathak job per ε over sockets (K = 5 processes, mutual TLS) on the seed-0 split")
    ap.add_argument("--pathak-key-bits", type=int, default=2048, help="Paillier/DGK bits of that run (< 2048: test mode)")
    ap.add_argument("--quick", action="store_true", help="N = 10, d = 1000, 1 repeat, deployment at N = 5, one seed")
    args = parse_common(ap, "seconds per Flower process")
    if args.markdown:
        print(markdown(json.loads(args.markdown.read_text())))
        return
    if args.quick:
        args.clients, args.dims, args.repeats, args.deploy_clients, args.seeds = "10", "1000", 1, "5", "0"
    parts = set(parse_list(args.parts, str))
    Ns, ds = parse_list(args.clients), parse_list(args.dims)
    deploy = parse_list(args.deploy_clients)
    eps_list, seeds = parse_list(args.epsilons, float), parse_list(args.seeds)
    t_start = time.perf_counter()
    args.cache = Path(os.path.abspath(args.cache))
    args.cache.mkdir(parents=True, exist_ok=True)
    res: dict = {"command": " ".join(["python", *sys.argv]), "machine": {"cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
                 "load_average_at_start": load_average(), "M": M_NODES, "lambda": LAMBDA, "parties": PARTIES, "sum": [], "lr": []}
    print(f"machine: {os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}; load average {res['load_average_at_start']}", flush=True)

    def save() -> None:
        if args.json_out:
            res["load_average_at_end"] = load_average()
            res["wall_seconds"] = time.perf_counter() - t_start
            args.json_out.parent.mkdir(parents=True, exist_ok=True)
            args.json_out.write_text(json.dumps(res, indent=2) + "\n")

    if "sum" in parts:
        fpy = ensure_venv(args.cache, "flower")
        res["versions_flower"] = subprocess.run([str(fpy), "-c", "import flwr, ray, grpc; print(flwr.__version__, ray.__version__, grpc.__version__)"],
                                                capture_output=True, text=True, env=clean_env(fpy)).stdout.split()
        with tempfile.TemporaryDirectory(prefix="mpdp-peers-") as tmp:
            mp = Mpdp(Path(tmp) / "fed")
            res["mpdp_federation_start_seconds"] = mp.start_seconds
            try:
                cells = [("simulation", n, d) for d in ds for n in Ns] + [("deployment (TLS)", n, args.deploy_dim) for n in deploy]
                for engine, n, d in cells:
                    cell = {"engine": engine, "N": n, "d": d, "flower": [], "mpdp": []}
                    res["sum"].append(cell)
                    for rep in range(args.repeats if engine == "simulation" else args.deploy_repeats):
                        la = load_average()
                        try:
                            if engine == "simulation":
                                f = flower_simulation(fpy, n, d, args.flower_rounds, args.timeout)
                            else:
                                f = flower_deployment(fpy, n, d, args.flower_rounds, args.timeout, Path(tmp) / f"flower-deploy-{n}-{rep}")
                            f["load_before"] = la
                        except (RuntimeError, subprocess.SubprocessError, OSError) as e:
                            f = {"error": f"{type(e).__name__}: {e}"}
                            print(f"  Flower {engine} N={n} d={d} repeat {rep}: {f['error'][:400]}", flush=True)
                        cell["flower"].append(f)
                        m = mp.job(n, d, seed=rep)
                        cell["mpdp"].append({k: m[k] for k in ("seconds", "client_seconds", "node_seconds", "cpu_seconds", "load_before", "job")})
                        print(f"  {engine:<17} N={n:>5} d={d:>6} rep {rep}: Flower {fmt(f.get('seconds'), '.3f')} s (1st round {fmt(f.get('first_round_seconds'), '.2f')} s)"
                              f"  mpdp {m['seconds']:.3f} s  load {load_average()[0]:.2f}", flush=True)
                        save()
                    if all("error" in f for f in cell["flower"]) and engine != "simulation":
                        print(f"  Flower deployment failed at N={n}; not trying larger deployments", flush=True)
                        break
            finally:
                mp.close()
    if "lr" in parts:
        dpy = ensure_venv(args.cache, "diffprivlib")
        cache: dict = {}
        for eps in eps_list:
            r = subprocess.run([str(dpy), str(HERE / "diffprivlib_lr.py"), "--data", str(args.data), "--epsilons", f"{eps:g}", "--seeds", ",".join(map(str, seeds)),
                                "--lam", f"{LAMBDA:g}"], capture_output=True, text=True, env=clean_env(dpy), timeout=args.timeout)
            if r.returncode != 0:
                raise SystemExit(f"diffprivlib failed:\n{r.stderr[-2000:]}")
            dp = tagged_json(r.stdout, "DIFFPRIVLIB_RESULT")
            res["versions_diffprivlib"] = {k: dp[k] for k in ("diffprivlib", "sklearn", "numpy", "python")}
            pk = pathak_errors(args.data, eps, seeds, cache)
            res["lr"].append({"epsilon": eps, "diffprivlib": dp["rows"], "pathak": pk})
            print(f"  ε={eps:g}: diffprivlib {statistics.fmean(x['test_error'] for x in dp['rows']):.4f}  Pathak {statistics.fmean(x['test_error'] for x in pk):.4f}"
                  f" (gaussian-distributed {statistics.fmean(x['test_error_gaussian'] for x in pk):.4f})", flush=True)
            save()
        res["nonprivate_error"] = nonprivate_error(cache)
        if args.pathak_protocol:
            with tempfile.TemporaryDirectory(prefix="mpdp-peers-pathak-") as tmp:
                try:
                    res["pathak_protocol"] = pathak_protocol(cache, eps_list, Path(tmp), args.pathak_key_bits, args.timeout)
                    for r in res["pathak_protocol"]:
                        print(f"  Pathak protocol over sockets (K = {PARTIES}, {r['key_bits']}-bit keys, mTLS) ε={r['epsilon']:g}: {r['seconds']:.2f} s, test error {r['test_error']:.4f}", flush=True)
                except (RuntimeError, OSError, TimeoutError) as e:
                    res["pathak_protocol_error"] = f"{type(e).__name__}: {e}"
                    print(f"  Pathak protocol over sockets failed: {res['pathak_protocol_error']}", flush=True)
    save()
    print_tables(res)
    print(f"\n{time.perf_counter() - t_start:.0f} s wall; load average {res['load_average_at_start']} at start, {load_average()} now")


if __name__ == "__main__":
    main()
