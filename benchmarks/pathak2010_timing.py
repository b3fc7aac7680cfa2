"""What the curator can time of a Pathak party's dataset size: the curator's stage seconds for parties of n rows.

A local federation (3 parties, 768-bit test keys, test mode), every party with a dataset of n rows for each n given;
for each n, ``--repeats`` jobs on that dataset. Prints, per n, each stage's seconds at the curator (JobSummary /
PublishedModel ``stage_seconds``: the curator's own clock) as mean ± standard deviation, and the submit-to-end time.
A party's local work (reading n rows, training ŵ_j) runs between ProtocolStart and its first message computed from
its records, padded to its ``local_work_seconds`` (docs/protocols/pathak2010.md, "When a party accepts, trains and
spends"), so with a pad above the largest training time no stage should grow with n.

    PYTHONPATH=.:$PYTHONPATH python benchmarks/pathak2010_timing.py --sizes 100 1000 10000 100000 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from mpdp.messages import common_pb2
from mpdp_services.launcher.federation import LocalFederation
from tests.adversarial.conftest import pathak_spec, release_of, submit_pathak, synthetic_rows, wait_pathak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000, 100000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dimension", type=int, default=4)
    ap.add_argument("--pad", type=float, default=None, help="every party's local_work_seconds (default: the party config's default)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        parties = ["party-1", "party-2", "party-3"]
        extra: dict[str, dict[str, dict]] = {p: {} for p in parties}
        for j, p in enumerate(parties):
            for n in a.sizes:
                X, y = synthetic_rows(n, 100 * j + n % 97, a.dimension)
                f = root / "data" / f"{p}-{n}.csv"
                f.parent.mkdir(parents=True, exist_ok=True)
                np.savetxt(f, np.column_stack([X, y]), delimiter=",", fmt="%.17g")
                extra[p][f"n{n}"] = {"path": str(f), "format": "csv"}
        fed = LocalFederation(root / "fed", parties, extra, test_mode=True, paillier_bits=768, dgk_bits=768, budget_epsilon=1000.0,
                              **({} if a.pad is None else {"party_options": {"local_work_seconds": a.pad}}))
        try:
            fed.start()
            fed.wait_precomputed()
            print(f"local_work_seconds = {a.pad if a.pad is not None else 'the default'}; d = {a.dimension}; {a.repeats} jobs per n")
            print(f"{'n':>8} {'setup':>16} {'stage1':>16} {'stage2':>16} {'stage3':>16} {'total':>16}")
            for n in a.sizes:
                seen: dict[str, list[float]] = {}
                for r in range(a.repeats):
                    spec = pathak_spec(parties, epsilon=0.1, seed=f"timing-{n}-{r}".encode(), mode=common_pb2.CORRECTED)
                    spec.dataset = f"n{n}"
                    t0 = time.perf_counter()
                    job = submit_pathak(fed, spec)
                    final = wait_pathak(fed, job, timeout=600)
                    total = time.perf_counter() - t0
                    assert final.state == "PUBLISHED", final
                    model = release_of(fed, job).pathak2010
                    for k, v in dict(model.stage_seconds).items():
                        seen.setdefault(k, []).append(v)
                    seen.setdefault("total", []).append(total)

                def cell(k: str) -> str:
                    v = seen.get(k, [])
                    return f"{statistics.mean(v):7.3f}±{statistics.pstdev(v):6.3f}" if v else "-"

                print(f"{n:>8} {cell('setup'):>16} {cell('stage1'):>16} {cell('stage2'):>16} {cell('stage3'):>16} {cell('total'):>16}", flush=True)
        finally:
            fed.stop()


if __name__ == "__main__":
    main()
