"""Commands under `mpdp experiment`. Add one import and one list entry per experiment."""

from __future__ import annotations

import click

COMMANDS: list[click.Command] = []
