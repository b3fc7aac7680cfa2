"""The party as a DCA client (regression contributions): computes a statistic of its own records and submits
it with its noise slice to the job's compute nodes, having spent the job's true (ε, δ) first."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import grpc

from mpdp.data.loaders import DatasetError, load
from mpdp.dca.params import DcaParams
from mpdp.ledger import BudgetExceeded, LedgerError
from mpdp.messages import common_pb2, contribution_pb2, contribution_pb2_grpc
from mpdp.regression.statistics import party_statistics
from services.common.endpoints import Endpoints
from services.common import errors
from services.common.errors import shown
from services.common.rpc import caller, roles_by_method
from services.dca_client.client import fetch_job, submit_vector

if TYPE_CHECKING:
    from services.party.server import Party

log = logging.getLogger("mpdp.party")
Problem = common_pb2.Problem

SERVICE = "mpdp.messages.ContributionParty"
ROLES = roles_by_method(SERVICE, {"Contribute": ("curator",)})
STATISTICS = {"linreg/std": "std", "linreg/main": "main"}
PROTOCOL = "dca"


class ContributingParty(contribution_pb2_grpc.ContributionPartyServicer):
    """The party as a DCA client: computes a statistic of its own records and submits it with its noise slice."""

    def __init__(self, party: "Party") -> None:
        self.party = party

    async def Contribute(self, request: contribution_pb2.StatisticRequest, context) -> contribution_pb2.ContributionReceipt:
        party = self.party
        await party.ready(context)
        cfg = party.cfg
        if caller(context).name != cfg.curator.name:
            await errors.refuse(context, Problem.WRONG_ROLE, f"only the curator of party {cfg.name} may ask for contributions")
        round_name = STATISTICS.get(request.statistic)
        if round_name is None:
            await errors.refuse(context, Problem.MALFORMED, f"unknown statistic {shown(request.statistic)}; use one of {sorted(STATISTICS)}")
        async with party.claimed(context, PROTOCOL, request.dca_job_id):
            return await self._contribute(party, request, round_name, context)

    async def _contribute(self, party: "Party", request: contribution_pb2.StatisticRequest, round_name: str, context) -> contribution_pb2.ContributionReceipt:
        cfg = party.cfg
        job = shown(request.dca_job_id)
        ds = cfg.datasets.get(request.dataset)
        if ds is None:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name} has no dataset {shown(request.dataset)} (configured: {sorted(cfg.datasets)})")
        tls = cfg.tls.files()
        endpoints = Endpoints(cfg.curator.address, cfg.curator.name, tls)
        try:
            ann = await fetch_job(cfg.curator.address, cfg.curator.name, tls, request.dca_job_id)
            params = DcaParams.from_spec(request.dca_job_id, ann.spec)
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                await errors.refuse(context, Problem.UNKNOWN_JOB, f"party {cfg.name}: the curator has no DCA job {job}")
            await errors.refuse(context, Problem.PEER_UNREACHABLE, f"party {cfg.name} could not fetch DCA job {job} from its curator ({e.code().name})")
        except ValueError as e:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name}: DCA job {job}: {e}")
        if params.seeded and not cfg.test_mode:
            await errors.refuse(context, Problem.INVALID_JOB, "simulation_seed is refused outside test mode")
        if params.secure_sum:  # a noise-free sum would carry the raw statistic: only DP sums take contributions
            await errors.refuse(context, Problem.INVALID_JOB, f"DCA job {job} adds no noise; statistics are contributed to DP sums only")
        charge = params.ledger_entry()
        await party.precheck(context, charge["epsilon"], charge["delta"])

        def compute():
            X, y = load(ds.path, ds.format, ds.n_features, ds.label_column)
            if len(y) > max(1, request.records_per_client):
                raise ValueError(f"{len(y)} rows exceed the job's public bound of {request.records_per_client} records per party")
            return party_statistics(X, y, round_name, tuple(request.bounds))

        try:
            z = await asyncio.to_thread(compute)
        except DatasetError as e:
            log.error("DCA job %s: dataset %s: %s", job, request.dataset, e)
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name} cannot read its dataset {shown(request.dataset)}; see its log")
        except ValueError as e:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name}: {e}")
        try:  # spends the job's true (ε, δ) in the ledger before any share leaves; a failed submission keeps it
            report = await submit_vector(endpoints, tls, cfg.name, request.dca_job_id, z, ledger=party.ledger, announcement=ann)
        except BudgetExceeded as e:
            await errors.refuse(context, Problem.BUDGET_EXCEEDED, f"party {cfg.name}: {e}")
        except (LedgerError, OSError) as e:
            await party.ledger_broken(context, e)
        except grpc.aio.AioRpcError as e:
            await errors.refuse(context, Problem.PEER_UNREACHABLE, f"party {cfg.name} could not submit its shares ({e.code().name})")
        if report.rejected:
            await errors.refuse(context, Problem.JOB_FAILED, f"party {cfg.name}'s shares were refused ({errors.problem_name(report.rejected[0].problem)})")
        return contribution_pb2.ContributionReceipt(party=cfg.name, accepted_shares=report.accepted)
