"""Which learner when: every classifier mpdp trains, on one task at two budgets, through the Python API.

    python benchmarks/which_learner.py [--runs 5] [--epsilons 0.1,1] [--key-bits 2048] [--json benchmarks/results/which_learner.json]

Task: a9a (``../shared/data/a9a``: UCI Adult as 123 binary features, rows scaled onto the unit ball), the 32,561
training rows split round-robin over K = 5 in-process parties (``mpdp.Federation.in_process``: the real role machines,
real keys and proofs, no network), test error on a9a.t. The ensembles' public auxiliary data are the first 2,000 rows
of a9a.t (the curator's public set), and their error is measured on the remaining 14,281 test rows, like everyone's.
Methods, each at ε and δ = 10⁻⁶ where the mechanism has a δ:

* ``pathak`` — Pathak, Rane & Raj 2010, gaussian-distributed noise (the default), λ = 10⁻³;
* ``lmgc`` — each party's ε-DP large-margin Gaussian classifier and their average (local releases);
* ``hamm2016-soft`` / ``hamm2016-vote`` — the HCB16 ensemble over the parties' votes on the auxiliary rows;
* ``dp-gd`` — the multiparty DP gradient descent, validated rounds, R from the public rule;
* ``hamm2016-soft K=50`` / ``hamm2016-vote K=50`` — the ensembles again with the rows over 50 parties: their
  privacy unit is a whole party, so their noise shrinks only with the number of voters.

Linear regression is another task (a real-valued target): ``regression`` runs on abalone (``../shared/data/abalone``,
the Heikkilä et al. 2017 preprocessing and split, its training rows over 5 parties) and reports the test RMSE beside the
RMSE of predicting the training mean.

Every run draws fresh randomness (OS CSPRNG); the methods are interleaved run by run. Reported per method and ε:
mean ± standard error of the test error over the runs, the process CPU seconds per job (in-process: every role's
work in this one process, the machine's cost of the job without network waits), and the trust each one needs.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

import mpdp
from mpdp.experiments.common import environment, mean_sem
from mpdp.experiments.heikkila2017 import load_uci, split as uci_split
from mpdp.experiments.pathak2010 import load_a9a

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
PARTIES = 5
MANY = 50  # the ensembles' privacy unit is a whole party: they need many voters (HCB16 used hundreds)
AUX_ROWS = 2000
DELTA = 1e-6
LAM = 1e-3

TRUST = {
    "pathak": "the curator colludes with no party (it holds the decryption key); the parties' noise shares suffice against the stated colluders",
    "lmgc": "none beyond each party's own release: every party publishes its own ε-DP model",
    "hamm2016-soft": "the compute nodes do not all collude (DCA secure sum); a public auxiliary set; a party is the privacy unit",
    "hamm2016-vote": "the compute nodes do not all collude (DCA secure sum); a public auxiliary set; a party is the privacy unit",
    "dp-gd": "the compute nodes do not all collude (DCA); every round vector proven on its shares",
    "regression": "the compute nodes do not all collude (DCA); every statistic proven in its public range",
}


def split(X: np.ndarray, y: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(X[i::k], y[i::k]) for i in range(k)]


def classifiers(key_bits: int) -> dict[str, Callable[[Any, float, np.ndarray], Any]]:
    return {
        "pathak": lambda fed, eps, aux: fed.logistic_regression(epsilon=eps, lam=LAM),
        "lmgc": lambda fed, eps, aux: fed.lmgc(epsilon=eps, lam=LAM),
        "hamm2016-soft": lambda fed, eps, aux: fed.ensemble(auxiliary=aux, epsilon=eps, lam=LAM, method="soft"),
        "hamm2016-vote": lambda fed, eps, aux: fed.ensemble(auxiliary=aux, epsilon=eps, lam=LAM, method="vote"),
        "dp-gd": lambda fed, eps, aux: fed.dp_gd(epsilon=eps, delta=DELTA, lam=LAM),
    }


def run(runs: int, epsilons: list[float], key_bits: int) -> dict[str, Any]:
    a9a = load_a9a(DATA / "a9a")
    aux, Xte, yte = a9a.X_test[:AUX_ROWS], a9a.X_test[AUX_ROWS:], a9a.y_test[AUX_ROWS:]
    parties = split(a9a.X, a9a.y, PARTIES)
    majority = float(max(np.mean(yte == c) for c in np.unique(yte)))
    ab = load_uci(DATA, "abalone")
    tr, te = uci_split(ab, seed=0, repeat=0)  # the paper's public split of repeat 0
    Xr, yr, Xrt, yrt = ab.X[tr], ab.y[tr], ab.X[te], ab.y[te]
    bounds = tuple([7.5] * (Xr.shape[1] + 1))  # the pre-clip of the paper's preprocessing: every value in ±7.5
    errors: dict[str, dict[float, list[float]]] = {}
    cpu: dict[str, list[float]] = {}
    methods = classifiers(key_bits)
    for r in range(runs):
        for eps in epsilons:
            with mpdp.Federation.in_process(parties=parties, key_bits=key_bits) as fed:
                for name, fit in methods.items():
                    c0 = time.process_time()
                    result = fit(fed, eps, aux)
                    cpu.setdefault(name, []).append(time.process_time() - c0)
                    err = float(np.mean(result.model.predict(Xte) != yte))
                    errors.setdefault(name, {}).setdefault(eps, []).append(err)
                    print(f"run {r + 1}/{runs} ε={eps:g} {name}: error {err:.4f}", flush=True)
            with mpdp.Federation.in_process(parties=split(a9a.X, a9a.y, MANY)) as fed:  # the ensembles with many voters
                for method in ("soft", "vote"):
                    name = f"hamm2016-{method} K={MANY}"
                    c0 = time.process_time()
                    result = fed.ensemble(auxiliary=aux, epsilon=eps, lam=LAM, method=method)
                    cpu.setdefault(name, []).append(time.process_time() - c0)
                    err = float(np.mean(result.model.predict(Xte) != yte))
                    errors.setdefault(name, {}).setdefault(eps, []).append(err)
                    print(f"run {r + 1}/{runs} ε={eps:g} {name}: error {err:.4f}", flush=True)
            with mpdp.Federation.in_process(parties=split(Xr, yr, PARTIES)) as fed:
                c0 = time.process_time()
                result = fed.linear_regression(bounds=bounds, epsilon=eps, delta=DELTA)
                cpu.setdefault("regression", []).append(time.process_time() - c0)
                rmse = float(np.sqrt(np.mean((result.model.predict(Xrt) - yrt) ** 2)))
                errors.setdefault("regression", {}).setdefault(eps, []).append(rmse)
                print(f"run {r + 1}/{runs} ε={eps:g} regression: RMSE {rmse:.4f}", flush=True)
    table = []
    for name, by_eps in errors.items():
        row: dict[str, Any] = {"method": name, "task": "abalone RMSE" if name == "regression" else "a9a test error",
                               "trust": TRUST[name.split(" ")[0]], "parties": MANY if " K=" in name else PARTIES, "cpu_seconds_per_job": mean_sem(cpu[name])}
        for eps, vals in by_eps.items():
            row[f"eps={eps:g}"] = mean_sem(vals)
        table.append(row)
    return {
        "runs": runs, "epsilons": epsilons, "delta": DELTA, "lam": LAM, "parties": PARTIES, "key_bits": key_bits,
        "a9a_majority_error": 1.0 - majority, "abalone_mean_rmse": float(np.sqrt(np.mean((yrt - yr.mean()) ** 2))),
        "table": table, "load_average": os.getloadavg(), "environment": environment(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--epsilons", default="0.1,1")
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "which_learner.json"))
    a = ap.parse_args()
    out = run(a.runs, [float(e) for e in a.epsilons.split(",")], a.key_bits)
    Path(a.json).write_text(json.dumps(out, indent=2) + "\n")
    for row in out["table"]:
        cells = "  ".join(f"{k} {v[0]:.4f}±{v[1]:.4f}" for k, v in row.items() if k.startswith("eps="))
        print(f"{row['method']:15s} {cells}  cpu {row['cpu_seconds_per_job'][0]:.2f} s")


if __name__ == "__main__":
    main()
