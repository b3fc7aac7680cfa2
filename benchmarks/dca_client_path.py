"""A validated DCA client's CPU, the whole load-generator path (in process; no network).

    python benchmarks/dca_client_path.py [--dims 10,1000] [--clients 4096,136] [--nodes 3] [--seeded] [--profile]
        [--json benchmarks/results/dca_client_path.json]

Per d: N clients (range predicate, discrete-Gaussian noise, a roster, clients named by roster index, as
``benchmarks/dca_node_path.py``'s and ``benchmarks/dca_validated.py``'s jobs) are built by
:func:`mpdp.dca.client.validated_cohort`, the code the load generator runs: values (clipping, rounding; the compute
nodes add the noise), encoding, sharing, joint-randomness parts, the FLP proofs, the ShareBatch messages, in
batches of :func:`mpdp.dca.validation.batch_size` clients. Reported: process CPU µs per client for the whole path
(``client_us``), the part in :func:`mpdp.dca.client.validated_values_many` (``values_us``: the rounding; a validated
client adds no noise, the compute nodes do) and the rest (``prove_us``: encoding, shares, parts, proofs, messages), and the
part in :meth:`mpdp.math.flp.Circuit.prove` alone (``flp_us``). Every batch is checked by M compute-node machines
afterwards (not timed): the cohort must be accepted whole. The machine is shared: the 1-minute load average is
recorded with each row, and CPU (not wall) time is what is measured.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import time
from collections import defaultdict
from typing import Any

import numpy as np

from dca_node_path import _commit, _Timed, cli, params  # the node-path benchmark's job, timer and command line

from mpdp.dca import client as dca_client
from mpdp.dca import validation
from mpdp.math import flp
from mpdp.math.drbg import Drbg


def _accepted(prm: Any, ids: list[str], batches: list) -> bool:
    """Every client's shares verify at every node (node 0's view of each client's records is enough to decide)."""
    plan = prm.validation
    keys = [validation.verify_key_piece() for _ in range(prm.M)]
    vk = validation.verify_key(prm.job_id, keys, prm.spec_digest)
    at = 0
    for names, msgs in batches:
        records: list[list[bytes]] = [[] for _ in names]
        for k, msg in enumerate(msgs):
            v = msg.validated
            packed = validation.PackedShares(len(names), v.measurements, v.proofs, v.share_seeds, v.blinds, v.joint_rand_parts)
            for i, res in enumerate(validation.check_packed(plan, packed, job_id=prm.job_id, client_ids=names, k=k, nodes=prm.M,
                                                            seeded=prm.seed_compressed, verify_key=vk)):
                if isinstance(res, Exception):
                    return False
                records[i].append(res[1])
        if not bool(np.all(validation.decide_many(plan, records))):
            return False
        at += len(names)
    return at == len(ids)


def run(d: int, m: int, n: int, *, seeded: bool, profile: bool) -> dict:
    prm = params(d, m, n, seeded=seeded)
    ids = [f"client-{i:06d}" for i in range(n)]
    Z = np.random.default_rng(d).uniform(-1, 1, (n, d))
    totals: dict[str, float] = defaultdict(float)
    real_values, real_prove = dca_client.validated_values_many, flp.Circuit.prove
    dca_client.validated_values_many = _Timed(real_values, totals, "values")  # type: ignore[assignment]
    timed_prove = _Timed(real_prove, totals, "flp")
    flp.Circuit.prove = lambda self, *a, **kw: timed_prove(self, *a, **kw)  # type: ignore[method-assign]
    prof = cProfile.Profile() if profile else None
    load = os.getloadavg()[0]
    try:
        if prof:
            prof.enable()
        t0 = time.process_time()
        batches = list(dca_client.validated_cohort(prm, ids, Z, Drbg.from_os()))
        total = time.process_time() - t0
        if prof:
            prof.disable()
    finally:
        dca_client.validated_values_many, flp.Circuit.prove = real_values, real_prove  # type: ignore[assignment, method-assign]
    load_after = os.getloadavg()[0]
    if not _accepted(prm, ids, batches):
        raise SystemExit(f"d = {d}: a client's shares were refused")
    row = {"d": d, "M": m, "N": n, "seeded": seeded, "client_us": 1e6 * total / n, "values_us": 1e6 * totals["values"] / n,
           "prove_us": 1e6 * (total - totals["values"]) / n, "flp_us": 1e6 * totals["flp"] / n,
           "bytes_per_client": sum(len(msg.SerializeToString()) for _, msgs in batches for msg in msgs) / n,
           "load_1min": [load, load_after], "commit": _commit()}
    if prof:
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    return row


def main() -> None:
    cli(__doc__, run, "4096,136", "the clients' path",
        [("client µs", "client_us", 10), ("values µs", "values_us", 9), ("prove µs", "prove_us", 9), ("flp µs", "flp_us", 8)])


if __name__ == "__main__":
    main()
