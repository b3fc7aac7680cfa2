"""A party takes only the federation's agreed public size bounds for a dataset, whatever the job asks.

Models an operator, and a curator, that vary a job's public size bound to learn a party's row count from its
acceptance: a Pathak job is refused iff n_j ≥ 2^size_bits, a contribution round iff n_j > records_per_client, so jobs
with other bounds would tell the bit length of n_j, or n_j itself by binary search, at no ε. Each party here has the
dataset ``agreed`` (its ``synthetic`` rows) provisioned with ``size_bits`` = 20 and ``records_per_party`` = 1000.
Expected: a Pathak job submitted through the job host with another size_bits (24, or 0: the default 32) fails
INVALID_JOB and no party's ledger changes, while one with size_bits 20 publishes; a contribution request with another
records_per_client, sent to a party with the curator's own certificate, is refused INVALID_JOB naming the agreed bound
and not the job's, before anything is read or spent, while one with the agreed bound gets past that check.
"""

from __future__ import annotations

import re

import grpc
import pytest

from mpdp.messages import common_pb2, contribution_pb2, contribution_pb2_grpc, operations_pb2 as ops, operations_pb2_grpc as ops_grpc

from .conftest import PARTIES, assert_all_serving, assert_status, channel, ledger, operator_curator, pathak_spec, refused, site_tls, start_federation

pytestmark = pytest.mark.integration

SIZE_BITS, RECORDS = 20, 1000


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    root = tmp_path_factory.mktemp("agreed")
    agreed = {p: {"agreed": {"path": str(root / "data" / f"{p}.csv"), "format": "csv", "size_bits": SIZE_BITS, "records_per_party": RECORDS}} for p in PARTIES}
    f = start_federation(root, extra_datasets=agreed)  # writes root/data/<party>.csv, which "agreed" reads too
    yield f
    f.stop()


def _ledgers(fed) -> dict:
    return {p: ledger(fed, p)["entries"] for p in PARTIES}


def _run(fed, size_bits: int) -> ops.JobSummary:
    spec = pathak_spec(seed=b"agreed-%d" % size_bits, size_bits=size_bits)
    spec.dataset = "agreed"
    last = None
    with operator_curator(fed) as ch:
        host = ops_grpc.JobOperationsStub(ch)
        first = host.SubmitJob(ops.JobSubmission(pathak2010=spec), timeout=120)
        for last in host.WatchJob(common_pb2.JobRef(job_id=first.job_id), timeout=300):
            if last.terminal:
                break
    assert last is not None and last.terminal, last
    return last


@pytest.mark.parametrize("size_bits", [24, 0])
def test_a_pathak_job_with_another_size_bound_is_refused_without_a_spend(fed, size_bits):
    before = _ledgers(fed)
    end = _run(fed, size_bits)
    assert end.state == "FAILED" and end.problem == common_pb2.INVALID_JOB, end
    assert _ledgers(fed) == before
    assert_all_serving(fed)


def test_a_pathak_job_with_the_agreed_size_bound_publishes(fed):
    end = _run(fed, SIZE_BITS)
    assert end.state == "PUBLISHED", end


def _contribute(fed, party: str, records: int) -> grpc.RpcError:
    req = contribution_pb2.StatisticRequest(dca_job_id="dca-000000000abc", dataset="agreed", statistic="linreg/std", bounds=[1.0] * 5,
                                            records_per_client=records, parties=PARTIES)
    with channel(fed, party, site_tls(fed, "curator")) as ch:
        return refused(lambda: contribution_pb2_grpc.ContributionPartyStub(ch).Contribute(req, timeout=60))


@pytest.mark.parametrize("records", [RECORDS - 1, RECORDS + 1, 1])
def test_a_round_with_another_row_bound_is_refused_before_anything_is_read_or_spent(fed, records):
    before = _ledgers(fed)
    e = _contribute(fed, "party-1", records)
    assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
    details = e.details() or ""
    assert "not the one agreed" in details and f"records_per_client = {RECORDS}" in details, details
    assert not re.search(rf"(?<![\w-]){records}(?!\w)", details.replace(f"= {RECORDS}", "")), details  # the job's own bound is not echoed
    assert _ledgers(fed) == before


def test_a_round_with_the_agreed_row_bound_passes_the_bound_check(fed):
    e = _contribute(fed, "party-1", RECORDS)  # refused later, for its unknown DCA job, not for its bound
    assert "not the one agreed" not in (e.details() or ""), e.details()
