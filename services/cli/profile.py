"""`mpdp profile ls|add|rm|default`: named federations, so commands need no ``--endpoints`` (services/common/profiles.py)."""

from __future__ import annotations

import json
from pathlib import Path

import click


def _profiles():
    from mpdp_services.common import profiles

    return profiles


def _load():
    p = _profiles()
    try:
        return p.load()
    except p.ProfileError as e:
        raise click.ClickException(str(e)) from None


@click.group("profile")
def profile() -> None:
    """Connection profiles: named endpoints files, chosen with --profile or MPDP_PROFILE."""


@profile.command("ls")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def ls(as_json: bool) -> None:
    """List the profiles and which one is the default."""
    found = _load()
    table = {n: p.endpoints for n, p in sorted(found.profiles.items())}
    where = str(_profiles().path())
    if as_json:
        click.echo(json.dumps({"file": where, "default": found.default or None, "profiles": table}, indent=2))
        return
    click.echo(f"profiles in {where}:")
    for name, endpoints in table.items():
        click.echo(f"{'*' if name == found.default else ' '} {name:<20} {endpoints}")
    if not found.profiles:
        click.echo("  (none; add one with `mpdp profile add NAME PATH`)")


@profile.command("add")
@click.argument("name")
@click.argument("endpoints", type=click.Path(exists=True, path_type=Path))
@click.option("--default", "make_default", is_flag=True, help="also make it the default profile")
def add(name: str, endpoints: Path, make_default: bool) -> None:
    """Add (or replace) profile NAME for ENDPOINTS (an endpoints.json or the folder holding it)."""
    p = _profiles()
    try:
        p.check_name(name)
        found = p.load()
    except p.ProfileError as e:
        raise click.ClickException(str(e)) from None
    target = endpoints.resolve()
    if not (target / "endpoints.json" if target.is_dir() else target).exists():
        raise click.ClickException(f"{target} holds no endpoints.json (written by `mpdp federation up` or `mpdp provision`)")
    found.profiles[name] = p.Profile(endpoints=str(target))
    if make_default or not found.default:
        found.default = name
    where = p.save(found)
    click.echo(f"profile {name} → {target}{' (default)' if found.default == name else ''}; saved in {where}")


@profile.command("rm")
@click.argument("name")
def rm(name: str) -> None:
    """Remove profile NAME."""
    found = _load()
    if found.profiles.pop(name, None) is None:
        raise click.ClickException(f"no profile {name!r} (`mpdp profile ls`)")
    if found.default == name:
        found.default = ""
    _profiles().save(found)
    click.echo(f"profile {name} removed")


@profile.command("default")
@click.argument("name")
def default(name: str) -> None:
    """Make NAME the profile used when neither --endpoints, MPDP_ENDPOINTS, --profile nor MPDP_PROFILE is given."""
    found = _load()
    if name not in found.profiles:
        raise click.ClickException(f"no profile {name!r} (`mpdp profile ls`)")
    found.default = name
    _profiles().save(found)
    click.echo(f"default profile: {name}")
