"""`mpdp federation up`, `mpdp predict`, `mpdp demo`, and the Pathak summaries `mpdp train logreg` prints (its
commands are in :mod:`mpdp_services.cli.train`)."""

from __future__ import annotations

import json
import sys
import shutil
import signal
import tempfile
import time
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import click

from mpdp_services.cli.errors import CliError, from_rpc
from mpdp_services.cli.options import endpoints_option, renamed_option
from mpdp_services.operator.pathak2010 import MODES

if TYPE_CHECKING:  # numpy, gRPC, rich and the protocol cores load when a command runs, not for its --help
    from mpdp.messages import pathak2010_pb2 as pb
    from mpdp.messages.operations_pb2 import JobSummary

STAGES = ["setup", "stage1", "stage2", "stage3"]


def _stdout_json(doc: dict) -> None:
    from rich.console import Console

    Console().print_json(json.dumps(doc))


@cache
def _stderr() -> Any:
    from rich.console import Console

    return Console(stderr=True)


NOISE_HELP = ("noise scheme: gaussian-distributed (every party draws a share of Gaussian noise, (ε, δ)-DP, no t parties know it), "
             "corrected (the smallest party's spherical Laplace, ε-DP, that party knows its noise) or paper (as published)")


def mode_name(model: pb.PublishedModel) -> str:
    from mpdp.messages import common_pb2, pathak2010_pb2 as pb

    if model.noise == pb.DISTRIBUTED_GAUSSIAN:
        return "gaussian-distributed"
    return "corrected" if model.mode == common_pb2.CORRECTED else "paper"


def run_and_watch(client, spec: pb.PathakJobSpec, quiet: bool, address: str | None = None) -> tuple[str, JobSummary]:
    """Submit, show live progress per stage (stderr), return the final summary (the job host's)."""
    import grpc
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    try:
        job_id = client.submit(spec)
    except grpc.RpcError as e:
        raise from_rpc(e, "the curator", address, "the job") from None
    if quiet:
        return job_id, client.wait(job_id)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[state]}"), TimeElapsedColumn(), console=_stderr()) as prog:
        task = prog.add_task(f"job {job_id}", total=len(STAGES), state="submitted")
        final = None
        for st in client.watch(job_id):
            done = STAGES.index(st.stage) if st.stage in STAGES else len(STAGES)
            prog.update(task, completed=done, state=st.state)
            final = st
            if st.terminal:
                break
    assert final is not None
    return job_id, final


def _fail_if_failed(status: JobSummary) -> None:
    from mpdp.messages import common_pb2

    if status.state == "FAILED":
        raise CliError(f"job {status.job_id} failed ({common_pb2.Problem.Name(status.problem)}): {status.detail}. Nothing was published.", code="job_failed",
                       hint=f"`mpdp jobs logs {status.job_id}` shows each state it entered; a party's service.log says more")


def model_summary(model: pb.PublishedModel) -> dict:
    from mpdp.messages import pathak2010_pb2 as pb
    from mpdp_services.operator.jobs import ordered_stages

    return {
        "job_id": model.job_id,
        "noise": mode_name(model),
        "epsilon": model.epsilon,
        "delta": model.guarantee.delta,
        "lam": getattr(model, "lambda"),
        "parties": model.parties,
        "dimension": model.dimension,
        "stage_seconds": ordered_stages(dict(model.stage_seconds), STAGES),
        "paillier_ops": dict(model.paillier_ops),
        "guarantee": {"epsilon": model.guarantee.epsilon, "delta": model.guarantee.delta, "mechanism": model.guarantee.mechanism, "statement": model.guarantee.statement},
        "trust_model": model.trust_model,
        **({"colluders": model.colluders} if model.noise == pb.DISTRIBUTED_GAUSSIAN else {}),
        "seeded": model.seeded,
        "mode": mode_name(model),  # deprecated spelling of "noise", kept for one release
        "lambda": getattr(model, "lambda"),  # deprecated spelling of "lam", kept for one release
    }


@click.group()
def federation() -> None:
    """Start a local federation (curator + parties as separate processes, throwaway CA, mutual TLS)."""


@federation.command("up")
@click.option("--workdir", type=click.Path(file_okay=False), default="runs/federation", show_default=True, help="folder for certificates, configs, logs and endpoints.json")
@click.option("--parties", "n_parties", type=int, default=3, show_default=True, help="number of parties")
@click.option("--dataset", "datasets", multiple=True, metavar="NAME=PARTY:PATH|{...}",
              help="give PARTY a dataset (repeatable): a file, e.g. adult=party-1:/data/a.libsvm, or the dataset's description as a provisioned "
                   "party's config gives it, a YAML mapping (docs/data-sources.md), e.g. 'adult=party-1:{format: parquet, path: /data/adult/, "
                   "schema: adult.yaml}', 'adult=party-2:{format: sql, table: adult, dsn_env: ADULT_DSN, schema: adult.yaml}' "
                   "(the variable is read by the party; a connection string itself is refused here), or dask: local")
@click.option("--schema", "schemas", multiple=True, metavar="[NAME=]PATH",
              help="a data schema (docs/schema.md): NAME=PATH for the datasets called NAME (repeatable, one per dataset), or PATH for every dataset; "
                   "each dataset is checked against its schema before anything starts (LIBSVM parts read with its d)")
@click.option("--test-mode", is_flag=True, help="allow small keys and simulation seeds (never for real data)")
@click.option("--key-bits", type=int, default=2048, show_default=True, help="Paillier and DGK modulus size")
@click.option("--compute-nodes", "n_nodes", type=int, default=0, show_default=True, help="also start M DCA compute nodes")
@click.option("--auxiliary", "auxiliary", multiple=True, metavar="NAME=PATH", help="give the curator a public auxiliary dataset for hamm2016 jobs (repeatable)")
@click.option("--budget-epsilon", type=click.FloatRange(min=0.0), default=100.0, show_default=True, help="every party's privacy budget ε (its ledger refuses jobs beyond it)")
@click.option("--budget-delta", type=click.FloatRange(min=0.0, max=1.0), default=1e-3, show_default=True, help="every party's privacy budget δ")
@click.option("--workers", "node_workers", type=click.IntRange(1, 64), default=1, show_default=True, help="processes per compute node, sharing its port (docs/deploy.md)")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True, envvar="MPDP_LOG_FORMAT",
              help="each role's WORKDIR/<site>/service.log: text, or one JSON object per line")
@click.option("--json", "as_json", is_flag=True, help="once everything is up, print one JSON object (endpoints file, addresses, HTTP URLs, dashboard) on stdout")
def federation_up(workdir: str, n_parties: int, datasets: tuple[str, ...], schemas: tuple[str, ...], test_mode: bool, key_bits: int, n_nodes: int, auxiliary: tuple[str, ...],
                  budget_epsilon: float, budget_delta: float, node_workers: int, log_format: str, as_json: bool) -> None:
    """Start the federation and keep it running until Ctrl-C; endpoints go to WORKDIR/endpoints.json."""
    stale = Path(workdir) / "endpoints.json"
    stale.unlink(missing_ok=True)  # first of all: a stopped run's file must not say this one is up (`mpdp health --wait` waits for the new one)
    from mpdp_services.launcher.federation import LocalFederation

    _check_key_bits(key_bits, test_mode)
    if n_parties < 1:
        raise click.BadParameter("a federation needs at least one party", param_hint="--parties")
    names = [f"party-{i + 1}" for i in range(n_parties)]
    ds: dict[str, dict[str, dict]] = {}
    for item in datasets:
        name, party, entry = _dataset_entry(item)
        if party not in names:
            raise click.BadParameter(f"{item.split(':', 1)[0]!r}: no party {party!r} (the parties are {', '.join(names)})", param_hint="--dataset")
        ds.setdefault(party, {})[name] = entry
    _apply_schemas(ds, schemas)
    _libsvm_dimensions(ds)
    for party, per in ds.items():  # every description complete (a parquet or sql dataset has its schema by now)
        for name, entry in per.items():
            _dataset_config(party, name, entry)
    nodes = [f"node-{k + 1}" for k in range(n_nodes)]
    aux: dict[str, dict] = {}
    for item in auxiliary:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise click.BadParameter(f"{item!r}: use NAME=PATH", param_hint="--auxiliary")
        aux[name] = {"path": str(Path(path).resolve())}
    fed = LocalFederation(Path(workdir).resolve(), names, ds, test_mode=test_mode, paillier_bits=key_bits, dgk_bits=key_bits, compute_nodes=nodes, auxiliary=aux,
                          budget_epsilon=budget_epsilon, budget_delta=budget_delta, node_workers=node_workers, log_format=log_format)
    if (fed.workdir / "ca" / "ca.crt").exists():  # a previous run's folder: keep its certificates and state, take this run's datasets, schemas and budgets
        missing = [site for site in ["curator", "operator", *names, *nodes] if not (fed.workdir / site / "site.crt").exists()]
        if missing:
            raise click.UsageError(f"{workdir} holds another federation (no certificate for {', '.join(missing)}): use a new --workdir or remove that folder")
        fed.write_configs()
    t0 = time.perf_counter()
    _stderr().print(f"starting the curator, then {n_parties} part{'y' if n_parties == 1 else 'ies'}{f' and {n_nodes} compute node(s)' if nodes else ''} ({key_bits}-bit keys)")
    _start(fed, lambda proc: _stderr().print(f"  {proc.role:<12} {proc.name:<10} " + (f"ready on 127.0.0.1:{proc.port}" if proc.port else "linked to the curator (no listening port)")
                                             + f"  ({time.perf_counter() - t0:.1f} s)"))
    _stderr().print(f"federation up in {time.perf_counter() - t0:.1f} s: curator on {fed.procs['curator'].port}, parties {', '.join(names)} linked "
                    "(they dial the curator and listen on no port)")
    if nodes:
        _stderr().print(f"compute nodes {', '.join(f'{n}:{fed.procs[n].port}' for n in nodes)}")
    cur_http = fed.procs["curator"].http_port
    if cur_http:
        _stderr().print(f"dashboard: http://127.0.0.1:{cur_http}/", soft_wrap=True)
        _stderr().print("(each role's HTTP base URL is under \"http\" in endpoints.json: URL/metrics, and URL/ is a party's ledger page)")
    _stderr().print(f"endpoints: {Path(workdir).resolve() / 'endpoints.json'}  (Ctrl-C or SIGTERM stops everything)")
    if as_json:
        endpoints_file = Path(workdir).resolve() / "endpoints.json"
        urls = json.loads(endpoints_file.read_text()).get("http", {})
        click.echo(json.dumps({"endpoints": str(endpoints_file), "ports": {n: p.port for n, p in fed.procs.items()}, "http": urls,
                               "dashboard": urls["curator"] + "/" if "curator" in urls else None}), nl=True)
        sys.stdout.flush()
    signal.signal(signal.SIGTERM, _interrupt)  # a service manager's stop must not orphan the child processes
    try:
        while all(p.popen.poll() is None for p in fed.procs.values()):
            time.sleep(1.0)
        dead = [n for n, p in fed.procs.items() if p.popen.poll() is not None]
        _stderr().print(f"[red]process exited: {dead}; stopping the federation")
    except KeyboardInterrupt:
        pass
    finally:
        fed.stop()
        _forget_endpoints(stale, fed.procs["curator"].popen.pid)


def _forget_endpoints(path: Path, curator_pid: int) -> None:
    """Remove the endpoints file of a federation that stopped (only if it is still this run's: its curator's pid)."""
    try:
        if json.loads(path.read_text()).get("pids", {}).get("curator") == curator_pid:
            path.unlink()
    except (OSError, ValueError, AttributeError):
        pass


@click.command()
@endpoints_option
@click.option("--job", "job_id", required=True, help="job id of a published model")
@click.option("--data", "data_path", required=True, type=click.Path(dir_okay=False), help="records to classify (CSV or LIBSVM)")
@click.option("--format", "fmt", type=click.Choice(["auto", "csv", "libsvm"]), default="auto", show_default=True, help="file format")
@click.option("--party", default="average", show_default=True, help="lmgc jobs: whose release to use (a party name or 'average')")
@click.option("--schema", "schema_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="logreg jobs: encode the records by the federation's data schema, as the parties did (labels ±1)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def predict(endpoints: str, job_id: str, data_path: str, fmt: str, party: str, schema_file: str | None, as_json: bool) -> None:
    """Play Dave: fetch the shares, rebuild ŵ_s = Σ shares / K, classify, report accuracy if labelled.

    A classifier's accuracy comes with the rows' majority rate (always predicting their most common label) and a
    warning line when it is no better than that."""
    import grpc

    from mpdp import registry
    from mpdp.data.loaders import DatasetError
    from mpdp_services.common.endpoints import Endpoints

    protocol = _protocol_of(endpoints, job_id)
    entry = registry.BY_NAME.get(protocol)
    if entry is None or entry.hooks.predict is None:  # its registry entry names no predictor: it released no model
        hint = f" (`mpdp {entry.hooks.command[0]} --help`)" if entry is not None and entry.hooks.command is not None else ""
        raise click.ClickException(f"job {job_id} is a {protocol} job: it released no model to predict with{hint}")
    ep = Endpoints.load(endpoints)
    try:
        out = registry.hook(entry.hooks.predict)(ep, job_id, data_path, fmt, party=party, schema_file=schema_file)
    except grpc.RpcError as e:
        raise from_rpc(e, "the curator", ep.curator_address, f"the model of job {job_id}") from None
    except (DatasetError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    _print_prediction(out, protocol, as_json)


def predict_pathak(ep: Any, job_id: str, data_path: str, fmt: str, *, schema_file: str | None = None, **_options: object) -> dict:
    """`mpdp predict` of a Pathak 2010 model (``mpdp.registry``: ``Hooks.predict``): ŵ_s = Σ shares / K, the rows
    classified, and the accuracy if they are labelled."""
    import numpy as np

    from mpdp.data.loaders import DatasetError, load, to_pm1
    from mpdp.pathak2010 import tester
    from mpdp_services.operator.pathak2010 import OperatorClient

    with OperatorClient(ep) as client:
        m = client.model(job_id)
    w = tester.rebuild(m)
    try:
        if schema_file:
            enc = _schema(schema_file)[2].encode_file(data_path, fmt)
            X, y = enc.X, enc.y
        else:
            X, y = load(data_path, fmt, n_features=m.dimension)
    except DatasetError as e:
        raise click.ClickException(str(e))
    if X.shape[1] != m.dimension:
        raise click.ClickException(f"{data_path} has {X.shape[1]} features, the model has {m.dimension}")
    pred = tester.classify(w, X)
    out: dict[str, Any] = {"job_id": job_id, "rows": int(len(pred)), "guarantee": m.guarantee.statement, "predicted": class_counts(pred, [-1, 1])}
    if len(np.unique(y)) == 2:
        from mpdp.results import against_majority, majority_rate

        out["accuracy"] = float(np.mean(pred == to_pm1(y)))
        out.update(against_majority(out["accuracy"], majority_rate(y)))
    return out


def class_counts(pred: Any, classes: list) -> dict[str, int]:
    """How many rows were predicted as each class (every class listed, in order; labels as text: -1 and 1, or names)."""
    import numpy as np

    return {format(c, "g") if isinstance(c, (int, float)) else str(c): int(np.sum(pred == c)) for c in classes}


def _print_prediction(out: dict, protocol: str, as_json: bool) -> None:
    """`mpdp predict`'s one shape for every protocol: job_id, protocol, rows, predicted (rows per class; a regression:
    its mean prediction instead), accuracy when the rows are labelled (with the rows' majority rate, and a warning line
    when it is no better than always predicting the majority class), guarantee, then what only that protocol has."""
    from mpdp.results import majority_warning

    first = ("job_id", "protocol", "rows", "predicted", "accuracy", "majority_rate", "beats_majority", "guarantee")
    doc = {"job_id": out["job_id"], "protocol": protocol, **out}
    doc = {**{k: doc[k] for k in first if k in doc}, **{k: v for k, v in doc.items() if k not in first}}
    if as_json:
        print(json.dumps(doc))
        return
    for k, v in doc.items():
        print(f"{k}: " + (", ".join(f"{c}: {n}" for c, n in v.items()) if isinstance(v, dict) else f"{v}"))
        warning = majority_warning(doc) if k == "beats_majority" else None
        if warning:
            print(warning)


@click.command()
@click.option("--parties", "n_parties", type=int, default=3, show_default=True, help="number of parties (≥ 3)")
@click.option("--epsilon", type=float, default=2.0, show_default=True, help="privacy parameter ε")
@renamed_option("--lam", "--lambda", "lam", type=float, default=0.1, show_default=True, help="the regulariser λ")
@renamed_option("--noise", "--mode", "mode", type=click.Choice(MODES), default=MODES[0], show_default=True, help=NOISE_HELP)
@click.option("--key-bits", type=int, default=2048, show_default=True, help="Paillier/DGK modulus size (below 2048 with --test-mode only)")
@click.option("--test-mode", is_flag=True, help="allow small keys (fast, never for real data)")
@click.option("--workdir", type=click.Path(file_okay=False), default=None, help="keep the federation's files here (default: a temporary folder)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def demo(n_parties: int, epsilon: float, lam: float, mode: str, key_bits: int, test_mode: bool, workdir: str | None, as_json: bool) -> None:
    """Everything in one command: a real federation on scikit-learn's breast-cancer data, split over parties."""
    if n_parties < 3:  # usage errors before anything heavy is imported
        raise click.BadParameter("the demo needs at least 3 parties", param_hint="--parties")
    _check_key_bits(key_bits, test_mode)
    import numpy as np

    from mpdp.learn import logreg
    from mpdp.pathak2010 import tester
    from mpdp_services.operator.pathak2010 import make_spec

    from sklearn.datasets import load_breast_cancer

    from mpdp_services.common.endpoints import Endpoints
    from mpdp_services.operator.pathak2010 import OperatorClient
    from mpdp_services.launcher.federation import LocalFederation

    X, y = load_breast_cancer(return_X_y=True)
    y = np.where(y == 1, 1.0, -1.0)
    X = (X - X.mean(axis=0)) / X.std(axis=0)  # demo-only public scaling; parties clip rows to ‖x‖ ≤ 1
    split = np.random.default_rng(7)  # public simulation choice (which rows go where), not a secret
    order = split.permutation(len(y))
    n_test = len(y) // 4
    test, train_idx = order[:n_test], order[n_test:]
    shares = np.array([0.4] + [0.6 / (n_parties - 1)] * (n_parties - 1))
    cuts = np.cumsum((shares * len(train_idx)).astype(int))[:-1]
    parts = np.split(train_idx, cuts)
    tmp = None if workdir is not None else tempfile.mkdtemp(prefix="mpdp-demo-")  # kept when the demo fails: the hint names its logs
    root = Path(workdir or tmp).resolve()  # type: ignore[arg-type]
    names = [f"party-{i + 1}" for i in range(n_parties)]
    datasets = {}
    for name, idx in zip(names, parts):
        path = root / name / "data" / "breast_cancer.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savetxt(path, np.column_stack([X[idx], y[idx]]), delimiter=",", fmt="%.10g")
        datasets[name] = {"breast_cancer": {"path": str(path), "format": "csv"}}
    fed = LocalFederation(root, names, datasets, paillier_bits=key_bits, dgk_bits=key_bits, test_mode=test_mode)
    t0 = time.perf_counter()
    try:
        _start(fed, quiet=as_json, status=f"starting curator and {n_parties} parties (separate processes, mutual TLS, {key_bits}-bit keys)")
        with OperatorClient(Endpoints.load(root)) as client:
            job_id, status = run_and_watch(client, make_spec("breast_cancer", names, epsilon, lam, mode), as_json)
            _fail_if_failed(status)
            model = client.model(job_id)
    finally:
        fed.stop()
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)  # only after a demo that worked
    w_dp = tester.rebuild(model)
    Xtr = logreg.clip_rows(X[train_idx])
    conv: Literal["half", "full"] = "full" if mode == "paper" else "half"
    w_np = logreg.fit(Xtr, y[train_idx], lam, conv)
    Xte = logreg.clip_rows(X[test])
    summary = model_summary(model)
    summary.update(
        dataset="scikit-learn breast_cancer (569 rows, d=30)",
        party_sizes={n: int(len(p)) for n, p in zip(names, parts)},
        test_rows=int(n_test),
        dp_accuracy=float(np.mean(logreg.predict(w_dp, Xte) == y[test])),
        nonprivate_accuracy=float(np.mean(logreg.predict(w_np, Xte) == y[test])),
        wall_seconds=time.perf_counter() - t0,
    )
    from mpdp.results import against_majority, majority_rate

    summary.update(against_majority(summary["dp_accuracy"], majority_rate(y[test])))  # the DP model's, on the test rows
    if as_json:
        print(json.dumps(summary))
    else:
        _print_summary(summary)


def _protocol_of(endpoints: str, job_id: str) -> str:
    """Which protocol ran ``job_id``: the curator's record of the job (`mpdp jobs show`), never a guess from the id."""
    import grpc

    from mpdp_services.common.endpoints import Endpoints
    from mpdp_services.operator.jobs import get_job

    try:
        ep = Endpoints.load(endpoints)
        return str(get_job(ep, job_id)["protocol"])
    except grpc.RpcError as e:
        raise from_rpc(e, "the curator", ep.curator_address, f"to show job {job_id}") from None


def predict_dpgd(ep: Any, job_id: str, data_path: str, fmt: str, **_options: object) -> dict:
    """`mpdp predict` of a dp-gd model from the curator's store (``Hooks.predict``; rows scaled onto the unit ball, as
    the parties trained on them)."""
    import numpy as np

    from mpdp.data.loaders import DatasetError, load
    from mpdp.dpgd.model import party_rows, prepare
    from mpdp_services.operator.dpgd import fetch_model

    run = fetch_model(ep, job_id)
    task, d = run.plan.task, run.plan.dimension
    try:
        X, y = load(data_path, fmt, n_features=d)
    except DatasetError as e:
        raise click.ClickException(str(e))
    if X.shape[1] != d:
        raise click.ClickException(f"{data_path} has {X.shape[1]} features, the model has {d}")
    pred = task.predict(run.model, prepare(X))
    classes = [-1, 1] if task.kind == "binary" else list(range(task.classes))
    out: dict[str, Any] = {"job_id": job_id, "rows": int(len(pred)), "predicted": class_counts(pred, classes),
                           "guarantee": run.plan.guarantee.statement, "trust_model": run.summary()["trust_model"]}
    try:
        _, labels = party_rows(task, X, y)
        from mpdp.results import against_majority, majority_rate

        out["accuracy"] = float(np.mean(pred == labels))
        out.update(against_majority(out["accuracy"], majority_rate(labels)))
    except ValueError:
        pass  # unlabelled or other labels: no accuracy
    return out


def _dataset_entry(item: str) -> tuple[str, str, dict]:
    """(dataset name, party, its entry in the party's ``datasets:``) of one ``--dataset NAME=PARTY:PATH`` or
    ``NAME=PARTY:{description}``: a YAML mapping of the fields a provisioned party's config takes for a dataset
    (:class:`mpdp_services.common.config.DatasetConfig`), its paths resolved against the current folder."""
    import yaml

    from mpdp_services.common.config import DatasetConfig

    try:
        name, rest = item.split("=", 1)
        party, spec = rest.split(":", 1)
    except ValueError:
        raise click.BadParameter(f"{item!r}: use NAME=PARTY:PATH or NAME=PARTY:{{format: ..., ...}}", param_hint="--dataset") from None
    where = f"{party}'s dataset {name!r}"
    if not spec.lstrip().startswith("{"):
        return name, party, {"path": str(Path(spec).resolve())}
    try:
        entry = yaml.safe_load(spec)
    except yaml.YAMLError as e:
        raise click.BadParameter(f"{where}: the description is not a YAML mapping ({str(e).splitlines()[0]})", param_hint="--dataset") from None
    if not isinstance(entry, dict) or not all(isinstance(k, str) for k in entry):
        raise click.BadParameter(f"{where}: the description must be a mapping of fields, e.g. {{format: parquet, path: DIR, schema: FILE}}", param_hint="--dataset")
    known = {f.alias or k for k, f in DatasetConfig.model_fields.items()}
    unknown = sorted(set(entry) - known)
    if unknown:
        raise click.BadParameter(f"{where}: unknown field(s) {', '.join(unknown)}; the fields are {', '.join(sorted(known - {'dsn'}))}", param_hint="--dataset")
    if "dsn" in entry:
        raise click.BadParameter(f"{where}: a connection string on the command line is visible to every user of this host; put it in an environment "
                                 "variable and name that with dsn_env", param_hint="--dataset")
    for key in ("path", "schema"):
        if isinstance(entry.get(key), str) and entry[key]:
            entry[key] = str(Path(entry[key]).expanduser().resolve())
    if isinstance(entry.get("dask_tls"), dict):
        entry["dask_tls"] = {k: str(Path(v).expanduser().resolve()) if isinstance(v, str) else v for k, v in entry["dask_tls"].items()}
    return name, party, entry


def _dataset_config(party: str, name: str, entry: dict) -> Any:
    """The entry as the party will read it (:class:`DatasetConfig`), or a usage error naming the party, the dataset and the field."""
    from pydantic import ValidationError

    from mpdp_services.common.config import DatasetConfig

    try:
        return DatasetConfig.model_validate(entry)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(x) for x in err['loc']) or 'description'}: {err['msg']}" for err in e.errors())
        raise click.BadParameter(f"{party}'s dataset {name!r}: {problems}", param_hint="--dataset") from None


def _libsvm_dimensions(ds: dict[str, dict[str, dict]]) -> None:
    """LIBSVM parts of one dataset (no schema) are read with the same d: the largest feature index in any part. A
    LIBSVM file lists only its non-zero features, so a part whose rows never use the last index would otherwise read
    with fewer columns than the other parts (a9a split three ways: 122, 123, 122)."""
    dims: dict[str, list[tuple[dict, int]]] = {}
    for per in ds.values():
        for name, entry in per.items():
            if "schema" in entry or entry.get("format", "auto") not in ("auto", "libsvm") or "path" not in entry:
                continue  # a schema names the columns; a Parquet folder or a database is not LIBSVM
            d = _libsvm_max_index(Path(entry["path"]))
            if d is not None:
                dims.setdefault(name, []).append((entry, d))
    for parts in dims.values():
        d = max(v for _, v in parts)
        for entry, _ in parts:
            entry.update(format="libsvm", n_features=d)


def _libsvm_max_index(path: Path) -> int | None:
    """The largest feature index of a LIBSVM file ("label idx:value ..."), or None if the file is not LIBSVM."""
    import gzip

    if not path.is_file() or path.suffix.lower() in (".csv", ".parquet"):
        return None
    most = 0
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt") as f:
            for line in f:
                tokens = line.split("#", 1)[0].split()
                if not tokens:
                    continue
                for t in tokens[1:]:
                    index, sep, _ = t.partition(":")
                    if not sep or not index.isdigit():
                        return None
                    most = max(most, int(index))
    except (OSError, UnicodeDecodeError):
        return None
    return most or None


def _apply_schemas(ds: dict[str, dict[str, dict]], schemas: tuple[str, ...]) -> None:
    """Give each dataset its schema (``--schema NAME=PATH`` per dataset name, ``--schema PATH`` for all), then check
    every file against its schema as its party will: a mismatch is a usage error now, not a refused job later."""
    from mpdp_services.party.datasets import schema_problems

    names = {n for per in ds.values() for n in per}
    every: Path | None = None
    by_name: dict[str, Path] = {}
    for item in schemas:
        name, sep, path = item.partition("=")
        if not sep:
            if every is not None:
                raise click.BadParameter("give one --schema PATH for every dataset, or NAME=PATH per dataset", param_hint="--schema")
            every = _schema(item)[0]
        elif name not in names:
            raise click.BadParameter(f"{item!r}: no --dataset is called {name!r} (datasets: {', '.join(sorted(names)) or 'none'})", param_hint="--schema")
        elif name in by_name:
            raise click.BadParameter(f"dataset {name!r} has two schemas", param_hint="--schema")
        else:
            by_name[name] = _schema(path)[0]
    problems = []
    for party, per in ds.items():
        for name, entry in per.items():
            schema = by_name.get(name, every if "schema" not in entry else None)  # a description's own schema stands unless NAME=PATH names one
            if schema is not None:
                entry["schema"] = str(schema)
        checked = schema_problems({n: _dataset_config(party, n, e) for n, e in per.items() if "schema" in e})
        problems += [f"{party}: {p}" for p in checked]
    if problems:
        hint = "; give each dataset its own schema with --schema NAME=PATH" if every is not None and len(names) > 1 else ""
        raise click.UsageError("; ".join(problems) + hint)


def _schema(path: str):
    """(resolved path, sha256, Schema) of a schema file, or a usage error naming what is wrong with it."""
    from mpdp.schema import Schema, SchemaError

    try:
        s = Schema.load(path)
    except SchemaError as e:
        raise click.BadParameter(str(e), param_hint="--schema")
    return Path(path).resolve(), s.sha256(), s


def _check_key_bits(key_bits: int, test_mode: bool) -> None:
    """The same rule as every role's config: 2048 bits and up, smaller keys in test mode only."""
    from mpdp.limits import SpecError, check_key_bits

    try:
        check_key_bits(key_bits, test_mode=test_mode)
    except SpecError as e:
        hint = "add --test-mode for a throwaway federation on public data, or use --key-bits 2048 or more" if not test_mode else ""
        raise CliError(f"--key-bits {key_bits}: {e}", code="usage", hint=hint, exit_code=2) from None


def _start(fed, on_ready=None, *, status: str | None = None, quiet: bool = False) -> None:
    """Start a local federation; a role that exits or hangs during start-up is one error naming its log. ``status``:
    a spinner's text on the terminal while the roles start; ``quiet``: no spinner at all (``--json``).

    The numerical kernels are compiled here first, once, into numba's cache (the first start after an install: a
    minute or more on a loaded machine), so every role then loads them from the cache and its start-up wait is not
    spent compiling."""
    from mpdp_services.common.readiness import compile_kernels

    with _stderr().status("compiling the numerical kernels (once after an install; cached afterwards)", spinner="dots") if not quiet else _null():
        compile_kernels()
    try:
        with _stderr().status(status, spinner="dots") if status and not quiet else _null():
            fed.start(on_ready=on_ready)
    except (RuntimeError, TimeoutError) as e:
        fed.stop()
        first, _, log = str(e).partition("\n")
        last = [ln for ln in log.splitlines() if ln.strip()][-1:] or [""]
        raise CliError(f"{first.removesuffix('; log:')}{': ' + last[0] if last[0] else ''}", code="failed",
                       hint=f"each role's log is WORKDIR/<site>/service.log (here {fed.workdir})") from None


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _endpoint_nodes(endpoints: str) -> list[str]:
    p = Path(endpoints)
    p = p / "endpoints.json" if p.is_dir() else p
    try:
        return sorted(json.loads(p.read_text()).get("compute_nodes", {}))
    except (OSError, ValueError):
        raise click.BadParameter(f"cannot read compute nodes from {p}; pass --compute-nodes") from None


def _print_summary(s: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    out = Console()
    t = Table(title=f"job {s['job_id']}", show_header=False)
    from mpdp.results import majority_warning

    for k in ("noise", "epsilon", "delta", "colluders", "lam", "parties", "dimension", "dp_accuracy", "majority_rate", "nonprivate_accuracy", "wall_seconds"):
        if k in s:
            v = s[k]
            t.add_row(k, f"{v:.4g}" if isinstance(v, float) else str(v))
        warning = majority_warning(s) if k == "majority_rate" and k in s else None
        if warning:
            t.add_row("", warning)
    for k, v in s["stage_seconds"].items():
        t.add_row(f"time {k}", f"{v:.3f} s")
    t.add_row("paillier/dgk ops", ", ".join(f"{k}={v}" for k, v in sorted(s["paillier_ops"].items())))
    t.add_row("guarantee", s["guarantee"]["statement"])
    t.add_row("trust model", s["trust_model"])
    out.print(t)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
