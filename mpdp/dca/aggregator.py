"""The aggregator of DCA — Charlie, the curator that owns the job (Heikkilä et al. 2017,
Algorithm 1, step 3: the final aggregator).

Charlie announces the job to the M compute nodes, tells them when the deadline has passed, takes the M
partial sums q_k, checks that every node summed the same agreed set A (same |A|, same digest) and that
|A| ≥ N − T, adds the q_k mod 2^64 and decodes Σ_{i∈A} (z_i + η_i). He sees nothing else: no client's
message and no node's per-client data (the transcript test in tests/dca checks it). When the check fails
nothing is released; :meth:`AggregatorMachine.dp_sum` raises the named error
(:class:`~mpdp.dca.errors.InsufficientNoise` when too few clients made it).
"""

from __future__ import annotations


import numpy as np

from mpdp.dca import mechanism, sharing, states
from mpdp.dca.engine import DcaMachine
from mpdp.dca.params import MODE_ENUM, NOISE_ENUM, VALIDATE_ENUM, DcaParams
from mpdp.math import field as F
from mpdp.math.fixedpoint import decode_u64
from mpdp.messages import common_pb2, dca_pb2 as pb
from mpdp.protocol import CURATOR, Output, Peer, Problem, ProtocolError, Publish, RemoteProtocolError, Send, require


class AggregatorMachine(DcaMachine):
    """Charlie for one job. States: MUST_ANNOUNCE → AWAIT_PARTIAL_SUMS → RELEASED (or FAILED)."""

    ROLE = states.AGGREGATOR
    STATES = states.AGGREGATOR_STATES
    TERMINAL = ("RELEASED", states.FAILED)
    TABLE = states.AGGREGATOR_TABLE

    def __init__(
        self,
        params: DcaParams,
        *,
        node_addresses: dict[str, str] | None = None,
        record: bool = True,
    ) -> None:
        super().__init__(params.job_id, CURATOR, record=record)
        self.params = params
        self.spec = params.to_spec()
        self.node_addresses = dict(node_addresses or {n: "" for n in params.nodes})
        self._sums: dict[int, pb.PartialSum] = {}
        self._closed = False
        self._release: pb.DpSum | None = None

    # -- public ----------------------------------------------------------------------------------------
    def announcement(self, *, for_nodes: bool = False) -> pb.DcaJobAnnouncement:
        """What clients fetch with GetJob, and what the nodes get at start (``for_nodes``: the same message; a validated
        job's verify key is the nodes' own, never the curator's: :meth:`ComputeNodeMachine.start`)."""
        return pb.DcaJobAnnouncement(job_id=self.job_id, spec=self.spec, node_addresses=self.node_addresses)

    def announce(self) -> list[Output]:
        """Setup: send the job to every compute node."""
        return self._local("announce")

    def close_submissions(self) -> list[Output]:
        """The deadline passed: tell every node to close its received set (idempotent)."""
        return self._local("close")

    def dp_sum(self) -> pb.DpSum:
        """The release (GetRelease); raises the job's error (e.g. InsufficientNoise) if it failed."""
        if self._release is not None:
            return self._release
        if self.error is not None:
            raise self.error
        raise RemoteProtocolError(Problem.STEP_OUT_OF_ORDER, f"job {self.job_id} is not released yet (state {self.state})")

    def status(self) -> pb.DcaJobStatus:
        st = pb.DcaJobStatus(job_id=self.job_id, state=self.state, nodes_reported=len(self._sums), terminal=self.terminal)
        if self._release is not None:  # the partial sums are dropped once added up: count them from the release
            st.clients_included = self._release.clients_included
            st.nodes_reported = self._release.compute_nodes
        if self.error is not None:
            st.problem, st.detail = self.error.problem, self.error.detail
        return st

    # -- engine hooks ------------------------------------------------------------------------------------
    def _sender_kind(self, sender: Peer) -> str | None:
        return "node" if sender.role == "compute_node" and sender.name in self.params.nodes else None

    def _abort_notices(self, e: ProtocolError) -> list[Output]:
        return self._abort(e, [Peer("compute_node", n) for n in self.params.nodes])

    def _joint_event(self) -> str | None:
        if self.state == "AWAIT_PARTIAL_SUMS" and len(self._sums) == self.params.M:
            return "release"
        return None

    def _release_memory(self) -> None:
        self._sums.clear()

    # -- handlers ------------------------------------------------------------------------------------------
    def _on_announce(self) -> list[Output]:
        ann = self.announcement(for_nodes=True)
        return [Send(Peer("compute_node", n), ann) for n in self.params.nodes]

    def _on_close(self) -> list[Output]:
        if self._closed:
            return []
        self._closed = True
        msg = pb.SubmissionsClose(job_id=self.job_id)
        return [Send(Peer("compute_node", n), msg) for n in self.params.nodes if self.params.nodes.index(n) not in self._sums]

    def _on_PartialSum(self, sender: Peer, msg: pb.PartialSum) -> list[Output]:
        k = self.params.nodes.index(sender.name)
        if k in self._sums:
            if self._sums[k] == msg:
                return []  # the same q_k again (pushed by the node and pulled after a curator restart): nothing new
            raise RemoteProtocolError(Problem.REPLAY, f"{sender} already sent another partial sum")
        d = self.params.dimension
        require(len(msg.partial_sum) == 8 * d, Problem.MALFORMED, f"q_k must be 8·d = {8 * d} bytes, got {len(msg.partial_sum)}")
        require(len(msg.agreed_set_digest) == 32, Problem.MALFORMED, "the agreed-set digest must be 32 bytes")
        require(msg.clients_included <= self.params.clients, Problem.MALFORMED, f"{sender} claims {msg.clients_included} > N = {self.params.clients} clients")
        self._sums[k] = msg
        return []

    def _on_release(self) -> list[Output]:
        """Step 4: check agreement and noise, Σ_k q_k mod 2^64, decode."""
        prm = self.params
        first = self._sums[0]
        for k, s in self._sums.items():
            if s.clients_included != first.clients_included or s.agreed_set_digest != first.agreed_set_digest or s.clients_rejected != first.clients_rejected:
                raise RemoteProtocolError(
                    Problem.JOB_FAILED,
                    f"compute nodes disagree on the agreed set: {prm.nodes[0]} has {first.clients_included} clients, "
                    f"{prm.nodes[k]} has {s.clients_included} (or a different digest); nothing is released",
                )
        included = first.clients_included
        mechanism.require_enough_clients(included, prm.clients, prm.max_missing)
        parts = np.stack([sharing.unpack_u64(self._sums[k].partial_sum, prm.dimension) for k in range(prm.M)])
        if prm.validation is not None:  # Σ_k q_k mod p, lifted to (−p/2, p/2), as int64 two's complement in Z_(2^64)
            total = F.to_signed(F.sum(F.canon(parts), axis=0)).view(np.uint64)
        else:
            total = sharing.ring_sum(parts)
        check_window(prm, total)
        g = prm.guarantee
        release = pb.DpSum(
            job_id=self.job_id,
            values=decode_u64(total, prm.frac_bits).tolist(),
            encoded_sum=sharing.pack_u64(total),
            dimension=prm.dimension,
            clients_expected=prm.clients,
            clients_included=included,
            max_missing=prm.max_missing,
            compute_nodes=prm.M,
            mode=MODE_ENUM[prm.mode],
            epsilon=prm.epsilon,
            delta=prm.delta,
            sensitivity=prm.sensitivity,
            sigma_std=prm.sigma_std,
            sigma_client=prm.sigma_client,
            noise_variance=prm.noise_variance(included),
            guarantee=common_pb2.Guarantee(**g.as_dict()),
            fractional_bits=prm.frac_bits,
            seeded=prm.seeded,
            trust_model=prm.trust_model,
            agreed_set_digest=first.agreed_set_digest,
            seed_compressed=prm.seed_compressed,
            purpose=prm.purpose,
            secure_sum=prm.secure_sum,
            noise=NOISE_ENUM[prm.noise],
            rho=prm.rho,
            sigma2_units=f"{prm.discrete.sigma2.numerator}/{prm.discrete.sigma2.denominator}" if prm.discrete is not None else "",
            validate=VALIDATE_ENUM[prm.validate],
            clients_rejected=first.clients_rejected,
            sigma_node=prm.sigma_node,
            colluders=prm.colluders or 0,
        )
        self._release = release
        self._sums.clear()
        return [Publish(release)]


def check_window(params: DcaParams, total: np.ndarray) -> None:
    """Wrap-around is never silent (`discrete-gaussian` mode, :mod:`mpdp.dca.discrete`): every coordinate of a valid
    sum satisfies |S_j| ≤ B (the job's window) except with probability 2^-96; a sum outside it wrapped in Z_2^64 or
    a node deviated, and nothing is released. (The Gaussian mode's headroom check bounds its sum at creation.)
    A validated job's window is N·max |ỹ_j| (proven for every accepted contribution) plus the tail of the M nodes' noise
    (exceeded with probability ≤ 2^-96, in δ): a sum outside it comes from a deviating node, or that rare draw."""
    if params.validation is not None:
        window = params.validation.window
    elif params.discrete is not None:
        window = params.discrete.window
    else:
        return
    signed = np.asarray(total, dtype=np.uint64).view(np.int64)
    b = np.int64(window)  # < 2^62 (checked at creation)
    if np.any((signed > b) | (signed < -b)):
        raise RemoteProtocolError(
            Problem.JOB_FAILED,
            "the sum left its window |S_j| ≤ B: it wrapped around Z_2^64 (or a compute node deviated); nothing is released",
        )
