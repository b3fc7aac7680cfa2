"""The `mpdp` command. Each subcommand lives in its own module and is registered here."""

from __future__ import annotations

import click

from mpdp import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mpdp")
def cli() -> None:
    """mpdp: multiparty differentially private learning over mutually authenticated gRPC."""


@cli.group()
def experiment() -> None:
    """Reproduce the papers' experiments (fast mechanism path, optional real-protocol spot checks)."""


def _register() -> None:
    # Subcommand modules; each exposes `command` (a click.Command).
    from mpdp_services.cli import dca, experiment_commands, health, jobs, provision, regress, serve

    cli.add_command(serve.serve)
    cli.add_command(jobs.federation)
    cli.add_command(jobs.train)
    cli.add_command(jobs.predict)
    cli.add_command(jobs.demo)
    cli.add_command(dca.dca)
    cli.add_command(regress.regress)
    cli.add_command(provision.provision)
    cli.add_command(health.health)

    for cmd in experiment_commands.COMMANDS:
        experiment.add_command(cmd)


def main() -> None:
    _register()
    cli()


if __name__ == "__main__":
    main()
