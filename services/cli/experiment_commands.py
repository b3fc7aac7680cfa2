"""Commands under `mpdp experiment`. Add one import and one list entry per experiment."""

from __future__ import annotations

import click

from services.cli import experiment_lmgc, experiment_pathak

COMMANDS: list[click.Command] = [
    experiment_pathak.command,
    experiment_lmgc.command,
]
