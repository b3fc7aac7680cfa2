"""Logging of a role process: plain text for a terminal (the default) or one JSON object per line.

JSON lines carry ``time`` (UTC, ISO 8601), ``level``, ``role``, ``site``, ``logger``, ``event`` (the message) and,
when the line is about a job, ``job_id``, ``protocol`` and ``stage``. Those come from the job context that the
job runtime sets around every step of a job (:func:`in_job`, used by services/common/runtime.py), or from a
log call's ``extra={"job_id": ...}``. Log lines never carry private values; the JSON form adds no field the text
form does not already show.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
from typing import Any

FORMATS = ("text", "json")
JOB: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("mpdp_job", default=None)
_JOB_FIELDS = ("job_id", "protocol", "stage")


def in_job(job_id: str, protocol: str, stage: str) -> None:
    """Mark the current task as working on this job (log lines it emits name the job)."""
    JOB.set({"job_id": job_id, "protocol": protocol, "stage": stage})


class JsonFormatter(logging.Formatter):
    def __init__(self, role: str, site: str) -> None:
        super().__init__()
        self.role, self.site = role, site

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "role": self.role,
            "site": self.site,
            "logger": record.name,
            "event": record.getMessage(),
        }
        job = JOB.get() or {}
        for key in _JOB_FIELDS:
            value = getattr(record, key, None) or job.get(key)
            if value:
                out[key] = str(value)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def setup(log_format: str, verbose: bool, role: str, site: str) -> None:
    """Configure the root logger of this role process (stderr)."""
    if log_format not in FORMATS:
        raise ValueError(f"log format must be one of {FORMATS}, got {log_format!r}")
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter(role, site))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO if verbose else logging.WARNING)
