"""A malicious curator shows the clients one DCA job spec and the compute nodes another, over real processes and
mutual TLS (docs/protocols/dca.md, "One spec everywhere").

The curator (a raw client holding a CURATOR certificate with the federation curator's exact name, which the curator
itself holds) announces a validated job to the three compute nodes with T = 3 (AnnounceJob), while its GetJob — here
the test's own curator server under the same name — shows the clients the same job id with T = 1. Under T = 1 each
client spends for noise calibrated to N − T − 1 = 3 honest others; the nodes would release with only N − T = 2
clients. Expected:

- a client (the product's ``submit_vector`` with its privacy ledger) asks each node for its spec digest, finds node-1's
  is not the digest of the spec it checked and refuses the job naming the node: its ledger is unchanged, no share
  left (the same client's share bound to the nodes' spec is accepted afterwards, not a REPLAY);
- a share bound to the spec the clients were shown is refused by a node INVALID_JOB, per client in the receipt, and a
  router's ShareBatch so bound is refused INVALID_ARGUMENT (INVALID_JOB) as a whole; the node keeps serving and the
  job is untouched;
- GetJobDigest answers a party or an operator, is refused PERMISSION_DENIED to a compute node or curator certificate,
  and NOT_FOUND for a job the node does not hold.
"""

from __future__ import annotations

import asyncio
import concurrent.futures

import grpc
import numpy as np
import pytest

from mpdp.dca.params import DcaParams
from mpdp.dca.spec import SpecMismatch
from mpdp.ledger import Ledger
from mpdp.messages import common_pb2, dca_pb2, dca_pb2_grpc
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.dca_client.client import submit_vector

from tests.adversarial.conftest import NODES, address, assert_all_serving, assert_status, channel, dca_spec, mint, refused, site_tls

D, N, F_BITS = 3, 5, 16
JOB = "dca-equivocate-1"


def _spec(max_missing: int) -> dca_pb2.DcaJobSpec:
    return dca_spec(n=N, d=D, deadline=60.0, max_missing=max_missing, noise=dca_pb2.DISCRETE_GAUSSIAN, validate=dca_pb2.VALIDATE_RANGE,
                    fractional_bits=F_BITS, sensitivity=2.0)


class _ShownCurator(dca_pb2_grpc.DcaCuratorServicer):
    """The curator's GetJob as the clients see it: the job with T = 1 and the real nodes' addresses."""

    def __init__(self, announcement: dca_pb2.DcaJobAnnouncement) -> None:
        self.announcement = announcement

    def GetJob(self, request, context):
        if request.job_id != self.announcement.job_id:
            context.abort(grpc.StatusCode.NOT_FOUND, "UNKNOWN_JOB: no such job")
        return self.announcement


@pytest.fixture(scope="module")
def equivocation(fed):
    """(announcement shown to the clients, the nodes' params, the clients' params, endpoints of the shown curator)."""
    ep = Endpoints.load(fed.workdir)
    curator_tls = mint(fed, "curator", ep.curator_name)  # the curator's own name: what the curator itself holds
    addresses = {n: address(fed, n) for n in NODES}
    to_nodes = dca_pb2.DcaJobAnnouncement(job_id=JOB, spec=_spec(3), node_addresses=addresses)

    def announce(node: str) -> None:
        with channel(fed, node, curator_tls) as ch:
            dca_pb2_grpc.ComputeNodeStub(ch).AnnounceJob(to_nodes, timeout=60)

    with concurrent.futures.ThreadPoolExecutor(len(NODES)) as pool:  # a validated job's nodes agree on its key: all at once
        list(pool.map(announce, NODES))

    shown = dca_pb2.DcaJobAnnouncement(job_id=JOB, spec=_spec(1), node_addresses=addresses)
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(2))
    dca_pb2_grpc.add_DcaCuratorServicer_to_server(_ShownCurator(shown), server)
    port = server.add_secure_port("127.0.0.1:0", curator_tls.server_credentials())
    server.start()
    try:
        yield shown, DcaParams.from_spec(JOB, to_nodes.spec), DcaParams.from_spec(JOB, shown.spec), f"127.0.0.1:{port}", ep.curator_name
    finally:
        server.stop(0)


def _stream(fed, tls, node: str, shares: list[dca_pb2.ClientShare]) -> dca_pb2.ShareReceipt:
    with channel(fed, node, tls) as ch:
        return dca_pb2_grpc.ComputeNodeStub(ch).SubmitShares(iter(shares), timeout=30)


def _client_shares(params: DcaParams, cid: str) -> dict[str, dca_pb2.ClientShare]:
    """A client's honest shares bound to ``params`` (the product's client machine), by node."""
    from mpdp.dca.client import ClientMachine
    from mpdp.math.drbg import Drbg
    from mpdp.protocol import Send

    out = ClientMachine(params, cid, np.full(D, 0.25), Drbg.from_os()).submit()
    return {o.to.name: o.message for o in out if isinstance(o, Send)}


def test_a_client_refuses_before_spending_when_the_nodes_hold_another_spec(fed, equivocation, tmp_path):
    shown, at_nodes, checked, curator_address, curator_name = equivocation
    assert checked.max_missing == 1 and at_nodes.max_missing == 3 and checked.spec_digest != at_nodes.spec_digest
    cid = "eq-client-1"
    tls = mint(fed, "party", cid)
    ledger = Ledger(tmp_path / "ledger.json", 10.0)
    before = (tmp_path / "ledger.json").read_bytes() if (tmp_path / "ledger.json").exists() else b""
    with pytest.raises(SpecMismatch) as e:
        asyncio.run(submit_vector(Endpoints(curator_address, curator_name, tls), tls, cid, JOB, np.full(D, 0.25), ledger=ledger))
    assert e.value.node == NODES[0] and NODES[0] in e.value.detail and e.value.problem == common_pb2.INVALID_JOB
    assert ledger.find("dca", JOB) is None and ledger.entries == []  # nothing spent
    after = (tmp_path / "ledger.json").read_bytes() if (tmp_path / "ledger.json").exists() else b""
    assert after == before
    # nothing was sent: the same client's share bound to the nodes' own spec is taken now (not a REPLAY)
    own = _client_shares(at_nodes, cid)
    for node in NODES:
        receipt = _stream(fed, tls, node, [own[node]])
        assert receipt.accepted == 1 and not receipt.rejected, receipt
    assert_all_serving(fed)


def test_a_share_bound_to_the_shown_spec_is_refused_and_the_job_lives_on(fed, equivocation):
    shown, at_nodes, checked, _, _ = equivocation
    cid = "eq-client-2"
    tls = mint(fed, "party", cid)
    wrong = _client_shares(checked, cid)  # what a client that skipped the check would send
    assert wrong[NODES[1]].spec_digest == checked.spec_digest
    receipt = _stream(fed, tls, NODES[1], [wrong[NODES[1]]])
    assert receipt.accepted == 0 and [r.problem for r in receipt.rejected] == [common_pb2.INVALID_JOB], receipt
    assert "spec" in receipt.rejected[0].detail and len(receipt.rejected[0].detail) < 300
    # an unvalidated-format share carrying the shown spec's digest: refused on its digest, before its kind is looked at
    plain = dca_pb2.ClientShare(job_id=JOB, client_id=cid, spec_digest=checked.spec_digest, masked_vector=bytes(8 * D))
    receipt = _stream(fed, tls, NODES[2], [plain])
    assert receipt.accepted == 0 and [r.problem for r in receipt.rejected] == [common_pb2.INVALID_JOB], receipt
    # a router's batch bound to the shown spec: refused whole (INVALID_JOB), nothing taken
    batch = dca_pb2.ShareBatch(job_id=JOB, spec_digest=checked.spec_digest, client_ids=["eq-r-1"], masked_vectors=bytes(8 * D))
    with channel(fed, NODES[0], site_tls(fed, "operator")) as ch:
        err = refused(lambda: dca_pb2_grpc.ComputeNodeStub(ch).SubmitShareBatch(batch, timeout=30))
    assert_status(err, grpc.StatusCode.INVALID_ARGUMENT, "eq-r-1")
    assert (err.details() or "").startswith("INVALID_JOB:")
    # the job is untouched: the same client's share bound to the nodes' spec is taken at every node
    own = _client_shares(at_nodes, cid)
    for node in NODES:
        receipt = _stream(fed, tls, node, [own[node]])
        assert receipt.accepted == 1 and not receipt.rejected, receipt
    assert_all_serving(fed)


def test_get_job_digest_answers_clients_only(fed, equivocation):
    _, at_nodes, _, _, curator_name = equivocation
    for tls in (mint(fed, "party", "eq-asker"), site_tls(fed, "operator")):
        with channel(fed, NODES[1], tls) as ch:
            got = dca_pb2_grpc.ComputeNodeStub(ch).GetJobDigest(common_pb2.JobRef(job_id=JOB), timeout=30)
        assert got.job_id == JOB and got.spec_digest == at_nodes.spec_digest
    for tls in (site_tls(fed, NODES[0]), mint(fed, "curator", curator_name)):
        with channel(fed, NODES[1], tls) as ch:
            err = refused(lambda: dca_pb2_grpc.ComputeNodeStub(ch).GetJobDigest(common_pb2.JobRef(job_id=JOB), timeout=30))
        assert_status(err, grpc.StatusCode.PERMISSION_DENIED)
    with channel(fed, NODES[1], site_tls(fed, "operator")) as ch:
        err = refused(lambda: dca_pb2_grpc.ComputeNodeStub(ch).GetJobDigest(common_pb2.JobRef(job_id="dca-nosuchjob"), timeout=30))
    assert_status(err, grpc.StatusCode.NOT_FOUND)
    assert_all_serving(fed)
