"""`mpdp --help` answers without importing protocol code: subcommands load lazily (mpdp_services/cli/lazy.py).

The listing's short helps are written in main.py; these tests keep them equal to each command's own and check
what `mpdp --help` imports. The time itself is measured by benchmarks/cli_startup.py, not asserted here."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mpdp_services.cli import main


@pytest.mark.parametrize("group, table", [(main.cli, main.COMMANDS), (main.experiment, main.EXPERIMENTS)], ids=["mpdp", "experiment"])
def test_static_short_helps_match_the_commands(group, table):
    for name, lazy in table.items():
        cmd = lazy.load()
        assert cmd.name == name or name in {"price-of-distrust"}, name
        assert lazy.short_help == (cmd.short_help or cmd.get_short_help_str(1000)), name


def test_every_command_module_is_registered():
    from pathlib import Path

    folder = Path(main.__file__).parent
    targets = {lz.target.split(":")[0].rsplit(".", 1)[1] for lz in [*main.COMMANDS.values(), *main.EXPERIMENTS.values()]}
    helpers = {"__init__", "main", "lazy", "options", "errors", "experiment_options"}
    modules = {p.stem for p in folder.glob("*.py")} - helpers
    # every module under cli/ either is a command's home or is imported by one (none today)
    assert modules == targets, sorted(modules ^ targets)


@pytest.mark.process  # starts a process or opens a socket: not in `make test-fast`
def test_help_imports_no_heavy_module():
    code = ("import sys, runpy; sys.argv = ['mpdp', '--help']\n"
            "try:\n    runpy.run_module('mpdp_services.cli.main', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "import json; print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "{'numpy', 'grpc', 'sklearn', 'scipy', 'cryptography', 'phe', 'gmpy2', 'rich', 'dp_accounting'})), file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "Commands:" in r.stdout and "train" in r.stdout
    assert json.loads(r.stderr.strip().splitlines()[-1]) == []


@pytest.mark.process  # starts a process or opens a socket: not in `make test-fast`
def test_a_lazy_command_runs_and_shows_its_own_help():
    r = subprocess.run([sys.executable, "-m", "mpdp_services.cli.main", "ledger", "show", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--json" in r.stdout
    r = subprocess.run([sys.executable, "-m", "mpdp_services.cli.main", "no-such-command"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "No such command" in r.stderr


def test_cli_reference_is_current():
    """docs/cli.md is generated from the commands: `python tools/gen_cli_docs.py > docs/cli.md`."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(repo / "tools"))
    try:
        import gen_cli_docs
    finally:
        sys.path.remove(str(repo / "tools"))
    assert (repo / "docs" / "cli.md").read_text() == gen_cli_docs.render(), "run `python tools/gen_cli_docs.py > docs/cli.md`"


def test_experiment_help_values_equal_the_experiments():
    """`mpdp experiment NAME --help` shows values copied into services/cli/experiment_options.py (so it imports no
    experiment); each copy equals its source."""
    from mpdp.experiments import hamm2016, lmgc, pathak2010
    from mpdp.hamm2016 import pate, simulation
    from mpdp.lmgc.datasets import DATASETS
    from mpdp.regression import config as uci
    from mpdp_services.cli import experiment_options as o

    assert (o.PATHAK_EPSILONS, o.PATHAK_LAMBDA, o.PATHAK_RUNS, o.PATHAK_SPLITS) == \
        (pathak2010.PAPER_EPSILONS, pathak2010.PAPER_LAMBDA, pathak2010.PAPER_RUNS, pathak2010.SPLIT_NAMES)
    assert (o.LMGC_DATASETS, o.LMGC_EPSILONS, o.LMGC_METHODS) == (DATASETS, lmgc.DEFAULT_EPSILONS, lmgc.METHODS)
    assert (o.UCI_DATASET_NAMES, o.UCI_DELTA, o.UCI_EPSILON_LABELS, o.UCI_GRID_REPEATS, o.UCI_REPEATS) == \
        (tuple(sorted(uci.UCI_DATASETS)), uci.UCI_DELTA, uci.UCI_EPSILON_LABELS, uci.UCI_GRID_REPEATS, uci.UCI_REPEATS)
    assert (o.HAMM_PARTIES, o.HAMM_EPSILONS_INV, o.HAMM_LOCAL_CHOICES, o.HAMM_METHODS, o.HAMM_PATE_QUERIES, o.HAMM_PATE_DELTA) == \
        (hamm2016.DEFAULT_PARTIES, simulation.DEFAULT_EPSILONS_INV, simulation.LOCAL_CHOICES, simulation.METHODS, pate.DEFAULT_QUERIES, pate.DEFAULT_DELTA)


@pytest.mark.parametrize("group", ["experiment", "dca", "jobs", "ledger", "model", "profile", "provision", "schema", "serve", "federation"])
@pytest.mark.process  # starts a process or opens a socket: not in `make test-fast`
def test_a_command_help_imports_no_protocol_core(group):
    """Each command's --help loads its module only: no scipy, dp-accounting, scikit-learn, pandas or protocol core."""
    code = ("import sys, json\nfrom mpdp_services.cli.main import cli\nimport click\n"
            f"g = cli.get_command(click.Context(cli), {group!r})\n"
            "names = g.list_commands(click.Context(g)) if isinstance(g, click.Group) else []\n"
            "[g.get_command(click.Context(g), n) for n in names]\n"
            "heavy = {'scipy', 'sklearn', 'dp_accounting', 'pandas'}\n"
            "cores = ('mpdp.pathak2010', 'mpdp.lmgc', 'mpdp.dca', 'mpdp.regression', 'mpdp.hamm2016', 'mpdp.dpgd', 'mpdp.experiments', 'mpdp.accounting')\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m.startswith(cores))))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == []
