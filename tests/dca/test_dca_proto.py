"""Wire types of proto/mpdp/messages/dca.proto: one round trip per message, services complete."""

from __future__ import annotations

import numpy as np
import pytest

from mpdp.dca import sharing
from mpdp.messages import common_pb2, dca_pb2 as pb

from tests.dca.helpers import make_params

VEC = sharing.pack_u64(np.array([1, 2**63, 2**64 - 1], dtype=np.uint64))


def spec() -> pb.DcaJobSpec:
    s = make_params(dimension=3, clip_bounds=(1.0, 2.0, 3.0), roster=tuple(f"c{i}" for i in range(20)), seed_compressed=True, purpose="p").to_spec()
    s.secure_sum = True  # wire round trip only (a real secure-sum spec leaves ε, δ, Δ₂ unset)
    s.noise = pb.DISCRETE_GAUSSIAN  # likewise (a secure sum has no noise)
    s.roster_range.prefix, s.roster_range.digits = "c", 2  # likewise (a job has a roster list or a range)
    s.validate = pb.VALIDATE_L2  # likewise (a validated job has DISCRETE_GAUSSIAN noise or a secure sum)
    s.vote_classes = 3  # likewise (vote_classes belongs to VALIDATE_VOTES)
    s.colluders = 1  # likewise (colluders belongs to a validated noisy job)
    return s


MESSAGES = {
    "DcaJobSpec": spec,
    "DcaJobStatus": lambda: pb.DcaJobStatus(job_id="j", state="FAILED", nodes_reported=2, clients_included=17, problem=common_pb2.INSUFFICIENT_NOISE, detail="d", terminal=True),
    "DpSum": lambda: pb.DpSum(
        job_id="j", values=[1.5, -2.25, 0.0], encoded_sum=VEC, dimension=3, clients_expected=20, clients_included=18, max_missing=3,
        compute_nodes=3, mode=common_pb2.PAPER, epsilon=1.0, delta=1e-5, sensitivity=2.0, sigma_std=9.7, sigma_client=2.5,
        noise_variance=112.5, guarantee=common_pb2.Guarantee(mechanism="m", epsilon=1.0, delta=1e-5, sensitivity=2.0, norm="l2", statement="s"),
        fractional_bits=32, seeded=True, trust_model="t", agreed_set_digest=b"\x07" * 32, seed_compressed=True, purpose="p",
        secure_sum=True, noise=pb.DISCRETE_GAUSSIAN, rho=0.03, sigma2_units="4185040256825957888/1", validate=pb.VALIDATE_L2, clients_rejected=2,
        sigma_node=4.2, colluders=2,
    ),
    "DcaJobAnnouncement": lambda: pb.DcaJobAnnouncement(job_id="j", spec=spec(), node_addresses={"node-a": "127.0.0.1:5001", "node-b": "[::1]:5002"},
                                                        verify_key=b"\x09" * 32),
    "VerifyKeyPiece": lambda: pb.VerifyKeyPiece(job_id="j", piece=b"\x0a" * 32, spec_digest=b"\x0b" * 32),
    "JobDigest": lambda: pb.JobDigest(job_id="j", spec_digest=b"\x0b" * 32),
    "SubmissionsClose": lambda: pb.SubmissionsClose(job_id="j"),
    "ClientShare": lambda: pb.ClientShare(job_id="j", client_id="c1", masked_vector=VEC, spec_digest=b"\x0b" * 32),
    "ValidatedShare": lambda: pb.ValidatedShare(measurement=VEC, proof=VEC, share_seed=b"\x04" * 32, blind=b"\x05" * 32, joint_rand_parts=b"\x06" * 96),
    "ShareBatch": lambda: pb.ShareBatch(job_id="j", client_ids=["c1", "c2"], mask_seeds=b"\x01" * 64, client_indices=b"\x01\0\0\0",
                                      spec_digest=b"\x0b" * 32),
    "ValidatedShares": lambda: pb.ValidatedShares(measurements=VEC, proofs=VEC, share_seeds=b"\x04" * 64, blinds=b"\x05" * 64, joint_rand_parts=b"\x06" * 192),
    "ShareReceipt": lambda: pb.ShareReceipt(job_id="j", accepted=3, rejected=[pb.ShareRejection(client_id="c9", problem=common_pb2.REPLAY, detail="again")]),
    "ShareRejection": lambda: pb.ShareRejection(client_id="c9", problem=common_pb2.MALFORMED, detail="short"),
    "ReceivedClients": lambda: pb.ReceivedClients(job_id="j", sequence=4, client_ids=["a", "b"], final=True, total=9, digest=b"\x02" * 32,
                                                  index_runs=[3, 5, 100, 2], bitmap_start=8, bitmap=b"\x81", verifier_shares=b"\x08" * 16,
                                                  spec_digest=b"\x0b" * 32),
    "RosterRange": lambda: pb.RosterRange(prefix="client-", digits=6),
    "PartialSum": lambda: pb.PartialSum(job_id="j", partial_sum=VEC, clients_included=17, agreed_set_digest=b"\x03" * 32, clients_rejected=1),
    "NodeRegistration": lambda: pb.NodeRegistration(address="node-a.example.org:7300"),
    "WorkerClaim": lambda: pb.WorkerClaim(job_id="j", sender_role="operator", sender_name="router", client_ids=["c1"], client_indices=b"\x01\0\0\0",
                                          verifier_records=b"\x07" * 8),
    "WorkerClaimReply": lambda: pb.WorkerClaimReply(verdicts=b"\x00\x02", indices=b"\0" * 8, rejected=[pb.ShareRejection(client_id="c9", problem=common_pb2.REPLAY, detail="x")],
                                                    confirmed=b"\x05\0\0\0", dropped=b"\x06\0\0\0"),
    "WorkerFinish": lambda: pb.WorkerFinish(job_id="j", confirmed=b"\x05\0\0\0", drop=True),
    "WorkerSum": lambda: pb.WorkerSum(job_id="j", partial_sum=VEC, clients_summed=3),
    "WorkerHello": lambda: pb.WorkerHello(worker=1),
    "RelayedCall": lambda: pb.RelayedCall(method="ReportReceivedClients", caller_certificate=b"pem", request=b"\x0a\x01j"),
    "RelayedReply": lambda: pb.RelayedReply(response=b"r", code=7, details="PERMISSION_DENIED: no"),
}


def test_every_message_has_a_round_trip_case():
    assert set(MESSAGES) == set(pb.DESCRIPTOR.message_types_by_name)


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_round_trip(name):
    msg = MESSAGES[name]()
    fields = {f.name for f in msg.DESCRIPTOR.fields}
    set_fields = {f.name for f, _ in msg.ListFields()}
    oneofs = {f.name for o in msg.DESCRIPTOR.oneofs for f in o.fields}
    assert fields - oneofs <= set_fields, f"{name}: fill every field in the case ({fields - oneofs - set_fields} unset)"
    wire = msg.SerializeToString(deterministic=True)
    back = type(msg).FromString(wire)
    assert back == msg and back.SerializeToString(deterministic=True) == wire


def test_oneof_share_kinds():
    a = pb.ClientShare(job_id="j", client_id="c", masked_vector=VEC)
    a.mask_seed = b"\x00" * 32
    assert a.WhichOneof("share") == "mask_seed" and a.masked_vector == b""
    b = pb.ShareBatch.FromString(pb.ShareBatch(job_id="j", client_ids=["x"], masked_vectors=VEC[:8]).SerializeToString())
    assert b.WhichOneof("shares") == "masked_vectors"


def test_packed_vectors_are_little_endian_and_checked():
    assert VEC[:8] == (1).to_bytes(8, "little") and VEC[8:16] == (2**63).to_bytes(8, "little")
    m = pb.PartialSum.FromString(pb.PartialSum(partial_sum=VEC).SerializeToString())
    assert list(sharing.unpack_u64(m.partial_sum, 3)) == [1, 2**63, 2**64 - 1]
    with pytest.raises(sharing.MalformedVector):
        sharing.unpack_u64(m.partial_sum, 4)


def test_services_are_complete():
    svc = pb.DESCRIPTOR.services_by_name
    node = {m.name: m for m in svc["ComputeNode"].methods}
    assert set(node) == {"AnnounceJob", "SubmitShares", "SubmitShareBatch", "ReportReceivedClients", "ShareVerifyKeyPiece", "CloseSubmissions", "GetPartialSum",
                         "AbortJob", "GetJobDigest"}
    assert node["GetJobDigest"].input_type.name == "JobRef" and node["GetJobDigest"].output_type.name == "JobDigest"
    assert node["SubmitShares"].client_streaming and not node["SubmitShares"].server_streaming
    assert node["SubmitShares"].input_type.name == "ClientShare" and node["SubmitShares"].output_type.name == "ShareReceipt"
    assert node["SubmitShareBatch"].output_type.name == "ShareReceipt"
    curator = {m.name: m for m in svc["DcaCurator"].methods}
    # operators create, watch and fetch DP sums through the job host (JobOperations); clients and nodes fetch the announcement
    assert set(curator) == {"GetJob", "RegisterComputeNode", "SendPartialSum", "AbortJob"}
    assert curator["GetJob"].input_type.name == "JobRef" and curator["GetJob"].output_type.name == "DcaJobAnnouncement"
