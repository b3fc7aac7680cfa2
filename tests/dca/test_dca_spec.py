"""The spec digest (mpdp.dca.spec): one name for a DCA job's whole spec, bound into every share, proof and report."""

from __future__ import annotations

import copy
import dataclasses
import os

import numpy as np
import pytest

from mpdp.dca import spec, validation
from mpdp.dca.client import ClientMachine
from mpdp.dca.compute_node import ComputeNodeMachine
from mpdp.dca.params import DcaParams
from mpdp.math.drbg import Drbg
from mpdp.messages import dca_pb2 as pb
from mpdp.protocol import Peer, Problem, ProtocolError, Send

NODES = ("n0", "n1", "n2")
D, N = 3, 6


def _validated(**kw) -> DcaParams:
    base = dict(job_id="spec-1", dimension=D, clients=N, max_missing=1, nodes=NODES, epsilon=1.0, delta=1e-5, sensitivity=2.0, frac_bits=16,
                noise="discrete-gaussian", validate="range", simulation_seed=b"spec")
    return DcaParams(**{**base, **kw})


# Another value for every field of DcaParams that a spec sets (its init fields). The digest must change with each.
OTHER = {
    "job_id": "spec-2", "dimension": D + 1, "clients": N + 1, "max_missing": 3, "epsilon": 1.5, "delta": 2e-5, "sensitivity": 1.0,
    "nodes": ("n1", "n0", "n2"), "mode": "paper", "frac_bits": 17, "clip_bounds": (0.5,), "seed_compressed": True, "deadline_seconds": 601.0,
    "simulation_seed": b"other", "roster": tuple(f"c{i}" for i in range(N)), "purpose": "another purpose", "secure_sum": True, "noise": "gaussian",
    "roster_range": ("c", 2), "validate": "l2", "vote_classes": 2, "colluders": 0,
}


def test_every_field_of_the_spec_changes_the_digest():
    base = _validated()
    fields = {f.name for f in dataclasses.fields(DcaParams) if f.init}
    assert set(OTHER) == fields, "a new DcaParams field needs a value here: is it part of the spec digest?"
    seen = {base.spec_digest}
    for name, value in OTHER.items():
        changed = copy.copy(base)
        object.__setattr__(changed, name, value)  # one field only (such a set may not be a valid job: the encoding is what is tested)
        digest = spec.spec_digest(changed)
        assert digest not in seen, name
        seen.add(digest)
    assert len(base.spec_digest) == spec.DIGEST_BYTES


def test_the_digest_is_of_the_spec_after_defaults_and_the_same_for_every_role():
    p = _validated()
    assert DcaParams.from_spec(p.job_id, p.to_spec()).spec_digest == p.spec_digest
    wire = p.to_spec()
    wire.fractional_bits, wire.deadline_seconds = 16, 0.0  # 0: the default 600
    assert DcaParams.from_spec(p.job_id, wire).spec_digest == _validated(deadline_seconds=600.0).spec_digest
    assert _validated(max_missing=3).spec_digest != p.spec_digest  # the equivocation: T = 1 shown, T = 3 announced
    assert p.validation is not None and p.validation.spec_digest == p.spec_digest  # the plan's proofs are bound to it


def test_the_binder_and_the_verify_key_include_the_digest():
    a, b = os.urandom(32), os.urandom(32)
    assert validation.binder("j", "c", a) != validation.binder("j", "c", b)
    assert validation.binders("j", ["c", "d"], a) == [validation.binder("j", "c", a), validation.binder("j", "d", a)]
    pieces = [os.urandom(32) for _ in range(3)]
    assert validation.verify_key("j", pieces, a) != validation.verify_key("j", pieces, b)
    with pytest.raises(ValueError):
        validation.binder("j", "c", b"")  # a proof bound to no spec is refused


def test_a_proof_for_another_spec_with_the_same_circuit_is_rejected():
    """Two specs differing in their purpose only have the same circuit; a proof made for one fails at nodes holding the
    other (the binder differs: joint randomness and query randomness), though every share is well formed."""
    mine, theirs = _validated(purpose="shown to the clients"), _validated(purpose="announced to the nodes")
    p1, p2 = mine.validation, theirs.validation
    assert p1 is not None and p2 is not None and dataclasses.replace(p1, spec_digest=b"") == dataclasses.replace(p2, spec_digest=b"")
    meas = validation.encode_input(p1, np.zeros(D, dtype=np.int64))
    shares = validation.client_shares(p1, mine.job_id, "c0", meas, 3, seeded=False)
    key = os.urandom(32)

    def records(plan):
        return [validation.check_share(plan, shares[k], job_id=mine.job_id, client_id="c0", k=k, nodes=3, seeded=False, verify_key=key)[1]
                for k in range(3)]

    assert validation.decide(p1, records(p1))
    assert not validation.decide(p2, records(p2))


def _keyed(params: DcaParams) -> list[ComputeNodeMachine]:
    nodes = [ComputeNodeMachine(params, n) for n in NODES]
    sent = {m.me: m.start() for m in nodes}
    by = {m.me: m for m in nodes}
    for src, outs in sent.items():
        for o in outs:
            by[o.to].receive(src, o.message)
    assert all(m.key_ready for m in nodes)
    return nodes


@pytest.mark.parametrize("validated", [True, False], ids=["validated", "unvalidated"])
def test_a_node_refuses_what_is_bound_to_another_spec_without_touching_the_job(validated):
    kw = {} if validated else {"validate": "none", "noise": "gaussian"}
    announced, shown = _validated(max_missing=3, **kw), _validated(max_missing=1, **kw)
    nodes = _keyed(announced) if validated else [ComputeNodeMachine(announced, n) for n in NODES]
    node = nodes[0]
    out = ClientMachine(shown, "c0", np.full(D, 0.25), Drbg.from_seed("c0")).submit()
    share = next(o.message for o in out if isinstance(o, Send) and o.to.name == "n0")
    assert share.spec_digest == shown.spec_digest
    with pytest.raises(ProtocolError) as e:
        node.receive(Peer("party", "c0"), share)
    assert e.value.problem == Problem.INVALID_JOB and node.received == 0 and not node.failed
    _, rejected = node.receive_shares(Peer("operator", "router"), [share])  # the batched path too
    assert [r.problem for _, r in rejected] == [Problem.INVALID_JOB] and node.received == 0
    report = pb.ReceivedClients(job_id=announced.job_id, spec_digest=shown.spec_digest, sequence=0, client_ids=["c1"])
    with pytest.raises(ProtocolError) as e:  # a node announced the other spec: refused, the job not failed
        node.receive(Peer("compute_node", "n1"), report)
    assert e.value.problem == Problem.INVALID_JOB and not node.failed
    if validated:
        piece = pb.VerifyKeyPiece(job_id=announced.job_id, spec_digest=shown.spec_digest, piece=bytes(32))
        with pytest.raises(ProtocolError) as e:
            node.receive(Peer("compute_node", "n1"), piece)
        assert e.value.problem == Problem.INVALID_JOB and not node.failed
    # the same client's share bound to the announced spec is taken: nothing of the refused ones was kept
    good = next(o.message for o in ClientMachine(announced, "c0", np.full(D, 0.25), Drbg.from_seed("c0")).submit()
                if isinstance(o, Send) and o.to.name == "n0")
    node.receive(Peer("party", "c0"), good)
    assert node.received == 1


def test_confirm_names_the_first_node_that_holds_another_spec_or_did_not_answer():
    p = _validated()
    spec.confirm(p, {n: p.spec_digest for n in NODES})
    with pytest.raises(spec.SpecMismatch) as e:
        spec.confirm(p, {"n0": p.spec_digest, "n1": bytes(32), "n2": p.spec_digest})
    assert e.value.node == "n1" and "n1" in e.value.detail and e.value.problem == Problem.INVALID_JOB
    with pytest.raises(spec.SpecMismatch) as e:
        spec.confirm(p, {"n0": p.spec_digest, "n1": p.spec_digest})
    assert e.value.node == "n2"
