"""A Pathak job across real processes (curator + 3 parties) with mutual TLS on loopback.

Invariants: the socket path returns exactly what the in-memory driver returns for the same seeds;
unauthenticated, foreign-CA and wrong-role callers are refused with the right status; bad input fails
the job with a precise status and nothing is published; the services keep serving afterwards.
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from mpdp.messages import common_pb2, operations_pb2 as ops, operations_pb2_grpc as ops_grpc, pathak2010_pb2 as pb, pathak2010_pb2_grpc as pb_grpc
from mpdp.pathak2010 import tester
from tests.pathak_helpers import run_test_job, small_curator_secrets
from mpdp_services.operator.pathak2010 import make_spec
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.operator.pathak2010 import OperatorClient
from mpdp_services.common import pki

from mpdp.messages import link_pb2
from tests.linked import assert_parties_listen_on_no_grpc_port, relay_stub, sealed_call

from .conftest import PARTIES, curator_channel, site_tls

pytestmark = pytest.mark.integration


def _seeded_spec(parties, seed: bytes, deadline: float = 120.0) -> pb.PathakJobSpec:
    spec = make_spec("synthetic", parties, 0.9, 0.05, "corrected", deadline)
    spec.simulation_seed = seed
    return spec


def test_full_job_matches_in_memory_driver(federation):
    with OperatorClient(Endpoints.load(federation.workdir)) as client:
        job = client.submit(_seeded_spec(PARTIES, b"socket-vs-memory"))
        assert_parties_listen_on_no_grpc_port(federation)  # while the job runs: the parties dial out only
        status = client.wait(job, timeout=120)
        assert status.state == "PUBLISHED", status.detail
        model = client.model(job)
        assert job in client.models()
    w_socket = tester.rebuild(model)
    mem = run_test_job(federation.parts, _seeded_spec(PARTIES, b"socket-vs-memory"), small_curator_secrets(768, 768), party_key_bits=768)
    w_mem = tester.rebuild(mem.model)
    assert np.max(np.abs(w_socket - w_mem)) < 1e-12
    X = np.random.default_rng(5).normal(size=(200, 4))
    assert np.array_equal(tester.classify(w_socket, X), tester.classify(w_mem, X))  # Dave's predictions agree
    assert set(model.stage_seconds) >= {"setup", "stage1", "stage2", "stage3"}
    assert model.paillier_ops["paillier_encrypt"] > 0 and model.paillier_ops["dgk_zero_test"] > 0
    # each party's ledger recorded the release
    import json

    for p in PARTIES:
        entries = json.loads((federation.workdir / p / "state" / "ledger.json").read_text())["entries"]
        assert any(e["job_id"] == job for e in entries)


def test_gaussian_distributed_job_releases_and_charges_epsilon_delta(federation):
    """The distributed-noise mode over sockets: published, the guarantee states (ε, δ) and the mode, every party's ledger
    holds the true (ε, δ), and the model is the in-memory driver's for the same seeds."""
    import json

    def spec() -> pb.PathakJobSpec:
        s = make_spec("synthetic", PARTIES, 0.9, 0.05, "gaussian-distributed", 120.0)
        s.simulation_seed = b"socket-gaussian"
        return s

    with OperatorClient(Endpoints.load(federation.workdir)) as client:
        job = client.submit(spec())
        assert_parties_listen_on_no_grpc_port(federation)  # while the job runs: the parties dial out only
        status = client.wait(job, timeout=120)
        assert status.state == "PUBLISHED", status.detail
        model = client.model(job)
    assert model.noise == pb.DISTRIBUTED_GAUSSIAN and model.colluders == 1  # K = 3: t = max(1, K − 2)
    g = model.guarantee
    assert (g.epsilon, g.delta, g.norm) == (0.9, 1e-6, "l2")
    assert g.statement.startswith("(0.9, 1e-06)-DP") and "any 1 colluding party" in g.statement
    assert "knows the noise it contributed" not in model.trust_model and "no party knows it" in model.trust_model
    mem = run_test_job(federation.parts, spec(), small_curator_secrets(768, 768), party_key_bits=768)
    assert np.max(np.abs(tester.rebuild(model) - tester.rebuild(mem.model))) < 1e-12
    for p in PARTIES:
        entries = json.loads((federation.workdir / p / "state" / "ledger.json").read_text())["entries"]
        mine = [e for e in entries if e["job_id"] == job]
        assert len(mine) == 1 and mine[0]["epsilon"] == 0.9 and mine[0]["delta"] == 1e-6 and mine[0]["mode"] == "gaussian-distributed"


def test_refused_without_client_certificate_or_with_foreign_ca(federation, tmp_path):
    ch = curator_channel(federation, None)  # server-verified TLS, no client certificate
    with pytest.raises(grpc.RpcError) as e:
        ops_grpc.JobOperationsStub(ch).ListJobs(ops.JobQuery(), timeout=10)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    ch.close()
    other_key, other_ca = pki.make_ca("other-federation")
    key, cert = pki.issue(other_key, other_ca, "operator", "intruder", ["127.0.0.1"])
    pki.write_site(tmp_path / "intruder", key, cert, other_ca)
    from mpdp_services.common.rpc import TlsFiles

    tls = TlsFiles(tmp_path / "intruder" / "site.crt", tmp_path / "intruder" / "site.key", federation.workdir / "ca" / "ca.crt")
    ch = curator_channel(federation, tls)
    with pytest.raises(grpc.RpcError) as e:
        ops_grpc.JobOperationsStub(ch).ListJobs(ops.JobQuery(), timeout=10)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    ch.close()


def test_wrong_role_is_permission_denied(federation):
    ch = curator_channel(federation, site_tls(federation, "party-1"))
    with pytest.raises(grpc.RpcError) as e:
        ops_grpc.JobOperationsStub(ch).SubmitJob(ops.JobSubmission(pathak2010=_seeded_spec(PARTIES, b"x")), timeout=10)
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    ch.close()
    ch = curator_channel(federation, site_tls(federation, "operator"))
    with pytest.raises(grpc.RpcError) as e:
        pb_grpc.CuratorStub(ch).AcceptJob(pb.JobAcceptance(job_id="x", dimension=4), timeout=10)
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    ch.close()
    # a party may not play Charlie towards another party: a sealed StartProtocol relayed to party-2 is refused there
    tls = site_tls(federation, "party-1")
    ch = curator_channel(federation, tls)
    relay = relay_stub(ch)
    cert = relay.Certificate(link_pb2.PartyCertificateRequest(name="party-2"), timeout=10).certificate
    call, _, _ = sealed_call(tls, federation.federation, "party-1", "party-2", cert, "/mpdp.messages.Party/StartProtocol",
                             pb.ProtocolStart(job_id="x", dimension=4).SerializeToString(), "x")
    with pytest.raises(grpc.RpcError) as e:
        relay.Relay(call, timeout=10)
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    ch.close()


def _job_with_mock(client, parties=("party-mock", "party-1", "party-2")) -> str:
    return client.submit(_seeded_spec(list(parties), b"mock", deadline=60))


def _assert_failed_unpublished(client, job: str, fragment: str) -> ops.JobSummary:
    status = client.wait(job, timeout=90)
    assert status.state == "FAILED" and fragment in status.detail, status
    with pytest.raises(grpc.RpcError) as e:
        client.model(job)
    assert e.value.code() == grpc.StatusCode.ABORTED  # JOB_FAILED: the job failed and published nothing
    assert job not in client.models()
    return status


def test_bad_input_over_the_wire_fails_the_job_cleanly(federation, mock_party):
    stub, servicer = mock_party
    with OperatorClient(Endpoints.load(federation.workdir)) as client:
        # unknown job id
        with pytest.raises(grpc.RpcError) as e:
            stub.AcceptJob(pb.JobAcceptance(job_id="pk-nope", dimension=4), timeout=10)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        # out-of-order: Stage 3 message while Charlie awaits acceptances
        job = _job_with_mock(client)
        with pytest.raises(grpc.RpcError) as e:
            stub.SendMaskedNoise(pb.MaskedNoise(job_id=job), timeout=10)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "MaskedNoise" in e.value.details()
        _assert_failed_unpublished(client, job, "MaskedNoise")
        # replayed message
        job = _job_with_mock(client)
        stub.AcceptJob(pb.JobAcceptance(job_id=job, dimension=4, pi1_commitment=bytes(32)), timeout=10)
        with pytest.raises(grpc.RpcError) as e:
            stub.AcceptJob(pb.JobAcceptance(job_id=job, dimension=4, pi1_commitment=bytes(32)), timeout=10)
        assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS
        _assert_failed_unpublished(client, job, "already received")
        # malformed (wrong-length) vector from the leader
        job = _job_with_mock(client)
        with pytest.raises(grpc.RpcError) as e:
            stub.ForwardSizeRemainders(pb.SizeRemainders(job_id=job, ciphertexts=[b"\x01"] * 2), timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        _assert_failed_unpublished(client, job, "K=3")
        # the services keep serving: a normal job still publishes
        job = client.submit(_seeded_spec(PARTIES, b"after-bad-input"))
        assert client.wait(job, timeout=120).state == "PUBLISHED"


def test_party_disconnecting_mid_protocol_fails_job_naming_it(federation, mock_party):
    stub, servicer = mock_party
    with OperatorClient(Endpoints.load(federation.workdir)) as client:
        job = _job_with_mock(client, ("party-mock", "party-1", "party-3"))
        ann = servicer.inbox.get(timeout=60)
        while not (isinstance(ann, pb.JobAnnouncement) and ann.job_id == job):
            ann = servicer.inbox.get(timeout=60)
        federation.kill("party-3")
        stub.AcceptJob(pb.JobAcceptance(job_id=job, dimension=4, pi1_commitment=bytes(32)), timeout=10)
        status = _assert_failed_unpublished(client, job, "party-3")
        assert status.problem in (common_pb2.PEER_UNREACHABLE, common_pb2.JOB_FAILED)
        federation.restart("party-3")
        job = client.submit(_seeded_spec(PARTIES, b"after-restart"))
        assert client.wait(job, timeout=120).state == "PUBLISHED"


def test_production_curator_refuses_seeded_jobs_and_small_keys(tmp_path):
    from mpdp_services.common import config as cfgmod
    from mpdp_services.curator.server import load_secrets

    cfg = cfgmod.CuratorConfig(name="c", tls={"cert": "a", "key": "b", "ca": "c"}, paillier_bits=1024)
    with pytest.raises(ValueError, match="2048"):
        load_secrets(cfg)


def test_curator_restart_keeps_published_models_and_serves_new_jobs(federation):
    with OperatorClient(Endpoints.load(federation.workdir)) as client:
        job = client.submit(_seeded_spec(PARTIES, b"before-restart"))
        assert client.wait(job, timeout=120).state == "PUBLISHED"
        before = client.model(job)
    federation.kill("curator")
    federation.restart("curator")
    with OperatorClient(Endpoints.load(federation.workdir)) as client:
        assert client.model(job) == before
        assert job in client.models()
        job2 = client.submit(_seeded_spec(PARTIES, b"after-curator-restart"))  # new keys reach the parties in the announcement
        assert client.wait(job2, timeout=120).state == "PUBLISHED"
