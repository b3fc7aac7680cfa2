"""A whole DP-GD job in one process: every round through the real DCA core (:func:`mpdp.dca.driver.run_job`),
the K parties as its clients, the curator's steps from :class:`~mpdp.dpgd.plan.DpgdCurator`.

With a ``seed`` the DCA jobs are simulations (``simulation_seed``) and the parties' noise and masks come from
``Drbg.from_seed(seed).child("client/<party>").child("dca/<job>")``: exactly what the party service draws for a
seeded job. The federation's DCA jobs get ids from the curator (``round_job_id`` is their purpose), so the socket job
(``services/operator/dpgd.py``) is reproduced bit for bit by :func:`mpdp.dpgd.role.run_inmemory` with its DCA job ids;
with the ids ``round_job_id(job, r)`` that function and this one give the same model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from mpdp.dca.driver import run_job
from mpdp.dpgd.plan import DpgdCurator, DpgdPlan, party_vector, round_job_id
from mpdp.math.drbg import Drbg

DEFAULT_NODES: tuple[str, ...] = ("node-1", "node-2", "node-3")


class RoundFailed(RuntimeError):
    """A DCA round released nothing (e.g. more than T parties missing); the job stops, nothing is learnt."""


@dataclass
class DpgdFit:
    plan: DpgdPlan
    model: np.ndarray
    iterates: list[np.ndarray]
    releases: list[np.ndarray]
    ledger_entry: dict
    seconds: float = 0.0
    job_ids: list[str] = field(default_factory=list)


def fit(
    plan: DpgdPlan,
    parts: Sequence[tuple[np.ndarray, np.ndarray]],
    *,
    seed: bytes | None = None,
    job_id: str = "dpgd",
    parties: Sequence[str] | None = None,
    nodes: Sequence[str] = DEFAULT_NODES,
    max_missing: int = 0,
    records_per_party: int | None = None,
    drop: dict[int, Sequence[int]] | None = None,
) -> DpgdFit:
    """Fit on K parties' (X_p, y_p), rows already on the unit ball. ``drop[r]``: party indices missing in round r."""
    t0 = time.perf_counter()
    K = len(parts)
    ids = list(parties or [f"party-{i + 1}" for i in range(K)])
    bound = records_per_party or max(len(y) for _, y in parts)
    cur = DpgdCurator(plan)
    releases, job_ids = [], []
    while not cur.done:
        r = cur.round
        W = cur.iterate()
        jid = round_job_id(job_id, r)
        params = plan.dca_params(r, jid, K, nodes, records_per_client=bound, max_missing=max_missing, simulation_seed=seed or b"", roster=ids)
        Z = np.stack([party_vector(plan, r, W, X, y) for X, y in parts])
        rng = Drbg.from_seed(seed) if seed else Drbg.from_os()
        run = run_job(params, Z, rng, client_ids=ids, client_mode="machines", record=False, drop=(drop or {}).get(r, ()))
        if run.release is None:
            raise RoundFailed(f"round {r} ({jid}) released nothing: {run.error}")
        v = np.asarray(run.release.values, dtype=np.float64)
        releases.append(v)
        job_ids.append(jid)
        cur.take(v)
    return DpgdFit(plan, cur.model(), cur.iterates, releases, plan.ledger_entry(job_id, seeded=bool(seed)), time.perf_counter() - t0, job_ids)
