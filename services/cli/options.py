"""Options shared by the commands that talk to a running federation (one definition, one help text)."""

from __future__ import annotations

from typing import Any, Callable

import click

ENDPOINTS_ENV = "MPDP_ENDPOINTS"
PROFILE_ENV = "MPDP_PROFILE"


def _remember_profile(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    ctx.meta["mpdp.profile"] = value


def _resolve(ctx: click.Context, _param: click.Parameter, value: str | None) -> str:
    from mpdp_services.common.profiles import ProfileError, resolve

    try:
        return resolve(value, ctx.meta.get("mpdp.profile"))
    except ProfileError as e:
        raise click.UsageError(str(e), ctx) from None


def endpoints_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--endpoints PATH`` and ``--profile NAME``; the command receives the resolved path as ``endpoints``."""
    fn = click.option(
        "--endpoints",
        type=click.Path(),
        default=None,
        envvar=ENDPOINTS_ENV,
        show_envvar=True,
        callback=_resolve,
        help=("endpoints.json, or the federation folder holding it (written by `mpdp federation up` or `mpdp provision`); "
              "default: the profile's, else runs/federation"),
    )(fn)
    return click.option(
        "--profile",
        default=None,
        envvar=PROFILE_ENV,
        show_envvar=True,
        is_eager=True,
        expose_value=False,
        callback=_remember_profile,
        help="a connection profile (`mpdp profile ls`); default: the profiles file's `default`",
    )(fn)
