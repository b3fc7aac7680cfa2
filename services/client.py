"""The operator's client (and Dave's): submit jobs, watch them, fetch published models.

Reads ``endpoints.json`` (written by `mpdp federation up` or by `mpdp provision`), or
explicit addresses and TLS files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import grpc

from mpdp.messages import common_pb2, pathak2010_pb2 as pb, pathak2010_pb2_grpc as pb_grpc
from services.common.rpc import CHANNEL_OPTIONS, TlsFiles


@dataclass
class Endpoints:
    curator_address: str
    curator_name: str
    tls: TlsFiles

    @classmethod
    def load(cls, path: str | Path) -> "Endpoints":
        p = Path(path)
        if p.is_dir():
            p = p / "endpoints.json"
        if not p.exists():
            raise FileNotFoundError(f"{p} not found: start a federation with `mpdp federation up` or pass --endpoints")
        d = json.loads(p.read_text())
        t = d["operator_tls"]
        here = p.resolve().parent  # relative TLS paths (as `mpdp provision` writes them) are relative to this file
        return cls(d["curator"]["address"], d["curator"]["name"], TlsFiles(*(here / t[k] for k in ("cert", "key", "ca"))))


class OperatorClient:
    def __init__(self, endpoints: Endpoints) -> None:
        opts = CHANNEL_OPTIONS + [("grpc.ssl_target_name_override", endpoints.curator_name)]
        self.channel = grpc.secure_channel(endpoints.curator_address, endpoints.tls.channel_credentials(), options=opts)
        self.curator = pb_grpc.CuratorStub(self.channel)

    def submit(self, spec: pb.PathakJobSpec, timeout: float = 60) -> str:
        return self.curator.SubmitJob(spec, timeout=timeout).job_id

    def watch(self, job_id: str, timeout: float | None = None) -> Iterator[pb.JobStatus]:
        yield from self.curator.WatchJob(common_pb2.JobRef(job_id=job_id), timeout=timeout)

    def wait(self, job_id: str, timeout: float | None = None) -> pb.JobStatus:
        last = None
        for st in self.watch(job_id, timeout):
            last = st
            if st.terminal:
                break
        assert last is not None
        return last

    def model(self, job_id: str) -> pb.PublishedModel:
        return self.curator.GetModel(common_pb2.JobRef(job_id=job_id), timeout=30)

    def models(self) -> list[str]:
        return list(self.curator.ListModels(common_pb2.Ack(), timeout=30).job_ids)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> "OperatorClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
