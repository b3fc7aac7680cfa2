"""Provisioning: one declarative federation description in, one folder per site out.

``federation.yaml`` names the federation, the curator, the compute nodes, the parties (address and
datasets) and the protocol defaults. :func:`provision` turns it into::

    OUT/
      federation.json          public summary: every site's role, address and certificate fingerprint
      curator/                 site.crt site.key ca.crt curator.yaml README.md
      party-1/                 site.crt site.key ca.crt party.yaml README.md
      compute-1/               site.crt site.key ca.crt README.md
      operator/                site.crt site.key ca.crt endpoints.json README.md
    CA/                        ca.key ca.crt      (a separate folder that stays on the provisioning host)

Certificates come from :mod:`mpdp_services.common.pki`: role in OU, site name in CN, federation in O, the
site's host names in the SAN. A site that keeps its key at home sends a CSR instead (``csr:`` in the
description, or ``mpdp provision csr`` / ``mpdp provision sign``); its folder then gets no key.

Every failure raises :class:`ProvisionError` whose message names the file or field and says what to do.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from mpdp_services.common import pki
from mpdp_services.common.link import LINK_ADDRESS
from mpdp_services.common.config import DatasetConfig
from mpdp_services.common.durable import PRIVATE, PUBLIC, make_private_dir, write_atomic

SITE_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
TLS = {"cert": "site.crt", "key": "site.key", "ca": "ca.crt"}


class ProvisionError(ValueError):
    """Provisioning cannot go on; the message says which file or field and what to do."""


# -- the federation description -------------------------------------------------------------------
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class _Site(_Strict):
    name: str = Field(description="site name: TLS server name, certificate CN, DNS label (a-z, 0-9, -)")
    address: str = Field(description="host:port the other sites dial")
    listen: str | None = Field(None, description="host:port to bind (default 0.0.0.0:<port of address>)")
    hosts: list[str] = Field([], description="extra host names or IPs for the certificate's SAN")
    csr: Path | None = Field(None, description="a CSR the site made at home: sign it instead of making a key here")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_site_name(v)

    @field_validator("address", "listen")
    @classmethod
    def _address(cls, v: str | None) -> str | None:
        if v is not None:
            split_address(v)
        return v

    @property
    def port(self) -> int:
        return split_address(self.address)[1]

    @property
    def bind(self) -> str:
        return self.listen or f"0.0.0.0:{self.port}"

    @property
    def san_hosts(self) -> list[str]:
        host = [split_address(self.address)[0]] if self.address else []
        return list(dict.fromkeys([*host, *self.hosts]))


class CuratorSpec(_Site):
    state_dir: str = Field("state", description="published models and job state (relative to the site folder, or absolute)")
    auxiliary: dict[str, DatasetConfig] = Field({}, description="public unlabelled datasets for ensemble (hamm2016) jobs: name → file on the curator's machine")


class ComputeNodeSpec(_Site):
    """A DCA compute node (`mpdp serve compute-node --config compute_node.yaml`)."""


class PartySpec(_Site):
    """A party (`mpdp serve party --config party.yaml`). It listens nowhere: it dials the curator and keeps its link
    open (services/party/link.py), so it needs no address, no inbound firewall rule and no port."""

    address: str | None = Field(None, description="unused: a party listens on no port (it dials the curator); an address given is ignored")  # type: ignore[assignment]
    datasets: dict[str, DatasetConfig] = Field({}, description="dataset name → file on the party's own machine")
    ledger: str = Field("state/ledger.json", description="the privacy ledger (relative to the site folder, or absolute)")
    budget_epsilon: float | None = Field(None, description="this party's total ε budget (default: defaults.budget_epsilon)")
    local_classifier: str = Field("logreg", description="the party's own model in ensemble (hamm2016) jobs: logreg, linear_svm, tree, naive_bayes, …")


class OperatorSpec(_Strict):
    name: str = "operator"
    csr: Path | None = None
    admin: bool = Field(default=False, description="role admin instead of operator: may list, watch, fetch and cancel every operator's jobs (an operator only its own)")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_site_name(v)


class Defaults(_Strict):
    paillier_bits: int = Field(default=2048, ge=256)
    dgk_bits: int = Field(default=2048, ge=256)
    budget_epsilon: float = Field(default=10.0, gt=0)
    test_mode: bool = Field(default=False, description="small keys and seeds allowed: never with real data")
    noise: Literal["gaussian-distributed", "corrected", "paper"] = Field(default="corrected", description="suggested noise scheme per job")
    epsilon: float = Field(default=1.0, gt=0, description="suggested ε per job (printed in the operator's README)")
    lam: float = Field(default=0.01, gt=0, description="suggested regulariser λ per job")
    dataset: str | None = Field(default=None, description="suggested dataset name for jobs")

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: object) -> object:
        """``lambda`` and ``mode`` are the old spellings of ``lam`` and ``noise``: still read for one release, with a warning."""
        if isinstance(data, dict):
            data = dict(data)
            for old, new in (("lambda", "lam"), ("mode", "noise")):
                if old in data:
                    warnings.warn(f"defaults: {old!r} is deprecated and goes in the next release; use {new!r}", FutureWarning, stacklevel=2)
                    data.setdefault(new, data.pop(old))
        return data

    @model_validator(mode="after")
    def _keys(self) -> "Defaults":
        if not self.test_mode and min(self.paillier_bits, self.dgk_bits) < 2048:
            raise ValueError("paillier_bits and dgk_bits must be at least 2048 unless test_mode is true")
        return self


class FederationSpec(_Strict):
    federation: str = Field(description="federation name: the O of every certificate; sites of other federations are refused")
    validity_days: int = Field(pki.DEFAULT_DAYS, ge=1, le=3650, description="leaf certificate lifetime")
    curator: CuratorSpec
    compute_nodes: list[ComputeNodeSpec] = []
    parties: list[PartySpec]
    operators: list[OperatorSpec] = [OperatorSpec()]
    defaults: Defaults = Defaults()

    @field_validator("federation")
    @classmethod
    def _fed(cls, v: str) -> str:
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,62}$", v):
            raise ValueError(f"federation name {v!r}: use letters, digits, space, '.', '_' or '-' (at most 63)")
        return v

    @model_validator(mode="after")
    def _unique(self) -> "FederationSpec":
        names = [s.name for s in self.sites()]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"site names must be unique across curator, compute nodes, parties and operators; repeated: {dup}")
        if not self.parties:
            raise ValueError("a federation needs parties")
        return self

    def sites(self) -> list:
        return [self.curator, *self.compute_nodes, *self.parties, *self.operators]


def check_site_name(v: str) -> str:
    if not SITE_NAME.match(v):
        raise ValueError(f"site name {v!r} must be a DNS label: lower-case letters, digits and '-', at most 63 characters")
    return v


def split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"address {address!r} must be host:port with a port in 1..65535")
    return host.strip("[]"), int(port)


def load_spec(path: str | Path) -> FederationSpec:
    p = Path(path)
    if not p.is_file():
        raise ProvisionError(f"federation description {p} not found; write one (see docs/deploy.md, 'The federation description')")
    try:
        raw = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise ProvisionError(f"{p} is not valid YAML: {e}") from e
    try:
        spec = FederationSpec.model_validate(raw)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(x) for x in err['loc']) or '(top level)'}: {err['msg']}" for err in e.errors())
        raise ProvisionError(f"{p}: {problems}") from e
    for s in spec.sites():  # CSR paths are relative to the description
        if s.csr is not None and not s.csr.is_absolute():
            s.csr = (p.parent / s.csr).resolve()
    return spec


# -- the CA ---------------------------------------------------------------------------------------
@dataclass
class CertificateAuthority:
    folder: Path
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    created: bool

    @property
    def federation(self) -> str:
        return _attr(self.cert.subject, NameOID.ORGANIZATION_NAME)


def open_ca(folder: str | Path) -> CertificateAuthority:
    """An existing CA folder (ca.key, ca.crt), for signing."""
    f = Path(folder)
    key_p, crt_p = f / "ca.key", f / "ca.crt"
    if not key_p.exists() or not crt_p.exists():
        raise ProvisionError(f"{f} is not a CA folder (needs ca.key and ca.crt); create one with `mpdp provision FEDERATION.yaml --out DIR --ca {f}`")
    try:
        key = serialization.load_pem_private_key(key_p.read_bytes(), None)
        cert = x509.load_pem_x509_certificate(crt_p.read_bytes())
    except ValueError as e:
        raise ProvisionError(f"{f}: cannot read the CA key or certificate ({e})") from e
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ProvisionError(f"{f}: the CA key is not an elliptic-curve key (the CA that `mpdp provision` makes)")
    if cert.not_valid_after_utc <= dt.datetime.now(dt.timezone.utc):
        raise ProvisionError(f"the CA certificate in {f} expired on {cert.not_valid_after_utc:%Y-%m-%d}; make a new CA (new --ca folder) and re-provision every site")
    return CertificateAuthority(f, key, cert, created=False)


def open_or_create_ca(folder: str | Path, federation: str) -> CertificateAuthority:
    f = Path(folder)
    if (f / "ca.key").exists():
        ca = open_ca(f)
        if ca.federation != federation:
            raise ProvisionError(f"the CA in {f} belongs to federation {ca.federation!r}, not {federation!r}; pass --ca with another folder")
        return ca
    key, cert = pki.make_ca(federation)
    make_private_dir(f)
    f.chmod(0o700)  # an existing empty folder too
    write_atomic(f / "ca.key", pki.pem_key(key), PRIVATE)
    write_atomic(f / "ca.crt", pki.pem_cert(cert), PUBLIC)
    return CertificateAuthority(f, key, cert, created=True)


def fingerprint(cert: x509.Certificate) -> str:
    return ":".join(f"{b:02X}" for b in cert.fingerprint(hashes.SHA256()))


# -- provisioning ---------------------------------------------------------------------------------
@dataclass
class SiteResult:
    name: str
    role: str
    folder: Path
    address: str | None
    fingerprint: str
    not_after: dt.datetime
    key_here: bool


@dataclass
class Result:
    out: Path
    ca: CertificateAuthority
    sites: list[SiteResult] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "federation": self.ca.federation,
            "out": str(self.out),
            "ca_folder": str(self.ca.folder),
            "ca_created": self.ca.created,
            "ca_fingerprint_sha256": fingerprint(self.ca.cert),
            "sites": [
                {"name": s.name, "role": s.role, "folder": str(s.folder), "address": s.address, "fingerprint_sha256": s.fingerprint, "not_after": s.not_after.isoformat(), "key_in_folder": s.key_here}
                for s in self.sites
            ],
        }


def provision(spec: FederationSpec, out: str | Path, ca_folder: str | Path | None = None, force: bool = False) -> Result:
    """Write one folder per site under ``out``; the CA goes to ``ca_folder`` (default: ``<out>-ca`` beside it)."""
    out = Path(out).resolve()
    ca_dir = Path(ca_folder).resolve() if ca_folder else out.with_name(out.name + "-ca")
    if ca_dir == out or out in ca_dir.parents:
        raise ProvisionError(f"the CA folder {ca_dir} is inside the output folder {out}, whose sub-folders are handed out; pass --ca with a folder outside it")
    existing = [s.name for s in spec.sites() if (out / s.name).exists()]
    if existing and not force:
        raise ProvisionError(f"{out} already has folders for {existing}; pass --force to issue new keys and certificates (rotation), or choose another --out")
    for s in spec.sites():
        if s.csr is not None and not s.csr.is_file():
            raise ProvisionError(f"{s.name}: CSR file {s.csr} not found; the site makes it with `mpdp provision csr --role ROLE --site {s.name}`")
    ca = open_or_create_ca(ca_dir, spec.federation)
    result = Result(out, ca)
    out.mkdir(mode=0o755, parents=True, exist_ok=True)

    def issue(site, role: str, hosts: list[str]) -> SiteResult:
        folder = out / site.name
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(mode=0o755, parents=True)
        if site.csr is not None:
            csr = _load_csr(site.csr)
            _check_csr(csr, role, site.name, spec.federation, site.csr)
            cert = pki.sign_csr(csr, ca.key, ca.cert, hosts, spec.validity_days)
            write_atomic(folder / "site.crt", pki.pem_cert(cert), PUBLIC)
            write_atomic(folder / "ca.crt", pki.pem_cert(ca.cert), PUBLIC)
            key_here = False
        else:
            key = pki.new_key()
            cert = pki.sign_csr(pki.make_csr(key, role, site.name), ca.key, ca.cert, hosts, spec.validity_days)
            pki.write_site(folder, key, cert, ca.cert)
            key_here = True
        address = getattr(site, "address", None) if role != "party" else None  # a party listens nowhere
        r = SiteResult(site.name, role, folder, address, fingerprint(cert), cert.not_valid_after_utc, key_here)
        result.sites.append(r)
        return r

    d = spec.defaults
    common = {"federation": spec.federation, "tls": dict(TLS), "test_mode": d.test_mode, "paillier_bits": d.paillier_bits}
    cur = spec.curator
    r = issue(cur, "curator", cur.san_hosts)
    _write_yaml(
        r.folder / "curator.yaml",
        {
            "name": cur.name,
            **common,
            "listen": cur.bind,
            "advertise": cur.address,
            "state_dir": cur.state_dir,
            "dgk_bits": d.dgk_bits,
            "compute_nodes": {c.name: c.address for c in spec.compute_nodes},
            "members": [p.name for p in spec.parties],  # the federation as provisioned: only these register
            "compute_node_members": [c.name for c in spec.compute_nodes],
            "auxiliary": {k: _dataset_dict(v) for k, v in cur.auxiliary.items()},
        },
    )
    _write_readme(r, spec, ca)
    for c in spec.compute_nodes:
        r = issue(c, "compute_node", c.san_hosts)
        _write_yaml(
            r.folder / "compute_node.yaml",
            {"name": c.name, **common, "listen": c.bind, "advertise": c.address, "curator": {"address": cur.address, "name": cur.name}},
        )
        _write_readme(r, spec, ca)
    for p in spec.parties:
        r = issue(p, "party", p.san_hosts)
        _write_yaml(
            r.folder / "party.yaml",
            {
                "name": p.name,
                **common,
                "curator": {"address": cur.address, "name": cur.name},  # the one place it dials, besides the compute nodes
                "datasets": {k: _dataset_dict(v) for k, v in p.datasets.items()},
                "ledger": p.ledger,
                "budget_epsilon": p.budget_epsilon if p.budget_epsilon is not None else d.budget_epsilon,
                "local_classifier": p.local_classifier,
                "members": [q.name for q in spec.parties],  # the federation as provisioned: this party's jobs name only these
            },
        )
        _write_readme(r, spec, ca)
    for o in spec.operators:
        r = issue(o, pki.ADMIN if o.admin else pki.OPERATOR, [])
        write_atomic(
            r.folder / "endpoints.json",
            json.dumps({"federation": spec.federation, "curator": {"address": cur.address, "name": cur.name}, "operator_tls": dict(TLS),
                        "parties": {p.name: LINK_ADDRESS for p in spec.parties},
                        # the DCA protocols (dp-gd, regression, ensembles, sums) name the compute nodes in their job specs
                        "compute_nodes": {c.name: c.address for c in spec.compute_nodes}}, indent=2)
            + "\n",
            PUBLIC,
        )
        _write_readme(r, spec, ca)
    write_atomic(out / "federation.json", json.dumps(result.as_dict() | {"out": ".", "ca_folder": "(kept on the provisioning host)"}, indent=2) + "\n", PUBLIC)
    return result


def _dataset_dict(ds: DatasetConfig) -> dict:
    d = ds.model_dump(exclude_defaults=True, by_alias=True)
    if ds.format != "sql":
        d["path"] = str(ds.path)
    if ds.dsn is not None:  # the plan's own connection string (dsn_env keeps it out of every file)
        d["dsn"] = ds.dsn.get_secret_value()
    if ds.schema_file is not None:
        d["schema"] = str(ds.schema_file)
    return d


def _load_csr(path: Path) -> x509.CertificateSigningRequest:
    try:
        return x509.load_pem_x509_csr(Path(path).read_bytes())
    except (ValueError, OSError) as e:
        raise ProvisionError(f"{path} is not a PEM certificate signing request ({e}); make one with `mpdp provision csr`") from e


def _check_csr(csr: x509.CertificateSigningRequest, role: str, site: str, federation: str, path: Path) -> None:
    if not csr.is_signature_valid:
        raise ProvisionError(f"{path}: the CSR's signature does not verify; ask the site for a fresh one")
    got_role, got_site = _attr(csr.subject, NameOID.ORGANIZATIONAL_UNIT_NAME), _attr(csr.subject, NameOID.COMMON_NAME)
    if got_role != role or got_site != site:
        raise ProvisionError(f"{path} asks for role {got_role!r} as site {got_site!r}, but the description has {site!r} as {role!r}; ask the site for a CSR made with --role {role} --site {site}")
    got_fed = _attr(csr.subject, NameOID.ORGANIZATION_NAME)
    if got_fed not in ("", "mpdp", federation):
        raise ProvisionError(f"{path} was made for federation {got_fed!r}, not {federation!r}")


def _attr(name: x509.Name, oid) -> str:
    vals = name.get_attributes_for_oid(oid)
    return str(vals[0].value) if vals else ""


def _write_yaml(path: Path, data: dict) -> None:
    """A site's config: no secrets in it (the key is a separate file), so readable like its certificate."""
    write_atomic(path, yaml.safe_dump(data, sort_keys=False), PUBLIC)


# -- the CSR flow ---------------------------------------------------------------------------------
def make_csr_files(role: str, site: str, out: str | Path, federation: str = "", force: bool = False) -> tuple[Path, Path]:
    """At the institution: a new private key (stays here) and a CSR to send to the federation operator."""
    try:
        pki._check_role(role)
        check_site_name(site)
    except ValueError as e:
        raise ProvisionError(str(e)) from e
    folder = Path(out)
    key_p, csr_p = folder / "site.key", folder / "site.csr"
    if key_p.exists() and not force:
        raise ProvisionError(f"{key_p} already exists; pass --force to replace the key (the old certificate then stops matching) or choose another --out")
    folder.mkdir(mode=0o755, parents=True, exist_ok=True)
    key = pki.new_key()
    csr = pki.make_csr(key, role, site, federation)
    write_atomic(key_p, pki.pem_key(key), PRIVATE)
    write_atomic(csr_p, csr.public_bytes(serialization.Encoding.PEM), PUBLIC)
    return key_p, csr_p


def sign_csr_file(ca_folder: str | Path, csr_path: str | Path, hosts: list[str], out: str | Path, days: int = pki.DEFAULT_DAYS, role: str | None = None) -> tuple[Path, x509.Certificate]:
    """At the federation operator: sign a site's CSR; writes site.crt and ca.crt into ``out``."""
    ca = open_ca(ca_folder)
    csr = _load_csr(Path(csr_path))
    if not csr.is_signature_valid:
        raise ProvisionError(f"{csr_path}: the CSR's signature does not verify; ask the site for a fresh one")
    got_role = _attr(csr.subject, NameOID.ORGANIZATIONAL_UNIT_NAME)
    if role is not None and got_role != role:
        raise ProvisionError(f"{csr_path} asks for role {got_role!r}, not {role!r}; refusing to sign")
    got_fed = _attr(csr.subject, NameOID.ORGANIZATION_NAME)
    if got_fed not in ("", "mpdp", ca.federation):
        raise ProvisionError(f"{csr_path} was made for federation {got_fed!r}, but this CA is {ca.federation!r}")
    for h in hosts:
        if not h or " " in h:
            raise ProvisionError(f"--hosts entry {h!r} is not a host name or IP")
    try:
        cert = pki.sign_csr(csr, ca.key, ca.cert, hosts, days)
    except ValueError as e:
        raise ProvisionError(f"{csr_path}: {e}") from e
    folder = Path(out)
    folder.mkdir(mode=0o755, parents=True, exist_ok=True)
    write_atomic(folder / "site.crt", pki.pem_cert(cert), PUBLIC)
    write_atomic(folder / "ca.crt", pki.pem_cert(ca.cert), PUBLIC)
    return folder / "site.crt", cert


# -- inspection -------------------------------------------------------------------------------------
def describe(path: str | Path) -> dict:
    """What a certificate (or CSR) says: role, site, federation, SAN, validity, SHA-256 fingerprint."""
    p = Path(path)
    if not p.is_file():
        raise ProvisionError(f"{p} not found")
    data = p.read_bytes()
    try:
        cert = x509.load_pem_x509_certificate(data)
    except ValueError:
        try:
            csr = x509.load_pem_x509_csr(data)
        except ValueError as e:
            raise ProvisionError(f"{p} is neither a PEM certificate nor a CSR") from e
        return {"file": str(p), "kind": "csr", "role": _attr(csr.subject, NameOID.ORGANIZATIONAL_UNIT_NAME), "site": _attr(csr.subject, NameOID.COMMON_NAME),
                "federation": _attr(csr.subject, NameOID.ORGANIZATION_NAME)}
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [str(n.value) for n in san]
    except x509.ExtensionNotFound:
        names = []
    now = dt.datetime.now(dt.timezone.utc)
    try:
        is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    return {
        "file": str(p),
        "kind": "ca" if is_ca else "certificate",
        "role": _attr(cert.subject, NameOID.ORGANIZATIONAL_UNIT_NAME),
        "site": _attr(cert.subject, NameOID.COMMON_NAME),
        "federation": _attr(cert.subject, NameOID.ORGANIZATION_NAME),
        "issuer": cert.issuer.rfc4514_string(),
        "san": names,
        "not_before": cert.not_valid_before_utc.isoformat(),
        "not_after": cert.not_valid_after_utc.isoformat(),
        "days_left": round((cert.not_valid_after_utc - now).total_seconds() / 86400, 1),
        "expired": cert.not_valid_after_utc <= now,
        "fingerprint_sha256": fingerprint(cert),
    }


def verify_site(folder: str | Path) -> list[str]:
    """Problems with a site folder: missing files, key/cert mismatch, a certificate not from ca.crt, expiry."""
    f = Path(folder)
    problems = [f"{f / n} is missing" for n in TLS.values() if not (f / n).exists()]
    if problems:
        return problems
    cert = x509.load_pem_x509_certificate((f / "site.crt").read_bytes())
    ca = x509.load_pem_x509_certificate((f / "ca.crt").read_bytes())
    key = serialization.load_pem_private_key((f / "site.key").read_bytes(), None)
    if key.public_key().public_numbers() != cert.public_key().public_numbers():  # type: ignore[union-attr]
        problems.append("site.key does not belong to site.crt (was the key replaced after signing?)")
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        problems.append(f"site.crt was not signed by ca.crt (issuer {cert.issuer.rfc4514_string()}, CA {ca.subject.rfc4514_string()})")
    if cert.not_valid_after_utc <= dt.datetime.now(dt.timezone.utc):
        problems.append(f"site.crt expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC; ask the federation operator for a new one")
    return problems


# -- per-site README --------------------------------------------------------------------------------
def _write_readme(r: SiteResult, spec: FederationSpec, ca: CertificateAuthority) -> None:
    cur = spec.curator
    lines = [
        f"# {r.name}: {r.role.replace('_', ' ')} of federation {spec.federation!r}",
        "",
        "Provisioned by `mpdp provision`. Keep this folder on the site's machine; `site.key` is its private key",
        "(mode 0600): never send it anywhere." if r.key_here else "The private key is the one this site generated with `mpdp provision csr`; copy `site.key` here.",
        "",
        "| file | what |",
        "|---|---|",
        "| site.crt | this site's certificate (role in OU, site name in CN, federation in O) |",
        "| site.key | its private key |" if r.key_here else "| (site.key) | your own key, kept at home |",
        "| ca.crt | the federation CA: the only issuer this site trusts |",
    ]
    cfg = {"curator": "curator.yaml", "party": "party.yaml", "compute_node": "compute_node.yaml", "operator": "endpoints.json", "admin": "endpoints.json"}.get(r.role)
    if cfg:
        lines.append(f"| {cfg} | {'client endpoints' if r.role in ('operator', 'admin') else 'service configuration (YAML; MPDP_* environment variables override fields)'} |")
    lines += [
        "",
        f"Certificate valid until **{r.not_after:%Y-%m-%d %H:%M} UTC**; SHA-256 fingerprint `{r.fingerprint}`.",
        f"CA fingerprint (compare it with the one the federation operator tells you out of band): `{fingerprint(ca.cert)}`.",
        "Check it: `mpdp provision show ca.crt` and `mpdp provision show site.crt` (role, site, expiry, fingerprint).",
        "",
        "## Run",
        "",
    ]
    if r.role == "curator":
        lines += [
            "```sh",
            "mpdp serve curator --config curator.yaml",
            "```",
            "",
            f"Listens on `{cur.bind}`; open this port inbound to the parties, the compute nodes and the operator. It dials out to "
            f"the compute nodes only: each party keeps a link open to it, and every call to a party (and every party-to-party "
            f"step, sealed end to end) travels over that link. Published models are kept in `{cur.state_dir}/models/`.",
        ]
    elif r.role == "party":
        p = next(x for x in spec.parties if x.name == r.name)
        lines += [
            "```sh",
            "mpdp serve party --config party.yaml",
            "```",
            "",
            f"Listens on no port: no inbound firewall rule is needed. It dials out to the curator `{cur.address}` (and keeps that "
            f"connection open: the curator's calls and the other parties' steps come back over it) and, for DCA jobs, to the compute "
            f"nodes ({', '.join(c.address for c in spec.compute_nodes) or 'none provisioned'}).",
            "",
            "Data stays here: the party reads these files itself when a job names the dataset; no record leaves this machine.",
            "",
        ]
        lines += [f"- `{k}`: `{v.path}` ({v.format})" for k, v in p.datasets.items()] or ["- (no datasets configured yet: add them under `datasets:` in party.yaml)"]
        lines += ["", f"Privacy ledger: `{p.ledger}` (JSON; every release this party took part in, with its ε; jobs beyond the budget are refused)."]
    elif r.role == "compute_node":
        c = next(x for x in spec.compute_nodes if x.name == r.name)
        others = [x.address for x in spec.compute_nodes if x.name != c.name]
        lines += [
            "```sh",
            "mpdp serve compute-node --config compute_node.yaml",
            "```",
            "",
            f"Listens on `{c.bind}` (others dial `{c.address}`): open it inbound to the curator `{cur.address}`, to the DCA clients "
            f"(parties, or the operator's load generator) and to the other compute nodes{' (' + ', '.join(others) + ')' if others else ''}. "
            "It dials out to the curator and to the other compute nodes. It sees only secret shares, never a client's vector.",
        ]
    elif r.role in (pki.OPERATOR, pki.ADMIN):
        d = spec.defaults
        parties = ",".join(p.name for p in spec.parties)
        lines += [
            "Submit a job (the curator must be up):",
            "",
            "```sh",
            f"mpdp train logreg --endpoints . --dataset {d.dataset or 'DATASET'} --parties {parties} --epsilon {d.epsilon:g} --lam {d.lam:g} --noise {d.noise}",
            "mpdp predict --endpoints . --job JOB_ID --data test.csv",
            "```",
        ]
    write_atomic(r.folder / "README.md", "\n".join(lines) + "\n", PUBLIC)


# -- demo data --------------------------------------------------------------------------------------
def write_demo_data(out: str | Path, parties: list[str], dataset: str = "breast_cancer", seed: int = 7) -> dict[str, Path]:
    """Split scikit-learn's bundled breast-cancer data into one CSV per party plus a held-out test CSV.

    Writes ``out/<party>/<dataset>.csv`` and ``out/operator/<dataset>_test.csv`` (standardised features,
    label ±1 in the last column), the same preparation as ``mpdp demo``, and ``out/curator/<dataset>_aux.csv``:
    a disjoint public slice whose labels are zeroed, the curator's auxiliary data for ensemble (hamm2016) jobs.
    Demo only: real parties bring their own files.
    """
    import numpy as np
    from sklearn.datasets import load_breast_cancer

    if len(parties) < 1:
        raise ProvisionError("name at least one party")
    X, y = load_breast_cancer(return_X_y=True)
    y = np.where(y == 1, 1.0, -1.0)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    order = np.random.default_rng(seed).permutation(len(y))  # public simulation data: which rows go where
    n_test, n_aux = len(y) // 4, len(y) // 8
    test, aux, train = order[:n_test], order[n_test:n_test + n_aux], order[n_test + n_aux:]
    parts = np.array_split(train, len(parties))
    root = Path(out)
    paths: dict[str, Path] = {}
    files = [*((n, idx, f"{dataset}.csv") for n, idx in zip(parties, parts)), ("operator", test, f"{dataset}_test.csv"), ("curator", aux, f"{dataset}_aux.csv")]
    for name, idx, fname in files:
        p = root / name / fname
        p.parent.mkdir(parents=True, exist_ok=True)
        labels = y[idx] if name != "curator" else np.zeros(len(idx))  # the auxiliary data are unlabelled
        np.savetxt(p, np.column_stack([X[idx], labels]), delimiter=",", fmt="%.10g")
        paths[name] = p
    return paths

