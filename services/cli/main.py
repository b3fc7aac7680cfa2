"""The `mpdp` command. Each subcommand lives in its own module, imported only when it runs (services/cli/lazy.py)."""

from __future__ import annotations

import sys
from typing import NoReturn

import click

from mpdp import __version__, registry
from mpdp_services.cli import errors
from mpdp_services.cli.lazy import Lazy, LazyGroup

_CLI = "mpdp_services.cli."

COMMANDS = {
    "demo": Lazy(_CLI + "jobs:demo", "Everything in one command: a real federation on scikit-learn's breast-cancer data, split over parties."),
    "evaluate": Lazy(_CLI + "evaluate:evaluate", "Evaluate a released classifier on the parties' own rows with DP: accuracy, confusion matrix, AUC."),
    "federation": Lazy(_CLI + "jobs:federation", "Start a local federation (curator + parties as separate processes, throwaway CA, mutual TLS)."),
    "jobs": Lazy(_CLI + "operate:jobs", "See, follow and cancel the curator's jobs of every protocol (`mpdp jobs ls --protocol`: the registry's names)."),
    "health": Lazy(_CLI + "health:health", "Exit 0 if the service at ADDRESS, or every role of the federation, reports SERVING over mutual TLS, else 1 with the reason."),
    "ledger": Lazy(_CLI + "ledger:ledger", "Read a party's privacy ledger."),
    "model": Lazy(_CLI + "model:model", "Released models of every protocol's jobs, from the curator's job host."),
    "predict": Lazy(_CLI + "jobs:predict", "Play Dave: fetch the shares, rebuild ŵ_s = Σ shares / K, classify, report accuracy if labelled."),
    "profile": Lazy(_CLI + "profile:profile", "Connection profiles: named endpoints files, chosen with --profile or MPDP_PROFILE."),
    "provision": Lazy(_CLI + "provision:provision", "Provision a federation: a CA, a certificate per site, each site's config and README."),
    "schema": Lazy(_CLI + "schema:schema", "Check a data file against the federation's schema, or draft a schema from a file (docs/schema.md)."),
    "serve": Lazy(_CLI + "serve:serve", "Run one role of the federation as a service (one OS process per role)."),
    "train": Lazy(_CLI + "train:train", "Train a model across the parties (one subcommand per model): the curator runs the job."),
}
# a protocol's own top-level command (e.g. `mpdp query`), named by its registry entry (mpdp.registry: Hooks.command)
COMMANDS.update({name: Lazy(path, help_) for name, path, help_ in (p.hooks.command for p in registry.PROTOCOLS if p.hooks.command is not None)})

EXPERIMENTS = {
    "hamm2016": Lazy(_CLI + "experiment_hamm:command",
                     "Hamm, Cao & Belkin 2016 Fig. 3: private ensembles (soft/vote/avg/avg-tight/pate) vs batch/indiv on KDD-99."),
    "heikkila2017": Lazy(_CLI + "experiment_heikkila:command", "Heikkilä et al. 2017 Fig. 2: BLR test MAE vs ε on UCI data (TA, DDP via DCA, projection)."),
    "lmgc": Lazy(_CLI + "experiment_lmgc:command", "Accuracy vs ε: non-private and DP LMGC (corrected and paper modes) against (DP) multinomial LR."),
    "pathak2010": Lazy(_CLI + "experiment_pathak:command",
                       "PRR10 Figure 2: test error of the DP aggregate classifier on a9a vs ε (K=5, three splits, both modes)."),
    "price-of-distrust": Lazy(_CLI + "experiment_price:command",
                              ("Test error of multiparty DP-GD (DCA), Pathak 2010 (both modes), central output and objective "
                               "perturbation, and diffprivlib, on a9a (K = 5) and digits, at the same (ε, δ = 1e-6).")),
}


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mpdp")
def cli() -> None:
    """mpdp: multiparty differentially private learning over mutually authenticated gRPC."""


@cli.group(cls=LazyGroup, lazy=EXPERIMENTS)
def experiment() -> None:
    """Reproduce the papers' experiments (fast mechanism path, optional real-protocol spot checks)."""


def main(argv: list[str] | None = None) -> NoReturn:
    """Run one command; every failure is reported by services/cli/errors.py (one JSON error object with --json)."""
    args = sys.argv[1:] if argv is None else list(argv)
    as_json = errors.wants_json(args)
    try:
        rv = cli.main(args=args, prog_name="mpdp", standalone_mode=False)
    except SystemExit as e:
        if as_json and e.code not in (None, 0) and not isinstance(e.code, int):  # a message instead of a status
            errors.report(errors.CliError(str(e.code)), True)
        raise
    except BaseException as e:  # noqa: BLE001 - every failure leaves as one message (a bug: with its traceback)
        errors.report(e, as_json)
    raise SystemExit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
