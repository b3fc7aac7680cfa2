"""P_j in a Pathak 2010 job: receives Charlie's and other parties' steps, forwards what its machine sends.

Servicer methods only check the caller, look up the job, feed its machine and forward what comes out;
the protocol lives in :mod:`mpdp.pathak2010.party`. The ledger is the site's (:class:`mpdp_services.party.server.Party`):
the job's true guarantee is spent at ProtocolStart (after every party accepted, before the party reads its records) and
marked released, failed or voided when it ends. The acceptance is built from public facts only (:meth:`PathakParty._build`).
"""

from __future__ import annotations

import asyncio
import csv
import gzip
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from mpdp import limits, registry
from mpdp.data.dataset import SchemaMismatch, open_rows, require_schema, schema_of
from mpdp.data.loaders import DatasetError, sniff_dialect
from mpdp.learn import model_cache
from mpdp.learn.model_cache import LocalModel, ModelCache
from mpdp.ledger import FAILED, RELEASED, BudgetExceeded, LedgerError
from mpdp.math.dgk import DgkPublicKey
from mpdp.math.paillier import PublicKey
from mpdp.messages import common_pb2, pathak2010_pb2 as pb, pathak2010_pb2_grpc as pb_grpc
from mpdp.pathak2010.params import InvalidJob, PathakParams
from mpdp.pathak2010.party import CLIP_BOUND, DATA_FREE_MESSAGES, FIT_MAX_ITER, FIT_TOL, PartyMachine, implausible_local_model, train_local_rows
from mpdp.pathak2010.resources import CuratorPublicKeys, PartyResources
from mpdp.schema import SchemaError
from mpdp.protocol import CURATOR, FAILED as MACHINE_FAILED, Peer, ProtocolError, Record, Send, Spend
from mpdp.contribution import check_agreed_bound, check_members
from mpdp_services.common import config as cfgmod, errors, jobs, metrics
from mpdp_services.common.errors import shown
from mpdp_services.common.rpc import caller, method_for_message, roles_by_method
from mpdp_services.common.runtime import Hosted
from mpdp_services.party.precompute import REFILL_DELAY_SECONDS, Precompute

if TYPE_CHECKING:
    from mpdp_services.party.flows import Flow, PartySite
    from mpdp_services.party.server import Party

log = logging.getLogger("mpdp.party")
Problem = common_pb2.Problem

PROTOCOL = "pathak2010"
SERVICE = "mpdp.messages.Party"
CURATOR_SERVICE = "mpdp.messages.Curator"
C, P = ("curator",), ("party",)
ROLES = roles_by_method(
    SERVICE,
    {
        "AnnounceJob": C,
        "StartProtocol": C,
        "SendMaskedSizeShare": C,
        "SendComparisonBits": C,
        "SendSelectionVector": C,
        "SendPartySecrets": P,
        "SendPi1Reveal": P,
        "SendSizeShare": P,
        "SendSealedSizeRemainder": P,
        "SendMaskedSize": P,
        "SendNoiseChain": P,
        "SendNoiseScaleShare": P,
        "SendNoiseScale": P,
        "SendResharePiece": C + P,
        "AbortJob": C + P,
    },
)
CURATOR_METHODS = method_for_message(pb.DESCRIPTOR.services_by_name["Curator"])
PARTY_METHODS = method_for_message(pb.DESCRIPTOR.services_by_name["Party"])


def curator_keys_from(msg: pb.CuratorKeys) -> CuratorPublicKeys:
    n = lambda b: int.from_bytes(b, "big")  # noqa: E731
    return CuratorPublicKeys(PublicKey(n(msg.paillier_n)), DgkPublicKey(n(msg.dgk_n), n(msg.dgk_g), n(msg.dgk_h), msg.dgk_u, msg.dgk_r_bits))


class PathakJob(Hosted[PartyMachine]):
    """One Pathak job at this party: its machine, the peers' addresses, whether its ledger entry is settled."""

    def __init__(self, machine: PartyMachine, route, addresses: dict[str, str], dataset: cfgmod.DatasetConfig | None = None) -> None:
        super().__init__(machine, route)
        self.addresses = addresses
        self.dataset = dataset  # read only after the spend (PathakParty._train)
        self.training = False  # the local model is being trained (at most once per job)
        self.settled = False  # the ledger entry is marked released, failed or voided
        self.spent_after: int | None = None  # messages the machine had produced when this party spent (None: not spent)
        self.spend_refused: tuple[int, str] | None = None  # (Problem, detail) when the ledger refused the job's Spend
        self.spend_mark: int | None = None  # messages the machine had produced before its Spend (None: no Spend yet)
        self.paid = asyncio.Event()  # set once the Spend is decided (spent or refused); the ledger is written outside the lock

    def _count(self, outputs) -> None:
        """Count the messages that may carry something computed from the data (abort notices and S0's
        data-free messages aside): a failed job whose count did not move after the spend voids its charge."""
        if self.spend_mark is None:
            for i, o in enumerate(outputs):
                if isinstance(o, Spend):
                    self.spend_mark = self.emitted + sum(map(_data_dependent, outputs[:i]))
                    break
        self.emitted += sum(map(_data_dependent, outputs))


def _data_dependent(o) -> bool:
    return isinstance(o, Send) and not isinstance(o.message, (common_pb2.JobAbort, *DATA_FREE_MESSAGES))


def deadline_seconds(spec: pb.PathakJobSpec, default: float) -> float:
    """When this party gives up on a job: the spec's deadline plus the grace the curator's last steps need
    (:func:`jobs.hard_deadline`; the curator fails the job first and says so), else the configured default."""
    return jobs.hard_deadline(spec.deadline_seconds) if spec.deadline_seconds > 0 else default


def _size(path) -> int:
    """The data file's bytes (a Parquet folder's: its parts')."""
    try:
        if os.path.isdir(path):
            return sum(os.stat(p).st_size for p in sorted(Path(path).glob("*.parquet")))
        return os.stat(path).st_size
    except OSError:
        return 0


def local_model_key(ds: cfgmod.DatasetConfig, params: PathakParams) -> str | None:
    """The model cache's key (:mod:`mpdp.learn.model_cache`): every input that changes ŵ_j. The data and
    schema files by content, how the file is read, the schema's canonical digest, λ and the objective's
    convention, the clipping bound and the solver's settings, and the label encoding. None for a database
    table (its content has no digest short of reading it): its model is trained for every job."""
    if ds.format == "sql":
        return None
    schema = ds.schema_file
    try:
        files = sorted(ds.path.glob("*.parquet")) if ds.path.is_dir() else [ds.path]
        data = model_cache.file_digest(ds.path) if len(files) == 1 and files[0] == ds.path else model_cache.cache_key(parts=[model_cache.file_digest(f) for f in files])
        digests = (data, model_cache.file_digest(schema) if schema is not None else "", schema_sha256_of(ds))
    except (OSError, SchemaError) as e:
        raise DatasetError(f"{ds.path}: {e}") from e
    return model_cache.cache_key(
        data_sha256=digests[0],
        schema_file_sha256=digests[1],
        schema_sha256=digests[2],
        format=ds.format,
        n_features=ds.n_features,
        label_column=ds.label_column,
        labels="to_pm1" if schema is None else "schema",
        lam=float(params.calibration.lam),
        convention=params.calibration.convention,
        clip_bound=CLIP_BOUND,
        fit_tol=FIT_TOL,
        fit_max_iter=FIT_MAX_ITER,
    )


def public_dimension(ds: cfgmod.DatasetConfig, name: str) -> int:
    """d of a dataset's encoded rows from public facts: its schema's width (one-hot columns counted), a LIBSVM file's
    configured n_features or a delimited file's first line; the learner adds no column
    (:func:`mpdp.data.engine.local_logreg` fits on the rows as encoded). Any other dataset (LIBSVM without n_features)
    is read whole here for its width, before the acceptance: give it a schema or n_features (docs/limitations.md,
    the timing row)."""
    try:
        schema = schema_of(ds)
    except SchemaError as e:
        raise DatasetError(f"{ds.path}: {e}") from e
    if schema is not None:
        return schema.dimension
    fmt = ds.format if ds.format != "auto" else ("csv" if ".csv" in Path(ds.path).name else "libsvm")  # as loaders.load guesses
    if ds.n_features is not None and fmt == "libsvm":  # the width the file is read with (loaders.load_libsvm)
        return int(ds.n_features)
    if fmt == "csv" and not Path(ds.path).is_dir():  # every column but the label is a feature (loaders.load_csv)
        return _csv_width(Path(ds.path))
    return open_rows(ds, name=name).dimension


def _csv_width(path: Path) -> int:
    """A delimited file's feature count from its first line alone (its columns less the label's): the same for every
    row count, so reading it times nothing of the records."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", newline="") as fh:
            row = next(csv.reader(fh, sniff_dialect(fh)), None)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise DatasetError(f"{path} is not readable delimited text: {e}") from e
    if not row or len(row) < 2:
        raise DatasetError(f"{path}: its first line has no feature column")
    return len(row) - 1


def schema_sha256_of(ds: cfgmod.DatasetConfig) -> str:
    schema = schema_of(ds)
    return schema.sha256() if schema is not None else ""


class PathakParty(pb_grpc.PartyServicer):
    """The Pathak party servicer. It serves once :meth:`start` has given it Charlie's keys (NOT_READY before)."""

    def __init__(self, party: "Party", on_precompute=lambda ready: None) -> None:
        self.party = party
        self.cfg = party.cfg
        self._on_precompute = on_precompute
        self.jobs: jobs.JobTable[PathakJob] = jobs.JobTable(PROTOCOL, jobs.machine_outcome, max_live=self.cfg.max_live_jobs,
                                                           retention=self.cfg.job_retention_seconds, max_retained=self.cfg.max_retained_jobs)
        self.reaper = jobs.Reaper(self.jobs, self._expire)
        self.keys: CuratorPublicKeys | None = None
        self.precompute: Precompute | None = None
        self.models = ModelCache(self.cfg.model_cache_entries, self.cfg.model_cache_dir)

    def start(self, keys: CuratorPublicKeys) -> None:
        """Charlie's public keys (from registration, or a newer announcement): fresh resources and pools."""
        self.keys = keys
        self.resources = PartyResources.create(self.party.rng.child("resources"), keys, self.cfg.paillier_bits, test_mode=self.cfg.test_mode,
                                               local_work_seconds=self.cfg.local_work_seconds)
        if self.precompute is not None:
            self.precompute.stop()
        self.precompute = Precompute(self.resources, self.cfg.paillier_bits, self.cfg.pool_target, self._on_precompute)
        metrics.watch_pools(self.precompute.levels, self.precompute.targets)

    def _pool(self) -> Precompute:
        if self.precompute is None:
            raise RuntimeError("the party has no curator keys yet (it registers before it takes jobs)")
        return self.precompute

    def stop(self) -> None:
        self.reaper.stop()
        if self.precompute is not None:
            self.precompute.stop()

    async def _ready(self, context) -> None:
        await self.party.ready(context)
        if self.keys is None:
            await errors.refuse(context, Problem.NOT_READY, "party is starting up (not yet registered with its curator)")

    # -- Charlie → party: a new job ----------------------------------------------------------
    async def AnnounceJob(self, request: pb.JobAnnouncement, context) -> common_pb2.Ack:
        await self._ready(context)
        ident = caller(context)
        if ident.name != self.cfg.curator.name:
            await errors.refuse(context, Problem.WRONG_ROLE, f"{shown(ident.name)} is not the curator of party {self.cfg.name}")
        if not jobs.valid_id(request.job_id):
            await errors.refuse(context, Problem.MALFORMED, "not a job id (1-64 letters, digits, '.', '_' or '-')")
        if request.job_id in self.jobs:
            await errors.refuse(context, Problem.REPLAY, f"party {self.cfg.name}: job {shown(request.job_id)} was already announced")
        async with self.party.claimed(context, PROTOCOL, request.job_id):
            await self._announce(request, context)
        return common_pb2.Ack()

    async def _announce(self, request: pb.JobAnnouncement, context) -> None:
        name = self.cfg.name
        ds = await self.party.dataset(context, request.spec.dataset)
        try:  # every party of the job is a member as provisioned (in gaussian-distributed mode each adds a share of σ²)
            check_members(list(request.spec.parties), self.cfg.members)
        except ValueError as e:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {name}: {e}")
        announced = curator_keys_from(request.curator_keys)
        try:  # the announcement is the curator's, but still input: never adopt keys outside the documented range
            limits.check_job_announcement(request)
            for n in (announced.paillier.n, announced.dgk.n):  # a k-bit key's modulus may have a few bits fewer
                limits.check_key_bits((n.bit_length() + 7) // 8 * 8, test_mode=self.cfg.test_mode)
            if not (1 < announced.dgk.u < (1 << 64) and 0 < announced.dgk.r_bits <= 1024):
                raise limits.SpecError("curator_keys", "DGK u must be a small prime and r_bits at most 1024")
        except limits.SpecError as e:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {name}: {e}")
        try:
            require_schema(ds, request.spec.schema_sha256)
        except SchemaMismatch as e:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {name} refuses: dataset {shown(request.spec.dataset)}: {e}")
        if self.keys is None or announced.paillier.n != self.keys.paillier.n or announced.dgk.n != self.keys.dgk.n:
            self.start(announced)  # the curator restarted with new keys
        try:
            machine = await asyncio.to_thread(self._build, request, ds)
        except DatasetError as e:
            log.error("job %s: dataset %s: %s", shown(request.job_id), request.spec.dataset, e)
            await errors.refuse(context, Problem.INVALID_JOB, f"party {name} cannot read its dataset {shown(request.spec.dataset)}; see its log")
        except InvalidJob as e:  # the spec's own fields
            await errors.refuse(context, Problem.INVALID_JOB, f"party {name}: {e}")
        except ValueError as e:  # the schema's or the file's header: the detail stays in this party's log
            log.error("job %s: dataset %s: %s", shown(request.job_id), request.spec.dataset, e)
            await errors.refuse(context, Problem.INVALID_JOB, f"party {name} cannot read its dataset {shown(request.spec.dataset)}; see its log")
        except ProtocolError as e:
            await errors.refuse(context, e.problem, f"party {name}: {e.detail}")
        try:  # the job's public size bound is the federation's agreed one for this dataset, or nothing is read or spent
            check_agreed_bound("size_bits", machine.params.size_bits, ds.size_bits)
        except ValueError as e:
            await errors.refuse(context, Problem.INVALID_JOB, f"party {name} refuses: dataset {shown(request.spec.dataset)}: {e}")
        hosted = PathakJob(machine, self._route, dict(request.party_addresses), ds)
        try:  # admitted (OVERLOADED past max_live_jobs) before anything is spent
            self.jobs.admit(request.job_id, hosted, deadline_seconds(request.spec, self.cfg.job_deadline_seconds))
        except ProtocolError as e:
            await errors.abort(context, e)
        self.reaper.ensure_running()
        entry = machine.charge()
        try:  # a job that cannot fit is refused now; it spends at ProtocolStart (StartProtocol), once every party accepted
            await self.party.precheck(context, entry["epsilon"], entry["delta"], entry["accounting"])
        except BaseException:
            self.jobs.forget(request.job_id)  # refused: nothing left this party; the id stays a record
            raise
        self._pool().pause()
        log.info("job %s announced: dataset %s, d=%d (accepted; trained after the spend)", request.job_id, request.spec.dataset, machine.d)
        await hosted.start(machine.start())

    def _build(self, request: pb.JobAnnouncement, ds: cfgmod.DatasetConfig) -> PartyMachine:
        """The job's machine, from public facts only: the spec, Charlie's keys and d from the dataset's schema
        (:func:`public_dimension`). The records are not read (nor the model cache): that is :meth:`_train`'s, after the
        spend, so neither the acceptance's content nor its latency depends on them."""
        return PartyMachine(self.cfg.name, request, public_dimension(ds, request.spec.dataset), self.resources)

    def _local_model(self, m: PartyMachine, ds: cfgmod.DatasetConfig) -> LocalModel:
        """ŵ_j and n_j, from the model cache when this data file and learner setting were seen (a worker thread)."""
        params, job_id, dataset = m.params, m.job_id, m.params.dataset
        key = local_model_key(ds, params)
        local = self.models.get(key) if key is not None else None
        why = implausible_local_model(local, params, _size(ds.path)) if local is not None else None
        if why is not None:  # planted or damaged: retrained below, and the fresh ŵ_j replaces it
            log.warning("job %s: the cached local model for dataset %s is implausible (%s); retraining", job_id, dataset, why)
            local = None
        if local is not None:
            return local
        trained = train_local_rows(ds, dataset, params)  # batch by batch: memory bounded by ds.batch_rows
        if key is not None and local_model_key(ds, params) == key:  # the file did not change while it was read
            self.models.put(key, LocalModel(trained.w, trained.n))
        return trained

    async def _train(self, hosted: PathakJob) -> None:
        """After the spend (ProtocolStart): train ŵ_j, wait out the party's local-work time, hand the model to the
        machine. A failure here fails the job before any message computed from the records left, so the charge is
        voided (:meth:`_settle`). A training longer than ``local_work_seconds`` is logged here only: the time the
        curator sees then grows with it (docs/limitations.md)."""
        m = hosted.machine
        assert hosted.dataset is not None and m.local_work_until is not None
        began = m.res.clock()
        local: LocalModel | None = None
        try:
            local = await asyncio.to_thread(self._local_model, m, hosted.dataset)
        except (DatasetError, ValueError, RuntimeError, OSError) as e:  # the detail stays in this party's log
            log.error("job %s: dataset %s: %s", m.job_id, m.params.dataset, e)
        took = m.res.clock() - began
        if took > self.cfg.local_work_seconds:
            log.warning("job %s: local training took %.3f s, over local_work_seconds = %.3f s: the curator can time this job's local "
                        "work (raise local_work_seconds above the largest dataset's training time)", m.job_id, took, self.cfg.local_work_seconds)
        while (left := m.local_work_until - m.res.clock()) > 0:  # the pad: a deadline the machine states, on its clock; a
            await asyncio.sleep(left)  # failure waits for it too, so that its abort notice does not time the records either
        if m.terminal:
            return
        if local is None:
            await hosted.fail(Problem.INVALID_JOB, f"party {self.cfg.name} cannot train on its dataset {shown(m.params.dataset)}; see its log")
        else:
            trained = local
            await hosted.local(lambda: m.trained(trained))

    # -- every other step ------------------------------------------------------------------------
    async def _deliver(self, request, context) -> common_pb2.Ack:
        await self._ready(context)
        hosted = self.jobs.get(request.job_id)
        if hosted is None:
            record = self.jobs.record(request.job_id)
            if record is not None and record.terminal:  # ended and left memory: refused, never re-created
                await errors.refuse(context, Problem.JOB_FAILED, f"party {self.cfg.name}: job {request.job_id} has ended ({record.state})")
            await errors.refuse(context, Problem.UNKNOWN_JOB, f"party {self.cfg.name} has no job {shown(request.job_id)}")
        ident = caller(context)
        if ident.role == "curator":
            if ident.name != self.cfg.curator.name:
                await errors.refuse(context, Problem.WRONG_ROLE, f"{shown(ident.name)} is not the curator of party {self.cfg.name}")
            sender = CURATOR
        else:
            sender = Peer("party", ident.name)
        try:
            await hosted.deliver(sender, request, context)
        except ProtocolError:
            pass
        finally:
            await self._settle(hosted)
            if hosted.machine.terminal:  # e.g. an abort notice, which makes no output to route
                self._ended(hosted)
        return common_pb2.Ack()

    async def StartProtocol(self, request: pb.ProtocolStart, context) -> common_pb2.Ack:
        """The spend step: every party has accepted, and the curator asks the parties one job at a time (P1 last).
        The machine's step outputs the job's Spend (its true guarantee: paper mode √d·ε/(2K), not the nominal ε)
        before its first data-dependent message (JobAcceptance carried only d); :meth:`_route` spends it durably
        before anything else leaves, and this call is answered once it is spent (BUDGET_EXCEEDED if refused)."""
        ack = await self._deliver(request, context)
        hosted = self.jobs.get(request.job_id)
        if hosted is not None and hosted.spend_refused is not None:
            await errors.refuse(context, *hosted.spend_refused)
        if hosted is not None and hosted.spent_after is not None and not hosted.training and not hosted.machine.terminal:
            hosted.training = True  # spent: the local work starts now, in the background (the curator's call returns)
            hosted.spawn(self._train(hosted))
        return ack

    async def _spend(self, hosted: PathakJob, entries: tuple[dict, ...]) -> bool:
        """Spend the job's charge (the machine's Spend); False (and the job failed) if the ledger refuses it."""
        m = hosted.machine
        try:
            for entry in entries:
                await asyncio.to_thread(self.party.ledger.spend, entry)
        except BudgetExceeded as e:  # nothing spent: the job fails here, no message leaves
            hosted.spend_refused = (Problem.BUDGET_EXCEEDED, f"party {self.cfg.name}: {e}")
        except (LedgerError, OSError) as e:
            log.error("ledger %s: %s", self.party.ledger.path, e)
            hosted.spend_refused = (Problem.INTERNAL, f"party {self.cfg.name} cannot use its privacy ledger; see its log")
        finally:
            hosted.paid.set()
        if hosted.spend_refused is not None:  # the job fails with the spend's own Problem (a broken ledger is not a budget)
            problem = hosted.spend_refused[0]
            await hosted.fail(problem, f"party {self.cfg.name} cannot pay job {m.job_id}" if problem == Problem.BUDGET_EXCEEDED
                              else f"party {self.cfg.name} cannot use its privacy ledger")
            return False
        if hosted.spent_after is None:  # the messages after the Spend come after the spend: a failure from here keeps it
            hosted.spent_after = hosted.spend_mark
        return True

    SendMaskedSizeShare = SendComparisonBits = SendSelectionVector = _deliver
    SendPartySecrets = SendPi1Reveal = SendSizeShare = SendSealedSizeRemainder = SendMaskedSize = SendNoiseChain = _deliver
    SendNoiseScaleShare = SendNoiseScale = _deliver
    SendResharePiece = AbortJob = _deliver

    # -- outputs ----------------------------------------------------------------------------------
    async def _route(self, hosted: PathakJob, outputs) -> None:
        m = hosted.machine
        for o in outputs:  # the Spend goes first (the engine's spend rule); a refusal stops every output
            if isinstance(o, Spend) and not await self._spend(hosted, o.entries):
                return
        if m.spent and any(isinstance(o, Send) and type(o.message).__name__ not in m.PUBLIC for o in outputs):
            await hosted.paid.wait()  # a later step taken while the spend was still being written: its messages wait for it
            if hosted.spend_refused is not None:
                return  # the spend was refused: nothing derived from the records leaves
        for o in outputs:  # DONE: the release marks the charge spent at ProtocolStart, before the share leaves
            if isinstance(o, Record):
                if o.entry.get("epsilon") != m.charge()["epsilon"]:
                    log.error("job %s: the release records ε=%s, but ε=%s was spent", m.job_id, o.entry.get("epsilon"), m.charge()["epsilon"])
                hosted.settled = True
                await self.party.mark(PROTOCOL, m.job_id, RELEASED)
        for o in outputs:
            if isinstance(o, Send):
                hosted.spawn(self._send(hosted, o.to, o.message))
        await self._settle(hosted)
        if m.terminal:
            self._ended(hosted)

    def _ended(self, hosted: PathakJob) -> None:
        """A job reached a terminal state: note it in the table (its entry leaves after the retention) and,
        when no job is left running, let the precompute thread refill the pools."""
        m = hosted.machine
        self.jobs.finish(m.job_id, m.state, m.error.problem if m.error else Problem.PROBLEM_UNSPECIFIED)
        self.jobs.sweep()
        held = self.jobs.held()
        log.info("party %s: %s jobs in memory: %d running, %d held", self.cfg.name, PROTOCOL, self.jobs.live_count(), len(held))
        if all(h.machine.terminal for h in self.jobs.entries()):
            self._pool().resume(getattr(m, "d", None), m.params.comparisons * m.params.compare_bits, delay=REFILL_DELAY_SECONDS)

    async def _settle(self, hosted: PathakJob) -> None:
        """A failed Pathak job keeps its charge, marked failed: its data may already have left in a message. If the
        machine produced no message after the spend (abort notices and S0's data-free messages aside), nothing
        data-dependent left this party and the charge is voided (docs/protocols/accounting.md, "Voided charges")."""
        m = hosted.machine
        if m.state == MACHINE_FAILED and not hosted.settled:
            if hosted.spend_mark is not None and not hosted.paid.is_set():
                await hosted.paid.wait()  # failed while its spend was being written (an abort meanwhile): settle that spend
                if hosted.settled:
                    return
            hosted.settled = True
            failure = errors.problem_name(m.error.problem) if m.error else "JOB_FAILED"
            if hosted.spent_after is None:
                return  # never spent: nothing to settle
            if hosted.emitted == hosted.spent_after:
                await self.party.void(PROTOCOL, m.job_id, f"failed ({failure}) before any message left this party after its spend")
            else:
                await self.party.mark(PROTOCOL, m.job_id, FAILED, {"failure": failure})

    async def _expire(self, job_id: str) -> None:
        """Past its deadline and not terminal (its curator may have crashed): fail it here, as a lost peer."""
        hosted = self.jobs.get(job_id)
        if hosted is not None and not hosted.machine.terminal:
            await hosted.fail(Problem.PEER_UNREACHABLE, f"job {job_id} did not end by its deadline (state {hosted.machine.state})")

    def _call_seconds(self, m: PartyMachine) -> float:
        """The job's per-call deadline, sized from its work (K, d, ℓ, the keys' sizes: PathakParams.call_seconds)."""
        keys = m.res.curator_keys
        return m.params.call_seconds(m.d, max(keys.paillier.bits, keys.dgk.n.bit_length(), self.cfg.paillier_bits))

    async def _send(self, hosted: PathakJob, to: Peer, message) -> None:
        channels = self.party.channels
        timeout = self._call_seconds(hosted.machine)
        if to == CURATOR:
            address, site = self.cfg.curator.address, self.cfg.curator.name
            call = lambda: channels.call(address, site, CURATOR_SERVICE, CURATOR_METHODS[message.DESCRIPTOR.full_name], message, common_pb2.Ack, timeout)  # noqa: E731
        else:  # relayed by the curator, sealed end to end for the recipient (services/party/link.py)
            link = self.party.link
            if to.name not in hosted.addresses or link is None:
                await hosted.fail(Problem.PEER_UNREACHABLE, f"party {to.name} is not a party of job {hosted.machine.job_id}")
                return
            method = PARTY_METHODS[message.DESCRIPTOR.full_name]
            call = lambda: link.relay(to.name, SERVICE, method, message, common_pb2.Ack, timeout, hosted.machine.job_id)  # noqa: E731
        await hosted.send(to, message, call)


# -- its place at the party (mpdp.registry: Hooks.party) -------------------------------------------------------------
def flow(site: "PartySite", protocol: registry.Protocol) -> "Flow":
    """The Pathak party servicer; its pools start once the party knows the curator's keys (it reports them ready on
    the precompute health service)."""
    from mpdp_services.party.flows import Flow
    from mpdp_services.party.precompute import PRECOMPUTE_HEALTH

    pathak = PathakParty(site.party, lambda ready: site.set_health(PRECOMPUTE_HEALTH, ready))
    return Flow(SERVICE, lambda server: pb_grpc.add_PartyServicer_to_server(pathak, server), ROLES, on_registered=pathak.start, on_stop=pathak.stop)
