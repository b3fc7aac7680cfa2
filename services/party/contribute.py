"""The party's one "contribute to a DCA job" step, for every protocol that sums through the DCA: regression's
statistics, dp-gd rounds, ensemble votes and contribution rounds.

:func:`contribute` carries out :class:`mpdp.contribution.Contributor`: fetch the DCA job as the curator announces
it, hold it to the round the party accepted (roster, N, compute nodes, noise, seeding, the protocol's own check),
precheck the charge, compute the vector off the event loop, connect to every compute node and have each confirm it was
announced the spec the party checked (GetJobDigest; refused INVALID_JOB naming the node otherwise, nothing spent),
spend the charge durably, then send the shares. A submission that fails once a share may have left keeps every entry
of the charge, marked failed; one that fails after the spend but before any share was handed to the network (a
cancelled call, a node lost in between) voids the entries it created (Party.settle_unsent; docs/protocols/accounting.md).
Every refusal goes through the party's RPC ``context`` (the one error table) and names only the job's public parameters.

The vector's computation is padded (:class:`~mpdp_services.party.local_work.LocalWork`): its deadline is fixed before
``compute`` reads the records, and neither the shares nor a refusal that read them (:func:`computed`'s
:class:`~mpdp_services.common.errors.Refused`) leaves before ``local_work_seconds`` from then, so the time the curator
and the compute nodes see does not grow with the party's row count (docs/protocols/job-model.md §9).

:func:`dataset_for` and :func:`computed` are the steps around it that read the party's own data.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Awaitable, Callable

import grpc
import numpy as np

from mpdp import limits
from mpdp.contribution import AcceptedRound, Contributor, check_agreed_bound
from mpdp.data.dataset import DoesNotFit, SchemaMismatch, require_schema
from mpdp.data.loaders import DatasetError
from mpdp.dca.params import DcaParams
from mpdp.dca.spec import SpecMismatch
from mpdp.ledger import FAILED, LedgerError
from mpdp.math.drbg import Drbg
from mpdp.messages import common_pb2, contribution_pb2, dca_pb2
from mpdp.protocol import ProtocolError
from mpdp_services.common import errors
from mpdp_services.common.errors import shown
from mpdp_services.dca_client.client import Handoff, NodesUnreachable, SubmitReport, carry_out
from mpdp_services.party.local_work import LocalWork

if TYPE_CHECKING:
    from mpdp_services.common.config import DatasetConfig
    from mpdp_services.party.server import Party

log = logging.getLogger("mpdp.party")
DCA_CURATOR_SERVICE = dca_pb2.DESCRIPTOR.services_by_name["DcaCurator"].full_name
FETCH_SECONDS = 60.0  # the job's announcement from the curator (as fetch_job)
Problem = common_pb2.Problem


async def contribute(party: "Party", context, accepted: AcceptedRound, compute: Callable[[DcaParams], Awaitable[np.ndarray]], *,
                     what: str = "shares") -> SubmitReport:
    """Contribute ``compute(params)`` to the DCA job of ``accepted``, spending the round's charge first; ``what``
    names the shares in refusals ("vote shares")."""
    cfg = party.cfg
    job = shown(accepted.dca_job)
    role = Contributor(accepted, cfg.name, cfg.members, cfg.test_mode)
    tls = cfg.tls.files()
    try:
        # over the party's kept channel to the curator: a round costs no new connection (TCP and TLS) to fetch its job
        ann = await party.channels.call(cfg.curator.address, cfg.curator.name, DCA_CURATOR_SERVICE, "GetJob", common_pb2.JobRef(job_id=accepted.dca_job),
                                        dca_pb2.DcaJobAnnouncement, FETCH_SECONDS)
        params = DcaParams.from_spec(accepted.dca_job, ann.spec)
    except grpc.aio.AioRpcError as e:
        if e.code() == grpc.StatusCode.NOT_FOUND:
            await errors.refuse(context, Problem.UNKNOWN_JOB, f"party {cfg.name}: the curator has no DCA job {job}")
        await errors.refuse(context, Problem.PEER_UNREACHABLE, f"party {cfg.name} could not fetch DCA job {job} from its curator ({e.code().name})")
    except ValueError as e:
        await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name}: DCA job {job}: {e}")
    try:
        role.announced(params)
    except ProtocolError as e:
        await errors.refuse(context, e.problem, f"party {cfg.name}: DCA job {job}: {e.detail}")
    for entry in role.charge:  # advisory, before the costly local work; the spend decides
        if await _charged(party, context, entry) is None:
            await party.precheck(context, entry["epsilon"], entry["delta"], entry.get("accounting"))
    work = LocalWork(cfg.local_work_seconds, job, f"the local work for its {what}")  # its deadline, before the records are read
    try:
        z = await compute(params)
    except errors.Refused as e:  # it read the records: refused at the deadline, when the shares would have left
        await work.done()
        await errors.refuse(context, e.problem, e.detail)
    except Exception:
        await work.done()
        raise
    await work.done()  # the shares leave no earlier than local_work_seconds after the records were first read
    rng = Drbg.from_seed(params.simulation_seed).child(f"client/{cfg.name}") if params.seeded else Drbg.from_os()
    try:
        outputs = role.computed(z, rng)
    except ProtocolError as e:
        await errors.refuse(context, e.problem, f"party {cfg.name}: DCA job {job}: {e.detail}")
    spent: list[tuple[dict, bool]] = []
    handoff = Handoff()

    async def spend(entries: tuple[dict, ...]) -> None:
        for entry in entries:  # each in one durable step of the ledger, before any share leaves
            spent.append(await party.hold(context, entry))

    try:  # every compute node reached, and confirming the spec this party checked, before anything is spent (mpdp.dca.spec)
        report = await carry_out(ann, tls, params, outputs, spend, handoff=handoff)
    except NodesUnreachable as e:  # before the spend: nothing charged
        await errors.refuse(context, Problem.PEER_UNREACHABLE, f"party {cfg.name} could not submit its {what}: {e}")
    except SpecMismatch as e:
        await _failed(party, spent)  # nothing is spent before the nodes confirm: empty
        await errors.refuse(context, e.problem, f"party {cfg.name}: DCA job {job}: {e.detail}")
    except grpc.aio.AioRpcError as e:
        await _settle(party, spent, handoff, f"could not submit its {what} ({e.code().name})")
        await errors.refuse(context, Problem.PEER_UNREACHABLE, f"party {cfg.name} could not submit its {what} ({e.code().name})")
    except BaseException as e:
        await _settle(party, spent, handoff, f"its submission stopped ({type(e).__name__})")
        raise
    try:
        role.receipts(report.accepted, report.rejected)
    except ProtocolError as e:
        await _failed(party, spent)
        await errors.refuse(context, e.problem, f"party {cfg.name}'s {what} were refused ({errors.problem_name(report.rejected[0].problem)})")
    party.let_go(spent)
    return report


async def _charged(party: "Party", context, entry: dict) -> dict | None:
    try:
        return await asyncio.to_thread(party.ledger.find, entry["protocol"], entry["job_id"])
    except (LedgerError, OSError) as e:
        await party.ledger_broken(context, e)


async def _failed(party: "Party", spent: list[tuple[dict, bool]]) -> None:
    """A failed submission whose shares may have left keeps its charge: every entry spent for it is marked failed."""
    for entry, _ in spent:
        await party.mark(entry["protocol"], entry["job_id"], FAILED)
    party.let_go(spent)


async def _settle(party: "Party", spent: list[tuple[dict, bool]], handoff: Handoff, why: str) -> None:
    """A submission failed after its spend: voided when no share was handed to the network yet, else failed."""
    if handoff.shares:
        await _failed(party, spent)
    else:
        await party.settle_unsent(spent, f"no share left: {why}")


async def dataset_for(party: "Party", context, dataset: str, schema_sha256: str, records_per_client: int) -> "DatasetConfig":
    """The party's configured dataset ``dataset``, checked against the job's schema digest and the round's public row
    bound against the one agreed for the dataset (config ``records_per_party``): INVALID_JOB otherwise, before any spend."""
    cfg = party.cfg
    ds = await party.dataset(context, dataset)
    try:
        require_schema(ds, schema_sha256)
    except SchemaMismatch as e:
        await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name} refuses: dataset {shown(dataset)}: {e}")
    try:
        check_agreed_bound("records_per_client", records_per_client, ds.records_per_party)
    except ValueError as e:
        await errors.refuse(context, Problem.INVALID_JOB, f"party {cfg.name} refuses: dataset {shown(dataset)}: {e}")
    return ds


async def computed(party: "Party", job_id: str, dataset: str, compute: Callable[[], np.ndarray], *, doing: str = "compute its statistic from") -> np.ndarray:
    """``compute()`` off the event loop; a dataset or shape problem raises :class:`~mpdp_services.common.errors.Refused`
    (INVALID_JOB), which :func:`contribute` sends at its pad's deadline; what was read from the records (counts,
    values) stays in this party's log."""
    cfg = party.cfg
    job = shown(job_id)
    try:
        return await asyncio.to_thread(compute)
    except DatasetError as e:
        log.error("job %s: dataset %s: %s", job, dataset, e)
        raise errors.Refused(Problem.INVALID_JOB, f"party {cfg.name} cannot read its dataset {shown(dataset)}; see its log") from None
    except DoesNotFit as e:  # names the job's public bound only; the counts stay in this party's log
        log.warning("job %s: dataset %s: %s", job, dataset, e.private)
        raise errors.Refused(Problem.INVALID_JOB, f"party {cfg.name}: {e}") from None
    except (ValueError, RuntimeError) as e:  # computed from the records: the detail stays in this party's log
        log.error("job %s: dataset %s: %s", job, dataset, e)
        raise errors.Refused(Problem.INVALID_JOB, f"party {cfg.name} could not {doing} dataset {shown(dataset)}; see its log") from None


async def check_carries(context, request: contribution_pb2.StatisticRequest, field: str, what: str) -> None:
    """A round request that carries its own protocol's request (``field``) and no clip box: every field in its
    range first (``mpdp.limits``, INVALID_JOB), then that shape (MALFORMED, "``what`` and no clip box")."""
    try:
        limits.check_statistic_request(request)
    except limits.SpecError as e:
        await errors.refuse(context, Problem.INVALID_JOB, str(e))
    if carried(request) != [field] or request.bounds:
        await errors.refuse(context, Problem.MALFORMED, f"{what} and no clip box")


def carried(request: contribution_pb2.StatisticRequest) -> list[str]:
    """The protocol requests a statistic request carries (its message fields that are set, e.g. ``["dpgd"]``): each
    round takes exactly its own protocol's, or none."""
    return [f.name for f, _ in request.ListFields() if f.message_type is not None]
