"""A click group that imports a subcommand's module only when that subcommand runs (or its own --help is asked).

`mpdp --help` lists every command from the short helps written here, so it imports no protocol code, numpy,
gRPC or scikit-learn (tests/core/test_cli_startup.py keeps each short help equal to its command's own, and
checks what `mpdp --help` imports; benchmarks/cli_startup.py measures the time).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import click


@dataclass(frozen=True)
class Lazy:
    """Where a command lives ("package.module:attribute") and its one-line help for the group's listing."""

    target: str
    short_help: str

    def load(self) -> click.Command:
        module, _, attr = self.target.partition(":")
        cmd = getattr(importlib.import_module(module), attr)
        if not isinstance(cmd, click.Command):
            raise TypeError(f"{self.target} is not a click command")
        return cmd


class LazyGroup(click.Group):
    """A group whose commands are :class:`Lazy` entries until first used."""

    def __init__(self, *args, lazy: dict[str, Lazy] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(self.lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            self.add_command(self.lazy[cmd_name].load(), cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []  # whole summaries, wrapped by the formatter (never cut)
        for name in self.list_commands(ctx):
            if name in self.commands:
                cmd = self.commands[name]
                rows.append((name, cmd.short_help or cmd.get_short_help_str(1000)))
            else:
                rows.append((name, self.lazy[name].short_help))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
