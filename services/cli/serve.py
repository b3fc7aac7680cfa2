"""`mpdp serve curator|party|compute-node --config FILE`: run one role as a long-lived process."""

from __future__ import annotations

import asyncio
import logging

import click

from mpdp_services.common import logs


@click.group()
def serve() -> None:
    """Run one role of the federation as a service (one OS process per role)."""


_ROLES = {"CuratorConfig": "curator", "PartyConfig": "party", "ComputeNodeConfig": "compute-node"}


def _run(cfg_name: str, config_path: str, quiet: bool, server_module: str, log_format: str = "text", **overrides) -> None:
    """Load a role's config (``cfg_name``: its class in services/common/config.py) and run its server until a signal;
    config and start-up errors become CLI errors."""
    import importlib

    from mpdp_services.common import config as cfgmod, tracing
    from mpdp_services.common.processes import exit_if_orphaned, raise_fd_limit

    cfg_cls = getattr(cfgmod, cfg_name)
    try:
        cfg = cfgmod.load(cfg_cls, config_path, **overrides)
    except cfgmod.ConfigError as e:
        raise click.ClickException(str(e))
    role = _ROLES.get(cfg_cls.__name__, cfg_cls.__name__)
    logs.setup(log_format, not quiet, role, cfg.name)
    try:
        tracing.setup(cfg.traces, role, cfg.name)  # off by default (the config's `traces`, the OTEL_* variables)
    except ValueError as e:
        raise click.ClickException(f"{cfg.name}: {e}")
    exit_if_orphaned()  # started by a parent that is already gone: nobody would ever stop this service
    # every idle connection costs a descriptor: let the hard limit, not the default soft one, bound them
    logging.getLogger("mpdp.serve").info("open-descriptor limit %d", raise_fd_limit())
    run = importlib.import_module(server_module).serve
    try:
        asyncio.run(run(cfg))
    except (ValueError, OSError) as e:
        raise click.ClickException(f"{cfg.name}: {e}")
    finally:
        tracing.shutdown()  # flush batched spans (otlp)


_CONFIG_HELP = "YAML config (env MPDP_* overrides fields)"
log_format_option = click.option("--log-format", type=click.Choice(logs.FORMATS), default="text", show_default=True, envvar="MPDP_LOG_FORMAT",
                                 help="text for a terminal, or json: one object per line (time, level, role, site, job_id, protocol, stage, event)")


@serve.command("curator")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False), help=f"curator {_CONFIG_HELP}")
@click.option("--quiet", is_flag=True, help="log warnings only")
@log_format_option
def serve_curator(config_path: str, quiet: bool, log_format: str) -> None:
    """Run Charlie, the curator: job submission, protocol steps, model registry."""
    _run("CuratorConfig", config_path, quiet, "mpdp_services.curator.server", log_format)


@serve.command("party")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False), help=f"party {_CONFIG_HELP}")
@click.option("--quiet", is_flag=True, help="log warnings only")
@log_format_option
def serve_party(config_path: str, quiet: bool, log_format: str) -> None:
    """Run a party P_j: trains locally on its own data and takes part in jobs."""
    _run("PartyConfig", config_path, quiet, "mpdp_services.party.server", log_format)


@serve.command("compute-node")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False), help=f"compute node {_CONFIG_HELP}")
@click.option("--quiet", is_flag=True, help="log warnings only")
@click.option("--workers", type=click.IntRange(1, 64), default=None, help="processes sharing the node's port (overrides the config's `workers`; docs/deploy.md)")
@log_format_option
def serve_compute_node(config_path: str, quiet: bool, workers: int | None, log_format: str) -> None:
    """Run a DCA compute node: sums clients' shares and agrees with the other nodes before releasing."""
    _run("ComputeNodeConfig", config_path, quiet, "mpdp_services.compute_node.server", log_format, **({"workers": workers} if workers else {}))
