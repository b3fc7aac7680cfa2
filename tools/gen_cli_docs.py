"""Render docs/cli.md from the click commands themselves (`python tools/gen_cli_docs.py > docs/cli.md`).

tests/core/test_cli_startup.py keeps the committed page equal to this output, so the reference cannot drift from
the code. The grammar and the conventions at the top are written here once.
"""

from __future__ import annotations

from pathlib import Path

import click

from mpdp_services.cli.main import cli

WIDTH = 100  # fixed, so the page does not depend on the terminal
HELP = ["-h", "--help"]  # as every command has it under `mpdp` (click remembers a command's help option once built)

HEADER = """# The `mpdp` command line

Generated from the commands by `python tools/gen_cli_docs.py > docs/cli.md` (a test keeps it current).

## Grammar and conventions

* `mpdp NOUN [VERB] [OPTIONS]`: a noun names what you act on (`federation`, `jobs`, `dca`, `ledger`, `profile`, `provision`,
  `experiment`), a verb what you do to it (`up`, `create`, `submit`, `watch`, `show`, ...). The protocol runs that
  publish a model are verbs of their own: `train MODEL` (one subcommand per model of `mpdp/registry.py`, each with
  only its own options), `regress` (the same as `train regression`), `predict`; `demo` runs everything once.
* Every command that prints a result takes `--json` and then prints exactly one JSON object on standard output;
  progress and notices go to standard error (long jobs show a progress line there, never with `--json`).
* Failures: with `--json`, exactly one object `{"error": {"code", "message", "hint"}}` on standard output and a
  non-zero exit; without it, `Error: ...` and `Hint: ...` on standard error. No traceback for any user error.
  Codes scripts may branch on: `usage`, `endpoints` (no endpoints file), `unreachable` (a service is not reachable
  at its address), `invalid`, `job_failed`, `budget_exceeded`, `unhealthy`, `failed`, `interrupted`, `internal`
  (a bug: its traceback is on standard error), and a service's refusal as its gRPC status in lower case
  (`invalid_argument`, `not_found`, `permission_denied`, `resource_exhausted`, ...). A check that reports
  (`health`, `schema check`, `provision check`) keeps its report's fields beside `error`.
* Into a pipe or a file (standard output not a terminal), listings print whole values, one tab-separated line per
  row (`mpdp jobs ls | cut -f1` gives the job ids).
* One name per concept, as in the Python API: `--lam` the regulariser λ (`lam=`, JSON `lam`); `--noise` the noise
  scheme or distribution (`noise=`); `--calibration` how σ is calibrated to (ε, δ), `corrected` or `paper`; δ
  defaults are written out in each `--help` (1e-6 where a job names none). The old spellings `--lambda`,
  `--local-lambda`, `--paper-lambda`, `--mode` (for the noise scheme or the calibration) and `--delta 0` still work in
  this release, with a warning on standard error; JSON outputs carry both the new key and the old one (`mode`,
  `lambda`) until the next.
* Commands that talk to a running federation take `--endpoints PATH` (the `endpoints.json` written by
  `mpdp federation up` or `mpdp provision`, or its folder). Without it they read the environment variable
  `MPDP_ENDPOINTS`, then a connection profile (`--profile NAME`, `MPDP_PROFILE`, else the default of
  `~/.config/mpdp/profiles.yaml`; `mpdp profile add NAME PATH`), then fall back to `runs/federation`.
* Exit codes: 0 success; 1 the operation failed (the message says why and what to do: a refused job carries the
  gRPC status and the problem, e.g. `RESOURCE_EXHAUSTED: BUDGET_EXCEEDED`); 2 a usage error (unknown command or
  option, a value out of range); 130 interrupted (Ctrl-C: a job already submitted goes on at the curator).
* `mpdp --help` answers without loading any protocol code (about 0.1 s); each command's `--help` lists all options
  (`benchmarks/cli_startup.py` times each one, `docs/benchmarks.md` has the table).
"""


def _section(cmd: click.Command, path: list[str], out: list[str]) -> None:
    ctx = click.Context(cmd, info_name=" ".join(path), terminal_width=WIDTH, max_content_width=WIDTH, help_option_names=HELP)
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                if isinstance(sub, click.Group):
                    _section(sub, [*path, name], out)
                else:
                    _command(sub, [*path, name], out)
        return
    _command(cmd, path, out)


def _command(cmd: click.Command, path: list[str], out: list[str]) -> None:
    _relative_defaults(cmd)
    ctx = click.Context(cmd, info_name=" ".join(path), terminal_width=WIDTH, max_content_width=WIDTH, help_option_names=HELP)
    out.append(f"## `{' '.join(path)}`\n")
    out.append("```text")
    out.append(cmd.get_help(ctx).rstrip())
    out.append("```\n")


def render() -> str:
    out = [HEADER]
    _section(cli, ["mpdp"], out)
    return "\n".join(out).rstrip() + "\n"


_SHARED = Path(__file__).resolve().parents[2] / "shared"


def _relative_defaults(cmd: click.Command) -> None:
    """Defaults resolved against this checkout (the shared data beside it) show as the relative path they mean,
    before the help is wrapped, so the page is the same wherever the repository is cloned."""
    for param in cmd.params:
        text = str(param.default) if isinstance(param.default, (str, Path)) else ""
        for prefix in (str(_SHARED), str(_SHARED.resolve())):
            if text.startswith(prefix):
                param.show_default = "../shared" + text[len(prefix):]  # type: ignore[attr-defined]
                break


if __name__ == "__main__":
    print(render(), end="")
