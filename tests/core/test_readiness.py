"""A role serves only once its start-up steps are done, and no job compiles a kernel.

- :func:`mpdp.math.field.warm_up` compiles every kernel Python calls, in the one version a job uses: after it, whole
  validated DCA jobs of every kind (range, l2, one-hot; full and seed-compressed shares) add no compiled version
  (checked in a fresh interpreter, where nothing else compiled before).
- :class:`Readiness` keeps the gRPC health service NOT_SERVING (every service name and the server's "") until its last
  step is done; the kernels' step is done only after every kernel is compiled.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from grpc_health.v1 import health, health_pb2

from mpdp.math import field as F
from mpdp_services.common import readiness as ready

ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from mpdp.math import field as F
cold = {n: len(d.signatures) for n, d in F.kernels().items()}
F.warm_up()
warm = {n: [str(s) for s in d.signatures] for n, d in F.kernels().items()}
from tests.dca.test_dca_validated import _data, _params
from mpdp.dca.driver import run_job
from mpdp.math.drbg import Drbg
for kind in ("range", "l2", "one-hot"):
    for seeded in (False, True):
        run = run_job(_params(kind, seeded=seeded), _data(kind, np.random.default_rng(1)), Drbg.from_seed(kind))
        assert run.error is None and run.release is not None, (kind, seeded, run.error)
after = {n: [str(s) for s in d.signatures] for n, d in F.kernels().items()}
print(json.dumps({"cold": cold, "warm": warm, "after": after}))
"""


@pytest.mark.process  # a fresh interpreter: what a role's start-up compiles
@pytest.mark.slow
def test_warm_up_compiles_the_one_version_of_every_kernel_that_validated_jobs_use():
    out = subprocess.run([sys.executable, "-c", PROBE, str(ROOT)], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(got["warm"]) >= {"_batch_inv", "_row_sums", "_mid_sums", "_ntt_columns", "_ntt_stack", "_coset_stack", "_pair_dots",
                                "_coset_pair_dots", "_prove_wires", "_recombine_rows", "_wire_evals"}
    assert not any(got["cold"].values())  # nothing compiled at import but the ufuncs: warm_up did it
    assert all(len(sigs) == 1 for sigs in got["warm"].values()), got["warm"]
    assert got["after"] == got["warm"]  # six validated jobs compiled nothing


def test_every_kernel_argument_has_one_type_whatever_the_caller_passes():
    """Read-only, non-contiguous or writable inputs reach a kernel as the same type (no second compiled version)."""
    F.warm_up()
    before = {n: len(d.signatures) for n, d in F.kernels().items()}
    x = F.rand(64).reshape(8, 8)
    ro = x.copy()
    ro.flags.writeable = False
    F.sum(x[:, ::2])  # a strided view
    F.sum(ro)
    F.sum(x.T, axis=0)
    F.batch_inv(ro[0] | 1)
    F.ntt(x[:, :4])
    F.pair_dots(x.T)
    F.recombine(ro & 1, 4)
    assert {n: len(d.signatures) for n, d in F.kernels().items()} == before


def test_health_is_not_serving_until_the_kernels_and_every_other_step_are_done():
    async def run() -> None:
        servicer = health.aio.HealthServicer()
        r = ready.Readiness(ready.KERNELS, ready.REGISTERED)
        await r.attach(servicer, ["mpdp.Svc"])

        async def status(name: str) -> int:
            return (await servicer.Check(health_pb2.HealthCheckRequest(service=name), None)).status

        assert [await status(n) for n in ("mpdp.Svc", "")] == [ready.NOT_SERVING] * 2 and not r.ready
        await ready.warm_kernels(r)
        assert all(d.signatures for d in F.kernels().values())  # the step is done only once every kernel is compiled
        assert r.waiting == [ready.REGISTERED]
        assert [await status(n) for n in ("mpdp.Svc", "")] == [ready.NOT_SERVING] * 2 and not r.ready
        await r.done(ready.REGISTERED)
        assert [await status(n) for n in ("mpdp.Svc", "")] == [ready.SERVING] * 2 and r.ready
        r.stop()
        assert not r.ready and r.stopping

    asyncio.run(run())


HITS = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from mpdp_services.common.readiness import compile_kernels
compile_kernels()
from mpdp.math import field as F
print(json.dumps({n: [d.stats.cache_hits.total(), d.stats.cache_misses.total()] for n, d in F.kernels().items()}))
"""


def _kernel_stats(env: dict[str, str]) -> dict[str, list[int]]:
    out = subprocess.run([sys.executable, "-c", HITS, str(ROOT)], capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.process  # a fresh interpreter: what a role's start-up compiles
@pytest.mark.slow
def test_kernels_compiled_ahead_of_time_are_loaded_from_a_read_only_seed_not_compiled(tmp_path):
    """What the image does (deploy/Dockerfile): compile into a folder at build time; at start, with that folder
    read-only, copy it into an empty writable NUMBA_CACHE_DIR and load every kernel from there (no cache miss)."""
    import os

    seed = tmp_path / "image-cache"
    base = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", ready.SEED_ENV)}
    built = _kernel_stats({**base, "NUMBA_CACHE_DIR": str(seed)})  # the build step
    assert all(misses for _, misses in built.values()), built  # compiled there (a fresh folder)
    for folder, _, files in os.walk(seed):
        for f in files:
            os.chmod(os.path.join(folder, f), 0o444)
        os.chmod(folder, 0o555)
    try:
        started = _kernel_stats({**base, "NUMBA_CACHE_DIR": str(tmp_path / "tmpfs" / "numba"), ready.SEED_ENV: str(seed)})
    finally:
        for folder, _, _ in os.walk(seed):
            os.chmod(folder, 0o755)
    assert set(started) == set(built)
    assert all(hits >= 1 and misses == 0 for hits, misses in started.values()), started
