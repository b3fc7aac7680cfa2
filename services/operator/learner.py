"""The operator's client of the curator's learner host (services/curator/learner.py): submit a multi-round learner
job (dp-gd, regression), watch it, fetch its model. The curator runs the rounds; this process may exit at any time."""

from __future__ import annotations

from typing import Iterator

import grpc

from mpdp.messages import common_pb2, learner_pb2 as pb, learner_pb2_grpc as pb_grpc
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.common.rpc import CHANNEL_OPTIONS


class JobFailed(RuntimeError):
    """The job ended without a release; the message names its Problem and the curator's detail."""

    def __init__(self, status: pb.LearnerStatus) -> None:
        super().__init__(f"job {status.job_id} {status.state} ({common_pb2.Problem.Name(status.problem)}): {status.detail}")
        self.status = status


class LearnerClient:
    def __init__(self, endpoints: Endpoints) -> None:
        opts = CHANNEL_OPTIONS + [("grpc.ssl_target_name_override", endpoints.curator_name)]
        self.channel = grpc.secure_channel(endpoints.curator_address, endpoints.tls.channel_credentials(), options=opts)
        self.stub = pb_grpc.LearnerCuratorStub(self.channel)

    def submit(self, spec: pb.LearnerJobSpec, timeout: float = 60) -> str:
        """The job id, at once; the curator runs the rounds."""
        return self.stub.SubmitLearner(spec, timeout=timeout).job_id

    def watch(self, job_id: str, timeout: float | None = None) -> Iterator[pb.LearnerStatus]:
        """The job's status now and after every change, until it is terminal."""
        for st in self.stub.WatchLearner(common_pb2.JobRef(job_id=job_id), timeout=timeout):
            yield st
            if st.terminal:
                return

    def wait(self, job_id: str, timeout: float | None = None) -> pb.LearnerStatus:
        last = None
        for last in self.watch(job_id, timeout):
            pass
        assert last is not None
        return last

    def model(self, job_id: str) -> pb.LearnerModel:
        return self.stub.GetLearnerModel(common_pb2.JobRef(job_id=job_id), timeout=30)

    def run(self, spec: pb.LearnerJobSpec, timeout: float | None = None) -> pb.LearnerModel:
        """Submit, wait for the end and fetch the model; :class:`JobFailed` if the job released nothing."""
        job_id = self.submit(spec)
        status = self.wait(job_id, timeout)
        if status.state != "DONE":
            raise JobFailed(status)
        return self.model(job_id)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> "LearnerClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def run_model(ep: Endpoints, spec: pb.LearnerJobSpec, what: str, failed: type[Exception]) -> pb.LearnerModel:
    """Submit ``spec`` through the curator's job host (keyed: a resend never starts a second job), wait for its end
    and return its model; ``failed`` (naming why) if nothing was released or the curator refused the job (``what``:
    the job's kind, for that message)."""
    from mpdp.messages import operations_pb2
    from mpdp_services.operator.jobs import JobEnded, run

    try:
        return run(ep, operations_pb2.JobSubmission(learner=spec))[1].learner
    except JobEnded as e:
        s = e.summary
        raise failed(f"job {s['job_id']} {s['state']} ({s['problem']}): {s['detail'] or ''}") from None
    except grpc.RpcError as e:
        raise failed(f"the curator refused the {what} job: {e.details()}") from None
