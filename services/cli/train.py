"""`mpdp train MODEL`: one subcommand per model of the registry (:func:`mpdp.registry.models`), each with only its own
options, every one run the same way through the curator's job host (``JobOperations``: a keyed SubmitJob, WatchJob,
GetRelease; :mod:`mpdp_services.operator.jobs`).

A model of the registry names its trainer in its entry (``Hooks.trainer``: a click command with its options that
builds the ``JobSubmission`` and calls :func:`run_job`; those of the first protocols are here); a model without one
is listed but refuses to run, naming itself, and an unknown model is an error listing the known ones: ``train`` never runs another protocol in its place. ``--detach`` prints the job id
(``--json``: the job's first summary, the same shape for every model) and returns; without it the command follows
the job (its stage on stderr) and prints the release's summary.
"""

from __future__ import annotations

from typing import Any, Callable

import click

from mpdp import registry
from mpdp.limits import DEFAULT_DELTA
from mpdp.registry import models as registered_models
from mpdp_services.cli.errors import CliError
from mpdp_services.cli.model import run_job
from mpdp_services.cli.options import deprecated, endpoints_option, renamed_option
from mpdp_services.operator.pathak2010 import MODES

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def _common(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options every model takes (applied last, so they come first in --help)."""
    for option in reversed([
        endpoints_option,
        click.option("--dataset", required=True, help="dataset name every party maps to its own file"),
        click.option("--parties", required=True, help="comma-separated party names (logreg: the first is P1)"),
        click.option("--epsilon", type=float, required=True, help="privacy parameter ε"),
        renamed_option("--lam", "--lambda", "lam", type=float, required=True, help="the regulariser λ"),
        click.option("--schema", "schema_file", type=click.Path(exists=True, dir_okay=False), default=None,
                     help="the federation's data schema: its sha256 goes in the job spec, and a party whose dataset has another schema refuses the job"),
        click.option("--detach", is_flag=True, help="print the job id and return at once (the curator runs the job; `mpdp jobs watch JOB` follows it, "
                                                     "`mpdp model export JOB` writes its model); with --json the job's first summary"),
        click.option("--json", "as_json", is_flag=True, help="print one JSON object"),
    ]):
        fn = option(fn)
    return fn


def _delta_option(help_: str) -> Decorator:
    return click.option("--delta", type=click.FloatRange(min=0, max=1, max_open=True), default=None, help=f"{help_}  [default: {DEFAULT_DELTA:g}]")


def _delta(delta: float | None) -> float | None:
    if delta == 0:
        deprecated("--delta 0", f"--delta {DEFAULT_DELTA:g} (the default), or leave it out")
        return None
    return delta


def _nodes_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--compute-nodes", default="", help="comma-separated compute nodes that sum the vectors (default: all in endpoints.json)")(fn)


def _validate_option(what: str) -> Decorator:
    return click.option("--validate", type=click.Choice(("on", "none")), default="on", show_default=True,
                        help=f"on: every party proves on its secret shares that its {what} is valid, with discrete Gaussian noise where the sum adds noise; "
                             "none: no proofs, Gaussian noise (honest-but-curious parties)")


def _schema_sha256(schema_file: str | None) -> str:
    from mpdp_services.cli.jobs import _schema

    return _schema(schema_file)[1] if schema_file else ""


def _nodes(endpoints: str, compute_nodes: str) -> list[str]:
    from mpdp_services.cli.jobs import _endpoint_nodes

    return [n for n in compute_nodes.split(",") if n] or _endpoint_nodes(endpoints)


# -- the models ---------------------------------------------------------------------------------------------------
NOISE_HELP = ("noise scheme: gaussian-distributed (every party draws a share of Gaussian noise, (ε, δ)-DP, no t parties know it), "
              "corrected (the smallest party's spherical Laplace, ε-DP, that party knows its noise) or paper (as published)")


@click.command("logreg", short_help="Pathak et al. 2010: a DP logistic regression aggregated by a secure protocol.")
@_common
@renamed_option("--noise", "--mode", "mode", type=click.Choice(MODES), default=MODES[0], show_default=True, help=NOISE_HELP)
@_delta_option("δ of gaussian-distributed noise (pure ε-DP noise takes none)")
@click.option("--colluders", type=click.IntRange(min=0), default=None, help="gaussian-distributed: t, parties that may pool their noise (default max(1, K−2))")
def logreg(endpoints: str, dataset: str, parties: str, epsilon: float, lam: float, schema_file: str | None, detach: bool, as_json: bool, mode: str,
           delta: float | None, colluders: int | None) -> None:
    """Pathak, Rane & Raj 2010: each party's local model, aggregated by a secure protocol (Paillier, DGK), with one
    party's or every party's noise; the curator publishes the DP model."""
    from mpdp.messages import operations_pb2
    from mpdp_services.cli.jobs import _print_summary, model_summary
    from mpdp_services.operator.pathak2010 import make_spec

    delta = _delta(delta)
    if delta is not None and mode != "gaussian-distributed":
        raise click.BadParameter(f"{mode} noise is pure ε-DP: it takes no δ", param_hint="--delta")
    spec = make_spec(dataset, parties.split(","), epsilon, lam, mode, delta=(DEFAULT_DELTA if delta is None else delta) if mode == "gaussian-distributed" else 0.0,
                     colluders=colluders, schema_sha256=_schema_sha256(schema_file))
    run_job(endpoints, operations_pb2.JobSubmission(pathak2010=spec), detach, as_json, lambda rel: model_summary(rel.pathak2010), _print_summary)


@click.command("lmgc", short_help="Pathak & Raj: each party's DP large-margin Gaussian classifier, and their average.")
@_common
@renamed_option("--calibration", "--noise", "mode", type=click.Choice(["corrected", "paper"]), default="corrected", show_default=True,
                help="corrected (provable) or paper (as published)")
@click.option("--ridge", type=float, default=1e-3, show_default=True, help="ridge floor Δ")
@click.option("--data-norm", type=float, default=1.0, show_default=True, help="public row-norm bound r (rows are clipped to it)")
def lmgc(endpoints: str, dataset: str, parties: str, epsilon: float, lam: float, schema_file: str | None, detach: bool, as_json: bool, mode: str,
         ridge: float, data_norm: float) -> None:
    """Each party releases a DP large-margin Gaussian classifier (objective perturbation, λ the trace regulariser);
    the curator publishes the set and their average."""
    from mpdp.messages import operations_pb2
    from mpdp_services.operator.local import local_spec, summary

    spec = local_spec(dataset, parties.split(","), epsilon, lam, mode, ridge, data_norm, schema_sha256=_schema_sha256(schema_file))
    run_job(endpoints, operations_pb2.JobSubmission(lmgc=spec), detach, as_json, lambda rel: summary(rel.lmgc))


@click.command("hamm2016", short_help="Hamm, Cao & Belkin 2016: the parties vote on public auxiliary data; a DP global classifier.")
@_common
@click.option("--auxiliary", required=True, help="the curator's auxiliary dataset name (curator config `auxiliary:`)")
@click.option("--method", type=click.Choice(["soft", "vote", "pate"]), default="soft", show_default=True,
              help="soft labels (Alg. 2), majority votes (Alg. 1), both ε-DP by output perturbation; or pate: the voters add Gaussian noise "
                   "inside the vote sum, the curator sees only noisy counts and labels by their noisy argmax (GNMax), (ε, δ)-DP (δ from --delta)")
@click.option("--queries", type=click.IntRange(min=0), default=0, help="pate: Q auxiliary points queried (a public random subset; 0 = all distinct points)")
@click.option("--classes", default="-1,1", show_default=True, help="the class labels, comma-separated (binary: the second is +1)")
@_nodes_option
@click.option("--max-missing", type=int, default=0, show_default=True, help="voters that may drop out")
@click.option("--protect-aux", is_flag=True, help="also protect one auxiliary point (HCB16 §3.4)")
@renamed_option("--local-lam", "--local-lambda", "local_lam", type=float, default=0.0, help="λ of the parties' local models (default: --lam)")
@_delta_option("δ of pate (soft and vote are pure ε-DP and take none)")
@_validate_option("vote vector (one vote per auxiliary point)")
def hamm2016(endpoints: str, dataset: str, parties: str, epsilon: float, lam: float, schema_file: str | None, detach: bool, as_json: bool, auxiliary: str,
             method: str, queries: int, classes: str, compute_nodes: str, max_missing: int, protect_aux: bool, local_lam: float, delta: float | None,
             validate: str) -> None:
    """The parties vote on the curator's public auxiliary data, the DCA compute nodes sum the votes, and the curator
    releases a DP global classifier trained on the labelled auxiliary data."""
    from mpdp.messages import hamm2016_pb2, operations_pb2
    from mpdp_services.operator.ensemble import summary

    delta = _delta(delta)
    if delta is not None and method != "pate":
        raise click.BadParameter(f"hamm2016 {method} is pure ε-DP: it takes no δ (pate does)", param_hint="--delta")
    spec = hamm2016_pb2.EnsembleJobSpec(dataset=dataset, auxiliary=auxiliary, method=method, lam=lam, epsilon=epsilon, classes=classes.split(","),
                                        parties=parties.split(","), compute_nodes=_nodes(endpoints, compute_nodes), max_missing=max_missing,
                                        protect_aux=protect_aux, local_lam=local_lam,
                                        delta=(DEFAULT_DELTA if delta is None else delta) if method == "pate" else 0.0, queries=queries if method == "pate" else 0,
                                        schema_sha256=_schema_sha256(schema_file), unvalidated=validate == "none")
    run_job(endpoints, operations_pb2.JobSubmission(hamm2016=spec), detach, as_json, lambda rel: summary(rel.hamm2016))


@click.command("dp-gd", short_help="DP gradient descent over the DCA (binary or softmax logistic regression), run by the curator.")
@_common
@renamed_option("--calibration", "--noise", "mode", type=click.Choice(["corrected", "paper"]), default="corrected", show_default=True,
                help="corrected (provable) or paper (as published)")
@_delta_option("δ of the whole job")
@click.option("--classes", default="-1,1", show_default=True, help="the class labels, comma-separated (two: binary; more: softmax)")
@click.option("--dimension", type=click.IntRange(min=1), required=True, help="the number of features d every party's dataset has")
@click.option("--total-records", type=click.IntRange(min=1), required=True, help="the public total row count N (replace-one adjacency)")
@click.option("--records-per-party", type=click.IntRange(min=1), required=True, help="public bound on one party's row count")
@click.option("--rounds", type=int, default=-1, help="R, the job runs R + 1 DCA rounds (default: 0 when N·ε ≥ 10⁴, else 4)")
@_nodes_option
@click.option("--max-missing", type=int, default=0, show_default=True, help="parties that may drop out of a round")
@_validate_option("round vector (in the ℓ2 ball of the public row bound × the clip)")
def dpgd(endpoints: str, dataset: str, parties: str, epsilon: float, lam: float, schema_file: str | None, detach: bool, as_json: bool, mode: str,
         delta: float | None, classes: str, dimension: int, total_records: int, records_per_party: int, rounds: int, compute_nodes: str, max_missing: int,
         validate: str) -> None:
    """DP gradient descent over the DCA: parties submit noisy clipped gradient sums each round and the curator steps;
    the curator runs every round and keeps the model (`mpdp predict --job`, `mpdp model export`)."""
    from mpdp.dpgd.model import Task
    from mpdp.dpgd.plan import DpgdPlan, auto_rounds
    from mpdp.dpgd.role import DpgdRun
    from mpdp.messages import operations_pb2
    from mpdp_services.operator.dpgd import dpgd_spec

    delta = _delta(delta)
    labels = classes.split(",")
    task = Task("binary") if len(labels) == 2 else Task("softmax", len(labels))
    try:
        plan = DpgdPlan(task, dimension, epsilon, DEFAULT_DELTA if delta is None else delta, lam=lam,
                        rounds=auto_rounds(epsilon, total_records) if rounds < 0 else rounds, total_records=total_records, mode=mode,
                        validate="l2" if validate != "none" else "none")
    except ValueError as e:
        raise click.ClickException(f"not a valid dp-gd plan: {e}")
    spec = dpgd_spec(dataset, parties.split(","), _nodes(endpoints, compute_nodes), plan, records_per_party, max_missing=max_missing,
                     schema_sha256=_schema_sha256(schema_file))

    def summarise(rel: Any) -> dict:
        out = {k: v for k, v in DpgdRun.of(rel.learner).summary().items() if k != "weights"}
        out["stored"] = "curator"  # `mpdp predict --job`, `mpdp model export` read it from the curator's store
        return out

    run_job(endpoints, operations_pb2.JobSubmission(learner=spec), detach, as_json, summarise)


def _trainer(path: str) -> Callable[[], click.Command]:
    return lambda: registry.hook(path)


# model name → its trainer, the click command its registry entry names (``Hooks.trainer``: here, or in the
# protocol's own module). A model the registry declares without one cannot run (see below).
TRAINERS: dict[str, Callable[[], click.Command]] = {p.model: _trainer(p.hooks.trainer) for p in registry.PROTOCOLS
                                                    if p.model is not None and p.hooks.trainer is not None}


def _untrainable(model: str) -> click.Command:
    @click.command(model, short_help=f"(registered, but `mpdp train` has no trainer for {model} yet)", context_settings={"ignore_unknown_options": True})
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def refuse(args: tuple[str, ...]) -> None:
        raise CliError(f"model {model} is registered but `mpdp train` has no trainer for it; nothing was submitted", code="usage", exit_code=2)

    return refuse


class TrainGroup(click.Group):
    """The registry's models as subcommands; an unknown model is an error naming it and the known ones."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(registered_models())

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in registered_models():
            return None
        make = TRAINERS.get(name)
        return _untrainable(name) if make is None else make()

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0]
        cmd = self.get_command(ctx, name)
        if cmd is None:
            known = ", ".join(registered_models())
            if name == "--model" or name.startswith("--model="):
                raise click.UsageError(f"`mpdp train --model M` is now `mpdp train M`; the models are {known}", ctx)
            shown = name if len(name) <= 40 and name.replace("-", "").replace("_", "").isalnum() else "<that>"
            raise click.UsageError(f"no model {shown!r}; the models are {known}", ctx)
        return name, cmd, args[1:]


@click.group("train", cls=TrainGroup, context_settings={"ignore_unknown_options": True},
             short_help="Train a model across the parties (one subcommand per model): the curator runs the job.")
def train() -> None:
    """Train a model across the parties through the curator's job host: `mpdp train MODEL --help` for its options.
    Each model is one subcommand; the curator runs the job (Ctrl-C stops watching only)."""
