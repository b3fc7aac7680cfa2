"""A Pathak party accepts before it reads its records, over real processes.

party-2's dataset ``three`` has three label values, which its training cannot map to ±1 (it learns that only by
reading the records). It accepts all the same — the acceptance is built from public facts — the job reaches the
spend, and then fails INVALID_JOB at party-2's training with nothing computed from the records sent: party-2's
charge (and any other party's that paid) is voided, and the refusal names no value of the records.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from mpdp.messages import common_pb2

from .conftest import PARTIES, ledger, pathak_spec, start_federation, submit_pathak, synthetic_rows, wait_pathak


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    root = tmp_path_factory.mktemp("accept")
    extra: dict[str, dict[str, dict]] = {}
    for j, p in enumerate(PARTIES):
        X, y = synthetic_rows(50 + j, 10 + j)
        if p == "party-2":
            y = np.arange(len(y)) % 3.0  # labels 0, 1, 2
        f = root / f"three-{p}.csv"
        np.savetxt(f, np.column_stack([X, y]), delimiter=",", fmt="%.17g")
        extra[p] = {"three": {"path": str(f), "format": "csv"}}
    f = start_federation(root, extra_datasets=extra)
    yield f
    f.stop()


def test_a_party_whose_training_fails_accepts_then_fails_after_its_spend_and_its_charge_is_voided(fed):
    spec = pathak_spec(seed=b"accept-first")
    spec.dataset = "three"
    job = submit_pathak(fed, spec)
    final = wait_pathak(fed, job)
    assert final.state == "FAILED" and final.problem == common_pb2.INVALID_JOB, final
    assert "party-2" in final.detail and "cannot train" in final.detail, final.detail
    said = (fed.workdir / "curator" / "service.log").read_text()
    for p in PARTIES:  # every party accepted, party-2 too: it had not read its records
        assert f"job {job}: curator received JobAcceptance from party:{p}" in said
    end = time.monotonic() + 60
    while True:  # each party settles its entry once it hears of the failure
        entries = {p: [e for e in ledger(fed, p)["entries"] if e["job_id"] == job] for p in PARTIES}
        if all(e["status"] != "spent" for es in entries.values() for e in es) or time.monotonic() > end:
            break
        time.sleep(0.1)
    assert [e["status"] for e in entries["party-2"]] == ["voided"], entries  # it paid at ProtocolStart, then failed training
    for p in PARTIES:  # the others trained on time: voided if the abort came before their first data-dependent message
        # left (both wait for the pad), failed if it came after (the ledger rule; which one is a race), never spent
        assert [e["status"] for e in entries[p]] in ([], ["voided"], ["failed"]), entries
    log = (fed.workdir / "party-2" / "service.log").read_text()
    assert "binary labels expected" in log  # the reason stays in the party's own log
