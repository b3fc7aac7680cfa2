"""Options shared by the commands that talk to a running federation (one definition, one help text)."""

from __future__ import annotations

import click

ENDPOINTS_ENV = "MPDP_ENDPOINTS"

endpoints_option = click.option(
    "--endpoints",
    type=click.Path(),
    default="runs/federation",
    show_default=True,
    envvar=ENDPOINTS_ENV,
    show_envvar=True,
    help="endpoints.json, or the federation folder holding it (written by `mpdp federation up` or `mpdp provision`)",
)
