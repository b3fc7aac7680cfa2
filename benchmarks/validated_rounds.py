"""Validated vs unvalidated rounds of the DCA-summed protocols over a real federation (processes, mutual TLS):
a dp-gd round and a pate vote sum (and, per contribution only, regression's two rounds).

    python benchmarks/validated_rounds.py [--features 10] [--rows 2000] [--rounds 2] [--queries 100,1000] [--classes 2]
        [--repeats 3] [--json benchmarks/results/validated_rounds.json]

Three parties, three compute nodes (T = 1), synthetic public data (numpy, seeded). For each mode (``validated``: the
default, every party's vector proven on its shares, discrete Gaussian noise; ``unvalidated``: Gaussian noise, no
proofs):

* dp-gd: one whole job through the curator's learner host (``run_dpgd``) with R = ``--rounds``; per round (``r0``,
  ``r1``, …) the curator's seconds from creating the round's DCA job to its release (round 0 sums d(d+1)/2 + d
  values, the others d), and the whole job (``job``);
* pate: one whole ensemble job (``train_ensemble``, method pate, Q = ``--queries`` points of C classes): its stages
  ``votes`` (the parties fit, vote, prove and send their shares) and ``vote_sum`` (closing the sum to its release,
  the nodes' decisions included), and the whole job (``job``).

Medians over ``--repeats`` runs after one warm-up per mode, the modes alternating. At these sizes a round's wall time
is dominated by the services' round trips, so the per-contribution core costs are measured too (``core``, one
process, ``--sample`` draws): a party's contribution (``client_ms``: noise, rounding, for a validated job the bits,
Field64 shares and the proof; ``bytes`` to all M nodes) and one node's work for it (``node_ms``: its verifier share
and output share, plus the decision from the M records; unvalidated: unpacking the share), for the same DCA jobs,
and for regression's std and main rounds (d = ``--features``, bounds 1 per feature and 2 for the target, ``--rows``
records a party; the main round at its widest, thresholds B = c).

Figures are wall times on a shared 2-core machine (other jobs running; the load average is recorded): indicative.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from mpdp.dca import sharing, validation
from mpdp.dca.client import ClientMachine
from mpdp.dca.params import DcaParams
from mpdp.dpgd.model import Task
from mpdp.hamm2016 import job as hamm
from mpdp.hamm2016.labels import party_votes
from mpdp.math.drbg import Drbg
from mpdp.protocol import Send
from mpdp.dpgd.plan import DpgdPlan
from mpdp.messages import hamm2016_pb2 as pb
from mpdp.regression.plan import RegressionPlan
from mpdp.regression.statistics import main_round_spec, party_statistics
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.launcher.federation import LocalFederation
from mpdp_services.operator.dpgd import run_dpgd
from mpdp_services.operator.ensemble import train_ensemble

PARTIES = ["party-1", "party-2", "party-3"]
NODES = ["node-1", "node-2", "node-3"]
MODES = ("unvalidated", "validated")


def write_data(root: Path, d: int, rows: int, classes: int) -> tuple[dict, dict]:
    g = np.random.default_rng(20)  # public simulation data
    w = g.normal(size=(d, classes))
    ds = {}
    for p in PARTIES:
        X = g.normal(size=(rows, d)) / np.sqrt(d)
        X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
        y = np.argmax(X @ w + 0.3 * g.normal(size=(rows, classes)), axis=1)
        f = root / "data" / f"{p}.csv"
        f.parent.mkdir(parents=True, exist_ok=True)
        np.savetxt(f, np.column_stack([X, y]), delimiter=",", fmt="%.10g")
        ds[p] = {"synthetic": {"path": str(f), "format": "csv"}}
    Xa = g.normal(size=(20_000, d)) / np.sqrt(d)
    aux = root / "data" / "aux.csv"
    np.savetxt(aux, np.column_stack([Xa, np.zeros(len(Xa))]), delimiter=",", fmt="%.10g")
    return ds, {"aux": {"path": str(aux), "format": "csv"}}


def dpgd_plan(d: int, rows: int, rounds: int, mode: str) -> DpgdPlan:
    return DpgdPlan(Task("binary"), d, 1.0, 1e-6, rounds=rounds, total_records=3 * rows, validate="l2" if mode == "validated" else "none")


def dpgd_once(ep: Endpoints, plan: DpgdPlan, rows: int) -> dict:
    t0 = time.perf_counter()
    run = run_dpgd(ep, "synthetic", PARTIES, NODES, plan, rows, max_missing=1)
    return {"job": time.perf_counter() - t0, **run.seconds}


def pate_spec(queries: int, classes: int, mode: str) -> pb.EnsembleJobSpec:
    return pb.EnsembleJobSpec(dataset="synthetic", auxiliary="aux", method="pate", lam=1e-3, epsilon=2.0, delta=1e-6, classes=[str(k) for k in range(classes)],
                              parties=PARTIES, compute_nodes=NODES, max_missing=1, queries=queries, unvalidated=mode == "unvalidated")


def pate_once(ep: Endpoints, spec: pb.EnsembleJobSpec) -> dict:
    t0 = time.perf_counter()
    rel = train_ensemble(ep, spec)
    stages = dict(rel.stage_seconds)
    return {"job": time.perf_counter() - t0, "votes": stages["votes"], "vote_sum": stages["vote_sum"]}


def medians(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def alternate(repeats: int, once) -> dict[str, dict]:
    """One warm-up per mode, then ``repeats`` runs alternating the modes (the shared machine's load hits both alike)."""
    for mode in MODES:
        once(mode)
    runs: dict[str, list[dict]] = {m: [] for m in MODES}
    for _ in range(repeats):
        for mode in MODES:
            runs[mode].append(once(mode))
    return {m: medians(v) for m, v in runs.items()}


def core_cost(params: DcaParams, z: np.ndarray, sample: int) -> dict:
    """Per contribution: one party's ClientMachine submit, and one node's check (validated: + the decision)."""
    t_client, t_node = [], []
    nbytes = 0
    for i in range(sample):
        t0 = time.perf_counter()
        sends = [o for o in ClientMachine(params, "party-1", z, Drbg.from_os(), record=False).submit() if isinstance(o, Send)]
        t_client.append(time.perf_counter() - t0)
        nbytes = sum(len(o.message.SerializeToString()) for o in sends)
        t0 = time.perf_counter()
        if params.validation is None:
            sharing.unpack_u64(sends[1].message.masked_vector, params.dimension)
            t_node.append(time.perf_counter() - t0)
            continue
        key, records = os.urandom(32), []
        for k, o in enumerate(sends):
            v = o.message.validated
            share = validation.ShareForNode(v.measurement, v.proof, v.share_seed, v.blind, v.joint_rand_parts)
            t0 = time.perf_counter()
            _, rec = validation.check_share(params.validation, share, job_id=params.job_id, client_id="party-1", k=k, nodes=params.M,
                                            seeded=params.seed_compressed, verify_key=key)
            if k == 1:
                t_node.append(time.perf_counter() - t0)
            records.append(rec)
        t0 = time.perf_counter()
        assert validation.decide(params.validation, records)
        t_node[-1] += time.perf_counter() - t0
    return {"client_ms": 1e3 * statistics.median(t_client), "node_ms": 1e3 * statistics.median(t_node), "bytes": nbytes}


def core_costs(d: int, rows: int, rounds: int, queries: list[int], classes: int, sample: int) -> list[dict]:
    out = []
    g = np.random.default_rng(3)  # public simulation data
    for mode in MODES:
        plan = dpgd_plan(d, rows, rounds, mode)
        for r in (0, 1):
            params = plan.dca_params(r, "dca-bench", len(PARTIES), NODES, records_per_client=rows, max_missing=1, roster=PARTIES)
            z = g.uniform(-1, 1, params.dimension)
            z *= 0.5 * plan.l2_bound(r, rows) / np.linalg.norm(z)
            out.append({"protocol": "dpgd", "round": r, "mode": mode, "dimension": params.dimension, "frac_bits": params.frac_bits, **core_cost(params, z, sample)})
        for q in queries:
            params = hamm.vote_job(pate_spec(q, classes, mode), "dca-bench", q)
            z = party_votes(g.integers(0, classes, size=q), classes)
            out.append({"protocol": "pate", "mode": mode, "dimension": params.dimension, "frac_bits": params.frac_bits, **core_cost(params, z, sample)})
        reg = RegressionPlan((1.0,) * d + (2.0,), 1.0, 1e-5, grid_repeats=(2, 2))
        X = np.clip(g.normal(size=(rows, d)) / d, -1.0, 1.0)
        y = np.clip(X.sum(axis=1) + 0.1 * g.normal(size=rows), -2.0, 2.0)
        for name, spec in (("std", reg.std_round()), ("main", main_round_spec(reg.bounds, *reg.budget.main, "corrected"))):
            params = spec.dca_params("dca-bench", len(PARTIES), NODES, records_per_client=rows, max_missing=1, roster=PARTIES,
                                     validate=mode == "validated")
            z = party_statistics(X, y, name, spec.bounds)
            out.append({"protocol": f"regression-{name}", "mode": mode, "dimension": params.dimension, "frac_bits": params.frac_bits,
                        **core_cost(params, z, sample)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--features", type=int, default=10)
    ap.add_argument("--rows", type=int, default=2000, help="rows per party (also the public row bound)")
    ap.add_argument("--rounds", type=int, default=2, help="dp-gd R (the job runs R + 1 rounds)")
    ap.add_argument("--queries", default="100,1000", help="pate Q values, comma-separated")
    ap.add_argument("--classes", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sample", type=int, default=5, help="draws per core cost")
    ap.add_argument("--core-only", action="store_true", help="only the in-process core costs (no federation)")
    ap.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "validated_rounds.json")
    a = ap.parse_args()
    rows: list[dict] = []
    core = core_costs(a.features, a.rows, a.rounds, [int(v) for v in a.queries.split(",")], a.classes, a.sample)
    for c in core:
        print(f"core  {c['protocol']:>5} {c['mode']:>11}: d = {c['dimension']:>5} (f = {c['frac_bits']}), party {c['client_ms']:8.1f} ms, "
              f"node {c['node_ms']:7.1f} ms, {c['bytes'] / 1e3:8.1f} kB to the nodes", flush=True)
    if a.core_only:
        return
    with tempfile.TemporaryDirectory(prefix="mpdp-bench-valid-") as tmp:
        root = Path(tmp)
        ds, aux = write_data(root, a.features, a.rows, a.classes)
        fed = LocalFederation(root / "fed", PARTIES, ds, budget_epsilon=1e9, compute_nodes=NODES, auxiliary=aux)
        with fed:
            ep = Endpoints.load(fed.workdir)
            plans = {m: dpgd_plan(a.features, a.rows, a.rounds, m) for m in MODES}
            got = alternate(a.repeats, lambda m: dpgd_once(ep, plans[m], a.rows))
            for mode in MODES:
                plan = plans[mode]
                rows.append({"protocol": "dpgd", "mode": mode, "features": a.features, "rows_per_party": a.rows, "rounds": a.rounds + 1,
                             "round_dimensions": [plan.round_dimension(r) for r in range(a.rounds + 1)], "seconds": got[mode],
                             "guarantee_epsilon": plan.guarantee.epsilon, "sigma_std": [s.sigma_std for s in plan.specs]})
                print(f"dp-gd {mode:>11}: d = {a.features}, dims {rows[-1]['round_dimensions']}, seconds {({k: round(v, 2) for k, v in got[mode].items()})}", flush=True)
            for q in (int(v) for v in a.queries.split(",")):
                specs = {m: pate_spec(q, a.classes, m) for m in MODES}
                got = alternate(a.repeats, lambda m: pate_once(ep, specs[m]))
                for mode in MODES:
                    rows.append({"protocol": "pate", "mode": mode, "queries": q, "classes": a.classes, "dimension": q * (1 if a.classes == 2 else a.classes),
                                 "seconds": got[mode]})
                    print(f"pate  {mode:>11}: Q·C = {rows[-1]['dimension']}, seconds {({k: round(v, 2) for k, v in got[mode].items()})}", flush=True)
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps({"benchmark": "validated_rounds", "parties": len(PARTIES), "nodes": len(NODES), "tls": True, "max_missing": 1,
                                  "load_average": os.getloadavg(), "core": core, "rows": rows}, indent=2))
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
