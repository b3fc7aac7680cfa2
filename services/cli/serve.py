"""`mpdp serve curator|party|compute-node --config FILE`: run one role as a long-lived process."""

from __future__ import annotations

import asyncio
import logging
import sys

import click

from mpdp_services.common import config as cfgmod
from mpdp_services.common.processes import raise_fd_limit


@click.group()
def serve() -> None:
    """Run one role of the federation as a service (one OS process per role)."""


def _logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")


def _run(cfg_cls, config_path: str, quiet: bool, server_module: str) -> None:
    """Load a role's config and run its server until a signal; config and start-up errors become CLI errors."""
    import importlib

    _logging(not quiet)
    # every idle connection costs a descriptor: let the hard limit, not the default soft one, bound them
    logging.getLogger("mpdp.serve").info("open-descriptor limit %d", raise_fd_limit())
    try:
        cfg = cfgmod.load(cfg_cls, config_path)
    except cfgmod.ConfigError as e:
        raise click.ClickException(str(e))
    run = importlib.import_module(server_module).serve
    try:
        asyncio.run(run(cfg))
    except (ValueError, OSError) as e:
        raise click.ClickException(f"{cfg.name}: {e}")


_CONFIG_HELP = "YAML config (env MPDP_* overrides fields)"


@serve.command("curator")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False), help=f"curator {_CONFIG_HELP}")
@click.option("--quiet", is_flag=True, help="log warnings only")
def serve_curator(config_path: str, quiet: bool) -> None:
    """Run Charlie, the curator: job submission, protocol steps, model registry."""
    _run(cfgmod.CuratorConfig, config_path, quiet, "mpdp_services.curator.server")


@serve.command("party")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False), help=f"party {_CONFIG_HELP}")
@click.option("--quiet", is_flag=True, help="log warnings only")
def serve_party(config_path: str, quiet: bool) -> None:
    """Run a party P_j: trains locally on its own data and takes part in jobs."""
    _run(cfgmod.PartyConfig, config_path, quiet, "mpdp_services.party.server")


@serve.command("compute-node")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False), help=f"compute node {_CONFIG_HELP}")
@click.option("--quiet", is_flag=True, help="log warnings only")
def serve_compute_node(config_path: str, quiet: bool) -> None:
    """Run a DCA compute node: sums clients' shares and agrees with the other nodes before releasing."""
    _run(cfgmod.ComputeNodeConfig, config_path, quiet, "mpdp_services.compute_node.server")
