"""`mpdp dca ...`: create, watch and fetch DCA jobs; submit a client's vector; generate load."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click

from mpdp_services.cli.errors import CliError, from_rpc
from mpdp_services.cli.options import ProgressLine, endpoints_option, renamed_option

# The spec's noise names (mpdp.dca.params.NOISE_ENUM, whose import pulls in the accountant): kept equal by a test.
NOISES = ("gaussian", "discrete-gaussian")  # by their NoiseKind number (dca.proto)
VALIDATIONS = ("range", "none", "l2", "one-hot", "votes")  # by their Validation number (dca.proto; 0 = range, the default)
CREATE_VALIDATIONS = ("none", "range", "l2", "one-hot")  # votes (one vote per point over C classes) is created by the ensemble jobs


def _operator(endpoints: str):
    from mpdp_services.common.endpoints import Endpoints
    from mpdp_services.dca_client.client import DcaOperator

    ep = Endpoints.load(endpoints)
    return ep.curator_address, DcaOperator(ep)


def _err(text: str) -> None:
    click.echo(text, err=True)


@click.group(short_help="Distributed Compute Algorithm (Heikkilä et al. 2017): secret-shared Gaussian sums over compute nodes.")
def dca() -> None:
    """Distributed Compute Algorithm (Heikkilä et al. 2017): secret-shared Gaussian sums over compute nodes."""


@dca.command("create")
@endpoints_option
@click.option("--dimension", "-d", type=int, required=True, help="d, the length of every client's vector")
@click.option("--clients", "-n", type=int, required=True, help="N, the number of clients expected")
@click.option("--max-missing", "-t", type=int, default=0, show_default=True, help="T, clients that may collude or drop out")
@click.option("--epsilon", type=float, required=True, help="ε")
@click.option("--delta", type=float, required=True, help="δ")
@click.option("--sensitivity", type=float, required=True, help="Δ₂ of one client's vector (after clipping)")
@click.option("--clip", type=float, default=1.0, show_default=True, help="|z_ij| ≤ clip, enforced by every client")
@click.option("--nodes", required=True, help="comma-separated compute node names")
@renamed_option("--calibration", "--mode", "mode", type=click.Choice(["corrected", "paper"]), default="corrected", show_default=True,
                help="how σ is calibrated to (ε, δ): the analytic Gaussian (corrected) or the classic formula (paper)")
@click.option("--noise", type=click.Choice(NOISES), default=None,
              help="the noise: exact integer discrete Gaussian (Canonne et al. 2020; ρ-zCDP and (ε, δ), Kairouz et al. 2021), "
                   "or floating-point Gaussian (only with --validate none)  [default: discrete-gaussian; gaussian with --validate none]")
@click.option("--frac-bits", type=int, default=None, help="f: values travel in units of 2^-f  [default: 16; 32 with --validate none]")
@click.option("--deadline", type=float, default=600.0, show_default=True, help="seconds until submissions close")
@click.option("--seed-compressed", is_flag=True, help="send nodes ≥ 2 a 32-byte seed instead of a full share")
@click.option("--validate", type=click.Choice(CREATE_VALIDATIONS), default="range", show_default=True,
              help="prove every contribution valid on its shares (|z_j| ≤ clip, ‖z‖₂ ≤ clip, or a one-hot vote; the compute nodes then add the noise); "
                   "invalid ones are dropped and counted like dropouts. none: contributions are trusted, not proven (honest clients only)")
@click.option("--colluders", type=int, default=None,
              help="validated jobs: c, the compute nodes that may pool their noise with the curator (0 ≤ c ≤ M − 1)  [default: M − 1]")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def create(endpoints, dimension, clients, max_missing, epsilon, delta, sensitivity, clip, nodes, mode, noise, frac_bits, deadline, seed_compressed, validate,
           colluders, as_json) -> None:
    """Create a DCA job at the curator; prints its id once the nodes know it (a job queued for an admission slot is waited for)."""
    import grpc

    from mpdp.messages.operations_pb2 import JobSubmission
    from mpdp_services.common.endpoints import Endpoints
    from mpdp_services.dca_client.client import job_spec
    from mpdp_services.operator.jobs import started, submit

    if validate != "none" and noise not in (None, "discrete-gaussian"):
        raise click.UsageError(f"--noise {noise} cannot be proven valid: a validated job (--validate {validate}, the default range) needs "
                               "--noise discrete-gaussian, the exact integer noise the compute nodes add; pass --validate none to trust "
                               "contributions unproven with floating-point noise")
    spec = job_spec(dimension=dimension, clients=clients, max_missing=max_missing, epsilon=epsilon, delta=delta, sensitivity=sensitivity,
                    clip=clip, nodes=nodes.split(","), calibration=mode, validate=validate, noise=noise, frac_bits=frac_bits,
                    deadline_seconds=deadline, seed_compressed=seed_compressed, colluders=colluders)
    ep = Endpoints.load(endpoints)
    try:  # through the curator's job host, with an idempotency key: a resend after a lost answer is the same job
        job = started(ep, submit(ep, JobSubmission(dca=spec)))["job_id"]  # once out of the admission queue: its clients may submit
    except grpc.RpcError as e:
        raise from_rpc(e, "the curator", ep.curator_address, "the DCA job") from None
    print(json.dumps({"job_id": job}) if as_json else job)


@dca.command("watch")
@endpoints_option
@click.option("--job", "job_id", required=True, help="DCA job id")
@click.option("--json", "as_json", is_flag=True, help="print the final status as one JSON object")
def watch(endpoints, job_id, as_json) -> None:
    """Follow a job until it is released or fails."""
    import grpc

    address, op = _operator(endpoints)
    with op:
        last = None
        try:
            for st in op.watch(job_id):
                last = st
                if not as_json:
                    _err(f"{st.state}: {st.stage}" + (f" {st.detail}" if st.detail else ""))
                if st.terminal:
                    break
            included = op.release(job_id).clients_included if last is not None and last.released else 0
        except grpc.RpcError as e:
            raise from_rpc(e, "the curator", address) from None
    if last is not None and last.state == "FAILED":
        raise CliError(f"job {job_id} failed: {last.detail}", code="job_failed", hint=f"`mpdp jobs logs {job_id}` shows each state it entered")
    if not as_json and last is not None and last.released:
        _err(f"released over {included} clients")
    if as_json and last is not None:
        print(json.dumps({"job_id": job_id, "state": last.state, "clients_included": included, "detail": last.detail}))


@dca.command("release")
@endpoints_option
@click.option("--job", "job_id", required=True, help="DCA job id")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object (the only output of this command; accepted for a uniform grammar)")
def release(endpoints, job_id, as_json: bool) -> None:
    """Print the released DP sum and its guarantee as JSON (ρ-zCDP too for the discrete-gaussian noise)."""
    import grpc


    address, op = _operator(endpoints)
    with op:
        try:
            r = op.release(job_id)
        except grpc.RpcError as e:
            raise from_rpc(e, "the curator", address, f"the release of job {job_id}") from None
    print(json.dumps({
        "job_id": r.job_id, "values": list(r.values), "clients_included": r.clients_included, "clients_expected": r.clients_expected,
        "sigma_std": r.sigma_std, "sigma_client": r.sigma_client, "noise_variance": r.noise_variance,
        "sigma_node": r.sigma_node if r.sigma_node else None, "colluders": r.colluders if r.sigma_node else None,
        "guarantee": {"mechanism": r.guarantee.mechanism, "epsilon": r.guarantee.epsilon, "delta": r.guarantee.delta, "rho": r.rho if r.noise else None,
                      "statement": r.guarantee.statement},
        "noise": NOISES[r.noise] if 0 <= r.noise < len(NOISES) else "unknown", "sigma2_units": r.sigma2_units or None, "fractional_bits": r.fractional_bits, "seeded": r.seeded,
        "validate": VALIDATIONS[r.validate] if 0 <= r.validate < len(VALIDATIONS) else "unknown", "clients_rejected": r.clients_rejected,
    }))


@dca.command("submit")
@endpoints_option
@click.option("--site", type=click.Path(file_okay=False), required=True, help="this client's site folder (site.crt, site.key, ca.crt); its name is the client id")
@click.option("--job", "job_id", required=True, help="DCA job id")
@click.option("--values", required=True, help="comma-separated vector, or @FILE with one number per line")
@click.option("--ledger", "ledger_path", type=click.Path(dir_okay=False), default=None,
              help="this client's privacy ledger (default: the `ledger` of SITE/party.yaml, shared with the party service)")
@click.option("--budget-epsilon", type=float, default=None, help="total ε of that ledger (default: SITE/party.yaml's budget_epsilon)")
@click.option("--budget-delta", type=float, default=None, help="total δ of that ledger (default: SITE/party.yaml's budget_delta)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def submit(endpoints, site, job_id, values, ledger_path, budget_epsilon, budget_delta, as_json) -> None:
    """Submit this client's vector: noise and secret sharing happen here; each node gets one share.

    The job's true (ε, δ) is spent in this client's privacy ledger first (the same file, under the same lock,
    as the party service of this site); the submission is refused when it does not fit the budget.
    """
    import grpc
    import numpy as np
    from cryptography import x509

    from mpdp.dca.spec import SpecMismatch
    from mpdp.ledger import BudgetExceeded, LedgerError
    from mpdp_services.common.endpoints import Endpoints
    from mpdp_services.common.channels import TlsFiles
    from mpdp_services.dca_client.client import NodesUnreachable, submit_vector

    try:
        z = np.loadtxt(values[1:]) if values.startswith("@") else np.array([float(v) for v in values.split(",")])
    except (OSError, ValueError) as e:
        raise click.BadParameter(f"not a vector: {e}", param_hint="--values") from None
    folder = Path(site)
    tls = TlsFiles(folder / "site.crt", folder / "site.key", folder / "ca.crt")
    missing = [p.name for p in (tls.cert, tls.key, tls.ca) if not p.exists()]
    if missing:
        raise click.BadParameter(f"{folder} is not a site folder: {', '.join(missing)} missing (`mpdp provision` writes them)", param_hint="--site")
    cid = str(x509.load_pem_x509_certificate(tls.cert.read_bytes()).subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value)  # a CN is a str
    ledger = client_ledger(folder, ledger_path, budget_epsilon, budget_delta)
    try:
        rep = asyncio.run(submit_vector(Endpoints.load(endpoints), tls, str(cid), job_id, np.atleast_1d(z), ledger=ledger))
    except BudgetExceeded as e:
        raise CliError(f"RESOURCE_EXHAUSTED: BUDGET_EXCEEDED: client {cid}: {e}", code="budget_exceeded",
                       hint=f"`mpdp ledger show --site {folder}` shows what is left; nothing was sent") from None
    except SpecMismatch as e:
        raise CliError(f"INVALID_ARGUMENT: INVALID_JOB: client {cid}: {e.detail}", code="invalid_job",
                       hint=f"compute node {e.node} holds another spec of the job than the curator showed this client; nothing was spent or sent") from None
    except LedgerError as e:
        raise CliError(f"the privacy ledger {ledger.path} cannot be used: {e}", hint="repair or restore the ledger file; nothing was sent") from None
    except NodesUnreachable as e:
        raise CliError(f"UNAVAILABLE: {e}", code="unreachable", hint="nothing was spent or sent; retry once the node is up") from None
    except grpc.RpcError as e:
        raise from_rpc(e, "a compute node or the curator", None, f"the submission of {cid}") from None
    out = {"client_id": cid, "accepted": rep.accepted, "rejected": [r.detail for r in rep.rejected], "seconds": rep.seconds}
    _show(out, as_json)


def client_ledger(site: Path, path: str | None, budget_epsilon: float | None, budget_delta: float | None):
    """The ledger a DCA client spends from: the options, else what SITE/party.yaml configures."""
    from mpdp.ledger import DEFAULT_BUDGET_DELTA, Ledger
    from mpdp_services.common import config as cfgmod

    party_yaml = site / "party.yaml"
    if party_yaml.exists():
        try:
            cfg = cfgmod.load(cfgmod.PartyConfig, party_yaml)
        except cfgmod.ConfigError as e:
            raise click.ClickException(str(e))
        path = path or str(cfg.ledger)
        budget_epsilon = cfg.budget_epsilon if budget_epsilon is None else budget_epsilon
        budget_delta = cfg.budget_delta if budget_delta is None else budget_delta
    if path is None or budget_epsilon is None:
        raise click.ClickException(f"{site} has no party.yaml: pass --ledger and --budget-epsilon (the client spends ε from its privacy ledger)")
    try:
        return Ledger(path, budget_epsilon, DEFAULT_BUDGET_DELTA if budget_delta is None else budget_delta)
    except ValueError as e:
        raise click.ClickException(str(e))


@dca.command("loadgen")
@endpoints_option
@click.option("--job", "job_id", required=True, help="DCA job id")
@click.option("--clients", "-n", type=click.IntRange(1), required=True, help="simulated clients")
@click.option("--batched/--unbatched", default=True, show_default=True, help="ShareBatch messages, or one ClientShare per client on a stream (a validated job always takes the latter)")
@click.option("--batch-bytes", type=click.IntRange(1), default=None,
              help="bytes of share per node message: a batch holds as many clients as fit (any d works)  [default: a quarter of the 64 MiB gRPC message limit]")
@click.option("--batch-size", type=click.IntRange(1), default=None, help="at most this many clients per batch  [default: as many as fit in --batch-bytes]")
@click.option("--seed", type=int, default=0, show_default=True, help="seed of the public simulation data (not of the noise)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def loadgen(endpoints, job_id, clients, batched, batch_bytes, batch_size, seed, as_json) -> None:
    """Simulate many clients against real compute nodes over TLS (operator certificate, per-client accounting)."""
    import grpc
    import numpy as np

    from mpdp_services.common.endpoints import Endpoints
    from mpdp_services.dca_client.client import BATCH_BYTES, DcaOperator, batch_size_for, submit_cohort

    ep = Endpoints.load(endpoints)
    try:
        with DcaOperator(ep) as op:
            ann = op.job(job_id)
    except grpc.RpcError as e:
        raise from_rpc(e, "the curator", ep.curator_address, f"to show job {job_id}") from None
    d = ann.spec.dimension
    ids = [f"client-{i}" for i in range(clients)]
    try:
        size = batch_size_for(d, clients, batch_bytes or BATCH_BYTES, max(len(c) for c in ids), batch_size)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--batch-bytes") from None
    clip = ann.spec.clip_bounds[0] if ann.spec.clip_bounds else 1.0
    Z = np.random.default_rng(seed).uniform(-clip, clip, size=(clients, d))  # public simulation data
    if not as_json:
        _err(f"{clients} clients, d = {d}: {-(-clients // size)} batch(es) of up to {size} clients")
    line = None if as_json else ProgressLine("clients sent")
    try:
        rep = asyncio.run(submit_cohort(ep, ep.tls, job_id, ids, Z, batched=batched, batch_size=size, batch_bytes=batch_bytes or BATCH_BYTES,
                                        progress=line.update if line else None))
    except grpc.RpcError as e:
        raise from_rpc(e, "a compute node or the curator", None, f"the shares of job {job_id}") from None
    finally:
        if line:
            line.close()
    out = {"job_id": job_id, "clients": clients, "dimension": d, "batch_size": size, "accepted_shares": rep.accepted, "rejected": len(rep.rejected),
           "seconds": rep.seconds, "client_seconds": rep.client_seconds, "batched": batched}
    _show(out, as_json)


def _show(out: dict, as_json: bool) -> None:
    """One JSON object with --json; otherwise one `key: value` line per field (never a Python repr)."""
    if as_json:
        print(json.dumps(out))
        return
    for key, value in out.items():
        shown = ", ".join(map(str, value)) if isinstance(value, list) else (f"{value:.3f}" if isinstance(value, float) else value)
        print(f"{key}: {shown if shown != '' else '-'}")
