"""Charlie for local DP releases (LMGC): fan a job out to the parties, publish what they release.

This module only moves messages; :class:`mpdp.local_release.LocalReleaseCurator` decides. Each party's
reply to TrainLocalModel is its ε-DP release; Charlie stores the set and the average (post-processing) in
``state_dir/local`` so a restart keeps them. A party that refuses or cannot be reached fails the whole job,
named, and nothing is published.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from mpdp import registry
from mpdp.local_release import LocalReleaseCurator, ReleaseError, validate_spec
from mpdp.messages import common_pb2, local_release_pb2 as pb
from mpdp.protocol import ProtocolError, Publish, Send
from mpdp_services.common import errors, jobs, tracing
from mpdp_services.common.rpc import PeerChannels
from mpdp_services.common.store import MessageStore
from mpdp_services.curator.admission import Admission
from mpdp_services.curator import turns
from mpdp_services.curator.links import require_linked

if TYPE_CHECKING:
    from mpdp_services.curator.hosting import CuratorSite, Hosting

log = logging.getLogger("mpdp.curator.local")

PARTY_SERVICE = "mpdp.messages.LocalModelParty"
PARTY_TIMEOUT = 600.0
TRAINING = "TRAINING"


class LocalCurator:
    """LMGC jobs at the curator: the job host's ``HostedProtocol`` of lmgc."""

    def __init__(self, state_dir: Path, channels: PeerChannels, addresses: dict[str, str], test_mode: bool, *, max_live: int = jobs.MAX_LIVE, admission: Admission | None = None) -> None:
        self.store = MessageStore(Path(state_dir) / "local", pb.LocalModelSet)
        self.jobs: jobs.JobTable[jobs.TaskJob] = jobs.JobTable("lmgc", jobs.task_outcome, max_live=max_live, admission=admission)
        self.channels = channels
        self.addresses = addresses  # shared with the Pathak curator's registry (parties register once)
        self.test_mode = test_mode
        self.tasks: jobs.TaskJobs[pb.LocalModelSet] = jobs.TaskJobs(self.jobs, self.store.folder)  # each job its own task

    async def cancel(self, job_id: str) -> bool:
        """The operator's `mpdp jobs cancel`: stop asking the parties (a queued job leaves the queue); the job ends
        CANCELLED and publishes nothing."""
        return await self.tasks.cancel(job_id)

    def submit(self, request: pb.LocalModelJobSpec) -> str:
        """Check the job, admit it and start it as the curator's own task (or queue it until it has an admission slot);
        its id at once (errors.Refused otherwise)."""
        try:
            validate_spec(request)
        except ReleaseError as e:
            raise errors.Refused(common_pb2.INVALID_JOB, str(e)) from None
        if request.simulation_seed and not self.test_mode:
            raise errors.Refused(common_pb2.INVALID_JOB, "simulation_seed is refused outside test mode")
        unknown = [p for p in request.parties if p not in self.addresses]
        if unknown:
            raise errors.Refused(common_pb2.INVALID_JOB, f"parties {', '.join(errors.shown(p) for p in unknown[:4])} are not registered with the curator")
        job_id = registry.new_job_id("lmgc")
        job = jobs.TaskJob(TRAINING)
        try:  # runs at once, or waits QUEUED for an admission slot (no party hears of it meanwhile)
            self.tasks.submit(job_id, job, PARTY_TIMEOUT + 60.0, lambda: self._traced(job_id, request), {q: self.addresses[q] for q in request.parties})
        except ProtocolError as e:
            raise errors.Refused(e.problem, e.detail) from None
        return job_id

    async def _traced(self, job_id: str, request: pb.LocalModelJobSpec) -> pb.LocalModelSet:
        with tracing.job_span(job_id, "lmgc", "curator") as span:  # the parties' spans join it (their requests carry it)
            published = await self._run(job_id, request)
            span.done("PUBLISHED")
            return published

    async def _run(self, job_id: str, request: pb.LocalModelJobSpec) -> pb.LocalModelSet:
        """Move Charlie's messages (LocalReleaseCurator decides): requests out, each party's answer in."""
        role = LocalReleaseCurator(job_id, request)
        outs: list = []
        await require_linked(self.channels, request.parties)  # a party that is down fails the job before any party spends

        async def ask(send: Send) -> None:
            party = send.to.name
            try:
                answer = await self.channels.call(self.addresses[party], party, PARTY_SERVICE, "TrainLocalModel", send.message, pb.LocalModelRelease, timeout=PARTY_TIMEOUT)
            except grpc.aio.AioRpcError as e:
                answer = f"{e.code().name}: {e.details()}"
            except Exception:
                log.error("local job %s: asking party %s raised", job_id, party, exc_info=True)
                answer = "internal error (see the curator's log)"
            if role.terminal:
                return  # the job already failed: a late answer changes nothing
            try:
                outs.extend(role.release_failed(party, answer) if isinstance(answer, str) else role.release(party, answer))
            except ProtocolError:
                pass  # the role failed closed (a second answer, a release it cannot publish): checked below

        async with turns.turn(request.parties):  # the parties of overlapping jobs decide their spends in one order
            asks = [asyncio.ensure_future(ask(s)) for s in role.ask()]
            try:
                for done in asyncio.as_completed(asks):
                    await done
                    if role.failed:  # stop at once: the other answers cannot change the outcome
                        break
            finally:
                for a in asks:
                    a.cancel()
        if role.failed:
            detail = role.error.detail if role.error is not None else f"job {job_id} published nothing"
            problem = common_pb2.BUDGET_EXCEEDED if role.error is not None and role.error.problem == common_pb2.BUDGET_EXCEEDED else common_pb2.JOB_FAILED
            log.warning("local job %s failed: %s", job_id, detail)
            raise errors.Refused(problem, detail)
        published = next(o.release for o in outs if isinstance(o, Publish))
        self.store.put(job_id, published)
        log.info("local job %s published: %d releases; %s", job_id, len(published.releases), published.aggregate_statement[:80])
        return published


# -- its place at the curator (mpdp.registry: Hooks.curator) ---------------------------------------------------------
def hosting(site: "CuratorSite", protocol: registry.Protocol) -> "Hosting":
    from mpdp_services.curator import catalog
    from mpdp_services.curator.hosting import Hosting

    curator = site.curator
    local = LocalCurator(site.state_dir, curator.channels, curator.addresses, site.cfg.test_mode, max_live=site.max_live, admission=curator.admission)
    site.on_restart(protocol.name, lambda: _recovered(local.tasks))

    async def submit(spec: pb.LocalModelJobSpec) -> str:
        return local.submit(spec)

    source = catalog.Source(protocol.name, local.jobs, lambda j: local.store.get(j) is not None,
                            lambda: [*catalog.files(local.store.folder, ".binpb", "PUBLISHED"), *local.tasks.failures()], catalog.task_live,
                            failure=local.tasks.failure)
    return Hosting(submit, local.store.get, local.cancel, source, store=local.store)


async def _recovered(tasks: jobs.TaskJobs) -> None:
    """After a restart: a job the previous process was running is FAILED (jobs.TaskJobs.recover)."""
    for job_id, _ in tasks.recover():
        log.warning("job %s: the curator restarted mid-job; marked FAILED", job_id)
