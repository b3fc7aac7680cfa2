"""Flower DP-FedAvg with SecAgg+ on a9a, K clients — runs INSIDE the Flower virtualenv (never imports mpdp).

    python flower_dpfedavg.py --data SPLIT.npz --noise-multiplier z [--clip 1] [--rounds 5] [--local-steps 10] [--lr 1] [--lam 1e-3]

Reads the rows ``learners.py`` prepared (``X``, ``y`` ±1 on the unit ball, ``X_test``, ``y_test``, the parts
``part0`` … ``part{K−1}``: row indices of each client). Flower's central DP with client-side fixed clipping:
the server strategy is ``DifferentialPrivacyClientSideFixedClipping(FedAvg(...), z, C, K)`` and every ClientApp has
``mods=[secaggplus_mod, fixedclipping_mod]`` (clipping innermost, as Flower asks: it must be the last mod to touch
the parameters, so SecAgg+ masks the clipped model). The fit round runs through ``SecAggPlusWorkflow`` (3 shares,
threshold 2, as Flower's example; clipping range 2¹⁰ so that the noisy global model is never clipped by the
quantiser, 2²² quantisation levels). Every client is in every round with weight 1 (unweighted FedAvg), so the server
gets the mean of the K clipped models and adds N(0, (z·C/K)²) per coordinate (Flower's ``add_gaussian_noise_to_params``).

A client's fit: ``--local-steps`` full-batch gradient steps of size ``--lr`` on its rows' (1/n_k)·Σ log(1 +
exp(−y·wᵀx)) + (λ/2)‖w‖² from the global w. Prints one JSON line (FLOWER_DP_RESULT): test error of the final global
model, the SecAgg+ seconds per round and per stage, the process's ``run_simulation`` seconds, versions. Flower ships no accountant for
DP-FedAvg: z comes from the caller (``learners.py`` states how it is calibrated).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
from flwr.client import NumPyClient
from flwr.client.mod import fixedclipping_mod, secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.common import Context, ndarrays_to_parameters
from flwr.server import LegacyContext, ServerConfig
from flwr.server.strategy import DifferentialPrivacyClientSideFixedClipping, FedAvg
from flwr.server.workflow import DefaultWorkflow
from flwr.serverapp import ServerApp
from flower_secagg import TimedSecAggPlus  # SecAgg+ timed per round and stage (same folder)

CFG: dict = {}
RESULT: dict = {}


def local_fit(w: np.ndarray, X: np.ndarray, y: np.ndarray, steps: int, lr: float, lam: float) -> np.ndarray:
    for _ in range(steps):
        m = y * (X @ w)
        g = -(X.T @ (y / (1.0 + np.exp(m)))) / len(y) + lam * w
        w = w - lr * g
    return w


class LrClient(NumPyClient):
    def __init__(self, k: int) -> None:
        d = np.load(CFG["data"])
        i = d[f"part{k}"]
        self.X, self.y = d["X"][i], d["y"][i]

    def fit(self, parameters, config):  # noqa: ANN001, ANN201
        w = local_fit(np.asarray(parameters[0], dtype=np.float64), self.X, self.y, CFG["local_steps"], CFG["lr"], CFG["lam"])
        return [w], 1, {}


server_app = ServerApp()


@server_app.main()
def main(grid, context: Context) -> None:  # noqa: ANN001
    from flwr.server.workflow.constant import MAIN_PARAMS_RECORD

    d = np.load(CFG["data"])
    K = sum(1 for f in d.files if f.startswith("part"))
    dim = d["X"].shape[1]
    fedavg = FedAvg(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=K, min_available_clients=K, min_evaluate_clients=0,
                    initial_parameters=ndarrays_to_parameters([np.zeros(dim)]))
    strategy = DifferentialPrivacyClientSideFixedClipping(fedavg, noise_multiplier=CFG["noise_multiplier"], clipping_norm=CFG["clip"], num_sampled_clients=K)
    legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=CFG["rounds"]), strategy=strategy)
    wf = TimedSecAggPlus(num_shares=3, reconstruction_threshold=2, clipping_range=float(2**10), quantization_range=2**22)
    DefaultWorkflow(fit_workflow=wf)(grid, legacy)
    w = legacy.state.array_records[MAIN_PARAMS_RECORD].to_numpy_ndarrays()[0]
    err = float(np.mean(np.where(d["X_test"] @ w >= 0, 1.0, -1.0) != d["y_test"]))
    RESULT.update(test_error=err, clients=K, round_seconds=wf.rounds, stage_seconds=wf.stages, weight_norm=float(np.linalg.norm(w)))


def main_cli() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--noise-multiplier", type=float, required=True)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--local-steps", type=int, default=10)
    ap.add_argument("--lr", type=float, default=1.0)
    ap.add_argument("--lam", type=float, default=1e-3)
    args = ap.parse_args()
    import flwr
    from flwr.simulation import run_simulation

    CFG.update(data=args.data, noise_multiplier=args.noise_multiplier, clip=args.clip, rounds=args.rounds, local_steps=args.local_steps, lr=args.lr, lam=args.lam)
    K = sum(1 for f in np.load(args.data).files if f.startswith("part"))
    cfg = dict(CFG)

    def cfn(context: Context):  # noqa: ANN202  (pickled by value into the Ray actors: CFG is refilled there)
        CFG.update(cfg)
        return LrClient(int(context.node_config["partition-id"])).to_client()

    app = ClientApp(client_fn=cfn, mods=[secaggplus_mod, fixedclipping_mod])
    backend = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"num_cpus": os.cpu_count() or 1, "include_dashboard": False}}
    t = time.perf_counter()
    run_simulation(server_app=server_app, client_app=app, num_supernodes=K, backend_config=backend)
    RESULT.update(process_seconds=time.perf_counter() - t, noise_multiplier=args.noise_multiplier, clip=args.clip, rounds=args.rounds,
                  local_steps=args.local_steps, lr=args.lr, lam=args.lam, engine="simulation", flwr=flwr.__version__, python=sys.version.split()[0])
    if "test_error" not in RESULT:
        raise SystemExit("the ServerApp did not finish")
    print("FLOWER_DP_RESULT " + json.dumps(RESULT), flush=True)


if __name__ == "__main__":
    main_cli()
