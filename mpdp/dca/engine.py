"""What the DCA role machines share on top of the one engine (:class:`mpdp.protocol.Machine`; Algorithm 1).

One message in, a list of outputs out (:class:`~mpdp.protocol.Send`, a client's :class:`~mpdp.protocol.Spend`,
:class:`~mpdp.protocol.Publish`, :class:`~mpdp.protocol.Record`, and :class:`~mpdp.protocol.Reply` — the answer to the RPC that carried the
message). The tables are in :mod:`mpdp.dca.states`; a handler ``_on_<event>`` validates everything before it
changes anything, so a rejected message leaves the machine as it was.

Failure policy: the one of :mod:`mpdp.protocol` (:func:`~mpdp.protocol.admit_sender`,
:func:`~mpdp.protocol.fails_job`), with DCA's sender kinds:

* The participants of a job are its compute nodes and the curator (:data:`PARTICIPANTS`). Clients and
  routers are senders the job takes shares from, but not participants: a problem with a client's or a
  router's message rejects that one submission, and the machine is unchanged. One client cannot kill a job.
* A message from an outsider (no sender kind of this job) or naming another job is refused (WRONG_ROLE,
  UNKNOWN_JOB) and never touches the job, its state or its transcript.
* Any other refusal of a participant's message (wrong step, replay, bad shape, a message it may not send)
  fails the job; so does a local refusal (insufficient noise, an encoding overflow).
* A FAILED machine raises its failure's Problem on every call and never emits a share or a release; failing
  emits :class:`~mpdp.messages.common_pb2.JobAbort` notices to the participants (``ProtocolError.notices``).
  A node that fails tells every participant itself, so a JobAbort received is not relayed (RELAY_ABORTS).
* The transcript holds the messages the machine took, in order.
"""

from __future__ import annotations

from typing import ClassVar

from mpdp.dca.errors import InsufficientNoise
from mpdp.messages import common_pb2
from mpdp.protocol import Machine, Peer, Problem, ProtocolError, RemoteProtocolError, Reply

__all__ = ["DcaMachine", "PARTICIPANTS", "Reply"]

PARTICIPANTS = frozenset({"node", "curator"})


class DcaMachine(Machine):
    """Base of the DCA client, compute-node and aggregator machines."""

    PARTICIPANTS: ClassVar[frozenset[str]] = PARTICIPANTS
    RELAY_ABORTS = False

    def _sender_kind(self, sender: Peer) -> str | None:
        """Which table sender kind ``sender`` is for this job (None: an outsider)."""
        raise NotImplementedError

    def _kinds(self, sender: Peer) -> frozenset[str]:
        kind = self._sender_kind(sender)
        return frozenset() if kind is None else frozenset({kind})

    def _abort_error(self, sender: Peer, abort: common_pb2.JobAbort) -> ProtocolError:
        detail = f"aborted by {sender}: {abort.detail}"
        # a refusal for lack of noise keeps its name wherever it is reported (GetRelease raises InsufficientNoise)
        if abort.problem == Problem.INSUFFICIENT_NOISE:
            return InsufficientNoise(detail)
        return RemoteProtocolError(abort.problem or Problem.JOB_FAILED, detail)
