"""Hiding, asserted on transcripts (Algorithm 1, step 2; hiding claims are assertions on
transcripts): no compute node, router or the aggregator ever receives a client's unmasked contribution
u_i = enc(z_i + η_i), and only all M messages of a client together give it back."""

from __future__ import annotations

import numpy as np
import pytest

from mpdp.dca import sharing
from mpdp.dca.driver import run_job
from mpdp.math.drbg import Drbg
from mpdp.math.fixedpoint import decode_u64
from mpdp.messages import dca_pb2 as pb

from tests.dca.helpers import NODES, data, make_params


def all_bytes(msg) -> list[bytes]:
    """Every bytes field of a protobuf message, recursively."""
    out = []
    for field, value in msg.ListFields():
        if field.type == field.TYPE_BYTES:
            out += list(value) if field.is_repeated else [value]
        elif field.type == field.TYPE_MESSAGE:
            for v in value if field.is_repeated else [value]:
                out += all_bytes(v) if hasattr(v, "ListFields") else []
    return out


@pytest.mark.parametrize("seed_compressed", [False, True])
def test_no_node_sees_an_unmasked_contribution(seed_compressed):
    p = make_params(dimension=6, clients=12, max_missing=2, seed_compressed=seed_compressed)
    run = run_job(p, data(12, 6), Drbg.from_seed(f"hide-{seed_compressed}"), client_mode="machines", keep_noise=True, report_every=3)
    assert run.error is None
    pos = {c: i for i, c in enumerate(run.client_ids)}
    received: dict[str, dict[str, np.ndarray]] = {n: {} for n in NODES}
    for name, node in run.nodes.items():
        kinds = {type(m).__name__ for _, m in node.transcript}
        assert kinds <= {"ClientShare", "ReceivedClients", "SubmissionsClose", "DcaJobAnnouncement"}
        for sender, m in node.transcript:
            if not isinstance(m, pb.ClientShare):
                continue
            i = pos[m.client_id]
            assert sender.role == "party" and sender.name == m.client_id  # straight from the client, nobody in between
            if m.WhichOneof("share") == "mask_seed":
                assert node.takes_seeds and len(m.mask_seed) == 32
                vec = sharing.expand_seed(m.mask_seed, p.dimension)
            else:
                vec = sharing.unpack_u64(m.masked_vector, p.dimension)
                u = run.encoded[i]
                assert not np.any(vec == u)
                # decoding what a node holds says nothing about z_i + η_i: off by ~2^63/2^32 per coordinate
                assert np.min(np.abs(decode_u64(vec, p.frac_bits) - (run.clipped[i] + run.noise[i]))) > 1.0
            received[name][m.client_id] = vec
    # M − 1 messages never give u_i back; all M do
    for cid, i in pos.items():
        u = run.encoded[i]
        full = sharing.ring_sum(np.stack([received[n][cid] for n in NODES]))
        assert np.array_equal(full, u)
        for missing in NODES:
            part = sharing.ring_sum(np.stack([received[n][cid] for n in NODES if n != missing]))
            assert not np.any(part == u)
    # u_i's bytes appear in no message anyone but the client received
    everything = [b for node in run.nodes.values() for _, m in node.transcript for b in all_bytes(m)]
    everything += [b for _, m in run.aggregator.transcript for b in all_bytes(m)]
    for i in range(12):
        packed = sharing.pack_u64(run.encoded[i])
        assert not any(packed in b for b in everything)


def test_aggregator_sees_only_partial_sums():
    p = make_params(clients=10, max_missing=1)
    run = run_job(p, data(10, 4), Drbg.from_seed("agg"), client_mode="machines", lost={(0, 1)})
    assert run.error is None
    msgs = [m for _, m in run.aggregator.transcript]
    assert len(msgs) == p.M and all(isinstance(m, pb.PartialSum) for m in msgs)
    assert {s.name for s, _ in run.aggregator.transcript} == set(NODES)
    assert all(m.clients_included == 9 for m in msgs)  # sums over ≥ N − T clients, never one client


def test_routers_each_serve_one_node():
    """Cohort mode: router k relays only node k's messages, so no router holds two messages of one client."""
    p = make_params(clients=40, max_missing=2)
    run = run_job(p, data(40, 4), Drbg.from_seed("routers"), batch_size=9)
    assert run.error is None
    seen: dict[str, set[str]] = {}
    for router, transcript in run.router_transcripts.items():
        for _, batch in transcript:
            for cid in batch.client_ids:
                assert cid not in seen.get(router, set())
                seen.setdefault(router, set()).add(cid)
    for name, node in run.nodes.items():
        senders = {s.name for s, m in node.transcript if isinstance(m, pb.ShareBatch)}
        assert senders == {f"router-{NODES.index(name)}"}
