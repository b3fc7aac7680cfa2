"""Published messages on disk, one file per job id, so a restart keeps them (durable, atomic, 0600 writes)."""

from __future__ import annotations

from pathlib import Path
from typing import Generic, TypeVar

from mpdp_services.common.durable import PRIVATE, write_atomic

M = TypeVar("M")

MAX_JOB_ID = 128  # far below a file name's 255 bytes once the store's prefixes and suffixes are added


class MessageStore(Generic[M]):
    """``folder/<job_id>.binpb`` holding one protobuf message of ``message_type`` per job.

    Files are 0600: the curator alone reads them and hands releases out over its authenticated RPCs.
    """

    def __init__(self, folder: Path, message_type: type[M]) -> None:
        self.folder = Path(folder)
        self.message_type = message_type
        self.folder.mkdir(parents=True, exist_ok=True)

    def put(self, job_id: str, message: M) -> None:
        if not safe_job_id(job_id):
            raise ValueError("this job id cannot name a file")
        write_atomic(self.folder / f"{job_id}.binpb", message.SerializeToString(), PRIVATE)  # type: ignore[attr-defined]

    def get(self, job_id: str) -> M | None:
        if not safe_job_id(job_id):
            return None
        p = self.folder / f"{job_id}.binpb"
        return self.message_type.FromString(p.read_bytes()) if p.exists() else None  # type: ignore[attr-defined]

    def list(self) -> list[str]:
        return sorted(p.stem for p in self.folder.glob("*.binpb"))


def safe_job_id(job_id: str) -> bool:
    """A job id that is a plain, short file name (no path separator or NUL, not hidden, not empty)."""
    return (
        bool(job_id)
        and len(job_id) <= MAX_JOB_ID
        and "/" not in job_id
        and "\\" not in job_id
        and "\0" not in job_id
        and not job_id.startswith(".")
    )
