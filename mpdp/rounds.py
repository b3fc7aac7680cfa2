"""The one round loop of the operator's multi-round roles (dp-gd, regression), driven in one thread.

A role (:class:`~mpdp.dpgd.role.DpgdRole`, :class:`~mpdp.regression.role.RegressionRole`) asks for one round at a
time (a ``RunRound`` output: a DCA job to create and the parties' contributions to it); :func:`drive` runs each round
with the caller's ``run_round``, feeds the release back and returns what the role published, with the wall time of
each stage the role names. :func:`inmemory_round` is ``run_round``'s body for a federation simulated in one process:
the round's DCA job on the in-memory driver (:func:`mpdp.dca.driver.run_job`), every party a DCA client machine.

The curator's learner host (``services/curator/learner.py``) moves the same roles asynchronously over the
federation, with the same stage names.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping

import numpy as np

from mpdp.dca.params import DcaParams
from mpdp.messages import dca_pb2
from mpdp.protocol import LocalProtocolError

#: ask → (the round's stage, the stage of the role's step after it or None when that step is not timed)
Stages = Callable[[Any], tuple[str, str | None]]


class RoundFailed(RuntimeError):
    """A round released nothing, or the role refused its release; the message names the round and its DCA job."""


def drive(role: Any, ask_type: type, run_round: Callable[[Any], tuple[str, dca_pb2.DpSum]], stages: Stages,
          clock: Callable[[], float] = time.perf_counter) -> Any:
    """Run ``role`` (``start``, ``released``, ``round_failed``, ``result``) to its end: ``run_round`` creates the
    asked round's DCA job (an ``ask_type`` output), has the parties contribute and returns (the DCA job id, its
    release), or raises :class:`RoundFailed`, which fails the role with its detail and is raised again. A release
    the role refuses raises :class:`RoundFailed` with the role's detail. The published run's ``seconds`` are the
    stages ``stages`` names, each timed by ``clock``."""
    seconds: dict[str, float] = {}
    outs = role.start()
    while role.result is None:
        ask = next(o for o in outs if isinstance(o, ask_type))
        round_stage, step_stage = stages(ask)
        t = clock()
        try:
            job_id, release = run_round(ask)
        except RoundFailed as e:
            role.round_failed(str(e))  # FAILED, with this detail
            raise
        seconds[round_stage] = clock() - t
        t = clock()
        try:
            outs = role.released(job_id, release)
        except LocalProtocolError as e:
            raise RoundFailed(e.detail) from None
        if step_stage is not None:
            seconds[step_stage] = clock() - t
    run = role.result
    run.seconds = seconds
    return run


def inmemory_round(name: str, params: DcaParams, party_data: Mapping[str, tuple[np.ndarray, np.ndarray]], records_per_party: int,
                   vector: Callable[[np.ndarray, np.ndarray], np.ndarray], *, seed: bytes = b"",
                   observe: Callable[[Any], None] | None = None, ledgers: Mapping[str, Any] | None = None,
                   charge: Callable[[DcaParams], Any] | None = None) -> tuple[str, dca_pb2.DpSum]:
    """One round in one process: every party's rows checked against the job's public row bound, its contribution
    ``vector(X, y)``, the DCA job ``params`` (its id chosen) on the in-memory driver with the parties as client
    machines (seeded: ``Drbg.from_seed(seed)``, else the OS CSPRNG). Returns (the DCA job id, its release);
    :class:`RoundFailed` naming the round (``name``) and its job otherwise. ``observe`` sees the
    :class:`~mpdp.dca.driver.DcaRun`. ``ledgers``: the parties' :class:`~mpdp.ledger.PrivacyLedger` by name, where
    each party's charge (``charge(params)``, default the DCA job's own) is checked and recorded before its shares
    leave (over budget: :class:`~mpdp.driver.SpendRefused`)."""
    from mpdp.dca.driver import run_job
    from mpdp.math.drbg import Drbg

    job_id = params.job_id
    for party, (X, _) in party_data.items():
        if len(X) > max(1, records_per_party):
            raise RoundFailed(f"{name} ({job_id}): party {party} has more rows than the job's public bound of {records_per_party}")
    Z = np.stack([vector(X, y) for X, y in party_data.values()])
    extra: dict[str, Any] = {} if charge is None else {"charge": charge}
    run = run_job(params, Z, Drbg.from_seed(seed) if seed else Drbg.from_os(), client_ids=list(party_data), client_mode="machines", ledgers=ledgers,
                  **extra)
    if observe is not None:
        observe(run)
    if run.release is None:
        raise RoundFailed(f"{name} ({job_id}) failed: {run.error.detail if run.error else 'nothing released'}")
    return job_id, run.release
