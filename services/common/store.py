"""Published messages on disk, one file per job id, so a restart keeps them (atomic writes)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Generic, TypeVar

M = TypeVar("M")


class MessageStore(Generic[M]):
    """``folder/<job_id>.binpb`` holding one protobuf message of ``message_type`` per job."""

    def __init__(self, folder: Path, message_type: type[M]) -> None:
        self.folder = Path(folder)
        self.message_type = message_type
        self.folder.mkdir(parents=True, exist_ok=True)

    def put(self, job_id: str, message: M) -> None:
        if not safe_job_id(job_id):
            raise ValueError(f"job id {job_id!r} cannot name a file")
        tmp = self.folder / f".{job_id}.tmp"
        tmp.write_bytes(message.SerializeToString())  # type: ignore[attr-defined]
        os.replace(tmp, self.folder / f"{job_id}.binpb")

    def get(self, job_id: str) -> M | None:
        if not safe_job_id(job_id):
            return None
        p = self.folder / f"{job_id}.binpb"
        return self.message_type.FromString(p.read_bytes()) if p.exists() else None  # type: ignore[attr-defined]

    def list(self) -> list[str]:
        return sorted(p.stem for p in self.folder.glob("*.binpb"))


def safe_job_id(job_id: str) -> bool:
    """A job id that is a plain file name (no path separator, not hidden, not empty)."""
    return bool(job_id) and "/" not in job_id and "\\" not in job_id and not job_id.startswith(".")
