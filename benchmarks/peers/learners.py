"""DP training on a9a beside its peers, at equal (ε, δ), interleaved in one run: mpdp's DP-GD as a federation job,
the same DP-GD with a trusted curator, Opacus's central DP-SGD and Flower's DP-FedAvg with SecAgg+.

    python benchmarks/peers/learners.py [--epsilons 0.1,0.5,1,2] [--delta 1e-5] [--runs 20] [--json FILE] [--cache DIR]
        [--systems federation,curator,opacus,flower] [--minutes M]
    python benchmarks/peers/learners.py --markdown FILE      # the table of docs/benchmarks.md from a results file

Data: a9a (32,561 training rows, 123 features, every row scaled to norm 1; test on a9a.t's 16,281 rows), split once
into K = 5 even parties by a fixed public permutation (``SPLIT_SEED``); every system sees the same rows, the
federated ones the same five parts. A run is one training job per (system, ε); the runs differ only in the noise
(and in Opacus's and Flower's own sampling/randomness). Objective: (1/n)·Σ log(1 + exp(−y·wᵀx)) + (λ/2)‖w‖²,
λ = 10⁻³, no intercept. Metric: test error; wall time per job.

* ``federation`` — ``mpdp train dp-gd`` as the curator-hosted job over sockets (:func:`run_dpgd`): a local
  federation of 5 party processes, 3 compute nodes and the curator, mutual TLS, test-mode keys (512 bits; the DCA
  uses none); R from the public rule :func:`~mpdp.dpgd.plan.auto_rounds`; replace-one-row adjacency (N public).
  One federation for the whole run, one unmeasured warm-up job. Wall time: submission → released model.
* ``curator`` — the same :class:`~mpdp.dpgd.plan.DpgdPlan` and curator steps (:class:`~mpdp.dpgd.plan.DpgdCurator`),
  but one trusted curator: each round it adds the five parties' plaintext vectors
  (:func:`~mpdp.dpgd.plan.party_vector`) and one Gaussian of the plan's σ_r = Δ_r/μ_r — the plan's guarantee
  exactly, without the DCA's extra K/(K − 1) noise variance. In process; wall time: the fit.
* ``opacus`` — Opacus DP-SGD (``opacus_lr.py`` in its own virtualenv): Poisson sampling, its accountant calibrates σ
  for the target (ε, δ) (add/remove-one adjacency, its native one). One process per job; wall time: the process.
* ``flower`` — Flower DP-FedAvg with client-side fixed clipping and SecAgg+ (``flower_dpfedavg.py`` in its own
  virtualenv, simulation engine): Flower ships no accountant for it, so :func:`flower_noise_multiplier` calibrates
  its noise multiplier with mpdp's GDP accountant (the one DP-GD uses): every client in every round, so T rounds of
  a Gaussian with record-level sensitivity 2C (one row changes its client's clipped update anywhere in the C-ball)
  compose to μ = 2√T/z. One process per job; wall time: the process.

``--minutes`` stops starting new runs after that many minutes (a run is all systems at all ε); the JSON records how
many runs each cell has. Virtualenvs as in ``run.py`` (``--cache``, default ``.venv-peers/``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
from run import clean_env, ensure_venv, load_average, parse_common, run_group, tagged_json  # noqa: E402

SYSTEMS = ("federation", "curator", "opacus", "flower")
LABELS = {"federation": "mpdp DP-GD, federation (K = 5, DCA, mTLS)", "curator": "DP-GD, trusted curator",
          "opacus": "Opacus DP-SGD (central)", "flower": "Flower DP-FedAvg + SecAgg+ (K = 5)"}
PARTIES = 5
NODES = ["node-1", "node-2", "node-3"]
LAMBDA = 1e-3
DELTA = 1e-5
SPLIT_SEED = 2027
DIMENSION = 123
# Flower DP-FedAvg, fixed before any run (never tuned on a9a.t): T rounds, every client in each; each client takes
# LOCAL_STEPS full-batch gradient steps of size LOCAL_LR from the global model; updates clipped to FLOWER_CLIP.
FLOWER_ROUNDS, LOCAL_STEPS, LOCAL_LR, FLOWER_CLIP = 5, 10, 1.0, 1.0
# Opacus DP-SGD, fixed likewise: expected batch 256 (q = 256/n), 5 epochs, SGD step 1, clip 1 (never binds: ‖∇ℓ‖ ≤ ‖x‖ ≤ 1).
OPACUS = {"epochs": 5, "batch": 256, "lr": 1.0, "clip": 1.0}


# -- pure parts -----------------------------------------------------------------------------------
def split(n: int, parties: int = PARTIES, seed: int = SPLIT_SEED) -> list[np.ndarray]:
    """The public even split of rows 0..n−1 into ``parties`` parts (public simulation randomness)."""
    return np.array_split(np.random.default_rng(seed).permutation(n), parties)


def dpgd_plan(epsilon: float, delta: float, n: int):  # noqa: ANN201
    """The plan `mpdp train dp-gd` makes for a9a: binary, d = 123, λ = 10⁻³, replace-one with N public, R by rule,
    validated rounds (the CLI's default: each party proves its round vector in its ℓ2 ball; discrete Gaussian noise)."""
    from mpdp.dpgd.model import Task
    from mpdp.dpgd.plan import DpgdPlan, auto_rounds

    return DpgdPlan(Task("binary"), DIMENSION, epsilon, delta, lam=LAMBDA, rounds=auto_rounds(epsilon, n), total_records=n, validate="l2")


def curator_fit(plan, parts: list[tuple[np.ndarray, np.ndarray]], rng) -> np.ndarray:  # noqa: ANN001
    """DP-GD with a trusted curator: each round the parties' plaintext vectors are summed and one Gaussian of the
    plan's σ_r added, then the plan's own curator step (mpdp.dpgd.plan.DpgdCurator)."""
    from mpdp.dp.mechanisms import gaussian
    from mpdp.dpgd.plan import DpgdCurator, party_vector

    cur = DpgdCurator(plan)
    while not cur.done:
        r, W = cur.round, cur.iterate()
        s = np.sum([party_vector(plan, r, W, X, y) for X, y in parts], axis=0)
        cur.take(s + gaussian(rng, s.shape, plan.specs[r].sigma_std))
    return cur.model()


def flower_noise_multiplier(epsilon: float, delta: float, rounds: int) -> float:
    """z for Flower's DP-FedAvg: T rounds of the Gaussian mechanism on the sum of clipped updates, noise z·C, sensitivity
    2C to one row (replace or add/remove: its client's clipped update moves anywhere in the C-ball), no sampling, so
    the job is μ-GDP with μ = 2√T/z (Dong, Roth & Su 2019, Cor. 3.3); z = 2√T/μ(ε, δ) with μ(ε, δ) exact."""
    from mpdp.dpgd.accounting import gdp_mu

    return 2.0 * math.sqrt(rounds) / gdp_mu(epsilon, delta)


def cell_rows(res: dict) -> list[dict]:
    """One row per (system, ε): mean ± sem test error, mean wall seconds, runs."""
    from mpdp.experiments.common import mean_sem

    out = []
    for system in res["systems"]:
        for eps in res["epsilons"]:
            jobs = [j for j in res["jobs"] if j["system"] == system and j["epsilon"] == eps and "test_error" in j]
            if not jobs:
                continue
            m, s = mean_sem([j["test_error"] for j in jobs])
            out.append({"system": system, "epsilon": eps, "runs": len(jobs), "error_mean": m, "error_sem": s,
                        "seconds_mean": statistics.fmean(j["seconds"] for j in jobs), "seconds_median": statistics.median(j["seconds"] for j in jobs),
                        "failures": sum(1 for j in res["jobs"] if j["system"] == system and j["epsilon"] == eps and "error" in j)})
    return out


def price_of_distrust(res: dict) -> list[dict]:
    """federation / curator mean test error per ε (> 1: distributing costs accuracy)."""
    rows = {(r["system"], r["epsilon"]): r for r in cell_rows(res)}
    out = []
    for eps in res["epsilons"]:
        f, c = rows.get(("federation", eps)), rows.get(("curator", eps))
        if f and c:
            out.append({"epsilon": eps, "federation": f["error_mean"], "curator": c["error_mean"], "difference": f["error_mean"] - c["error_mean"],
                        "difference_sem": math.hypot(f["error_sem"], c["error_sem"]), "ratio": f["error_mean"] / c["error_mean"]})
    return out


def markdown(res: dict) -> str:
    rows = {(r["system"], r["epsilon"]): r for r in cell_rows(res)}
    eps = res["epsilons"]
    out = ["| system | " + " | ".join(f"ε = {e:g}" for e in eps) + " | wall s per job (median) |", "|---|" + "---|" * (len(eps) + 1)]
    for s in res["systems"]:
        cells = [f"{100 * r['error_mean']:.2f} ± {100 * r['error_sem']:.2f} ({r['runs']})" if (r := rows.get((s, e))) else "–" for e in eps]
        secs = [rows[(s, e)]["seconds_median"] for e in eps if (s, e) in rows]
        wall = " / ".join(f"{x:.2f}" if x < 10 else f"{x:.0f}" for x in secs)
        out.append(f"| {LABELS[s]} | " + " | ".join(cells) + f" | {wall} |")
    pod = price_of_distrust(res)
    if pod:
        out += ["", "| ε | federation % | trusted curator % | difference (points) | ratio |", "|---|---|---|---|---|"]
        for p in pod:
            out.append(f"| {p['epsilon']:g} | {100 * p['federation']:.2f} | {100 * p['curator']:.2f} | {100 * p['difference']:+.2f} ± {100 * p['difference_sem']:.2f} | {p['ratio']:.3f}× |")
    return "\n".join(out)


# -- the systems ----------------------------------------------------------------------------------
class Federation:
    """One local federation (5 parties with their a9a part as CSV, 3 compute nodes, the curator; mutual TLS) for the run."""

    def __init__(self, workdir: Path, X: np.ndarray, y: np.ndarray, idx: list[np.ndarray]) -> None:
        from mpdp_services.common.endpoints import Endpoints
        from mpdp_services.launcher.federation import LocalFederation

        self.names = [f"party-{k + 1}" for k in range(PARTIES)]
        ds = {}
        for name, i in zip(self.names, idx):
            f = workdir / "data" / f"{name}.csv"
            f.parent.mkdir(parents=True, exist_ok=True)
            np.savetxt(f, np.column_stack([X[i], y[i]]), delimiter=",", fmt="%.17g")
            ds[name] = {"a9a": {"path": str(f), "format": "csv"}}
        self.n, self.bound = len(y), max(len(i) for i in idx)
        self.fed = LocalFederation(workdir / "fed", self.names, ds, test_mode=True, paillier_bits=512, dgk_bits=512, compute_nodes=NODES,
                                   budget_epsilon=1e9, budget_delta=0.5)
        t = time.perf_counter()
        self.fed.__enter__()
        self.ep = Endpoints.load(self.fed.workdir)
        self.start_seconds = time.perf_counter() - t

    def job(self, epsilon: float, delta: float) -> tuple[np.ndarray, float, dict]:
        from mpdp_services.operator.dpgd import run_dpgd

        plan = dpgd_plan(epsilon, delta, self.n)
        t = time.perf_counter()
        run = run_dpgd(self.ep, "a9a", self.names, NODES, plan, self.bound)
        return run.model, time.perf_counter() - t, {"job": run.job_id, "rounds": plan.rounds, "round_seconds": dict(run.seconds),
                                                     "guarantee_epsilon": plan.guarantee.epsilon}

    def close(self) -> None:
        self.fed.__exit__(None, None, None)


def peer_job(py: Path, script: str, tag: str, argv: list[str], timeout: float) -> dict:
    t = time.perf_counter()
    r = run_group([str(py), str(HERE / script), *argv], timeout, clean_env(py), HERE)
    wall = time.perf_counter() - t
    try:
        out = tagged_json(r.stdout, tag)
    except ValueError:
        raise RuntimeError(f"{script} failed (exit {r.returncode}): {r.stderr[-1500:]}") from None
    out["seconds"] = wall
    return out


# -- main -----------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epsilons", default="0.1,0.5,1,2")
    ap.add_argument("--delta", type=float, default=DELTA)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--minutes", type=float, default=0.0, help="start no new run after this many minutes (0: no limit)")
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data/a9a"), help="folder with a9a.gz and a9a.t.gz")
    args = parse_common(ap, "seconds per peer process")
    if args.markdown:
        print(markdown(json.loads(args.markdown.read_text())))
        return
    from mpdp.dpgd.model import Task
    from mpdp.experiments.pathak2010 import load_a9a
    from mpdp.math.drbg import Drbg

    eps_list = [float(e) for e in args.epsilons.split(",") if e]
    systems = [s for s in args.systems.split(",") if s]
    if not set(systems) <= set(SYSTEMS):
        raise SystemExit(f"--systems must be among {SYSTEMS}")
    t_start = time.perf_counter()
    args.cache = Path(os.path.abspath(args.cache))
    args.cache.mkdir(parents=True, exist_ok=True)
    a = load_a9a(args.data)
    n = len(a.y)
    idx = split(n)
    parts = [(a.X[i], a.y[i]) for i in idx]
    task = Task("binary")
    res: dict = {"command": " ".join(["python", *sys.argv]), "machine": {"cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
                 "load_average_at_start": load_average(), "epsilons": eps_list, "delta": args.delta, "systems": systems, "parties": PARTIES, "lambda": LAMBDA,
                 "split_seed": SPLIT_SEED, "train_rows": n, "test_rows": len(a.y_test), "runs_asked": args.runs,
                 "plans": {f"{e:g}": dpgd_plan(e, args.delta, n).guarantee.as_dict() | {"rounds": dpgd_plan(e, args.delta, n).rounds} for e in eps_list},
                 "flower": {"rounds": FLOWER_ROUNDS, "local_steps": LOCAL_STEPS, "local_lr": LOCAL_LR, "clip": FLOWER_CLIP,
                            "noise_multiplier": {f"{e:g}": flower_noise_multiplier(e, args.delta, FLOWER_ROUNDS) for e in eps_list}},
                 "opacus": dict(OPACUS), "jobs": []}
    print(f"machine: {os.cpu_count()} cores; load average {res['load_average_at_start']}; δ = {args.delta:g}; systems {systems}", flush=True)

    def save() -> None:
        if args.json_out:
            res["load_average_at_end"] = load_average()
            res["wall_seconds"] = time.perf_counter() - t_start
            res["summary"] = cell_rows(res)
            res["price_of_distrust"] = price_of_distrust(res)
            args.json_out.parent.mkdir(parents=True, exist_ok=True)
            args.json_out.write_text(json.dumps(res, indent=2) + "\n")

    with tempfile.TemporaryDirectory(prefix="mpdp-peers-learners-") as tmp:
        root = Path(tmp)
        npz = root / "a9a-split.npz"
        np.savez(npz, X=a.X, y=a.y, X_test=a.X_test, y_test=a.y_test, **{f"part{k}": i for k, i in enumerate(idx)})
        opy = ensure_venv(args.cache, "opacus") if "opacus" in systems else None
        fpy = ensure_venv(args.cache, "flower") if "flower" in systems else None
        fed = None
        if "federation" in systems:
            fed = Federation(root, a.X, a.y, idx)
            res["federation_start_seconds"] = fed.start_seconds
            fed.job(1.0, args.delta)  # warm-up, not measured: imports and the first TLS connections
        rng = Drbg.from_os()
        try:
            for run in range(args.runs):
                if args.minutes and run and time.perf_counter() - t_start > 60 * args.minutes:
                    print(f"stopping after {run} runs (--minutes {args.minutes:g})", flush=True)
                    break
                for j, eps in enumerate(eps_list):
                    for system in systems:
                        job = {"system": system, "epsilon": eps, "run": run, "load_before": load_average()}
                        try:
                            if system == "federation":
                                W, sec, extra = fed.job(eps, args.delta)  # type: ignore[union-attr]
                                job.update(extra, seconds=sec, test_error=task.error(W, a.X_test, a.y_test))
                            elif system == "curator":
                                t = time.perf_counter()
                                W = curator_fit(dpgd_plan(eps, args.delta, n), parts, rng)
                                job.update(seconds=time.perf_counter() - t, test_error=task.error(W, a.X_test, a.y_test))
                            elif system == "opacus":
                                job.update(peer_job(opy, "opacus_lr.py", "OPACUS_RESULT", ["--data", str(npz), "--epsilon", f"{eps!r}", "--delta", f"{args.delta!r}",  # type: ignore[arg-type]
                                                                                           "--seed", str(1000 * run + j), "--lam", f"{LAMBDA!r}",
                                                                                           *[x for k, v in OPACUS.items() for x in (f"--{k}", str(v))]], args.timeout))
                            else:
                                z = flower_noise_multiplier(eps, args.delta, FLOWER_ROUNDS)
                                job.update(peer_job(fpy, "flower_dpfedavg.py", "FLOWER_DP_RESULT", ["--data", str(npz), "--noise-multiplier", repr(z),  # type: ignore[arg-type]
                                           "--clip", repr(FLOWER_CLIP), "--rounds", str(FLOWER_ROUNDS), "--local-steps", str(LOCAL_STEPS), "--lr", repr(LOCAL_LR),
                                           "--lam", repr(LAMBDA)], args.timeout), noise_multiplier=z)
                        except (RuntimeError, OSError, ValueError) as e:
                            job["error"] = f"{type(e).__name__}: {str(e)[:1500]}"
                        res["jobs"].append(job)
                        te = job.get("test_error")
                        print(f"run {run:>2} ε={eps:<4g} {system:<10} " + (f"error {te:.4f}  {job['seconds']:7.2f} s" if te is not None else job["error"][:300])
                              + f"  load {load_average()[0]:.1f}", flush=True)
                        save()
        finally:
            if fed is not None:
                fed.close()
    save()
    print(markdown(res))
    print(f"\n{time.perf_counter() - t_start:.0f} s wall; load average {res['load_average_at_start']} at start, {load_average()} now")


if __name__ == "__main__":
    main()
