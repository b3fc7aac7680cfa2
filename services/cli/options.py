"""Options shared by the commands that talk to a running federation (one definition, one help text)."""

from __future__ import annotations

from typing import Any, Callable

import click

ENDPOINTS_ENV = "MPDP_ENDPOINTS"
PROFILE_ENV = "MPDP_PROFILE"


def _remember_profile(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    ctx.meta["mpdp.profile"] = value


def _resolve(ctx: click.Context, _param: click.Parameter, value: str | None) -> str:
    if value:  # --endpoints or MPDP_ENDPOINTS: no profile to read
        return value
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


def deprecated(old: str, new: str) -> None:
    """Say on stderr that ``old`` is an old spelling of ``new`` (kept for one release)."""
    click.echo(f"mpdp: {old} is deprecated and goes in the next release; use {new}", err=True)


def renamed_option(new: str, old: str, dest: str, *, required: bool = False, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Option ``new`` (the command receives ``dest``), with its old spelling ``old`` still accepted for one release:
    hidden from --help, and a warning on stderr when used. ``required`` is checked after both are read."""
    key = f"mpdp.renamed.{dest}"

    def take_old(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        if value is not None:
            deprecated(old, new)
            ctx.meta[key] = value

    def take_new(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        from click.core import ParameterSource

        explicit = ctx.get_parameter_source(param.name or dest) not in (ParameterSource.DEFAULT, None)
        if not explicit and key in ctx.meta:
            return ctx.meta[key]
        if value is None and required:
            raise click.MissingParameter(ctx=ctx, param=param)
        return value

    help_text = kwargs.pop("help", "")
    if required:
        help_text = f"{help_text}  [required]"

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn = click.option(old, f"renamed_{dest}", hidden=True, expose_value=False, callback=take_old, type=kwargs.get("type"))(fn)
        return click.option(new, dest, callback=take_new, help=help_text, **kwargs)(fn)

    return decorate


class ProgressLine:
    """One progress line on stderr for a long command (never on stdout, so --json output stays one object):
    rewritten in place on a terminal, else a line per tenth of the way."""

    def __init__(self, what: str) -> None:
        import sys
        import time

        self.what = what
        self._stream = sys.stderr
        self._tty = sys.stderr.isatty()
        self._t0 = time.monotonic()
        self._shown = -1

    def update(self, done: int, total: int) -> None:
        import time

        tenth = 10 * done // max(total, 1)
        if not self._tty and tenth == self._shown:
            return
        self._shown = tenth
        text = f"{self.what}: {done:,} / {total:,} ({100 * done / max(total, 1):.0f} %, {time.monotonic() - self._t0:.1f} s)"
        self._stream.write(f"\r{text}\033[K" if self._tty else text + "\n")
        self._stream.flush()

    def close(self) -> None:
        if self._tty and self._shown >= 0:
            self._stream.write("\n")
            self._stream.flush()
