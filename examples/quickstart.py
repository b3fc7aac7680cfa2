"""mpdp quickstart: three hospitals train a differentially private logistic regression together.

Everything runs in this process (curator and parties as machines of the same core the services run, 2048-bit
Paillier and DGK keys, the OS CSPRNG): scikit-learn's bundled breast-cancer data (569 rows, 30 features) is
split over three parties, who run Pathak et al.'s protocol at ε = 1 with distributed Gaussian noise. Prints one
JSON object: the test accuracy, the non-private baseline's, and the guarantee.

    python examples/quickstart.py [--epsilon 1.0] [--key-bits 2048]
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from sklearn.datasets import load_breast_cancer

import mpdp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--lam", type=float, default=0.1, help="L2 regularisation λ")
    ap.add_argument("--key-bits", type=int, default=2048, help="Paillier/DGK modulus size (2048 or more for real data)")
    args = ap.parse_args()

    X, y = load_breast_cancer(return_X_y=True)
    labels = np.where(y == 1, "benign", "malignant")
    order = np.random.default_rng(7).permutation(len(y))  # public simulation choice: which rows go where
    test, train = order[:142], order[142:]
    # Public scaling for this demo (standardise with the training split's statistics); each party then scales
    # its rows onto ‖x‖ ≤ 1, the bound the privacy proof needs.
    mu, sd = X[train].mean(axis=0), X[train].std(axis=0)
    X = (X - mu) / sd
    parties = [(X[rows], labels[rows]) for rows in np.array_split(train, 3)]

    fed = mpdp.Federation.in_process(parties=parties, key_bits=args.key_bits)
    result = fed.logistic_regression(epsilon=args.epsilon, lam=args.lam)  # noise="gaussian-distributed" by default
    baseline = mpdp.baselines.nonprivate_logistic_regression(X[train], labels[train], lam=args.lam)

    g = result.guarantee
    print(json.dumps({
        "dataset": "scikit-learn breast_cancer (569 rows, d = 30)",
        "protocol": result.protocol,
        "backend": result.backend,
        "parties": {name: len(part[1]) for name, part in zip(fed.parties, parties)},
        "test_rows": len(test),
        "accuracy": result.score(X[test], labels[test]),
        "nonprivate_accuracy": baseline.score(X[test], labels[test]),
        "guarantee": {"epsilon": g.epsilon, "delta": g.delta, "mechanism": g.mechanism, "noise": result.noise, "statement": g.statement},
        "trust_model": result.trust_model,
        "key_bits": args.key_bits,
        "timings": dict(result.timings),
        "operations": dict(result.operations),
    }))


if __name__ == "__main__":
    main()
