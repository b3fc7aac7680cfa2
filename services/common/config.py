"""Site configuration: a YAML file, overridable by environment variables (MPDP_<FIELD>, nested with __).

Example party config::

    name: hospital-a
    tls: {cert: site.crt, key: site.key, ca: ca.crt}
    curator: {address: curator.example.org:7000, name: curator}   # the one place a party dials (and the compute nodes)
    datasets:
      adult: {path: /data/adult.csv, format: csv, schema: /etc/mpdp/adult-schema.yaml}
    ledger: state/ledger.json
    budget_epsilon: 10.0
    budget_delta: 0.001

Relative paths are resolved against the config file's folder. A party listens on no port (it keeps a link open to its
curator: services/party/link.py), so its ``listen`` and ``advertise`` are unused.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from mpdp import limits

if TYPE_CHECKING:  # gRPC and OpenTelemetry load when a service uses them, not for reading a config (`mpdp ledger show`)
    from mpdp_services.common.rpc import TlsFiles


class ConfigError(ValueError):
    """The config file is missing or wrong; the message names the file and the field."""


class TlsConfig(BaseModel):
    cert: Path
    key: Path
    ca: Path

    def files(self) -> TlsFiles:
        from mpdp_services.common.rpc import TlsFiles

        return TlsFiles(self.cert, self.key, self.ca)


class Endpoint(BaseModel):
    address: str
    name: str = Field(description="site name in the peer's certificate (TLS server name)")


class DatasetConfig(BaseModel):
    path: Path = Field(Path(), description="the data file (a Parquet file or folder of parts for parquet; unused for sql)")
    format: Literal["libsvm", "csv", "auto", "parquet", "sql"] = "auto"
    n_features: int | None = None
    label_column: str | int = -1
    # "schema" in YAML; the attribute is schema_file because pydantic's BaseModel already has a ``schema`` method
    schema_file: Path | None = Field(None, alias="schema", description="the federation's data schema (docs/schema.md): the file is validated and encoded by it")
    table: str | None = Field(None, description="sql: the table (schema.table allowed) holding the rows")
    query: str | None = Field(None, description="sql: a SELECT whose result holds the rows (instead of table)")
    dsn_env: str | None = Field(None, description="sql: the environment variable holding the PostgreSQL connection string (never logged)")
    dsn: SecretStr | None = Field(None, description="sql: the connection string itself (prefer dsn_env; never logged)")
    columns: list[str] | None = Field(None, min_length=1, max_length=4096, description=(
        "the table's columns this dataset reads: exactly its schema's features and label, in any order; every other column "
        "of the file or table is ignored. Unset: columns the schema does not read are ignored too, and their count is logged "
        "once as a WARNING"))
    batch_rows: int = Field(65_536, ge=1, le=10_000_000, description="rows read and computed on at a time: bounds the party's memory")
    dask: str = Field("", description=(
        "run this dataset's batch computations on Dask: \"local\" (a local cluster of dask_workers processes, mutual TLS on loopback) "
        "or the address of the party's own scheduler, tls://host:port (with dask_tls)"))
    dask_tls: TlsConfig | None = Field(None, description="an external Dask scheduler's TLS: this party's client certificate and key, and the cluster's CA")
    dask_workers: int = Field(2, ge=1, le=256, description="worker processes of a local Dask cluster")
    # The federation's agreed public size bounds for this dataset (docs/protocols/pathak2010.md, "Public size bounds are
    # the federation's"): a job asking for another is refused before anything is read or spent, so that no sequence of
    # jobs with different bounds can probe the dataset's size. Unset: every job's own bound is taken.
    size_bits: int | None = Field(None, ge=1, le=limits.MAX_SIZE_BITS, description=(
        "Pathak jobs: the agreed size bound (n < 2^size_bits); a job with another size_bits (0 counts as its default 32) is refused INVALID_JOB before any spend"))
    records_per_party: int | None = Field(None, ge=1, le=limits.MAX_LOCAL_ROWS, description=(
        "contribution rounds (regression, dp-gd, queries and other statistics): the agreed public row bound; a round with another "
        "records_per_client is refused INVALID_JOB before any spend"))

    model_config = ConfigDict(populate_by_name=True)

    @model_validator(mode="after")
    def _source(self) -> "DatasetConfig":
        if self.format == "sql":
            if (self.table is None) == (self.query is None):
                raise ValueError("an sql dataset names exactly one of table and query")
            if (self.dsn is None) == (self.dsn_env is None):
                raise ValueError("an sql dataset names exactly one of dsn_env and dsn")
            if self.schema_file is None:
                raise ValueError("an sql dataset needs a schema (it names the columns and their encoding)")
        elif self.format == "parquet" and self.schema_file is None:
            raise ValueError("a parquet dataset needs a schema (it names the columns and their encoding)")
        elif self.path == Path():
            raise ValueError("a file dataset needs its path")
        if self.dask not in ("", "local") and (not self.dask.startswith("tls://") or self.dask_tls is None):
            raise ValueError("a Dask scheduler address must be tls://host:port, with dask_tls {cert, key, ca} (the party never talks to a cluster in the clear)")
        if self.columns is not None and self.schema_file is None:
            raise ValueError("columns (the columns to read) needs a schema: they are its features and label")
        return self

    def connection_string(self) -> str:
        """The PostgreSQL connection string of an sql dataset; the error names the variable, never its value."""
        import os

        if self.dsn is not None:
            return self.dsn.get_secret_value()
        value = os.environ.get(self.dsn_env or "", "")
        if not value:
            raise ValueError(f"the environment variable {self.dsn_env} holding the dataset's connection string is not set")
        return value


class _Base(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MPDP_", env_nested_delimiter="__", extra="forbid")

    name: str
    federation: str = ""
    listen: str = "127.0.0.1:0"
    http_listen: str = Field("127.0.0.1:0", description="host:port of the HTTP endpoint (GET /metrics, the curator's dashboard, a party's ledger page); loopback by default, \"\" disables it")
    http_token_file: Path | None = Field(None, description="a file holding the token the HTTP endpoint requires (Bearer header, or a session from POST /login); needed unless http_listen is loopback")
    probe_listen: str = Field("", description=(
        "host:port of the plain-HTTP probes GET /healthz (alive) and GET /readyz (200 once the role can serve, else 503) for an orchestrator: "
        "no token, no certificate, nothing about keys or jobs; \"\" (the default) serves none (docs/deploy.md)"))
    advertise: str | None = None
    tls: TlsConfig
    test_mode: bool = Field(False, description="allow small keys and simulation seeds: never in production")
    paillier_bits: int = 2048
    job_retention_seconds: float = Field(600.0, ge=0, description="a finished job's state stays in memory this long, then only a value-free record")
    max_live_jobs: int = Field(256, ge=1, description="jobs of one protocol running at once at this site; more are refused OVERLOADED")
    traces: str = Field("off", description=(
        "OpenTelemetry traces of jobs (services/common/tracing.py): off, console, otlp or file:PATH ({role}, {site}, {pid} replaced), "
        "comma-separated; anything but off needs the SDK (pip install 'mpdp[traces]')"))

    @field_validator("traces")
    @classmethod
    def _traces(cls, v: str) -> str:
        if v.strip().lower() in ("", "off"):  # off: nothing to check, and OpenTelemetry is not loaded to read a config
            return v
        from mpdp_services.common import tracing

        tracing.parse(v)  # ValueError names the unknown exporter
        return v

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings) -> tuple[PydanticBaseSettingsSource, ...]:
        return (env_settings, init_settings)

    @model_validator(mode="after")
    def _http_exposure(self) -> "_Base":
        if self.http_listen:
            from mpdp_services.common import web

            host, _ = web.split_listen(self.http_listen)
            if not self.http_token_file and not web.is_loopback(host or "0.0.0.0"):
                raise ValueError(f"http_listen {self.http_listen} is not a loopback address: set http_token_file (or MPDP_HTTP_TOKEN_FILE) to a file "
                                 "holding a random token (`openssl rand -hex 32 > http.token`, docs/deploy.md §4), or bind 127.0.0.1")
        return self

    @field_validator("probe_listen")
    @classmethod
    def _probe_listen(cls, v: str) -> str:
        if v:
            from mpdp_services.common import web

            web.split_listen(v)  # host:port or a clear error
        return v

    @field_validator("paillier_bits")
    @classmethod
    def _bits(cls, v: int) -> int:
        if v < 256:
            raise ValueError("paillier_bits must be at least 256")
        return v


class PartyConfig(_Base):
    curator: Endpoint
    datasets: dict[str, DatasetConfig] = {}
    ledger: Path = Path("ledger.json")
    budget_epsilon: float = Field(10.0, ge=0, allow_inf_nan=False, description=(
        "total ε this party may spend: the ledger's composed ε at budget_delta "
        "(PLD/RDP accountant, never above basic composition; docs/protocols/accounting.md)"))
    budget_delta: float = Field(1e-3, ge=0, allow_inf_nan=False, description="the δ at which the ledger composes all this party's releases (and the most basic composition's Σδ may reach)")
    pool_target: int = Field(256, description="Paillier randomness factors kept precomputed for Charlie's key")
    model_cache_entries: int = Field(4, ge=1, le=1024, description="local models ŵ kept in memory, keyed by the data file's digest, λ and the learner's parameters (Pathak jobs)")
    model_cache_dir: Path | None = Field(None, description="if set, the local-model cache is also kept here (0600 files, fsync'd): as private as the data files")
    local_work_seconds: float = Field(2.0, ge=0, le=3600, allow_inf_nan=False, description=(
        "the least time from the start of this party's work on its records to its next message (Pathak: from "
        "ProtocolStart to its first message computed from them; a contribution, dp-gd or regression round, query or "
        "ensemble vote: to its shares; a local release: to the release; a refusal that read the records waits too), so "
        "the curator cannot time n_j; every such step costs at least this long. Set it above the work time of the "
        "largest dataset served (a longer work is logged here and shows its length: docs/limitations.md)"))
    local_classifier: str = Field("logreg", description="the party's own model in ensemble (hamm2016) jobs: any name of mpdp.hamm2016.local.CLASSIFIERS")
    job_deadline_seconds: float = Field(600.0, gt=0, le=86_400, allow_inf_nan=False, description="a job whose spec sets no deadline fails at this party after this long (its curator may have crashed)")
    max_retained_jobs: int = Field(256, ge=0, le=100_000, description="finished jobs of one protocol kept in memory (within job_retention_seconds); older ones leave a value-free record")
    members: list[str] = Field([], max_length=limits.MAX_PARTIES, description=(
        "the federation's parties as provisioned (site names; your IT team checks this list when it joins). This party "
        "takes part in a job with other parties (Pathak, a contribution or dp-gd round, an ensemble vote) only if every "
        "party the job names is a member, so a certificate minted later under a new name can never join a round and thin "
        "this party's noise share. Empty: no such job is taken"))


class CuratorConfig(_Base):
    parties: dict[str, str] = Field({}, description="parties named here are members too (their addresses are unused: a party listens nowhere and is reached over its link); prefer members")
    state_dir: Path = Path("curator-state")
    dgk_bits: int = 2048
    compute_nodes: dict[str, str] = Field({}, description="compute node site name → address; compute nodes may also register at start-up")
    members: list[str] = Field([], max_length=limits.MAX_PARTIES, description=(
        "the federation's parties as provisioned (site names, as in every party's config). Only these and the parties "
        "named in parties may register (RegisterParty); any other party certificate is refused WRONG_ROLE"))
    compute_node_members: list[str] = Field([], max_length=limits.MAX_PARTIES, description=(
        "the federation's compute nodes as provisioned. Only these and the nodes named in compute_nodes may register "
        "(RegisterComputeNode); any other compute-node certificate is refused WRONG_ROLE"))
    auxiliary: dict[str, DatasetConfig] = Field({}, description="public auxiliary (unlabelled) datasets for ensemble (hamm2016) jobs; labels are ignored")
    max_live_jobs_federation: int = Field(limits.MAX_LIVE_JOBS_FEDERATION, ge=1, le=100_000, description=(
        "jobs of every protocol live at once in this federation; past it an operator's job waits in the admission queue (any protocol), told to no party until it has a slot"))
    max_live_jobs_per_operator: int = Field(limits.MAX_LIVE_JOBS_PER_OPERATOR, ge=1, le=100_000, description=(
        "jobs one operator certificate may have live at once; more wait in the admission queue (any protocol), told to no party until they have a slot"))
    max_queued_jobs: int = Field(limits.MAX_QUEUED_JOBS, ge=0, le=100_000, description=(
        "jobs of every protocol that may wait for a slot (round-robin over operators); a submission past it is refused OVERLOADED"))
    max_queued_jobs_per_operator: int = Field(limits.MAX_QUEUED_JOBS_PER_OPERATOR, ge=0, le=100_000, description=(
        "jobs one operator certificate may have waiting for a slot; more are refused OVERLOADED"))
    max_dca_deadline_seconds: float = Field(limits.MAX_DCA_SLOT_SECONDS, gt=0, le=limits.MAX_DEADLINE, description=(
        "the longest deadline an operator's DCA job may ask for: it holds a slot while it waits for clients; longer is refused INVALID_JOB"))


def load(cls: type[_Base], path: str | Path, **overrides: Any) -> Any:
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"config file {p} not found")
    try:
        raw = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{p} is not valid YAML: {e}") from e
    raw.update(overrides)
    try:
        cfg = cls(**raw)
    except ValidationError as e:
        raise ConfigError(f"{p}: {e}") from e
    base = p.parent.resolve()
    _resolve_paths(cfg, base)
    return cfg


def _resolve_paths(model: BaseModel, base: Path) -> None:
    for name, value in model:
        if isinstance(value, Path) and not value.is_absolute():
            setattr(model, name, base / value)
        elif isinstance(value, BaseModel):
            _resolve_paths(value, base)
        elif isinstance(value, dict):
            for v in value.values():
                if isinstance(v, BaseModel):
                    _resolve_paths(v, base)


class ComputeNodeConfig(_Base):
    curator: Endpoint
    report_every: int = Field(256, description="send received-set deltas to the other nodes once this many clients are unreported (single shares or in ShareBatches)")
    workers: int = Field(1, ge=1, le=64, description="processes of this node sharing its port (SO_REUSEPORT); 1 = one process (docs/deploy.md)")
    backlog_mib: float = Field(64.0, gt=0, le=1 << 20, description="memory per job for clients received here and not yet decided by every node (their rows and verifier records); "
                               "past it, submissions wait for the other nodes to catch up")
    backlog_stall_seconds: float = Field(20.0, ge=0.1, le=40.0, description="a full backlog none of whose clients was decided for this long is presumed stuck "
                                         "(clients that reached some nodes only): shares are taken beside it")
    backlog_held_calls: int = Field(16, ge=1, le=1024, description="submissions of one job held at once while the backlog is full; more are refused OVERLOADED (retry later)")
