"""Charlie for local DP releases (LMGC): fan a job out to the parties, publish what they release.

Each party's reply to TrainLocalModel is its ε-DP release; Charlie stores the set and the average
(post-processing) in ``state_dir/local`` so a restart keeps them. A party that refuses or cannot be
reached fails the whole job, named, and nothing is published.
"""

from __future__ import annotations

import asyncio
import logging
import secrets as pysecrets
from pathlib import Path

import grpc

from mpdp.local_release import ReleaseError, average_releases, validate_spec
from mpdp.messages import common_pb2, local_release_pb2 as pb, local_release_pb2_grpc as pb_grpc
from services.common.rpc import PeerChannels, roles_by_method
from services.common.store import MessageStore

log = logging.getLogger("mpdp.curator.local")

SERVICE = "mpdp.messages.LocalModelCurator"
PARTY_SERVICE = "mpdp.messages.LocalModelParty"
ROLES = roles_by_method(SERVICE, {"SubmitLocalJob": ("operator",), "GetLocalModels": ("operator", "party")})


class LocalCurator(pb_grpc.LocalModelCuratorServicer):
    def __init__(self, state_dir: Path, channels: PeerChannels, addresses: dict[str, str], test_mode: bool) -> None:
        self.store = MessageStore(Path(state_dir) / "local", pb.LocalModelSet)
        self.channels = channels
        self.addresses = addresses  # shared with the Pathak curator's registry (parties register once)
        self.test_mode = test_mode

    async def SubmitLocalJob(self, request: pb.LocalModelJobSpec, context) -> pb.LocalModelSet:
        try:
            validate_spec(request)
        except ReleaseError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"INVALID_JOB: {e}")
        if request.simulation_seed and not self.test_mode:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_JOB: simulation_seed is refused outside test mode")
        unknown = [p for p in request.parties if p not in self.addresses]
        if unknown:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"INVALID_JOB: parties {unknown} are not registered with the curator")
        job_id = "lm-" + pysecrets.token_hex(6)
        req = pb.LocalModelRequest(job_id=job_id, spec=request)

        async def ask(party: str) -> pb.LocalModelRelease:
            try:
                return await self.channels.call(self.addresses[party], party, PARTY_SERVICE, "TrainLocalModel", req, pb.LocalModelRelease, timeout=600)
            except grpc.aio.AioRpcError as e:
                raise RuntimeError(f"party {party}: {e.code().name}: {e.details()}") from e

        results = await asyncio.gather(*(ask(p) for p in request.parties), return_exceptions=True)
        failures = [str(r) for r in results if isinstance(r, BaseException)]
        if failures:
            log.warning("local job %s failed: %s", job_id, "; ".join(failures))
            await context.abort(grpc.StatusCode.ABORTED, f"JOB_FAILED: job {job_id} published nothing: {'; '.join(failures)}")
        releases = [r for r in results if isinstance(r, pb.LocalModelRelease)]
        if any(r.party != p or r.job_id != job_id for r, p in zip(releases, request.parties)):
            await context.abort(grpc.StatusCode.INTERNAL, "MALFORMED: a party answered for another job or party")
        avg, statement = average_releases(job_id, releases)
        published = pb.LocalModelSet(job_id=job_id, releases=releases, aggregate=avg, aggregate_statement=statement, seeded=bool(request.simulation_seed))
        self.store.put(job_id, published)
        log.info("local job %s published: %d releases; %s", job_id, len(releases), statement[:80])
        return published

    async def GetLocalModels(self, request: common_pb2.JobRef, context) -> pb.LocalModelSet:
        published = self.store.get(request.job_id)
        if published is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"UNKNOWN_JOB: no local-release job {request.job_id!r}")
        return published
