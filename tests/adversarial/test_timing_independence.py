"""The time the curator sees for a party's work does not depend on the party's row count n_j, over real processes.

Models a curator (or an operator reading the curator's job summary) that times a party's contribution: the same
one-round dp-gd job runs over dataset ``small`` (every party 10² rows) and over dataset ``big`` (party-1 10⁵ rows,
the others 10²), and the curator's own stage clock for the round (``stage_seconds["r0"]``: the round's DCA job, the
parties' contributions, the nodes' release) is compared. With every party's ``local_work_seconds`` at PAD, the two
rounds take the same time within BOUND; with the pad off (0) the same two jobs differ by more than BOUND, so the
check cannot pass for want of a difference to hide: party-1's work on 10⁵ rows (reading the CSV, the clipped
gradient sum) takes seconds, on 10² rows milliseconds.

An ensemble's votes and an LMGC local release are padded by the same mechanism: over 10² rows each job ends before PAD
with the pad off and no earlier than PAD with it on (the curator's job summary: from its creation to its end). So does
a round every party refuses because its rows exceed the job's row bound, which it learns only by reading them.

BOUND (0.6 s) is above the run-to-run noise of one round's fixed steps (fetching the DCA job, connecting to three
compute nodes, the durable spend, the shares of dimension D, the nodes' agreement and release): with the pad on, the
two sizes' rounds differed by 0.01–0.11 s in three runs on a 2-core machine at a load average of about 20, where the
unpadded difference was 2.8–3.6 s (party-1's work on 10⁵ rows alone: 1.4 s on an idle core). Each size's stage time
is the lesser of two jobs, so one stall of the machine does not fail the comparison.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import yaml

from mpdp.dpgd.model import Task
from mpdp.messages import common_pb2, hamm2016_pb2, local_release_pb2
from mpdp.dpgd.plan import DpgdPlan
from mpdp_services.launcher.federation import LocalFederation
from mpdp_services.operator.dpgd import dpgd_spec

from .conftest import D, NODES, PARTIES, host_release, host_submit, host_wait, synthetic_rows

SMALL, BIG = 100, 100_000
PAD = 8.0  # seconds: above party-1's work on 10⁵ rows (1.4 s alone, 5 s at a load average of 23 on 2 cores)
BOUND = 0.6  # seconds (see the module docstring)
RUNS = 2  # jobs per dataset and pad; the least stage time of each is compared
OVERRUN = re.compile(r"took [0-9.]+ s, over local_work_seconds")


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    root = tmp_path_factory.mktemp("timing")
    datasets: dict[str, dict[str, dict]] = {}
    for j, p in enumerate(PARTIES):
        datasets[p] = {}
        for name, n in (("small", SMALL), ("big", BIG if p == "party-1" else SMALL)):
            X, y = synthetic_rows(n, 10 * j + n % 7)
            f = root / "data" / f"{p}-{name}.csv"
            f.parent.mkdir(parents=True, exist_ok=True)
            np.savetxt(f, np.column_stack([X, y]), delimiter=",", fmt="%.9g")
            datasets[p][name] = {"path": str(f), "format": "csv"}
    X, _ = synthetic_rows(60, 99)  # the curator's public auxiliary points for the ensemble (labels ignored)
    aux = root / "data" / "aux.csv"
    np.savetxt(aux, np.column_stack([X, np.zeros(len(X))]), delimiter=",", fmt="%.9g")
    f = LocalFederation(root / "fed", PARTIES, datasets, test_mode=True, paillier_bits=768, dgk_bits=768, budget_epsilon=100.0,
                        compute_nodes=list(NODES), auxiliary={"aux": {"path": str(aux), "format": "csv"}},
                        party_options={"local_work_seconds": 0.0})
    try:
        f.start()
        yield f
    finally:
        f.stop()


def _set_pad(fed: LocalFederation, seconds: float) -> None:
    """Every party restarted with ``local_work_seconds = seconds`` (its ledger and certificate kept)."""
    for p in PARTIES:
        fed.kill(p)
        path = fed.workdir / p / "party.yaml"
        cfg = yaml.safe_load(path.read_text())
        cfg["local_work_seconds"] = seconds
        path.write_text(yaml.safe_dump(cfg))
        fed.restart(p)


def _round_seconds(fed: LocalFederation, dataset: str, seed: bytes) -> float:
    """The curator's stage time of the one round of a dp-gd job over ``dataset`` (the job must publish)."""
    plan = DpgdPlan(Task("binary"), D, 1.0, 1e-6, lam=1e-2, rounds=0, total_records=BIG + 2 * SMALL)
    spec = dpgd_spec(dataset, list(PARTIES), list(NODES), plan, BIG, seed=seed, deadline=120.0)
    job = host_submit(fed, learner=spec).job_id
    final = host_wait(fed, job, timeout=180)
    assert final.state == "DONE" and final.released, final
    assert len(host_release(fed, job).learner.releases) == 1
    return final.stage_seconds["r0"]


def _job_seconds(fed: LocalFederation, **submission) -> float:
    """From the creation to the end of a job the curator hosts (it must publish), by the curator's clock."""
    final = host_wait(fed, host_submit(fed, **submission).job_id, timeout=180)
    assert final.released, final
    return final.ended_unix - final.created_unix


def _ensemble_seconds(fed: LocalFederation, seed: bytes) -> float:
    spec = hamm2016_pb2.EnsembleJobSpec(dataset="small", auxiliary="aux", method="soft", lam=0.1, epsilon=1.0, classes=["-1", "1"],
                                        parties=PARTIES, compute_nodes=NODES, deadline_seconds=60.0, simulation_seed=seed)
    return _job_seconds(fed, hamm2016=spec)


def _local_release_seconds(fed: LocalFederation, seed: bytes) -> float:
    spec = local_release_pb2.LocalModelJobSpec(dataset="small", model="lmgc", mode=common_pb2.CORRECTED, epsilon=1.0, parties=PARTIES,
                                               ridge=1e-3, data_norm=1.0, huber_h=0.5, simulation_seed=seed)
    setattr(spec, "lambda", 1e-3)
    return _job_seconds(fed, lmgc=spec)


def _refusal_seconds(fed: LocalFederation, seed: bytes) -> float:
    """From the creation to the end of a dp-gd job whose row bound (10) every party's 10² rows exceed: each party
    learns that only by reading its records, and refuses (the job fails)."""
    plan = DpgdPlan(Task("binary"), D, 1.0, 1e-6, lam=1e-2, rounds=0, total_records=30)
    final = host_wait(fed, host_submit(fed, learner=dpgd_spec("small", list(PARTIES), list(NODES), plan, 10, seed=seed, deadline=120.0)).job_id, timeout=180)
    assert final.state == "FAILED" and not final.released, final
    return final.ended_unix - final.created_unix


def _measured(fed: LocalFederation, tag: str) -> dict[str, float]:
    """The least round stage of RUNS dp-gd jobs per dataset (interleaved, so a slow phase of the machine meets both
    sizes), and one ensemble's and one local release's job time, over ``small``."""
    times: dict[str, list[float]] = {"small": [], "big": []}
    for k in range(RUNS):
        for dataset in times:
            times[dataset].append(_round_seconds(fed, dataset, f"timing-{tag}-{dataset}-{k}".encode()))
    return {**{d: min(t) for d, t in times.items()}, "ensemble": _ensemble_seconds(fed, f"timing-{tag}-hm".encode()),
            "local release": _local_release_seconds(fed, f"timing-{tag}-lm".encode()), "refusal": _refusal_seconds(fed, f"timing-{tag}-no".encode())}


@pytest.fixture(scope="module")
def measured(fed) -> dict[str, dict[str, float]]:
    off = _measured(fed, "off")  # the parties start with the pad off
    print(f"pad off: {off}")
    _set_pad(fed, PAD)
    on = _measured(fed, "on")
    print(f"pad {PAD} s: {on}")
    log = (fed.workdir / "party-1" / "service.log").read_text()
    assert not OVERRUN.search(log), "party-1's work overran the pad: raise PAD"
    return {"off": off, "on": on}


def test_a_rounds_time_at_the_curator_does_not_depend_on_a_partys_row_count(measured):
    off, on = measured["off"], measured["on"]
    assert off["big"] - off["small"] > BOUND, f"without the pad the 10⁵-row party's work must show (else this test proves nothing): {off}"
    assert min(on["small"], on["big"]) >= PAD, f"the round took less than the pad: {on}"
    assert abs(on["big"] - on["small"]) <= BOUND, f"the curator times party-1's row count through the pad: {on} (pad off: {off})"


@pytest.mark.parametrize("job", ["ensemble", "local release", "refusal"])
def test_ensemble_votes_local_releases_and_refusals_that_read_the_records_wait_for_the_pad(measured, job):
    assert measured["off"][job] < PAD <= measured["on"][job], measured
