"""The examples run as a user runs them: examples/quickstart.py in a subprocess (its one JSON line), and
examples/quickstart.ipynb executed by a real Jupyter kernel (nbclient + ipykernel, the ``dev`` extra)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

pytestmark = pytest.mark.slow


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def test_quickstart_prints_one_json_object_with_accuracy_and_guarantee():
    out = subprocess.run([sys.executable, str(EXAMPLES / "quickstart.py")], capture_output=True, text=True, env=_env(), timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, out.stdout
    doc = json.loads(lines[0])
    assert doc["backend"] == "in-process" and doc["protocol"] == "pathak2010" and doc["key_bits"] == 2048
    assert doc["guarantee"]["epsilon"] == 1.0 and doc["guarantee"]["delta"] == 1e-6 and doc["guarantee"]["noise"] == "gaussian-distributed"
    assert 0.5 < doc["accuracy"] <= 1.0 and doc["nonprivate_accuracy"] > 0.9
    assert sum(doc["parties"].values()) + doc["test_rows"] == 569 and doc["operations"]["paillier_encrypt"] > 0


def test_notebook_executes_and_predicts():
    import nbclient  # the dev extra installs nbformat, nbclient and ipykernel
    import nbformat

    nb = nbformat.read(EXAMPLES / "quickstart.ipynb", as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit the notebook without outputs"
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = _env()["PYTHONPATH"]  # the kernel is a child process: it imports this tree's mpdp
    try:
        nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(EXAMPLES)}}).execute()
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
    printed = [json.loads(line) for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.get("name") == "stdout"
               for line in o["text"].splitlines() if line.startswith("{")]
    summary = next(d for d in printed if "accuracy" in d)
    assert summary["guarantee"]["epsilon"] == 1.0 and 0.5 < summary["accuracy"] <= 1.0
    preds = next(d for d in printed if "predicted" in d)
    assert len(preds["predicted"]) == 5 and set(preds["predicted"]) <= {"benign", "malignant"}
