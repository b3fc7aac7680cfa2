"""Named DCA errors; each carries its Problem kind, so services map it to one gRPC status.

Peer-caused problems are :class:`~mpdp.protocol.RemoteProtocolError` (see :mod:`mpdp.dca.engine`
for which of them fail a job and which only reject one submission). The two local refusals
below are named because callers branch on them.
"""

from __future__ import annotations

from mpdp.protocol import LocalProtocolError, Problem


class InvalidJob(LocalProtocolError):
    """A job specification that can never run (e.g. no encoding headroom); the message names the field and the bound."""

    def __init__(self, detail: str) -> None:
        super().__init__(Problem.INVALID_JOB, detail)


class InsufficientNoise(LocalProtocolError):
    """Fewer than N − T clients reached every node: their noise cannot reach σ²_std (Thm 1), so nothing is released."""

    def __init__(self, detail: str) -> None:
        super().__init__(Problem.INSUFFICIENT_NOISE, detail)
