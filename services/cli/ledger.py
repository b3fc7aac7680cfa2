"""`mpdp ledger show`: a party's privacy ledger, each entry and the ε spent under the accountant and basic composition.

The ledger is read as the party service writes it (the file is replaced atomically, so a plain read is a
consistent snapshot; nothing is locked or created). ``--site`` takes a party's site folder (its party.yaml names
the ledger and the budget) or a folder of sites (a federation workdir: every ``*/party.yaml``), and may repeat;
``--ledger FILE --budget-epsilon E [--budget-delta D]`` reads one file with an explicit budget.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import click


def _sites(folders: tuple[Path, ...]) -> list[Path]:
    """party.yaml files: FOLDER/party.yaml, else FOLDER/*/party.yaml."""
    found: list[Path] = []
    for folder in folders:
        own = folder / "party.yaml"
        more = [own] if own.exists() else sorted(folder.glob("*/party.yaml"))
        if not more:
            raise click.UsageError(f"{folder} has no party.yaml (nor any */party.yaml): pass a party's site folder, or --ledger")
        found += more
    return found


def _report(name: str, path: Path, budget_epsilon: float, budget_delta: float) -> dict:
    from mpdp.ledger import LedgerError, PrivacyLedger

    try:
        text = path.read_text()
    except FileNotFoundError:
        text = '{"entries": []}'
    except OSError as e:
        raise click.ClickException(f"cannot read the ledger of {name} at {path}: {e}")
    try:
        led = PrivacyLedger.from_json(text, budget_epsilon, budget_delta)
        return {"party": name, "ledger": str(path), **led.report()}
    except LedgerError as e:
        raise click.ClickException(f"the ledger of {name} at {path} cannot be used: {e}")


def _num(x: float | None, fmt: str = ".4g") -> str:
    return "—" if x is None else format(x, fmt)


def _print(reports: list[dict]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    for rep in reports:
        b, acc, basic = rep["budget"], rep["accountant"], rep["basic"]
        table = Table(title=f"{escape(rep['party'])}: {escape(rep['ledger'])}  (budget ε = {b['epsilon']:g}, δ = {b['delta']:g})", title_justify="left")
        for col in ("protocol", "job", "status", "mechanism", "ε", "δ"):
            table.add_column(col, justify="right" if col in ("ε", "δ") else "left")
        for e in rep["entries"]:
            table.add_row(escape(e["protocol"]), escape(e["job_id"]), e["status"], escape(e["accounted_as"]), f"{e['epsilon']:.4g}", f"{e['delta']:.3g}")
        console.print(table)
        console.print(f"  spent, accountant ({acc['method']}) at δ = {b['delta']:g}: ε = {_num(acc['epsilon'])}   left ε = {_num(acc['left_epsilon'])}")
        console.print(f"  spent, basic composition: ε = {basic['epsilon']:.4g}, δ = {basic['delta']:.3g}   left ε = {_num(basic['left_epsilon'])}, δ = {basic['left_delta']:.3g}")


@click.group("ledger")
def ledger() -> None:
    """Read a party's privacy ledger."""


@ledger.command("show")
@click.option("--site", "sites", type=click.Path(file_okay=False, exists=True, path_type=Path), multiple=True,
              help="a party's site folder (party.yaml), or a folder of sites such as a federation workdir; repeatable")
@click.option("--ledger", "ledger_path", type=click.Path(dir_okay=False, path_type=Path), default=None, help="a ledger file (with --budget-epsilon)")
@click.option("--budget-epsilon", type=float, default=None, help="the ledger's total ε (with --ledger)")
@click.option("--budget-delta", type=float, default=None, help="the ledger's total δ (with --ledger)  [default: 1e-3]")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def show(sites: tuple[Path, ...], ledger_path: Path | None, budget_epsilon: float | None, budget_delta: float | None, as_json: bool) -> None:
    """Per party: each entry (protocol, job, status, mechanism, its (ε, δ)), ε spent under the accountant (at the
    budget δ) and under basic composition, and what is left."""
    # usage errors first (exit 2), before the ledger and configuration code is imported
    if ledger_path is None and not sites:
        raise click.UsageError("pass --site DIR (repeatable) or --ledger FILE --budget-epsilon E")
    if ledger_path is not None and budget_epsilon is None:
        raise click.UsageError("--ledger needs --budget-epsilon (the budget lives in the party's configuration, not in the file)")
    if ledger_path is None and (budget_epsilon is not None or budget_delta is not None):
        raise click.UsageError("--budget-epsilon and --budget-delta go with --ledger (a site's budget is in its party.yaml)")
    for value in (budget_epsilon, budget_delta):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise click.UsageError(f"budgets must be finite, ε ≥ 0 and δ in [0, 1]; got ε={budget_epsilon}, δ={budget_delta}")
    if budget_delta is not None and budget_delta > 1:
        raise click.UsageError(f"budgets must be finite, ε ≥ 0 and δ in [0, 1]; got δ={budget_delta}")
    yamls = _sites(sites)

    from mpdp.ledger import DEFAULT_BUDGET_DELTA
    from mpdp_services.common import config as cfgmod

    reports: list[dict] = []
    if ledger_path is not None:
        assert budget_epsilon is not None  # checked above
        delta = DEFAULT_BUDGET_DELTA if budget_delta is None else budget_delta
        reports.append(_report(ledger_path.name, ledger_path, budget_epsilon, delta))
    for yaml_path in yamls:
        try:
            cfg = cfgmod.load(cfgmod.PartyConfig, yaml_path)
        except cfgmod.ConfigError as e:
            raise click.ClickException(str(e))
        reports.append(_report(cfg.name, Path(cfg.ledger), cfg.budget_epsilon, cfg.budget_delta))
    if as_json:
        click.echo(json.dumps({"parties": reports}, indent=2))
    else:
        _print(reports)
