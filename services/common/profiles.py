"""Connection profiles: named federations an operator works with, so no command needs ``--endpoints`` copied.

A profile names an ``endpoints.json`` (or the folder holding it). They live in one YAML file, by default
``$XDG_CONFIG_HOME/mpdp/profiles.yaml`` (``~/.config/mpdp/profiles.yaml``), another with ``MPDP_PROFILES``::

    default: hospital-a
    profiles:
      hospital-a: {endpoints: /etc/mpdp/hospital-a/operator}
      local: {endpoints: runs/federation}

Which endpoints a command uses, first match wins: ``--endpoints``, ``MPDP_ENDPOINTS``, ``--profile``,
``MPDP_PROFILE``, the file's ``default``, then ``runs/federation`` (what ``mpdp federation up`` writes).
The file is written 0600 (it names where the operator's key lives).
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from mpdp import limits
from mpdp_services.common.durable import write_atomic

FALLBACK = "runs/federation"
FILE_ENV, PROFILE_ENV = "MPDP_PROFILES", "MPDP_PROFILE"


class ProfileError(ValueError):
    """A profile that does not exist or a profiles file that cannot be used: says which and what to do."""


class Profile(BaseModel):
    endpoints: str


class Profiles(BaseModel):
    default: str = ""
    profiles: dict[str, Profile] = {}


def path() -> Path:
    if os.environ.get(FILE_ENV):
        return Path(os.environ[FILE_ENV])
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "mpdp" / "profiles.yaml"


def load(where: Path | None = None) -> Profiles:
    p = where or path()
    if not p.exists():
        return Profiles()
    try:
        return Profiles.model_validate(yaml.safe_load(p.read_text()) or {})
    except (yaml.YAMLError, ValidationError) as e:
        raise ProfileError(f"{p} is not a profiles file (default: NAME, profiles: {{NAME: {{endpoints: PATH}}}}): {str(e).splitlines()[0]}") from None


def save(profiles: Profiles, where: Path | None = None) -> Path:
    p = where or path()
    p.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(p, yaml.safe_dump(profiles.model_dump(), sort_keys=True).encode())
    return p


def check_name(name: str) -> str:
    if not limits.is_id(name):
        raise ProfileError("a profile name is 1-64 letters, digits, '.', '_' or '-'")
    return name


def resolve(endpoints: str | None, profile: str | None) -> str:
    """The endpoints path a command uses (see the module docstring for the order)."""
    if endpoints:
        return endpoints
    if os.environ.get("MPDP_ENDPOINTS"):
        return os.environ["MPDP_ENDPOINTS"]
    name = profile or os.environ.get(PROFILE_ENV) or ""
    profiles = load() if (name or path().exists()) else Profiles()
    name = name or profiles.default
    if not name:
        return FALLBACK
    found = profiles.profiles.get(name)
    if found is None:
        known = ", ".join(sorted(profiles.profiles)) or "none"
        raise ProfileError(f"no profile {name!r} in {path()} (known: {known}); add it with `mpdp profile add {name} PATH`")
    return found.endpoints
