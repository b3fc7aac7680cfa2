"""A fresh install's first validated dp-gd job publishes on a loaded machine: no job pays for compiling a kernel.

Right after an install numba's cache is empty, and compiling every kernel of :mod:`mpdp.math.field` costs ≈ 16 s of
CPU. Each role compiles them at start, before it reports ready (:func:`mpdp_services.common.readiness.compile_kernels`),
so a job only ever meets compiled kernels. Here:

* every role of a federation (curator, 3 parties, 3 compute nodes) starts with ``NUMBA_CACHE_DIR`` at one fresh empty
  folder (a cold cache, as right after an install: one machine, one cache), while 2 busy-loop processes per CPU load
  the machine for the whole test;
* when the curator (the first role) reports ready, the folder already holds the compiled code of every kernel: it
  compiled them at start;
* a validated dp-gd job (2 rounds of the distributed discrete Gaussian over validated DCA) with a per-round deadline
  of :data:`ROUND_DEADLINE` publishes its model, and each party's ledger holds exactly the plan's (ε, δ), once;
* the job compiled nothing: the cache folder is byte for byte what it was when every role was ready (a kernel compiled
  inside the job, in any role, would add its code there).

The deadline is below what a cold compile takes under this load, so a job that compiled would miss it: measured on
this project's 2-core machine, a cold import + :func:`mpdp.math.field.warm_up` took 16 s of CPU and 316 s of wall time
with 4 busy loops and the other work of the machine (load ≈ 15); with 4 busy loops on 2 otherwise idle cores a
compiling process gets at most 2/5 of a core, so ≥ 40 s. In this test's own run there the curator's start-up compile
took 124 s and the job's two rounds 2.3 s and 0.2 s. The test times nothing itself: it fails when the job fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mpdp.dpgd.model import Task
from mpdp.dpgd.plan import DpgdPlan, round_job_id
from mpdp.math import field as F
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.launcher.federation import LocalFederation, Proc
from mpdp_services.operator.dpgd import run_dpgd
from tests.adversarial.conftest import NODES, PARTIES, synthetic_rows

pytestmark = pytest.mark.integration
D = 4
ROWS = (40, 47, 54)
BOUND = 60  # the public bound on one party's rows
ROUND_DEADLINE = 30.0  # s per round: below a cold compile under this load (module docstring)
PLAN = DpgdPlan(Task("binary"), D, 1.0, 1e-6, lam=1e-2, rounds=1, total_records=sum(ROWS), validate="l2")


def _burners() -> list[subprocess.Popen]:
    """2 busy loops per CPU: a loaded machine."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * (os.cpu_count() or 1))]


def _datasets(root: Path) -> dict[str, dict[str, dict]]:
    ds = {}
    for j, (p, n) in enumerate(zip(PARTIES, ROWS)):
        X, y = synthetic_rows(n, j, D)
        f = root / "data" / f"{p}.csv"
        f.parent.mkdir(parents=True, exist_ok=True)
        np.savetxt(f, np.column_stack([X, y]), delimiter=",", fmt="%.17g")
        ds[p] = {"synthetic": {"path": str(f), "format": "csv"}}
    return ds


def _compiled(cache: Path) -> set[str]:
    """The kernels whose compiled code is in numba's cache folder (an index file and at least one code file)."""
    files = [f.name for f in cache.rglob("*") if f.is_file()]
    return {k for k in F.kernels() if any(f.startswith(f"field.{k}-") and f.endswith(".nbi") for f in files)
            and any(f.startswith(f"field.{k}-") and f.endswith(".nbc") for f in files)}


def _snapshot(cache: Path) -> dict[str, tuple[int, int]]:
    return {str(f.relative_to(cache)): (f.stat().st_size, f.stat().st_mtime_ns) for f in cache.rglob("*") if f.is_file()}


def test_a_fresh_installs_first_validated_dpgd_job_publishes_on_a_loaded_machine(tmp_path):
    cache = tmp_path / "numba-cache"
    cache.mkdir()
    assert not any(cache.iterdir())  # cold: nothing compiled yet
    compiled_at_ready: dict[str, set[str]] = {}

    def on_ready(proc: Proc) -> None:
        compiled_at_ready[proc.name] = _compiled(cache)

    burners = _burners()
    fed = LocalFederation(tmp_path / "fed", PARTIES, _datasets(tmp_path), test_mode=True, paillier_bits=768, dgk_bits=768, compute_nodes=NODES,
                          budget_epsilon=10.0, env={"NUMBA_CACHE_DIR": str(cache)})
    try:
        fed.start(timeout=900.0, on_ready=on_ready)  # the curator compiles under load before it reports ready
        kernels = set(F.kernels())
        assert len(kernels) >= 11
        assert compiled_at_ready["curator"] == kernels  # every kernel compiled at start, before the first role was ready
        assert all(compiled_at_ready[n] == kernels for n in [*PARTIES, *NODES])
        at_ready = _snapshot(cache)

        job = "dp-c01dc01dc01d"
        run = run_dpgd(Endpoints.load(fed.workdir), "synthetic", PARTIES, NODES, PLAN, BOUND, job_id=job, seed=b"cold-start", deadline=ROUND_DEADLINE)
        assert len(run.dca_jobs) == PLAN.rounds + 1 and run.model.shape == (D, 1) and np.all(np.isfinite(run.model))

        g = PLAN.guarantee
        for p in PARTIES:
            entries = json.loads((fed.workdir / p / "state" / "ledger.json").read_text())["entries"]
            charged = [e for e in entries if (e["epsilon"], e["delta"]) != (0.0, 0.0)]
            assert [(e["protocol"], e["job_id"], e["epsilon"], e["delta"]) for e in charged] == [("dpgd", job, g.epsilon, g.delta)], (p, entries)
            markers = sorted(e["job_id"] for e in entries if e["protocol"] == "dpgd-round")
            assert markers == [round_job_id(job, r) for r in range(PLAN.rounds + 1)], (p, entries)
        assert _snapshot(cache) == at_ready  # no role compiled a kernel during the job
    finally:
        for b in burners:
            b.kill()
        for b in burners:
            b.wait()
        fed.stop()
