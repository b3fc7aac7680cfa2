"""Opacus DP-SGD logistic regression on a9a — runs INSIDE the Opacus virtualenv (never imports mpdp).

    python opacus_lr.py --data SPLIT.npz --epsilon 1 --delta 1e-5 --seed 0 [--epochs 5] [--batch 256] [--lr 1] [--clip 1]

Reads the rows ``learners.py`` prepared (``X``, ``y`` ±1, ``X_test``, ``y_test``; every row already on the unit
ball) and trains w ∈ R^123 (no intercept) on (1/n)·Σ log(1 + exp(−y·wᵀx)) + (λ/2)‖w‖² with Opacus's
``PrivacyEngine.make_private_with_epsilon``: its accountant (Opacus's default, PRV) chooses the noise multiplier σ
for the target (ε, δ) given the Poisson sampling rate batch/n and the number of epochs; per-example gradients are
clipped to ``--clip`` (a logistic gradient has norm |σ(wᵀx) − [y = 1]|·‖x‖ ≤ 1, so clip 1 never binds). Weight
decay λ is applied by the optimiser after the noise (data-independent). Prints one JSON line (OPACUS_RESULT): test
error, σ, the ε the accountant reports after training, fit seconds, versions.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--epsilon", type=float, required=True)
    ap.add_argument("--delta", type=float, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=256, help="expected batch size (Poisson sampling rate batch/n)")
    ap.add_argument("--lr", type=float, default=1.0)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--lam", type=float, default=1e-3)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    t_import = time.perf_counter()
    import opacus
    import torch
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    torch.set_num_threads(1)
    import_seconds = time.perf_counter() - t_import
    d = np.load(args.data)
    X = torch.tensor(d["X"], dtype=torch.float32)
    y01 = torch.tensor((d["y"] > 0).astype(np.float32))
    Xt, yt = d["X_test"], d["y_test"]
    torch.manual_seed(args.seed)
    model = torch.nn.Linear(X.shape[1], 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, weight_decay=args.lam)
    loader = DataLoader(TensorDataset(X, y01), batch_size=args.batch, shuffle=True)
    engine = PrivacyEngine()
    t = time.perf_counter()
    model, opt, loader = engine.make_private_with_epsilon(module=model, optimizer=opt, data_loader=loader, target_epsilon=args.epsilon,
                                                          target_delta=args.delta, epochs=args.epochs, max_grad_norm=args.clip)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    for _ in range(args.epochs):
        for xb, yb in loader:
            if len(xb) == 0:
                continue
            opt.zero_grad()
            loss_fn(model(xb).squeeze(1), yb).backward()
            opt.step()
    fit = time.perf_counter() - t
    w = model._module.weight.detach().numpy().astype(np.float64).ravel()  # noqa: SLF001 (GradSampleModule wraps the Linear)
    err = float(np.mean(np.where(Xt @ w >= 0, 1.0, -1.0) != yt))
    print("OPACUS_RESULT " + json.dumps({
        "test_error": err, "noise_multiplier": opt.noise_multiplier, "epsilon_spent": engine.get_epsilon(args.delta), "accountant": engine.accountant.mechanism(),
        "sample_rate": args.batch / len(y01), "steps": engine.accountant.history[-1][2] if engine.accountant.history else None,
        "epochs": args.epochs, "batch": args.batch, "lr": args.lr, "clip": args.clip, "lam": args.lam, "fit_seconds": fit, "import_seconds": import_seconds,
        "opacus": opacus.__version__, "torch": torch.__version__, "numpy": np.__version__, "python": sys.version.split()[0]}), flush=True)


if __name__ == "__main__":
    main()
