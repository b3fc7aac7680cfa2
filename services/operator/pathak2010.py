"""The operator's client (and Dave's) for Pathak jobs: submit jobs, watch them, fetch published models, all through
the curator's job host (JobOperations).

Reads ``endpoints.json`` (written by `mpdp federation up` or by `mpdp provision`), or
explicit addresses and TLS files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:  # gRPC and the messages load with the first client or spec, so `mpdp train --help` imports neither
    from mpdp.messages import pathak2010_pb2 as pb
    from mpdp.messages.operations_pb2 import JobSummary
    from mpdp_services.common.endpoints import Endpoints


LIST_MOST = 1000  # the most jobs one ListJobs answers (JobQuery.limit, operations.proto)
MODES = ("gaussian-distributed", "corrected", "paper")  # the first is the default (docs/experiments/pathak2010.md)


def make_spec(dataset: str, parties: list[str], epsilon: float, lam: float, mode: str, deadline: float = 0.0,
              delta: float = 0.0, colluders: int | None = None, schema_sha256: str = "") -> pb.PathakJobSpec:
    """A Pathak job; ``delta`` (0 = default 1e-6) and ``colluders`` (None = default) apply to gaussian-distributed only."""
    from mpdp.messages import common_pb2, pathak2010_pb2 as pb

    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    spec = pb.PathakJobSpec(
        dataset=dataset, epsilon=epsilon, parties=parties, mode=common_pb2.PAPER if mode == "paper" else common_pb2.CORRECTED,
        noise=pb.DISTRIBUTED_GAUSSIAN if mode == "gaussian-distributed" else pb.SMALLEST_PARTY, deadline_seconds=deadline, delta=delta,
        schema_sha256=schema_sha256,
    )
    if colluders is not None:
        spec.colluders = colluders
    setattr(spec, "lambda", lam)
    return spec


class OperatorClient:
    """A Pathak job through the curator's one job host (JobOperations): submit, watch its summary, fetch its model."""

    def __init__(self, endpoints: Endpoints) -> None:
        import grpc

        from mpdp.messages import operations_pb2_grpc
        from mpdp_services.common.channels import CHANNEL_OPTIONS

        opts = CHANNEL_OPTIONS + [("grpc.ssl_target_name_override", endpoints.curator_name)]
        self.channel = grpc.secure_channel(endpoints.curator_address, endpoints.tls.channel_credentials(), options=opts)
        self.host = operations_pb2_grpc.JobOperationsStub(self.channel)

    def submit(self, spec: pb.PathakJobSpec, timeout: float = 60) -> str:
        from mpdp.messages import operations_pb2

        return self.host.SubmitJob(operations_pb2.JobSubmission(pathak2010=spec), timeout=timeout).job_id

    def watch(self, job_id: str, timeout: float | None = None) -> Iterator[JobSummary]:
        """The job's summary now and after each change, until it ends (stage "setup", "stage1" … while it runs)."""
        from mpdp.messages import common_pb2

        yield from self.host.WatchJob(common_pb2.JobRef(job_id=job_id), timeout=timeout)

    def wait(self, job_id: str, timeout: float | None = None) -> JobSummary:
        last = None
        for st in self.watch(job_id, timeout):
            last = st
            if st.terminal:
                break
        assert last is not None
        return last

    def model(self, job_id: str) -> pb.PublishedModel:
        """The job's published model (its release); refused JOB_FAILED if it published nothing, STEP_OUT_OF_ORDER while it runs."""
        from mpdp.messages import common_pb2

        return self.host.GetRelease(common_pb2.JobRef(job_id=job_id), timeout=30).pathak2010

    def models(self) -> list[str]:
        """The ids of this operator's published Pathak models, newest first (at most the job host's list limit)."""
        from mpdp.messages import operations_pb2

        listed = self.host.ListJobs(operations_pb2.JobQuery(protocol="pathak2010", limit=LIST_MOST), timeout=30).jobs
        return [j.job_id for j in listed if j.released]

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> "OperatorClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
