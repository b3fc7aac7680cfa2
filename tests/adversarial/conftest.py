"""The adversarial suite's shared tools: a real federation, raw gRPC clients, minted certificates, checks.

Every attack talks to real processes over mutual TLS on loopback with the generated messages of
``mpdp/messages`` (no client library of the product), as an outside checker would. The federation is
the one ``mpdp federation up --test-mode --parties 3 --compute-nodes 3`` starts (LocalFederation, in
process), plus small datasets so that legitimate jobs can run. Certificates for attackers are minted
here from the federation's CA key (``<workdir>/ca/ca.key``) with :mod:`mpdp_services.common.pki`.

Checks shared by every attack module:

- :func:`refused` runs one call and returns its gRPC error (a call that succeeds fails the test);
- :func:`assert_clean` holds status details to the hygiene rule: short, no echo of what the attacker
  sent, no filesystem path, no class name, no traceback;
- :func:`assert_serving` asks the standard health service of a site;
- :func:`assert_ledgers_within_budget` reads every party's ledger file;
- :func:`pathak_job` / :func:`dca_job` run a small legitimate job to the end, through the curator's one job
  host (:func:`job_host`: JobOperations submit, watch and release, as every operator does).
"""

from __future__ import annotations

import http.client
import json
import math
import os
import re
import time
from pathlib import Path
from typing import Any, Callable

import grpc
import numpy as np
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from grpc_health.v1 import health_pb2, health_pb2_grpc

from mpdp.dca.client import ClientCohort
from mpdp.dca.params import DcaParams
from mpdp.ledger import Ledger, composition
from mpdp.math.drbg import Drbg
from mpdp.messages import common_pb2, dca_pb2, dca_pb2_grpc, operations_pb2 as ops, operations_pb2_grpc as ops_grpc, pathak2010_pb2 as pk, pathak2010_pb2_grpc as pk_grpc
from mpdp_services.common import pki
from mpdp_services.common.rpc import TlsFiles
from mpdp_services.launcher.federation import LocalFederation
from tests.linked import LinkedServer, PartyChannel, local_serving

PARTIES = ["party-1", "party-2", "party-3"]
NODES = ["node-1", "node-2", "node-3"]
D = 4
BUDGET = 100.0
MAX_DETAILS = 300  # characters: "PROBLEM: " + errors.MAX_DETAIL with room to spare
PATHAK_SERVICE = "mpdp.messages.Curator"
PARTY_SERVICE = "mpdp.messages.Party"
NODE_SERVICE = "mpdp.messages.ComputeNode"
DCA_SERVICE = "mpdp.messages.DcaCurator"


# -- the federation -------------------------------------------------------------------------------------
def synthetic_rows(n: int, seed: int, d: int = D) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(seed)
    X = np.clip(g.normal(size=(n, d)) / (1.5 * d), -0.9 / np.sqrt(d), 0.9 / np.sqrt(d))
    w = np.linspace(1.0, -0.5, d)
    y = np.where(X @ w + 0.01 * g.normal(size=n) > 0, 1.0, -1.0)
    return X, y


def start_federation(root: Path, budget: float = BUDGET, parties: list[str] | None = None, dimension: int = D, *, nodes: list[str] = NODES,
                     key_bits: int = 768, curator_options: dict | None = None, members: list[str] | None = None,
                     node_options: dict | None = None, extra_datasets: dict[str, dict[str, dict]] | None = None) -> LocalFederation:
    """Curator (auxiliary dataset ``aux``), 3 parties (each with dataset ``synthetic``: d = 4, ±1 labels, rows in
    the unit ball) and 3 compute nodes, small keys, test mode: what ``mpdp federation up --test-mode --parties 3 --compute-nodes 3``
    starts, plus the data a legitimate job needs. ``curator_options``, ``node_options``: extra curator and compute-node
    configuration fields; ``members``:
    the federation's parties as provisioned (default: the parties started); ``extra_datasets``: party → more datasets."""
    names = parties or PARTIES
    datasets: dict[str, dict[str, dict]] = {}
    for j, p in enumerate(names):
        X, y = synthetic_rows(40 + 7 * j, j, dimension)
        f = root / "data" / f"{p}.csv"
        f.parent.mkdir(parents=True, exist_ok=True)
        np.savetxt(f, np.column_stack([X, y]), delimiter=",", fmt="%.17g")
        datasets[p] = {"synthetic": {"path": str(f), "format": "csv"}, **(extra_datasets or {}).get(p, {})}
    X, _ = synthetic_rows(60, 99, dimension)  # the curator's public auxiliary points for ensemble jobs (labels ignored)
    aux = root / "data" / "aux.csv"
    np.savetxt(aux, np.column_stack([X, np.zeros(len(X))]), delimiter=",", fmt="%.17g")
    fed = LocalFederation(root / "fed", names, datasets, test_mode=True, paillier_bits=key_bits, dgk_bits=key_bits, budget_epsilon=budget, compute_nodes=list(nodes),
                          auxiliary={"aux": {"path": str(aux), "format": "csv"}}, curator_options=dict(curator_options or {}), members=members,
                          node_options=dict(node_options or {}))
    try:
        fed.start()
    except BaseException:
        fed.stop()
        raise
    return fed


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    f = start_federation(tmp_path_factory.mktemp("adv"))
    yield f
    f.stop()


def endpoints(fed: LocalFederation) -> dict:
    return json.loads((fed.workdir / "endpoints.json").read_text())


def address(fed: LocalFederation, site: str) -> str:
    return f"127.0.0.1:{fed.procs[site].port}"


# -- certificates -----------------------------------------------------------------------------------------
def site_tls(fed: LocalFederation, site: str) -> TlsFiles:
    d = fed.workdir / site
    return TlsFiles(d / "site.crt", d / "site.key", d / "ca.crt")


def mint(fed: LocalFederation, role: str, name: str) -> TlsFiles:
    """A certificate from the federation's own CA for (role, name): what a rogue or extra site would hold."""
    folder = fed.workdir / "minted" / f"{role}-{name}"
    if not (folder / "site.crt").exists():
        ca = fed.workdir / "ca"
        ca_key = serialization.load_pem_private_key((ca / "ca.key").read_bytes(), None)
        ca_cert = x509.load_pem_x509_certificate((ca / "ca.crt").read_bytes())
        key, cert = pki.issue(ca_key, ca_cert, role, name, ["127.0.0.1"])
        pki.write_site(folder, key, cert, ca_cert)
    return TlsFiles(folder / "site.crt", folder / "site.key", folder / "ca.crt")


def mint_custom(fed: LocalFederation, label: str, subject: list[tuple[Any, str]], usages: list | None) -> TlsFiles:
    """A certificate from the federation's CA with a hand-made subject (``[(NameOID.X, value), …]``) and extended key
    usages (None: no EKU extension at all): what a careless or hostile issuer could produce."""
    import datetime as dt

    from cryptography.hazmat.primitives import hashes

    folder = fed.workdir / "minted" / f"custom-{label}"
    if not (folder / "site.crt").exists():
        ca = fed.workdir / "ca"
        ca_key = serialization.load_pem_private_key((ca / "ca.key").read_bytes(), None)
        ca_cert = x509.load_pem_x509_certificate((ca / "ca.crt").read_bytes())
        key = pki.new_key()
        now = dt.datetime.now(dt.timezone.utc)
        b = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(oid, v) for oid, v in subject])).issuer_name(ca_cert.subject)
             .public_key(key.public_key()).serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
             .not_valid_after(now + dt.timedelta(days=1)).add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
             .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False))
        if usages is not None:
            b = b.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        pki.write_site(folder, key, b.sign(ca_key, hashes.SHA256()), ca_cert)
    return TlsFiles(folder / "site.crt", folder / "site.key", folder / "ca.crt")


def channel(fed: LocalFederation, target: str, tls: TlsFiles, **options: Any) -> Any:
    """A channel to ``target`` as the holder of ``tls``. A party listens nowhere: a call to it is what that holder can
    make of it, down the party's link as the curator or sealed through the curator's relay (tests/linked.py)."""
    if target in fed.parties:
        return PartyChannel(address(fed, "curator"), target, tls, fed.federation, fed.procs[target].local_socket)
    opts = [("grpc.ssl_target_name_override", target), *options.items()]
    return grpc.secure_channel(address(fed, target), tls.channel_credentials(), options=opts)


def serve_party(fed: LocalFederation, name: str, servicer: Any) -> tuple[LinkedServer, TlsFiles]:
    """The test's own Pathak party server under ``name`` (a certificate minted for it), registered at the curator and
    linked to it as a party is, so that a job naming ``name`` talks to ``servicer``. The caller stops the server."""
    tls = mint(fed, "party", name)
    with channel(fed, "curator", tls) as ch:
        pk_grpc.CuratorStub(ch).RegisterParty(pk.PartyRegistration(), timeout=30)
    linked = LinkedServer(address(fed, "curator"), name, tls, fed.federation, lambda server: pk_grpc.add_PartyServicer_to_server(servicer, server))
    try:
        linked.wait_up()
    except BaseException:
        linked.stop()
        raise
    return linked, tls


# -- raw calls ---------------------------------------------------------------------------------------------
def raw_unary(ch: grpc.Channel, service: str, method: str, response_type: Any = None) -> Callable:
    """A unary method taking bytes as they are (no serializer): for undecodable or hand-built bodies."""
    return ch.unary_unary(f"/{service}/{method}", request_serializer=None, response_deserializer=(response_type.FromString if response_type else None))


def refused(call: Callable[[], Any]) -> grpc.RpcError:
    """The error a call ends with; a call that succeeds fails the test."""
    try:
        result = call()
    except grpc.RpcError as e:
        return _seen(e)
    if hasattr(result, "__iter__") and not isinstance(result, (bytes, str)) and not hasattr(result, "DESCRIPTOR"):
        try:
            for _ in result:
                pass
        except grpc.RpcError as e:
            return _seen(e)
    pytest.fail(f"the call was accepted: {result!r:.200}")


def _seen(e: grpc.RpcError) -> grpc.RpcError:
    """With MPDP_ADV_REFUSALS=<file>, every refusal the suite sees is appended there (test, status, details):
    the raw material of a details-hygiene review."""
    out = os.environ.get("MPDP_ADV_REFUSALS")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps({"test": os.environ.get("PYTEST_CURRENT_TEST", "?"), "code": e.code().name, "details": e.details() or ""}) + "\n")
    return e


_PATH = re.compile(r"(/(tmp|home|work|root|usr|var|proc|etc|opt|srv)/|[A-Za-z]:\\\\|\.py\b|\.json\b|\.binpb\b)")
_PLAIN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")


def assert_clean(e: grpc.RpcError, *sent: str) -> None:
    """Status details fit the hygiene rule: bounded, no echo of an attacker string that is long or not a plain
    identifier, no filesystem path, no class name, no traceback."""
    details = e.details() or ""
    assert len(details) <= MAX_DETAILS, f"{len(details)}-character details: {details[:120]!r}…"
    for s in sent:
        if s and not _PLAIN_ID.match(s):
            assert s[:64] not in details and repr(s)[1:65] not in details, f"details echo the attacker's {len(s)}-character string: {details[:120]!r}"
    assert "Traceback" not in details and "<class" not in details and "Error'>" not in details, details
    assert not _PATH.search(details), f"details show a path: {details!r}"


def assert_status(e: grpc.RpcError, code: grpc.StatusCode, *sent: str) -> None:
    assert e.code() == code, f"expected {code.name}, got {e.code().name}: {(e.details() or '')[:200]!r}"
    assert_clean(e, *sent)


def metric_total(fed: LocalFederation, site: str, name: str) -> float:
    """The sum of a counter's samples on a site's /metrics page."""
    c = http.client.HTTPConnection("127.0.0.1", fed.procs[site].http_port, timeout=10)
    try:
        c.request("GET", "/metrics")
        page = c.getresponse().read().decode()
    finally:
        c.close()
    return sum(float(line.rsplit(" ", 1)[1]) for line in page.splitlines() if line.startswith(f"{name} ") or line.startswith(f"{name}{{"))


def until_metric(fed: LocalFederation, site: str, name: str, at_least: float, seconds: float = 60.0) -> None:
    """Poll a site's counter until it reaches ``at_least`` (fails after ``seconds``)."""
    end = time.monotonic() + seconds
    while metric_total(fed, site, name) < at_least:
        assert time.monotonic() < end, f"{name} did not reach {at_least} at {site}"
        time.sleep(0.05)  # polling a page, not synchronising on time: the loop ends on the counter


def assert_serving(fed: LocalFederation, site: str, timeout: float = 10.0) -> None:
    """The site's health service answers SERVING within ``timeout`` (operator certificate; a party's on its local
    socket, as it has no port)."""
    if site in fed.parties:
        assert local_serving(fed.procs[site].local_socket), site
        return
    with channel(fed, site, site_tls(fed, "operator")) as ch:
        resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
    assert resp.status == health_pb2.HealthCheckResponse.SERVING, f"{site}: {resp}"


def assert_all_serving(fed: LocalFederation) -> None:
    for site in ["curator", *fed.parties, *fed.compute_nodes]:
        assert_serving(fed, site)


def wait_linked(fed: LocalFederation, timeout: float = 60.0) -> None:
    """Every party's link to the curator is open: the curator's health service for it (what `mpdp health` asks)
    reports SERVING, watched, not polled. After a curator restart a party re-opens its link on its own schedule."""
    from mpdp_services.common.link import health_service

    with channel(fed, "curator", site_tls(fed, "operator")) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        for party in fed.parties:
            watch = stub.Watch(health_pb2.HealthCheckRequest(service=health_service(party)), timeout=timeout)
            try:
                assert any(r.status == health_pb2.HealthCheckResponse.SERVING for r in watch), f"{party}: no link"
            finally:
                watch.cancel()


def ledger(fed: LocalFederation, party: str) -> dict:
    p = fed.workdir / party / "state" / "ledger.json"
    return json.loads(p.read_text()) if p.exists() else {"entries": []}


def spent(fed: LocalFederation, party: str) -> float:
    """The party's composed ε at its budget δ: what its refusal rule compares with the budget (accounting.md)."""
    return composition(ledger(fed, party)["entries"], fed.budget_delta).epsilon


def assert_ledgers_within_budget(fed: LocalFederation) -> None:
    for p in fed.parties:
        s = spent(fed, p)
        assert math.isfinite(s) and s <= fed.budget_epsilon + 1e-9, f"{p} spent ε={s} of budget {fed.budget_epsilon}"


def client_ledger(fed: LocalFederation, client_id: str) -> Ledger:
    """A DCA client's own privacy ledger (what `mpdp dca submit --site` spends in): one file per client id, a wide
    budget; ``submit_vector`` spends the job's (ε, δ) there before any share leaves."""
    folder = fed.workdir / "client-ledgers"
    folder.mkdir(exist_ok=True)
    return Ledger(folder / f"{client_id}.json", budget_epsilon=1e6, budget_delta=0.5)


def ledger_job_ids(fed: LocalFederation, party: str) -> set[str]:
    return {e.get("job_id") for e in ledger(fed, party)["entries"]}


# -- legitimate jobs ----------------------------------------------------------------------------------------
def pathak_spec(parties=PARTIES, epsilon: float = 0.5, deadline: float = 120.0, seed: bytes = b"adv", mode: int = common_pb2.CORRECTED, **fields: Any) -> pk.PathakJobSpec:
    spec = pk.PathakJobSpec(dataset="synthetic", epsilon=epsilon, mode=mode, parties=list(parties), deadline_seconds=deadline, simulation_seed=seed, **fields)
    setattr(spec, "lambda", 0.05)
    return spec


def operator_curator(fed: LocalFederation) -> grpc.Channel:
    return channel(fed, "curator", site_tls(fed, "operator"))


def job_host(ch: grpc.Channel) -> ops_grpc.JobOperationsStub:
    """The curator's one job host (JobOperations): every operator call on a job goes through it."""
    return ops_grpc.JobOperationsStub(ch)


def submit_pathak(fed: LocalFederation, spec: pk.PathakJobSpec) -> str:
    with operator_curator(fed) as ch:
        return job_host(ch).SubmitJob(ops.JobSubmission(pathak2010=spec), timeout=60).job_id


def watch_job(fed: LocalFederation, job_id: str, timeout: float, tls: TlsFiles | None = None) -> ops.JobSummary:
    """Follow a job of any protocol to its end through the job host as its owner (the federation's operator, or
    ``tls``'s); its last summary."""
    last = None
    with (channel(fed, "curator", tls) if tls is not None else operator_curator(fed)) as ch:
        for st in job_host(ch).WatchJob(common_pb2.JobRef(job_id=job_id), timeout=timeout):
            last = st
            if st.terminal:
                break
    assert last is not None and last.terminal, f"job {job_id} not terminal: {last}"
    return last


def wait_pathak(fed: LocalFederation, job_id: str, timeout: float = 180.0, tls: TlsFiles | None = None) -> ops.JobSummary:
    """Follow a Pathak job to its end as its owner (the federation's operator, or ``tls``'s)."""
    return watch_job(fed, job_id, timeout, tls)


def release_of(fed: LocalFederation, job_id: str, tls: TlsFiles | None = None) -> ops.JobRelease:
    """What a job published, from the job host as its owner (an RPC error if it published nothing)."""
    with (channel(fed, "curator", tls) if tls is not None else operator_curator(fed)) as ch:
        return job_host(ch).GetRelease(common_pb2.JobRef(job_id=job_id), timeout=30)


def pathak_published(fed: LocalFederation, job_id: str) -> bool:
    """Whether the job's model is in the curator's registry (the job host's summary says it released)."""
    with operator_curator(fed) as ch:
        try:
            return job_host(ch).GetJob(common_pb2.JobRef(job_id=job_id), timeout=30).released
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                return False
            raise


def pathak_job(fed: LocalFederation, seed: bytes = b"legit", epsilon: float = 0.5) -> str:
    """A small legitimate Pathak job; asserts it publishes."""
    job = submit_pathak(fed, pathak_spec(seed=seed, epsilon=epsilon))
    st = wait_pathak(fed, job)
    assert st.state == "PUBLISHED", st
    return job


def dca_spec(n: int = 3, d: int = 3, nodes=NODES, deadline: float = 30.0, **fields: Any) -> dca_pb2.DcaJobSpec:
    base = dict(dimension=d, clients=n, max_missing=0, epsilon=1.0, delta=1e-5, sensitivity=2 * math.sqrt(d), mode=common_pb2.CORRECTED,
                clip_bounds=[1.0], compute_nodes=list(nodes), deadline_seconds=deadline, validate=dca_pb2.VALIDATE_NONE)  # unproven: floating-point noise
    base.update(fields)
    return dca_pb2.DcaJobSpec(**base)


def create_dca(fed: LocalFederation, spec: dca_pb2.DcaJobSpec) -> str:
    with operator_curator(fed) as ch:
        return job_host(ch).SubmitJob(ops.JobSubmission(dca=spec), timeout=60).job_id


def wait_dca(fed: LocalFederation, job_id: str, timeout: float = 120.0) -> ops.JobSummary:
    return watch_job(fed, job_id, timeout)


def dca_release(fed: LocalFederation, job_id: str) -> dca_pb2.DpSum:
    """The DP sum a DCA job released (an RPC error if it released nothing)."""
    return release_of(fed, job_id).dca


def cohort_job(fed: LocalFederation, n: int, d: int, batch: int, *, deadline: float = 120.0, max_missing: int = 8, seed: int = 7) -> tuple[str, DcaParams, list]:
    """A DCA job of ``n`` simulated clients created by the operator: (job id, its DcaParams, the cohort's batches of
    ``batch`` clients, each with one ShareBatch per node and the clients' exact contributions)."""
    job = create_dca(fed, dca_spec(n=n, d=d, deadline=deadline, max_missing=max_missing))
    with operator_curator(fed) as ch:
        ann = dca_pb2_grpc.DcaCuratorStub(ch).GetJob(common_pb2.JobRef(job_id=job), timeout=30)
    params = DcaParams.from_spec(job, ann.spec)
    Z = np.random.default_rng(seed).uniform(-0.5, 0.5, (n, d))  # public test data
    cohort = ClientCohort(params, [f"client-{i:03d}" for i in range(n)], Z, Drbg.from_os(), keep_noise=True)
    return job, params, list(cohort.batches(batch))


def spec_digest_of(fed: LocalFederation, job_id: str) -> bytes:
    """The spec digest of a DCA job as the curator shows it (GetJob, operator certificate): what a raw client's shares
    must carry for the nodes to take them (mpdp.dca.spec)."""
    with operator_curator(fed) as ch:
        ann = dca_pb2_grpc.DcaCuratorStub(ch).GetJob(common_pb2.JobRef(job_id=job_id), timeout=30)
    return DcaParams.from_spec(job_id, ann.spec).spec_digest


def submit_batch(fed: LocalFederation, k: int, batch: dca_pb2.ShareBatch, timeout: float = 90.0) -> dca_pb2.ShareReceipt:
    """SubmitShareBatch to compute node ``NODES[k]`` with the federation's operator certificate (a load generator)."""
    with channel(fed, NODES[k], site_tls(fed, "operator")) as ch:
        return dca_pb2_grpc.ComputeNodeStub(ch).SubmitShareBatch(batch, timeout=timeout)


def dca_released(fed: LocalFederation, job_id: str) -> bool:
    try:
        dca_release(fed, job_id)
        return True
    except grpc.RpcError:
        return False


def submit_clients(fed: LocalFederation, job_id: str, clients: list[str], nodes=None) -> None:
    """Legitimate clients (an OPERATOR router) submit shares of small vectors to every node of the job."""
    import asyncio

    from mpdp_services.common.endpoints import Endpoints
    from mpdp_services.dca_client.client import submit_cohort

    ep = Endpoints.load(fed.workdir)
    d = _job_dimension(fed, job_id)
    Z = np.random.default_rng(len(clients)).uniform(-0.5, 0.5, size=(len(clients), d))
    rep = asyncio.run(submit_cohort(ep, ep.tls, job_id, clients, Z))
    assert not rep.rejected, rep.rejected[:3]


def _job_dimension(fed: LocalFederation, job_id: str) -> int:
    with operator_curator(fed) as ch:
        return dca_pb2_grpc.DcaCuratorStub(ch).GetJob(common_pb2.JobRef(job_id=job_id), timeout=30).spec.dimension


def dca_job(fed: LocalFederation, n: int = 3, nodes=NODES) -> str:
    """A small legitimate DCA job (operator-routed clients); asserts it releases."""
    job = create_dca(fed, dca_spec(n=n, nodes=nodes))
    submit_clients(fed, job, [f"legit-{i}" for i in range(n)])
    st = wait_dca(fed, job)
    assert st.state == "RELEASED", st
    return job


def garbage(n: int = 64) -> bytes:
    """Bytes no protobuf parser accepts: a field tag with the invalid wire type 7 first, then random bytes."""
    return b"\x07" + os.urandom(max(0, n - 1))


# -- jobs through the curator's job host (JobOperations), raw: lmgc, hamm2016 and the learners -------------------------
def host_submit(fed: LocalFederation, tls: TlsFiles | None = None, timeout: float = 60.0, **spec: Any):
    """SubmitJob of ``JobSubmission(**spec)`` (e.g. ``learner=…``, ``lmgc=…``) as the federation's operator or ``tls``'s
    holder; the job's first summary."""
    from mpdp.messages import operations_pb2, operations_pb2_grpc

    with (channel(fed, "curator", tls) if tls is not None else operator_curator(fed)) as ch:
        return operations_pb2_grpc.JobOperationsStub(ch).SubmitJob(operations_pb2.JobSubmission(**spec), timeout=timeout)


def host_wait(fed: LocalFederation, job_id: str, timeout: float = 180.0, tls: TlsFiles | None = None):
    """Follow a job of any protocol to its end (WatchJob) as its owner; its last summary."""
    from mpdp.messages import operations_pb2_grpc

    last = None
    with (channel(fed, "curator", tls) if tls is not None else operator_curator(fed)) as ch:
        for s in operations_pb2_grpc.JobOperationsStub(ch).WatchJob(common_pb2.JobRef(job_id=job_id), timeout=timeout):
            last = s
            if s.terminal:
                break
    assert last is not None and last.terminal, f"job {job_id} not terminal: {last}"
    return last


def host_release(fed: LocalFederation, job_id: str, tls: TlsFiles | None = None):
    """GetRelease of an ended job (any protocol) as its owner."""
    from mpdp.messages import operations_pb2_grpc

    with (channel(fed, "curator", tls) if tls is not None else operator_curator(fed)) as ch:
        return operations_pb2_grpc.JobOperationsStub(ch).GetRelease(common_pb2.JobRef(job_id=job_id), timeout=60)


def submit_learner(fed: LocalFederation, spec: Any, tls: TlsFiles | None = None, timeout: float = 60.0) -> str:
    """A learner job (dp-gd, regression, query) through the job host; its id, at once."""
    return host_submit(fed, tls, timeout, learner=spec).job_id


def wait_learner(fed: LocalFederation, job_id: str, timeout: float = 300.0, tls: TlsFiles | None = None):
    """Follow a learner job to its end; its last summary (state DONE or FAILED, problem, detail)."""
    return host_wait(fed, job_id, timeout, tls)


def learner_spec(parties: list[str] = PARTIES, nodes: list[str] = NODES, *, rounds: int = 0, dataset: str = "synthetic", records_per_party: int = 60,
                 job_id: str = "", seed: bytes = b"adv", max_missing: int = 0, deadline: float = 60.0, schema_sha256: str = "") -> Any:
    """A small dp-gd learner job over the conftest's synthetic rows (D features, a ±1 label). ``rounds = 0`` is one
    contribution round (one DCA job the parties contribute to), then the model: the host path of one round."""
    from mpdp.dpgd.model import Task
    from mpdp.dpgd.plan import DpgdPlan
    from mpdp_services.operator.dpgd import dpgd_spec

    plan = DpgdPlan(Task("binary"), D, 1.0, 1e-6, lam=1e-2, rounds=rounds, total_records=141)
    return dpgd_spec(dataset, list(parties), list(nodes), plan, records_per_party, job_id=job_id, max_missing=max_missing, seed=seed,
                     deadline=deadline, schema_sha256=schema_sha256)


def host_run(fed: LocalFederation, tls: TlsFiles | None = None, timeout: float = 300.0, **spec: Any):
    """Submit a job through the job host, follow it to its end and fetch what it published (GetRelease): the
    JobRelease, or the grpc.RpcError of a refused submit or of a job that published nothing (JOB_FAILED, its detail)."""
    job = host_submit(fed, tls, 60.0, **spec).job_id
    host_wait(fed, job, timeout, tls)
    return host_release(fed, job, tls)
