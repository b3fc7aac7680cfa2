"""Jobs belong to the operator who asked for them.

A job at the curator is owned by the certificate name (CN) of the operator whose call admitted it (the job host's
SubmitJob, or a protocol's own submit call, and the DCA jobs such a job creates). Another operator
cannot list, watch, fetch, cancel or release it: to them it does not exist, so
the gate answers ``UNKNOWN_JOB`` (NOT_FOUND), the same as for an id never issued, and list answers leave it out.
This keeps one operator from learning even that another's job exists. An operator who submits a job under an id
(a learner's ``job_id``) that names another's job is refused ``INVALID_JOB`` with the words any id it may not use
gets (:data:`mpdp_services.common.jobs.TAKEN`: no job, no owner, no state); only its own duplicate is a ``REPLAY``.
That an id is taken is all it learns; ids the curator picks are random (12 hex digits), so only an id its owner
chose can be guessed at all.

A certificate with role ``admin`` (``mpdp provision``: ``operators: [{name: …, admin: true}]``) may do whatever an
operator may, on every job. Parties and compute nodes are not operators (the job host is closed to them): what the
protocols let them fetch (a DCA job's public spec) is unchanged. A job no operator call admitted (one recovered at start-up
from a state folder of before this rule) has no owner and is the admin's alone.

Owners are kept in ``state_dir/owners.jsonl`` (one ``{"job": …, "owner": …}`` line per job, appended at admission),
so ownership survives a restart; at most :data:`MAX_OWNED` jobs are remembered (the oldest forgotten first).
"""

from __future__ import annotations

import json
import logging
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

from mpdp.messages import operations_pb2
from mpdp_services.common import calls, jobs
from mpdp_services.common.durable import PRIVATE, write_atomic
from mpdp_services.common.pki import ADMIN, OPERATOR, Identity
from mpdp_services.common.rpc import Scope

log = logging.getLogger("mpdp.curator")

MAX_OWNED = 100_000
NOT_YOURS = "no such job at this curator (or not one of yours)"


def _job_id(request: Any) -> str:
    return request.job_id


# method → the job id its request names (operator callers only)
NAMES_JOB: dict[str, Callable[[Any], str]] = {
    "/mpdp.messages.DcaCurator/GetJob": _job_id,
    **{f"/mpdp.messages.JobOperations/{m}": _job_id for m in ("GetJob", "CancelJob", "WatchJob", "GetRelease")},
}
LISTS = ("/mpdp.messages.JobOperations/ListJobs",)


class Ownership(Scope):
    """Job id → owning operator, with the gate's check and list filter (rpc.RoleInterceptor ``scope``)."""

    def __init__(self, state_dir: Path | None = None) -> None:
        self._path = Path(state_dir) / "owners.jsonl" if state_dir is not None else None
        self._owners: OrderedDict[str, str] = OrderedDict()
        self._load()

    # -- who owns what ---------------------------------------------------------------------------------
    def install(self) -> "Ownership":
        """Record the caller of every job this process admits from now on (:func:`calls.on_admit`)."""
        calls.on_admit(self.admitted)
        calls.on_may_see(self.may)
        return self

    def admitted(self, job_id: str, ident: Identity) -> None:
        if ident.role == OPERATOR and job_id not in self._owners:  # an admin's jobs stay unowned: the admin's alone
            self.claim(job_id, ident.name)

    def claim(self, job_id: str, owner: str) -> None:
        self._owners[job_id] = owner
        while len(self._owners) > MAX_OWNED:
            self._owners.popitem(last=False)
        if self._path is not None:
            try:
                fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE)
                with os.fdopen(fd, "a") as f:
                    f.write(json.dumps({"job": job_id, "owner": owner}) + "\n")
            except OSError as e:
                log.warning("job %s: its owner could not be written to %s (%s); it is kept in memory", job_id, self._path.name, e.strerror)

    def owner(self, job_id: str) -> str | None:
        return self._owners.get(job_id)

    def may(self, ident: Identity, job_id: str) -> bool:
        """An admin may touch every job; an operator only its own; other roles are not judged here."""
        if ident.role == ADMIN:
            return True
        if ident.role != OPERATOR:
            return True
        return self._owners.get(job_id) == ident.name

    # -- the gate's hooks ------------------------------------------------------------------------------
    def check(self, method: str, ident: Identity, request: Any) -> str | None:
        names = NAMES_JOB.get(method)
        if names is None or ident.role != OPERATOR:
            return None
        job_id = names(request)
        if not jobs.valid_id(job_id):
            return None  # the servicer refuses a malformed id itself
        return None if self.may(ident, job_id) else NOT_YOURS

    def filter(self, method: str, ident: Identity, response: Any) -> Any:
        if method not in LISTS or ident.role != OPERATOR:
            return response
        if isinstance(response, operations_pb2.JobList):
            return operations_pb2.JobList(jobs=[j for j in response.jobs if self.may(ident, j.job_id)])
        return response

    # -- the file --------------------------------------------------------------------------------------
    def _load(self) -> None:
        if self._path is None or not self._path.exists():
            return
        lines = 0
        for line in self._path.read_text(errors="replace").splitlines():
            lines += 1
            try:
                row = json.loads(line)
                job_id, owner = row["job"], row["owner"]
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line after a crash
            if isinstance(job_id, str) and isinstance(owner, str) and jobs.valid_id(job_id) and job_id not in self._owners:
                self._owners[job_id] = owner
        while len(self._owners) > MAX_OWNED:
            self._owners.popitem(last=False)
        if lines > 2 * MAX_OWNED or lines > len(self._owners) + 1000:  # compact
            write_atomic(self._path, "".join(json.dumps({"job": j, "owner": o}) + "\n" for j, o in self._owners.items()).encode(), PRIVATE)
