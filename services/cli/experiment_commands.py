"""Commands under `mpdp experiment`. Add one import and one list entry per experiment."""

from __future__ import annotations

import click

from mpdp_services.cli import experiment_pathak
from mpdp_services.cli import experiment_lmgc
from mpdp_services.cli import experiment_heikkila
from mpdp_services.cli import experiment_hamm
from mpdp_services.cli import experiment_price

COMMANDS: list[click.Command] = [
    experiment_pathak.command,
    experiment_lmgc.command,
    experiment_heikkila.command,
    experiment_hamm.command,
    experiment_price.command,
]
