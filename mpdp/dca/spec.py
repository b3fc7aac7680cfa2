"""The spec digest of a DCA job: one 32-byte name for the whole job specification (ours; docs/protocols/dca.md,
"One spec everywhere").

The curator announces a job to the compute nodes (AnnounceJob) and to the clients (GetJob) separately. A curator
that showed the clients one spec (say T = 1) and the nodes another (T = 3, with ε and Δ₂ chosen so that a validated
job's circuit is bit-identical) would have the nodes release a sum under-noised for what every client spent. So:

* :func:`spec_digest` hashes the job id and every field of the job's :class:`~mpdp.dca.params.DcaParams` (every
  field of its DcaJobSpec after defaults: d, N, T, ε, δ, Δ₂, mode, f, clip bounds, the M compute nodes in order,
  seed compression, deadline, simulation seed, roster, purpose, secure sum, noise kind, roster range, validation,
  vote classes) in a canonical encoding: SHA-256 over a domain-separation tag, then each field as its name and a
  typed, length-prefixed value, in declaration order. Two parameter sets have the same digest only if every
  field is equal (or SHA-256 collides).
* Every share (ClientShare, ShareBatch), verify-key piece and received-set report carries its sender's digest; a
  node refuses one whose digest is not that of the spec it was announced (INVALID_JOB) without touching the job.
  A validated job's proofs are bound to it too (:func:`mpdp.dca.validation.binder`, :func:`~mpdp.dca.validation.verify_key`).
* Before it spends, a client asks every compute node for the digest of the job it was announced (GetJobDigest) and
  refuses the job, naming the node, unless each equals the digest of the spec it checked itself (:func:`confirm`).

Node addresses are not part of the spec: a client dials each node at the address the curator gives but checks the
node's certificate name against the node named in the spec, so a wrong address reaches no other node.
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from mpdp.dca.errors import InvalidJob

if TYPE_CHECKING:
    from mpdp.dca.params import DcaParams

DIGEST_BYTES = 32
_DST = b"mpdp/dca/spec-digest/v1"


class SpecMismatch(InvalidJob):
    """A compute node was announced another spec than the one this client checked (Problem INVALID_JOB)."""

    def __init__(self, node: str, detail: str) -> None:
        super().__init__(detail)
        self.node = node


def _value(v: Any) -> bytes:
    """One value, typed and length-prefixed (so no two different values of the fields below encode alike). A field's
    type is fixed by DcaParams, so an integer given as a numpy integer encodes as the same int, a list as a tuple."""
    if v is None:
        return b"n"
    if isinstance(v, (bool, np.bool_)):
        return b"b" + (b"\x01" if v else b"\x00")
    if isinstance(v, (int, np.integer)):
        return b"i" + int(v).to_bytes(16, "big", signed=True)
    if isinstance(v, (float, np.floating)):
        return b"f" + struct.pack(">d", float(v))
    if isinstance(v, str):
        raw = v.encode("utf-8", "surrogatepass")
        return b"s" + len(raw).to_bytes(4, "big") + raw
    if isinstance(v, (bytes, bytearray)):
        return b"y" + len(v).to_bytes(4, "big") + bytes(v)
    if isinstance(v, (tuple, list)):
        return b"t" + len(v).to_bytes(4, "big") + b"".join(_value(x) for x in v)
    raise InvalidJob(f"a spec field of type {type(v).__name__} has no canonical encoding")


def canonical(params: "DcaParams") -> bytes:
    """The canonical encoding of every init field of ``params`` (the whole spec, after defaults), in declaration order."""
    out = [_DST]
    for f in dataclasses.fields(params):
        if not f.init:
            continue  # derived (σ, the guarantee, the validation plan): a function of the fields encoded here
        out.append(_value(f.name) + _value(getattr(params, f.name)))
    return b"".join(out)


def spec_digest(params: "DcaParams") -> bytes:
    """SHA-256 of :func:`canonical`: the 32-byte spec digest of a DCA job."""
    return hashlib.sha256(canonical(params)).digest()


def confirm(params: "DcaParams", answers: Mapping[str, bytes]) -> None:
    """The digests the M compute nodes said they were announced (``answers``: node name → digest) are each the
    digest of ``params``, the spec this client checked. Raises :class:`SpecMismatch` naming the first node (in node
    order) that did not answer or answered another digest."""
    for node in params.nodes:
        got = answers.get(node)
        if got is None:
            raise SpecMismatch(node, f"compute node {node} did not confirm the spec digest of job {params.job_id}")
        if got != params.spec_digest:
            raise SpecMismatch(node, f"compute node {node} was announced another spec of job {params.job_id} than this client checked "
                                     "(spec digests differ); nothing was spent or sent")
