"""The spread of `bash examples/adult/run.sh`'s accuracy: the same three parties, encoding, ε, δ and λ, and many
draws of the released model's noise, scored on adult.test. Prints one JSON object.

run.sh trains one model through the real services; its local models are fixed by the data (the same row-by-row
split), so what varies between its runs is only the Gaussian noise the parties add. This script draws that noise
directly with the plaintext mechanism (:mod:`mpdp.pathak2010.mechanism`, which the cryptographic protocol is
proven to compute, up to fixed-point rounding), so thousands of runs take seconds:

    .venv/bin/python examples/adult/accuracy.py --runs 1000      # docs/schema.md quotes this
    .venv/bin/python examples/adult/accuracy.py --runs 1000 --seed 1   # reproducible (a simulation, not private)

Environment: MPDP_DATA (default ../shared/data beside the repository), as run.sh.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from mpdp.dp.pathak_noise import GAUSSIAN, PathakCalibration
from mpdp.learn import logreg
from mpdp.math.drbg import Drbg
from mpdp.pathak2010.mechanism import draw_aggregate, party_rng
from mpdp.pathak2010.params import default_colluders
from mpdp.pathak2010.party import CLIP_BOUND, FIT_MAX_ITER, FIT_TOL
from mpdp.schema import Schema

HERE = Path(__file__).resolve().parent
PARTIES = ["party-1", "party-2", "party-3"]


def split_like_run_sh(data: Path, folder: Path) -> list[Path]:
    """adult.data's non-empty lines dealt row by row to three files, as run.sh's awk does."""
    import gzip

    lines = [line for line in gzip.open(data, "rt").read().splitlines() if line.split()]
    paths = [folder / f"{p}.csv" for p in PARTIES]
    for k, path in enumerate(paths):
        path.write_text("".join(line + "\n" for line in lines[k::len(PARTIES)]))
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1000, help="noise draws (each one run of run.sh)")
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--lam", "--lambda", dest="lam", type=float, default=1.5e-3, help="the regulariser λ (run.sh's LAMBDA; --lambda is its old spelling)")
    ap.add_argument("--delta", type=float, default=1e-6, help="mpdp train's default δ")
    ap.add_argument("--seed", type=int, default=None, help="fix the noise (simulation: reproducible, not private)")
    args = ap.parse_args()
    data = Path(os.environ.get("MPDP_DATA") or HERE.parents[1].parent / "shared" / "data") / "adult"
    schema = Schema.load(HERE / "schema.yaml")
    with tempfile.TemporaryDirectory() as tmp:
        parts = [schema.encode_file(p) for p in split_like_run_sh(data / "adult.data.gz", Path(tmp))]
    test = schema.encode_file(data / "adult.test.gz")
    cal = PathakCalibration(GAUSSIAN, args.epsilon, args.lam, len(PARTIES), args.delta, default_colluders(len(PARTIES)))
    models = [logreg.fit(logreg.clip_rows(e.X, CLIP_BOUND), e.y, cal.lam, cal.convention, tol=FIT_TOL, max_iter=FIT_MAX_ITER) for e in parts]
    sizes = [len(e.y) for e in parts]
    Xte = logreg.clip_rows(test.X, CLIP_BOUND)

    def accuracy(w: np.ndarray) -> float:
        return float(np.mean(np.where(Xte @ w > 0, 1.0, -1.0) == test.y))

    acc = []
    for i in range(args.runs):
        root = Drbg.from_os() if args.seed is None else Drbg.from_seed(f"adult-accuracy/{args.seed}/{i}")
        acc.append(accuracy(draw_aggregate(models, sizes, cal, [party_rng(root, p) for p in PARTIES]).weights))
    a = np.array(acc)
    print(json.dumps({
        "runs": args.runs, "epsilon": args.epsilon, "delta": args.delta, "lambda": args.lam, "test_rows": int(len(test.y)),
        "accuracy": {"min": round(float(a.min()), 4), "p01": round(float(np.quantile(a, 0.01)), 4), "p05": round(float(np.quantile(a, 0.05)), 4), "mean": round(float(a.mean()), 4),
                     "max": round(float(a.max()), 4)},
        "nonprivate_average": round(accuracy(np.mean(np.stack(models), axis=0)), 4),
        "seeded": args.seed is not None,
    }))


if __name__ == "__main__":
    main()
