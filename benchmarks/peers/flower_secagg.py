"""Flower SecAgg+ summing N vectors of dimension d — runs INSIDE the Flower virtualenv (never imports mpdp).

    python flower_secagg.py --clients N --dim d [--rounds 2] [--num-shares 3] [--threshold 2]   # simulation engine

Prints one JSON line: per-round wall seconds of the SecAgg+ fit round (``rounds``; round 1 includes Ray actor and
ClientApp start-up, later rounds are warm), the four SecAgg+ stages of every round, the total wall time of the
process's ``run_simulation`` call, and a correctness check (the aggregate against the plain mean of the vectors).

The same module is the Flower App of the deployment-engine run (``run.py`` copies it into an app folder with a
``pyproject.toml``; components ``flower_secagg:server_app`` / ``flower_secagg:client_app``). The server writes its
JSON to the file named by the run config ``out`` (the ServerApp runs in its own process there).

Each client i sends z_i ∈ [−1, 1]^d (seeded by its partition id, float64 → quantised by SecAgg+ into
[0, 2^22) with clipping range 8, modulus 2^32) with weight 1; FedAvg over the SecAgg+ result gives Σ z_i / N,
so the sum is N times the aggregate. No DP noise: SecAgg+ hides individual vectors from the server, nothing more.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
from flwr.client import NumPyClient
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.common import Context, ndarrays_to_parameters
from flwr.server import LegacyContext, ServerConfig
from flwr.server.strategy import FedAvg
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow
from flwr.serverapp import ServerApp


def client_vector(i: int, d: int) -> np.ndarray:
    return np.random.default_rng([2017, i, d]).uniform(-1.0, 1.0, size=d)


class SumClient(NumPyClient):
    def __init__(self, i: int, d: int) -> None:
        self.z = client_vector(i, d)

    def fit(self, parameters, config):  # noqa: ANN001, ANN201
        return [self.z], 1, {}


def client_fn(context: Context):  # noqa: ANN201
    i = int(context.node_config.get("partition-id", context.node_id % (1 << 31)))
    d = int(context.run_config["dim"])
    return SumClient(i, d).to_client()


client_app = ClientApp(client_fn=client_fn, mods=[secaggplus_mod])

RESULT: dict = {}


class TimedSecAggPlus(SecAggPlusWorkflow):
    """SecAgg+ with wall-clock timing per round and per stage."""

    def __init__(self, *a, **kw) -> None:  # noqa: ANN002, ANN003
        super().__init__(*a, **kw)
        self.rounds: list[float] = []
        self.stages: list[dict[str, float]] = []
        for name in ("setup_stage", "share_keys_stage", "collect_masked_vectors_stage", "unmask_stage"):
            setattr(self, name, self._timed(name, getattr(self, name)))

    def _timed(self, name: str, f):  # noqa: ANN001, ANN202
        def g(*a):  # noqa: ANN002, ANN202
            t = time.perf_counter()
            ok = f(*a)
            self.stages[-1][name.removesuffix("_stage")] = time.perf_counter() - t
            return ok
        return g

    def __call__(self, grid, context) -> None:  # noqa: ANN001
        self.stages.append({})
        t = time.perf_counter()
        super().__call__(grid, context)
        self.rounds.append(time.perf_counter() - t)


server_app = ServerApp()


@server_app.main()
def main(grid, context: Context) -> None:  # noqa: ANN001
    rc = context.run_config
    n, d, rounds = int(rc["clients"]), int(rc["dim"]), int(rc["rounds"])
    strategy = FedAvg(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=n, min_available_clients=n, min_evaluate_clients=0,
                      initial_parameters=ndarrays_to_parameters([np.zeros(d)]))
    legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=rounds), strategy=strategy)
    wf = TimedSecAggPlus(num_shares=int(rc["num-shares"]), reconstruction_threshold=int(rc["threshold"]))
    t = time.perf_counter()
    DefaultWorkflow(fit_workflow=wf)(grid, legacy)
    total = time.perf_counter() - t
    from flwr.server.workflow.constant import MAIN_PARAMS_RECORD

    agg = legacy.state.array_records[MAIN_PARAMS_RECORD].to_numpy_ndarrays()[0]
    err = None
    if agg is not None and len(agg) == d:
        want = sum(client_vector(i, d) for i in range(n)) / n
        err = float(np.max(np.abs(agg - want)))
    RESULT.update(clients=n, dim=d, rounds=wf.rounds, stages=wf.stages, workflow_seconds=total, max_abs_error_of_mean=err,
                  num_shares=int(rc["num-shares"]), threshold=int(rc["threshold"]))
    out = rc.get("out", "")
    if out:
        with open(str(out), "w") as f:
            json.dump(RESULT, f)


def simulate(args: argparse.Namespace) -> dict:
    from flwr.simulation import run_simulation

    # run_config comes from the Context; in the Python-API simulation it is empty, so patch it in before main runs
    cfg = {"clients": args.clients, "dim": args.dim, "rounds": args.rounds, "num-shares": args.num_shares, "threshold": args.threshold, "out": ""}
    inner = server_app._main  # noqa: SLF001

    def patched(grid, context):  # noqa: ANN001, ANN202
        context.run_config.update(cfg)
        return inner(grid, context)

    server_app._main = patched  # noqa: SLF001

    def cfn(context: Context):  # noqa: ANN202  (pickled by value into the Ray actors: the run config cannot be set there)
        return SumClient(int(context.node_config["partition-id"]), int(cfg["dim"])).to_client()

    app = ClientApp(client_fn=cfn, mods=[secaggplus_mod])
    backend = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"num_cpus": os.cpu_count() or 1, "include_dashboard": False}}
    t = time.perf_counter()
    run_simulation(server_app=server_app, client_app=app, num_supernodes=args.clients, backend_config=backend)
    RESULT["process_seconds"] = time.perf_counter() - t
    return RESULT


def main_cli() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, required=True)
    ap.add_argument("--dim", type=int, required=True)
    ap.add_argument("--rounds", type=int, default=2, help="SecAgg+ rounds; round 1 is cold (actors start), later ones warm")
    ap.add_argument("--num-shares", type=int, default=3, help="SecAgg+ neighbours each secret is shared with (Flower's example: 3)")
    ap.add_argument("--threshold", type=int, default=2, help="SecAgg+ reconstruction threshold (Flower's example: 2)")
    args = ap.parse_args()
    import flwr

    res = simulate(args)
    res.update(engine="simulation", flwr=flwr.__version__, python=sys.version.split()[0])
    print("FLOWER_RESULT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main_cli()
