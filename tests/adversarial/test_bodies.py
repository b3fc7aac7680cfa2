"""Hostile bodies: what a peer holding a valid certificate can put on the wire without following the protocol.

Models an attacker (or a buggy peer) that sends bytes that are no protobuf message, bodies larger than any
message, and well-formed messages whose strings are attacker-sized (300 characters, 20 kB, 1 MB job ids,
path-like and control-character ids). Expected: INVALID_ARGUMENT for undecodable bodies (never UNKNOWN
"Unexpected <class DecodeError>"); the role (and the curator's name) checked before the body is parsed, so a
wrong-role caller gets PERMISSION_DENIED even for garbage; unknown or malformed ids NOT_FOUND or
INVALID_ARGUMENT with short details that echo nothing, show no path, no class name and no traceback; and
every service keeps serving.
"""

from __future__ import annotations

import grpc
import pytest

from mpdp.messages import common_pb2, dca_pb2, hamm2016_pb2, local_release_pb2, pathak2010_pb2 as pk
from mpdp.messages import operations_pb2 as ops

from .conftest import (
    DCA_SERVICE,
    NODE_SERVICE,
    PARTY_SERVICE,
    PATHAK_SERVICE,
    assert_all_serving,
    assert_clean,
    assert_ledgers_within_budget,
    assert_serving,
    assert_status,
    channel,
    dca_job,
    garbage,
    raw_unary,
    refused,
    site_tls,
)

OPS_SERVICE = "mpdp.messages.JobOperations"  # the curator's one job host: every operator call on a job

# (target site, service, method, a caller allowed to call it, a caller that is not)
UNARY = [
    ("curator", OPS_SERVICE, "SubmitJob", "operator", "party-1"),
    ("curator", PATHAK_SERVICE, "AcceptJob", "party-1", "operator"),
    ("curator", OPS_SERVICE, "GetRelease", "operator", "node-1"),
    ("curator", DCA_SERVICE, "GetJob", "party-1", "curator"),
    ("curator", DCA_SERVICE, "SendPartialSum", "node-1", "party-1"),
    ("curator", "mpdp.messages.JobOperations", "SubmitJob", "operator", "node-1"),
    ("party-1", PARTY_SERVICE, "AnnounceJob", "curator", "party-2"),
    ("party-1", PARTY_SERVICE, "SendSizeShare", "party-2", "operator"),
    ("party-1", PARTY_SERVICE, "AbortJob", "party-2", "node-1"),
    ("party-1", "mpdp.messages.LocalModelParty", "TrainLocalModel", "curator", "party-2"),
    ("party-1", "mpdp.messages.ContributionParty", "Contribute", "curator", "operator"),
    ("party-1", "mpdp.messages.EnsembleParty", "Vote", "curator", "party-2"),
    ("node-1", NODE_SERVICE, "AnnounceJob", "curator", "node-2"),
    ("node-1", NODE_SERVICE, "SubmitShareBatch", "operator", "party-1"),
    ("node-1", NODE_SERVICE, "ReportReceivedClients", "node-2", "operator"),
    ("node-1", NODE_SERVICE, "ShareVerifyKeyPiece", "node-2", "party-1"),
    ("node-1", NODE_SERVICE, "CloseSubmissions", "curator", "party-1"),
    ("node-1", NODE_SERVICE, "GetPartialSum", "curator", "operator"),
    ("node-1", NODE_SERVICE, "AbortJob", "node-2", "party-1"),
]
IDS = [f"{t}/{s.rsplit('.', 1)[1]}.{m}" for t, s, m, _, _ in UNARY]


@pytest.mark.parametrize("target,service,method,ok,_wrong", UNARY, ids=IDS)
def test_undecodable_body_is_invalid_argument(fed, target, service, method, ok, _wrong):
    with channel(fed, target, site_tls(fed, ok)) as ch:
        e = refused(lambda: raw_unary(ch, service, method)(garbage(200), timeout=20))
    assert_status(e, grpc.StatusCode.INVALID_ARGUMENT)
    assert "DecodeError" not in (e.details() or "")


@pytest.mark.parametrize("target,service,method,_ok,wrong", UNARY, ids=IDS)
def test_undecodable_body_from_wrong_role_is_permission_denied(fed, target, service, method, _ok, wrong):
    """The role is checked before the body is parsed."""
    with channel(fed, target, site_tls(fed, wrong)) as ch:
        e = refused(lambda: raw_unary(ch, service, method)(garbage(200), timeout=20))
    assert_status(e, grpc.StatusCode.PERMISSION_DENIED)


def test_undecodable_stream_messages_are_invalid_argument(fed):
    """Server streams (the job host's WatchJob) and client streams (SubmitShares) parse their messages after the role check too."""
    with channel(fed, "curator", site_tls(fed, "operator")) as ch:
        watch = ch.unary_stream(f"/{OPS_SERVICE}/WatchJob", request_serializer=None, response_deserializer=None)
        assert_status(refused(lambda: list(watch(garbage(100), timeout=20))), grpc.StatusCode.INVALID_ARGUMENT)
    with channel(fed, "curator", site_tls(fed, "party-1")) as ch:  # a party may not watch, garbage or not
        watch = ch.unary_stream(f"/{OPS_SERVICE}/WatchJob", request_serializer=None, response_deserializer=None)
        assert_status(refused(lambda: list(watch(garbage(100), timeout=20))), grpc.StatusCode.PERMISSION_DENIED)
    with channel(fed, "node-1", site_tls(fed, "party-1")) as ch:
        submit = ch.stream_unary(f"/{NODE_SERVICE}/SubmitShares", request_serializer=None, response_deserializer=None)
        assert_status(refused(lambda: submit(iter([garbage(100), garbage(100)]), timeout=20)), grpc.StatusCode.INVALID_ARGUMENT)
    with channel(fed, "node-1", site_tls(fed, "node-2")) as ch:  # a node may not submit shares, garbage or not
        submit = ch.stream_unary(f"/{NODE_SERVICE}/SubmitShares", request_serializer=None, response_deserializer=None)
        assert_status(refused(lambda: submit(iter([garbage(100)]), timeout=20)), grpc.StatusCode.PERMISSION_DENIED)


# The per-protocol operator calls the job host replaced: no servicer has them any more.
REMOVED_UNARY = [(PATHAK_SERVICE, "SubmitJob"), (PATHAK_SERVICE, "GetModel"), (PATHAK_SERVICE, "ListModels"), (DCA_SERVICE, "CreateJob"), (DCA_SERVICE, "GetRelease")]
REMOVED_STREAMS = [(PATHAK_SERVICE, "WatchJob"), (DCA_SERVICE, "WatchJob")]


@pytest.mark.parametrize("caller", ["operator", "party-1", "node-1"])
def test_removed_pathak_and_dca_operator_calls_are_unimplemented(fed, caller):
    """Curator.SubmitJob/WatchJob/GetModel/ListModels and DcaCurator.CreateJob/WatchJob/GetRelease are gone (the job
    host, JobOperations, is the one operator front): gRPC's own UNIMPLEMENTED for every caller, a well-formed body
    or garbage, with a clean detail; the curator keeps serving and the job host answers on the same connection."""
    bodies = [pk.PathakJobSpec(dataset="synthetic").SerializeToString(), common_pb2.JobRef(job_id="pk-000000000000").SerializeToString(), garbage(100)]
    with channel(fed, "curator", site_tls(fed, caller)) as ch:
        for service, method in REMOVED_UNARY:
            for body in bodies:
                e = refused(lambda: raw_unary(ch, service, method)(body, timeout=20))
                assert e.code() == grpc.StatusCode.UNIMPLEMENTED, (service, method, e.code(), e.details())
                assert_clean(e)
        for service, method in REMOVED_STREAMS:
            watch = ch.unary_stream(f"/{service}/{method}", request_serializer=None, response_deserializer=None)
            for body in bodies:
                e = refused(lambda: list(watch(body, timeout=20)))
                assert e.code() == grpc.StatusCode.UNIMPLEMENTED, (service, method, e.code(), e.details())
                assert_clean(e)
        if caller == "operator":
            from .conftest import job_host

            listed = job_host(ch).ListJobs(ops.JobQuery(protocol="pathak2010"), timeout=20).jobs
            assert all(j.protocol == "pathak2010" for j in listed), listed
    assert_serving(fed, "curator")


def test_unknown_methods_are_refused(fed):
    """The interceptor refuses what it cannot authorise; an unknown method is UNIMPLEMENTED, never served."""
    with channel(fed, "curator", site_tls(fed, "party-1")) as ch:
        e = refused(lambda: raw_unary(ch, PATHAK_SERVICE, "NoSuchMethod")(b"", timeout=20))
    assert e.code() in (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.PERMISSION_DENIED), e
    assert_clean(e)


@pytest.mark.parametrize("target,service,method,caller", [
    ("curator", PATHAK_SERVICE, "AcceptJob", "party-1"),
    ("node-1", NODE_SERVICE, "SubmitShareBatch", "operator"),
], ids=["curator", "node"])
def test_oversized_body_is_refused_and_the_service_serves(fed, target, service, method, caller):
    """A body past the server's receive limit (65 MB > the 64 MB in services/common/rpc.py)."""
    body = b"\x0a" + b"\x80\x80\x80\x1f" + bytes(65 * 1024 * 1024)  # field 1, length 65 MiB, zeros
    with channel(fed, target, site_tls(fed, caller), **{"grpc.max_send_message_length": -1}) as ch:
        e = refused(lambda: raw_unary(ch, service, method)(body, timeout=60))
    assert e.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INVALID_ARGUMENT), e
    assert_clean(e)
    assert_all_serving(fed)


HOSTILE_IDS = {
    "300-chars": "pk-" + "a" * 297,
    "20kB": "x" * 20_000,
    "1MB": "y" * 1_000_000,
    "path": "../../../../etc/passwd",
    "control": "job\nWARNING forged log line\x00\x1b[31m",
}

# (target site, service, method, caller, request type, how the id is placed)
BY_ID = [
    ("curator", OPS_SERVICE, "GetRelease", "operator", common_pb2.JobRef),
    ("curator", PATHAK_SERVICE, "AcceptJob", "party-1", pk.JobAcceptance),
    ("curator", PATHAK_SERVICE, "PublishShare", "party-1", pk.PublishedShare),
    ("curator", OPS_SERVICE, "CancelJob", "operator", common_pb2.JobRef),
    ("curator", DCA_SERVICE, "GetJob", "party-1", common_pb2.JobRef),
    ("curator", DCA_SERVICE, "SendPartialSum", "node-1", dca_pb2.PartialSum),
    ("curator", "mpdp.messages.JobOperations", "GetRelease", "operator", common_pb2.JobRef),
    ("party-1", PARTY_SERVICE, "SendSizeShare", "party-2", pk.SizeShare),
    ("party-1", PARTY_SERVICE, "StartProtocol", "curator", pk.ProtocolStart),
    ("node-1", NODE_SERVICE, "GetPartialSum", "curator", common_pb2.JobRef),
    ("node-1", NODE_SERVICE, "CloseSubmissions", "curator", dca_pb2.SubmissionsClose),
    ("node-1", NODE_SERVICE, "AbortJob", "curator", common_pb2.JobAbort),
    ("node-1", NODE_SERVICE, "ReportReceivedClients", "node-2", dca_pb2.ReceivedClients),
    ("node-1", NODE_SERVICE, "ShareVerifyKeyPiece", "node-2", dca_pb2.VerifyKeyPiece),
    ("node-1", NODE_SERVICE, "SubmitShareBatch", "operator", dca_pb2.ShareBatch),
]


@pytest.mark.parametrize("kind", list(HOSTILE_IDS))
@pytest.mark.parametrize("target,service,method,caller,request_type", BY_ID, ids=[f"{t}/{m}" for t, _, m, _, _ in BY_ID])
def test_hostile_job_ids_get_short_clean_refusals(fed, kind, target, service, method, caller, request_type):
    job_id = HOSTILE_IDS[kind]
    body = request_type(job_id=job_id).SerializeToString()
    with channel(fed, target, site_tls(fed, caller)) as ch:
        e = refused(lambda: raw_unary(ch, service, method)(body, timeout=30))
    assert e.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT), f"{e.code().name}: {(e.details() or '')[:200]!r}"
    assert_clean(e, job_id)


def test_hostile_ids_in_streams_get_short_clean_refusals(fed):
    for job_id in HOSTILE_IDS.values():
        with channel(fed, "curator", site_tls(fed, "operator")) as ch:
            watch = ch.unary_stream(f"/{OPS_SERVICE}/WatchJob", request_serializer=None, response_deserializer=None)
            e = refused(lambda: list(watch(common_pb2.JobRef(job_id=job_id).SerializeToString(), timeout=30)))
            assert e.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT), e
            assert_clean(e, job_id)
        with channel(fed, "node-1", site_tls(fed, "party-1")) as ch:
            submit = ch.stream_unary(f"/{NODE_SERVICE}/SubmitShares", request_serializer=None, response_deserializer=None)
            share = dca_pb2.ClientShare(job_id=job_id, client_id="party-1", masked_vector=bytes(24)).SerializeToString()
            try:
                receipt = dca_pb2.ShareReceipt.FromString(submit(iter([share]), timeout=30))
            except grpc.RpcError as e:
                assert e.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT), e
                assert_clean(e, job_id)
            else:  # per-client accounting: the rejection's own detail is held to the same rule
                assert receipt.accepted == 0 and receipt.rejected, receipt
                for r in receipt.rejected:
                    assert len(r.detail) <= 300 and job_id[:64] not in r.detail, r.detail[:200]


def test_attacker_sized_strings_in_specs_are_not_echoed(fed):
    """Dataset, purpose and party names of attacker size in job specs: refused INVALID_ARGUMENT, not echoed."""
    big = "d" * 20_000
    with channel(fed, "curator", site_tls(fed, "operator")) as ch:

        from .conftest import dca_spec, host_submit, learner_spec, pathak_spec

        from .conftest import job_host

        host = job_host(ch)
        e = refused(lambda: host.SubmitJob(ops.JobSubmission(pathak2010=pathak_spec(seed=b"big").__class__(**{**_fields(pathak_spec(seed=b"big")), "dataset": big})), timeout=30))
        assert_status(e, grpc.StatusCode.INVALID_ARGUMENT, big)
        e = refused(lambda: host.SubmitJob(ops.JobSubmission(pathak2010=pathak_spec(parties=["party-1", "party-2", big])), timeout=30))
        assert_status(e, grpc.StatusCode.INVALID_ARGUMENT, big)
        e = refused(lambda: host.SubmitJob(ops.JobSubmission(dca=dca_spec(purpose=big)), timeout=30))
        assert_status(e, grpc.StatusCode.INVALID_ARGUMENT, big)
        e = refused(lambda: host.SubmitJob(ops.JobSubmission(dca=dca_spec(nodes=["node-1", "node-2", big])), timeout=30))
        assert_status(e, grpc.StatusCode.INVALID_ARGUMENT, big)
        e = refused(lambda: host_submit(fed, timeout=60, lmgc=local_release_pb2.LocalModelJobSpec(
            dataset=big, model="lmgc", mode=common_pb2.CORRECTED, epsilon=1.0, parties=["party-1"], ridge=1e-3, data_norm=1.0)))
        assert_status(e, grpc.StatusCode.INVALID_ARGUMENT, big)
        e = refused(lambda: host_submit(fed, timeout=60, hamm2016=hamm2016_pb2.EnsembleJobSpec(
            dataset="synthetic", auxiliary=big, method="soft", lam=0.1, epsilon=1.0, classes=["-1", "1"], parties=["party-1", "party-2"],
            compute_nodes=["node-1", "node-2"])))
        assert_status(e, grpc.StatusCode.INVALID_ARGUMENT, big)
        e = refused(lambda: host_submit(fed, timeout=60, learner=learner_spec(dataset=big)))
        assert_status(e, grpc.StatusCode.INVALID_ARGUMENT, big)
    assert_all_serving(fed)
    assert_ledgers_within_budget(fed)


def _fields(msg) -> dict:
    return {f.name: v for f, v in msg.ListFields()}


def test_services_still_complete_jobs_after_hostile_bodies(fed):
    assert_all_serving(fed)
    dca_job(fed)
    assert_ledgers_within_budget(fed)
